"""Models by their Hugging Face name (files/hf.py): `pull hf.co/USER/REPO:QUANT` and `run -hf USER/REPO:QUANT`,
against a fake Hub on loopback (tests/fake_hub.py) through the real huggingface_hub."""
import os
import subprocess

import pytest

from fake_hub import FakeHub
from terminal import CMD

pytest.importorskip("huggingface_hub", reason="the hf extra (huggingface_hub) is not installed")

REPO = "someone/SmolLM2-135M-Instruct-GGUF"


@pytest.fixture(scope="module")
def hub(smollm2_path, tmp_path_factory):
    data = smollm2_path.read_bytes()
    files = {"SmolLM2-135M-Instruct.Q4_1.gguf": data, "SmolLM2-135M-Instruct.Q4_K_M.gguf": data,
             "mmproj-SmolLM2-f16.gguf": b"GGUF not a model", "README.md": b"# a model card"}
    from split_gguf import split
    parts = split(smollm2_path, tmp_path_factory.mktemp("parts"), 3, "SmolLM2-135M-Instruct-Q4_1")
    with FakeHub({REPO: files, "someone/split-GGUF": {p.name: p for p in parts},
                  "someone/partial-GGUF": {parts[0].name: parts[0], parts[2].name: parts[2]}}) as h:
        yield h


def _run(args, hub, home, timeout=180):
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(home / "hf"), "LOCALINFER_CACHE": str(home / "li"),
           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("HF_TOKEN", None)
    return subprocess.run(CMD + args, capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


def test_pull_by_quant_then_run_from_the_cache(hub, tmp_path, smollm2_path, smollm2_model):
    r = _run(["pull", f"hf.co/{REPO}:Q4_1"], hub, tmp_path)
    assert r.returncode == 0, r.stderr
    path = r.stdout.strip()
    assert open(path, "rb").read() == smollm2_path.read_bytes()
    assert hub.downloads == [f"{REPO}/SmolLM2-135M-Instruct.Q4_1.gguf"]
    want = smollm2_model.chat([{"role": "user", "content": "Hi"}], max_tokens=5, temperature=0).text
    r = _run(["run", "-hf", f"{REPO}:q4_1", "-p", "Hi", "-n", "5", "--temp", "0"], hub, tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == want.strip(), r.stderr
    assert len(hub.downloads) == 1   # the tag in another case names the same file: from the cache


def test_without_a_tag_q4_k_m_is_taken_and_the_projector_never(hub, tmp_path):
    r = _run(["pull", f"huggingface.co/{REPO}"], hub, tmp_path)
    assert r.returncode == 0 and r.stdout.strip().endswith("SmolLM2-135M-Instruct.Q4_K_M.gguf"), r.stderr


@pytest.mark.parametrize("name, says", [
    (f"hf.co/{REPO}:Q9_9", "has no .gguf file for 'Q9_9'"),
    ("hf.co/nobody/nothing", "no such repository"),
    ("hf.co/someone/partial-GGUF:Q4_1", "does not hold all of them"),
    ("hf.co/../etc", "not a Hugging Face model name"),
])
def test_names_that_cannot_be_fetched_are_one_line_errors(hub, tmp_path, name, says):
    r = _run(["pull", name], hub, tmp_path)
    assert r.returncode == 1 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_download_that_does_not_match_the_hubs_checksum_is_refused(hub, tmp_path):
    hub.corrupt.add(f"{REPO}/SmolLM2-135M-Instruct.Q4_1.gguf")
    try:
        r = _run(["pull", f"hf.co/{REPO}:Q4_1"], hub, tmp_path)
    finally:
        hub.corrupt.clear()
    assert r.returncode == 1 and "does not match the Hub's checksum" in r.stderr, r.stderr


def test_a_split_model_is_fetched_whole_and_runs(hub, tmp_path, smollm2_model):
    r = _run(["pull", "hf.co/someone/split-GGUF:Q4_1"], hub, tmp_path)
    assert r.returncode == 0 and r.stdout.strip().endswith("-00001-of-00003.gguf"), r.stderr
    assert sorted(d for d in hub.downloads if "split" in d) == [
        f"someone/split-GGUF/SmolLM2-135M-Instruct-Q4_1-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    want = smollm2_model.generate("The capital of France is", max_tokens=6, temperature=0).text
    r = _run(["run", "-hf", "someone/split-GGUF", "--raw", "-p", "The capital of France is", "-n", "6", "--temp", "0"],
             hub, tmp_path)
    assert r.returncode == 0 and r.stdout == want + "\n", r.stderr
