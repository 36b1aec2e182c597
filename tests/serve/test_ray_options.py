"""`serve --ray` options and the autoscaling policy, without a Ray cluster: what the command refuses
(with the option named), the clear error where Ray is not installed, and the autoscaling config
derived from the slot count."""
from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from localinfer.cli.main import main
from localinfer.serve.ray_app import Scaling, ScalingError


def _serve(*args):
    return CliRunner().invoke(main, ["serve", *args])


@pytest.mark.parametrize("args, message", [
    (["--replicas", "2"], "--replicas needs --ray"),
    (["--max-replicas", "3"], "--max-replicas needs --ray"),
    (["--ray", "--replicas", "2", "--max-replicas", "3"], "--replicas is a fixed count"),
    (["--ray", "--min-replicas", "3", "--max-replicas", "2"], "--max-replicas (2) is below --min-replicas (3)"),
    (["--ray", "--replicas", "0"], "--replicas"),
])
def test_contradictory_replica_options_are_refused_by_name(args, message):
    r = _serve("smollm2", *args)
    assert r.exit_code != 0 and message in r.output, r.output


def test_ray_missing_is_a_clear_error(monkeypatch):
    for name in [m for m in sys.modules if m == "ray" or m.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as where it is absent
    r = _serve("smollm2", "--ray", "--replicas", "2")
    assert r.exit_code == 1 and "--ray needs Ray Serve: pip install 'localinfer[ray]'" in r.output, r.output


def test_autoscaling_targets_one_request_in_flight_per_slot():
    auto = Scaling(min_replicas=2, max_replicas=6).autoscaling_config(slots=8)
    assert auto["target_ongoing_requests"] == 8.0 and (auto["min_replicas"], auto["max_replicas"]) == (2, 6)
    assert auto["initial_replicas"] == 2  # warm from the start, not scaled up from nothing
    assert auto["upscale_delay_s"] < auto["downscale_delay_s"]  # add fast, remove slowly
    assert Scaling(min_replicas=3, max_replicas=3).autoscaling_config(slots=8) is None  # a fixed count


def test_replicas_that_cannot_fit_a_local_cluster_are_refused_before_starting_it():
    from localinfer.serve.ray_app import ReplicaSpec, check_fits_here
    spec = ReplicaSpec(model="smollm2", name="smollm2", threads=2)
    check_fits_here(spec, Scaling(min_replicas=2, max_replicas=8), n_cpus=4)  # autoscaling past it may wait
    with pytest.raises(ScalingError, match=r"3 replicas \(--replicas/--min-replicas\) x -t 2 needs 6 CPUs and "
                                           r"this machine has 4"):
        check_fits_here(spec, Scaling(min_replicas=3, max_replicas=3), n_cpus=4)


@pytest.mark.parametrize("kwargs, name", [
    (dict(min_replicas=0, max_replicas=2), "--min-replicas"),
    (dict(min_replicas=1, max_replicas=3, initial_replicas=4), "initial_replicas"),
    (dict(min_replicas=1, max_replicas=3, target_ongoing_requests=0), "target_ongoing_requests"),
])
def test_bad_scaling_names_the_value(kwargs, name):
    with pytest.raises(ScalingError, match=name):
        Scaling(**kwargs).validate()


def test_origins_and_the_open_host_warning_reach_the_replicas(monkeypatch, smollm2_path):
    """--cors-origins and --allowed-hosts go into every replica's server config (they were dropped
    on the way to Ray), and --host 0.0.0.0 without a key warns as the plain server does."""
    from localinfer.serve import ray_app

    specs = []
    monkeypatch.setattr(ray_app, "serve_on_ray", lambda spec, scaling, host, port, log: specs.append(spec))
    r = _serve(str(smollm2_path), "--ray", "--host", "0.0.0.0", "--cors-origins", "https://app.example/, http://b.lan",
               "--allowed-hosts", "box.lan")
    assert r.exit_code == 0, r.output
    assert "without --api-key" in r.output
    assert specs[0].config["cors_origins"] == ("https://app.example", "http://b.lan")
    assert specs[0].config["allowed_hosts"] == ("box.lan",)
    r = _serve(str(smollm2_path), "--ray")
    assert r.exit_code == 0 and "without --api-key" not in r.output, r.output
    assert "allowed_hosts" not in specs[1].config and specs[1].config["cors_origins"] == ()   # the replica's default
