"""`localinfer serve --ray` on a local Ray cluster: the openai client against Ray Serve replicas of
smollm2, requests spread over them (seen in each replica's own /metrics), and the autoscaler adding
a replica under a burst. Skipped where Ray Serve is not installed (pip install 'localinfer[ray]').

Bounded: one Ray cluster for the module (4 logical CPUs, 1 per replica, a 80 MB object store),
replicas of 1 thread, short answers; everything is shut down after (serve.shutdown, ray.shutdown).
"""
from __future__ import annotations

import concurrent.futures
import os
import re
import socket
import time
import urllib.request

import pytest

serve = pytest.importorskip("ray.serve")
import openai  # noqa: E402
import ray  # noqa: E402
from ray.serve._private import api as serve_private_api  # noqa: E402  (its proxy start timeout, below)

from localinfer.serve.ray_app import REPLICA_HEADER, ReplicaSpec, Scaling, build_application  # noqa: E402
from localinfer.batching.config import EngineConfig  # noqa: E402

# Ray warns when look_back_period_s is below its deprecated 10 s metrics_interval_s field; the push
# interval that matters is the environment's (FAST_METRICS), 1 s here
pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore:`look_back_period_s`.*metrics_interval_s:FutureWarning")]
NAME = "smollm2"
APP = "localinfer-test"
HELLO = [{"role": "user", "content": "Name a colour."}]
STORY = [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}]
COMPLETED = re.compile(r'^localinfer_requests_total\{[^}]*status="completed"[^}]*\}\s+(\S+)$', re.M)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Ray's replicas and proxy report their requests in flight to the autoscaler every 10 s by default;
# every 1 s here, so the burst test need not last long. Read by Ray's processes, which inherit the
# environment of the driver that starts the local cluster.
FAST_METRICS = {"RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "1",
                "RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "1"}
# Ray Serve's controller kills an HTTP proxy actor that is not ready within 5 s (then 10 s, ...), and a
# health check that takes 10 s three times; the driver waits 60 s for the first proxy. Its start is a new
# Python process importing Ray Serve's web stack: beside the suite's other worker and a CPU hog it took
# longer, the first proxy was killed, and both tests errored at setup. What they check comes after.
PROXY_START_S = 240   # within pytest-timeout's 300 s for the first test, whose setup this is
PATIENT_PROXY = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": str(PROXY_START_S),
                 "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "60"}
RAY_ENV = {**FAST_METRICS, **PATIENT_PROXY}


@pytest.fixture(scope="module")
def cluster():
    port = _free_port()
    saved = {k: os.environ.get(k) for k in RAY_ENV}
    os.environ.update(RAY_ENV)
    ray.init(num_cpus=4, num_gpus=0, include_dashboard=False, object_store_memory=80 << 20,
             log_to_driver=False, configure_logging=False)
    try:
        with pytest.MonkeyPatch.context() as patch:   # the driver's own wait (see PATIENT_PROXY)
            patch.setattr(serve_private_api, "HTTP_PROXY_TIMEOUT", PROXY_START_S)
            serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def _spec(path, parallel: int, ctx_size: int = 256) -> ReplicaSpec:
    return ReplicaSpec(model=str(path), name=NAME, threads=1,
                       engine=EngineConfig(n_slots=parallel, n_ctx=ctx_size, max_queue=16, prefix_cache_bytes=0),
                       config={})


@pytest.fixture
def deploy(cluster):
    deployed = []

    def run(app):
        serve.run(app, name=APP, route_prefix="/")
        deployed.append(APP)
        return cluster
    yield run
    for name in deployed:
        serve.delete(name)


def _chat(client, max_tokens=8, messages=HELLO, temperature=0.0):
    raw = client.chat.completions.with_raw_response.create(model=NAME, messages=messages, max_tokens=max_tokens,
                                                           temperature=temperature)
    return raw.headers[REPLICA_HEADER], raw.parse()


def _running_replicas() -> int:
    status = serve.status().applications[APP].deployments["localinfer"]
    return status.replica_states.get("RUNNING", 0)


def _metrics_by_replica(url: str, replicas: set[str], tries: int = 60) -> dict[str, float]:
    """Completed requests in each replica's own /metrics: Ray routes each GET to one replica, so
    ask until every replica has answered once (the header says which one did)."""
    seen = {}
    for _ in range(tries):
        with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
            seen.setdefault(r.headers[REPLICA_HEADER], sum(float(v) for v in COMPLETED.findall(r.read().decode())))
        if replicas <= seen.keys():
            return seen
    raise AssertionError(f"/metrics answered only from {sorted(seen)} of {sorted(replicas)}")


def test_two_replicas_answer_the_openai_client_and_share_the_requests(smollm2_path, deploy):
    url = deploy(build_application(_spec(smollm2_path, parallel=2), Scaling(min_replicas=2, max_replicas=2)))
    assert _running_replicas() == 2
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    answered: dict[str, int] = {}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for _ in range(3):  # Ray picks the less busy of two replicas: concurrent requests reach both
            for replica, r in pool.map(lambda _: _chat(client), range(8)):
                assert r.choices[0].message.content and r.model == NAME
                assert 0 < r.usage.completion_tokens <= 8
                answered[replica] = answered.get(replica, 0) + 1
            if len(answered) == 2:
                break
    assert len(answered) == 2, f"every request went to one replica: {answered}"
    # each replica's own engine counted exactly the requests its header claimed
    assert _metrics_by_replica(url, set(answered)) == {k: float(v) for k, v in answered.items()}


def test_a_burst_makes_the_autoscaler_add_a_replica(smollm2_path, deploy):
    scaling = Scaling(min_replicas=1, max_replicas=2, upscale_delay_s=1.0, downscale_delay_s=600.0,
                      look_back_period_s=2.0)
    assert scaling.autoscaling_config(1)["target_ongoing_requests"] == 1.0  # one slot: one request in flight
    url = deploy(build_application(_spec(smollm2_path, parallel=1, ctx_size=512), scaling))
    assert _running_replicas() == 1
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    t0 = time.monotonic()
    deadline = t0 + 150
    seen = {"STARTING": None, "RUNNING": None}  # seconds into the burst a second replica was in that state

    def watch() -> bool:
        states = serve.status().applications[APP].deployments["localinfer"].replica_states
        for state in seen:
            if seen[state] is None and sum(states.get(s, 0) for s in ("STARTING", "RUNNING")
                                           if s == state or state == "STARTING") >= 2:
                seen[state] = time.monotonic() - t0
        return states.get("RUNNING", 0) >= 2

    def keep_asking() -> list:
        # answers one after another until the second replica runs: ~6 requests in flight against a
        # target of 1, however fast this machine answers. Sampled without a seed, so none is served
        # from the engine's cache of deterministic completions: each one occupies the slot
        answers = []
        while time.monotonic() < deadline and seen["RUNNING"] is None:
            answers.append(_chat(client, 48, STORY, temperature=1.0))
        return answers

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        burst = [pool.submit(keep_asking) for _ in range(6)]
        while time.monotonic() < deadline and not watch():
            time.sleep(0.25)
        answers = [a for f in burst for a in f.result()]
    assert seen["RUNNING"] is not None, f"still one replica {time.monotonic() - t0:.0f} s into the burst"
    assert answers and all(r.usage.completion_tokens > 0 for _, r in answers)
    print(f"\nburst: a second replica starting after {seen['STARTING']:.1f} s, running after {seen['RUNNING']:.1f} s; "
          f"{len(answers)} answers, {sum(r.usage.completion_tokens for _, r in answers)} tokens, "
          f"finish {sorted(set(r.choices[0].finish_reason for _, r in answers))}")
