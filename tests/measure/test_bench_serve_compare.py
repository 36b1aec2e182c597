"""`bench serve --compare-checkout DIR` serves a baseline from a checkout's source tree: the process
it starts is `localinfer serve` of that tree (here this checkout itself), answering over HTTP."""
import json
import urllib.request
from pathlib import Path

from localinfer.measure.bench_serve_compare import server_process

ROOT = Path(__file__).resolve().parents[2]


def test_a_checkout_serves_from_its_source_tree(smollm2_path):
    with server_process(str(smollm2_path), str(ROOT), parallel=1, ctx_size=256, max_queue=4, threads=1) as (url, pid):
        assert pid > 0
        with urllib.request.urlopen(url + "/v1/models", timeout=60) as r:
            models = json.load(r)
    assert models["data"], models
