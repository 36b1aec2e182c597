"""A server of several models (`serve --models`, serve/pool.py) through HTTP: the `openai` client
asks for one model then the other, /v1/models shows which are loaded, and a model the memory budget
cannot hold is a 503 (busy) or a 507 (never fits) naming `model`."""
from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

import localinfer
from localinfer.backend import kernels
from localinfer.serve.app import BackgroundServer, make_registry_server
from localinfer.serve.pool import ModelPool, memory_estimate
from localinfer.batching.config import EngineConfig

from serve_helpers import raw

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(not kernels.available(), reason="C kernels not built")

SMALL = EngineConfig(n_slots=2, n_ctx=256, prefix_cache_bytes=0)


def serve(pool) -> BackgroundServer:
    return BackgroundServer(make_registry_server(pool, port=0))


def cards(url) -> dict:
    status, _, body = raw(url, "GET", "/v1/models")
    assert status == 200
    return {card["id"]: card for card in body["data"]}


def test_openai_client_asks_two_models_by_name(smollm2_path, gemma3_path):
    pool = ModelPool({"smollm2": smollm2_path, "gemma3": gemma3_path}, SMALL, keep_alive=-1)
    with serve(pool) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list()] == ["smollm2", "gemma3"]
        assert not any(c["status"]["loaded"] for c in cards(server.url).values())
        assert cards(server.url)["gemma3"]["size"] == gemma3_path.stat().st_size
        for name in ("smollm2", "gemma3"):
            reply = client.chat.completions.create(model=name, max_tokens=4, temperature=0,
                                                   messages=[{"role": "user", "content": "Hello"}])
            assert reply.model == name and reply.usage.completion_tokens >= 1
            assert cards(server.url)[name]["status"]["loaded"]
        text = "".join(chunk.choices[0].text for chunk in client.completions.create(
            model="smollm2", prompt="The capital of France is", max_tokens=4, temperature=0, stream=True)
            if chunk.choices)
        assert "Paris" in text
        assert client.models.retrieve("gemma3").id == "gemma3"
        with pytest.raises(openai.NotFoundError) as e:
            client.chat.completions.create(model="llama9", messages=[{"role": "user", "content": "Hi"}])
        assert e.value.body["param"] == "model" and "'llama9' does not exist" in e.value.body["message"]
        # the stream held its lease until it ended: nothing left leased, both still loaded (keep-alive -1)
        assert {n for n, c in cards(server.url).items() if c["status"]["loaded"]} == {"smollm2", "gemma3"}


def test_keep_alive_expiry_shows_in_the_model_list(smollm2_path):
    # 2 s: the model list is read before the countdown ends, however busy the machine
    pool = ModelPool({"smollm2": smollm2_path}, SMALL, keep_alive=2.0)
    with serve(pool) as server:
        status, _, _ = raw(server.url, "POST", "/v1/completions", {"model": "smollm2", "prompt": "Hi", "max_tokens": 2})
        assert status == 200 and cards(server.url)["smollm2"]["status"]["expires_at"] > time.time()
        deadline = time.monotonic() + 30
        while cards(server.url)["smollm2"]["status"]["loaded"]:  # until the timer on the server's loop fires
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert pool.loaded() == []


def test_memory_budget_errors_name_model(smollm2_path, gemma3_path, tmp_path):
    (tmp_path / "other.gguf").symlink_to(smollm2_path)
    gate = threading.Event()

    def load(path):  # smollm2's load waits for the gate: meanwhile its request holds the budget
        if path == smollm2_path:
            assert gate.wait(60)
        return localinfer.Model(path)
    pool = ModelPool({"smollm2": smollm2_path, "gemma3": gemma3_path, "other": tmp_path / "other.gguf"}, SMALL,
                     keep_alive=-1, max_memory=memory_estimate(smollm2_path, SMALL) + (1 << 20), load=load)
    ask = {"prompt": "Hi", "max_tokens": 2}
    with serve(pool) as server:
        status, _, err = raw(server.url, "POST", "/v1/completions", {**ask, "model": "gemma3"})
        assert status == 507 and err["error"]["param"] == "model" and "'gemma3' needs about" in err["error"]["message"]
        first = {}
        waiting = threading.Thread(target=lambda: first.update(r=raw(server.url, "POST", "/v1/completions",
                                                                     {**ask, "model": "smollm2"})))
        waiting.start()
        deadline = time.monotonic() + 30
        while pool.memory_in_use() == 0:  # smollm2's load has reserved its memory
            assert time.monotonic() < deadline
            time.sleep(0.01)
        status, headers, err = raw(server.url, "POST", "/v1/completions", {**ask, "model": "other"})
        assert status == 503 and int(headers["Retry-After"]) > 0
        assert err["error"]["param"] == "model" and "held by models in use ('smollm2')" in err["error"]["message"]
        gate.set()
        waiting.join(60)
        assert first["r"][0] == 200
        assert raw(server.url, "POST", "/v1/completions", {**ask, "model": "other"})[0] == 200
        assert {n for n, c in cards(server.url).items() if c["status"]["loaded"]} == {"other"}  # smollm2 made room


def test_serve_options_errors():
    from localinfer.cli.serve import serve as serve_command
    runner = CliRunner()
    for args, message in [(["--keep-alive", "5m"], "go with --models"),
                          (["smollm2", "--models", "gemma3"], "not both"),
                          (["--models", "smollm2", "--keep-alive", "soon"], "cannot read 'soon' as a duration"),
                          (["--models", "smollm2", "--max-memory", "2G"], "cannot read '2G' as a size"),
                          (["--models", "smollm2,,gemma3"], "comma-separated"),
                          (["--models", "smollm2", "--lookup-ngram", "3"], "serves one MODEL")]:
        result = runner.invoke(serve_command, args)
        assert result.exit_code != 0 and message in result.output, (args, result.output)


@pytest.mark.slow
def test_serve_models_command(tmp_path, smollm2_path):
    """`localinfer serve --models DIR` as a user starts it: the folder's model by its stem, loaded on
    the first request."""
    (tmp_path / "tiny.gguf").symlink_to(smollm2_path)
    p = subprocess.Popen([sys.executable, "-m", "localinfer.cli.main", "serve", "--models", str(tmp_path),
                          "--port", "0", "-c", "128", "-np", "1", "--keep-alive", "-1", "--max-memory", "1GiB"],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        line = p.stderr.readline()
        m = re.search(r"serving 1 models \(tiny; .*kept forever, within 1.00 GiB\) at (http://127\.0\.0\.1:\d+)/v1",
                      line)
        assert m, line
        assert not cards(m.group(1))["tiny"]["status"]["loaded"]
        status, _, body = raw(m.group(1), "POST", "/v1/completions", {"model": "tiny", "prompt": "Hi", "max_tokens": 2})
        assert status == 200 and body["model"] == "tiny"
        assert cards(m.group(1))["tiny"]["status"]["loaded"]
        p.terminate()
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_bad_file_in_the_models_folder_costs_only_its_own_name(tmp_path, smollm2_path):
    """A truncated .gguf (behind a symlink) and a text file named .gguf beside a good model: the
    listings answer, marking the two unavailable with why; requests for them are 503s that name
    neither the folder nor where the link leads; the good model is served."""
    folder, hidden = tmp_path / "models", tmp_path / "hidden-target"
    folder.mkdir()
    hidden.mkdir()
    (folder / "good.gguf").symlink_to(smollm2_path)
    with open(smollm2_path, "rb") as f:
        (hidden / "cut.gguf").write_bytes(f.read(4 << 20))
    (folder / "cut.gguf").symlink_to(hidden / "cut.gguf")
    (folder / "notes.gguf").write_text("not a model\n" * 10)
    secrets = [str(tmp_path), str(tmp_path.resolve()), "hidden-target"]
    pool = ModelPool([str(folder)], SMALL, keep_alive=-1)
    with serve(pool) as server:
        listed = cards(server.url)
        assert listed["good"]["status"]["available"] and not listed["good"]["status"]["loaded"]
        assert "GGUF" in listed["notes"]["status"]["error"] and not listed["notes"]["status"]["available"]
        assert not listed["cut"]["status"]["available"] and listed["cut"]["status"]["error"]
        status, _, tags = raw(server.url, "GET", "/api/tags")
        assert status == 200, tags
        tags = {m["name"]: m for m in tags["models"]}
        assert tags["good"]["details"]["format"] == "gguf" and "status" not in tags["good"]
        assert tags["cut"]["status"]["available"] is False and tags["notes"]["status"]["error"]
        answers = [raw(server.url, "POST", "/v1/completions", {"model": "cut", "prompt": "Hi", "max_tokens": 2}),
                   raw(server.url, "POST", "/api/generate", {"model": "notes", "prompt": "Hi", "stream": False}),
                   raw(server.url, "POST", "/api/show", {"model": "cut"})]
        for status, _, body in answers:
            assert status == 503 and "unavailable" in str(body), body
        status, _, body = answers[0]
        assert body["error"]["code"] == "model_unavailable" and body["error"]["param"] == "model"
        text = str([listed, tags, answers])
        assert not [s for s in secrets if s in text], text
        status, _, body = raw(server.url, "POST", "/v1/completions", {"model": "good", "prompt": "Hi", "max_tokens": 2})
        assert status == 200 and body["model"] == "good"
