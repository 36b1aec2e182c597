"""deploy/kubernetes/*.yaml: they parse, and what they tell localinfer agrees with itself (probes on a
route the server has, the port it listens on, threads equal to the CPUs granted) and with
localinfer.serve.ray_app (the RayService's serve args build an application). No cluster is run."""
from __future__ import annotations

from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def _docs(name: str) -> dict:
    return {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / name).read_text())}


def _flag(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_deployment_probes_health_on_the_port_it_serves():
    docs = _docs("localinfer.yaml")
    assert set(docs) == {"PersistentVolumeClaim", "Deployment", "Service"}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    args = server["args"]
    assert args[0] == "serve" and _flag(args, "--host") == "0.0.0.0"
    assert int(_flag(args, "--port")) == server["ports"][0]["containerPort"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert server["resources"]["requests"] == server["resources"]["limits"]  # Guaranteed: never throttled
    assert int(_flag(args, "-t")) == int(server["resources"]["limits"]["cpu"])
    # the model the server loads is the one the init container pulls into the shared volume
    assert pod["initContainers"][0]["args"] == ["pull", args[1]]
    claim = pod["volumes"][0]["persistentVolumeClaim"]["claimName"]
    assert claim == docs["PersistentVolumeClaim"]["metadata"]["name"]
    assert docs["Service"]["spec"]["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]


def test_rayservice_args_build_the_application():
    pytest.importorskip("ray.serve")
    from localinfer.serve import ray_app
    service = _docs("rayservice.yaml")["RayService"]
    (app,) = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]
    module, attr = app["import_path"].split(":")
    assert module == ray_app.__name__ and getattr(ray_app, attr) is ray_app.app_builder
    built = ray_app.app_builder(app["args"])
    deployment = built._bound_deployment
    assert deployment.ray_actor_options["num_cpus"] == app["args"]["threads"]
    auto = deployment._deployment_config.autoscaling_config
    assert (auto.min_replicas, auto.max_replicas) == (app["args"]["min_replicas"], app["args"]["max_replicas"])
    assert auto.target_ongoing_requests == app["args"]["parallel"]
    worker = service["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert int(worker["resources"]["limits"]["cpu"]) == app["args"]["threads"]


def test_app_builder_names_an_unknown_argument():
    pytest.importorskip("ray.serve")
    from localinfer.serve.ray_app import ScalingError, app_builder
    with pytest.raises(ScalingError, match="replicas_max"):
        app_builder({"model": "smollm2", "replicas_max": 3})
    with pytest.raises(ScalingError, match="max-replicas"):
        app_builder({"min_replicas": 3, "max_replicas": 2})
