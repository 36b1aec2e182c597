"""The q8_0 / q4_0 KV cache (kv/cache_types.py, --cache-type-k / -v) in whole models: its size, the fused C
layers against the Python layer loop on it, the logits against the f16 cache, and clear errors."""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

import localinfer
from localinfer.backend import kernels
from localinfer.arch import build_model
from localinfer.files.gguf_file import GGUFFile
from localinfer.kv.cache import KVCache
from localinfer.kv.cache_types import CacheTypeError, KVCacheTypes

TYPES = [KVCacheTypes("q8_0", "q8_0"), KVCacheTypes("q4_0", "q4_0"), KVCacheTypes("q8_0", "f16")]
needs_c = pytest.mark.skipif(not kernels.available(), reason="C kernels not built")


@pytest.mark.parametrize("types, ratio", [(KVCacheTypes("q8_0", "q8_0"), 34 / 64), (KVCacheTypes("q4_0", "q4_0"), 18 / 64),
                                          (KVCacheTypes("q8_0", "f16"), (34 + 64) / 128)])
@pytest.mark.parametrize("name", ["smollm2_path", "gemma3_path"])
def test_cache_bytes_per_token(request, name, types, ratio):
    """34 (q8_0) or 18 (q4_0) bytes per 32 values against f16's 64, for the full and ring caches alike."""
    path = request.getfixturevalue(name)
    f16 = localinfer.load(path, n_ctx=256).new_context()
    quant = localinfer.load(path, n_ctx=256, cache_type_k=types.k, cache_type_v=types.v).new_context()
    assert quant.cache.nbytes / f16.cache.nbytes == pytest.approx(ratio, rel=1e-12)


def _run(m, fuse, types, chunks):
    m.fuse = fuse
    cache = m.new_cache(600, types)
    return [m.forward(np.array(c), cache) for c in chunks], cache


@needs_c
@pytest.mark.parametrize("types", TYPES, ids=lambda t: f"{t.k}-{t.v}")
# gemma3's 540 positions of 262144-wide logits, twice per case: the slow tier
@pytest.mark.parametrize("name", ["smollm2_path", pytest.param("gemma3_path", marks=pytest.mark.slow)])
def test_fused_layers_are_the_loop_on_a_quantized_cache(request, name, types):
    """The one C call writes and reads the same quantized rows as the Python loop's ops: same bits
    (gemma3 crosses its 512-key sliding window, so its ring is read and written too)."""
    with GGUFFile(request.getfixturevalue(name)) as f:
        m = build_model(f, "c")
        assert m.fused_layers() is not None
        chunks = [list(range(400, 437)), [5], list(range(1000, 1500)), [77], [9]]
        (fused, cf), (loop, cl) = _run(m, True, types, chunks), _run(m, False, types, chunks)
        for a, b in zip(fused, loop):
            np.testing.assert_array_equal(a, b)
        parts = [(cf, cl)] if isinstance(cf, KVCache) else [(cf.full, cl.full), (cf.swa, cl.swa)]
        for x, y in parts:
            assert x.k.dtype == (np.float16 if types.k == "f16" else np.uint8)
            np.testing.assert_array_equal(x.k, y.k)
            np.testing.assert_array_equal(x.v, y.v)


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.mark.parametrize("name", ["smollm2_path", "gemma3_path"])
def test_q8_0_cache_logits_stay_close_to_f16(request, name):
    """120 positions of real text. q8_0 rounds K and V to 2^-8 of each block's largest value; measured
    here the mean KL(f16 || q8_0) is ~0.004 (SmolLM2) / ~0.006 (gemma3), the same as over 200
    positions: the bound 0.02 leaves 3x.
    The greedy token may flip only where f16's top two logits are close: never where they are more
    than 1.0 apart (the largest logit change measured is ~0.2 of the logits' std, ~0.6)."""
    path = request.getfixturevalue(name)
    with open(request.config.rootpath / "tests" / "data" / "pride_excerpt.txt", encoding="utf-8") as f:
        text = f.read()
    out = {}
    for t in ("f16", "q8_0", "q4_0"):
        with localinfer.load(path, n_ctx=256, cache_type_k=t, cache_type_v=t) as m:
            out[t] = m.new_context().append(m.tokenize(text)[:120])
    base = _log_softmax(out["f16"])
    kl = {t: (np.exp(base) * (base - _log_softmax(out[t]))).sum(-1).mean() for t in ("q8_0", "q4_0")}
    assert kl["q8_0"] < 0.02
    assert kl["q8_0"] < kl["q4_0"]  # 4 bits lose more than 8
    top2 = np.sort(out["f16"], axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1.0
    np.testing.assert_array_equal(out["q8_0"].argmax(-1)[clear], out["f16"].argmax(-1)[clear])


def test_bad_cache_types_are_clear_errors(smollm2_path):
    with pytest.raises(CacheTypeError, match=r"cache_type_k must be one of f16, q8_0, q4_0, got 'q5_0'"):
        localinfer.load(smollm2_path, n_ctx=64, cache_type_k="q5_0")
    with pytest.raises(ValueError, match=r"cache_type_v must be one of"):
        localinfer.load(smollm2_path, n_ctx=64, cache_type_v="Q8_0")
    with pytest.raises(CacheTypeError, match="need kv_dtype 'f16'"):
        localinfer.load(smollm2_path, n_ctx=64, kv_dtype="f32", cache_type_k="q8_0")
    with pytest.raises(CacheTypeError, match="head size that is a multiple of 32.*head_dim is 48"):
        KVCache(1, 8, 1, 48, KVCacheTypes("q4_0", "f16"))


CLI = [sys.executable, "-m", "localinfer.cli.main"]


def test_cli_cache_type_options(smollm2_path):
    ok = subprocess.run(CLI + ["run", str(smollm2_path), "-p", "Hi", "-n", "3", "--temp", "0", "-c", "64",
                               "-ctk", "q8_0", "--cache-type-v", "q4_0"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(CLI + ["run", str(smollm2_path), "-p", "Hi", "-ctk", "q5_0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "'q5_0' is not one of 'f16', 'q8_0', 'q4_0'" in bad.stderr


@pytest.mark.slow
def test_server_slots_use_the_cache_types(smollm2_path):
    """The server's slots are made by the loaded model, so -ctk / -ctv reach them; greedy answers
    are those of the library with the same cache."""
    from serve_helpers import raw
    p = subprocess.Popen(CLI + ["serve", str(smollm2_path), "--port", "0", "-c", "128", "-np", "2", "-ctk", "q8_0",
                                "-ctv", "q8_0"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        m = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", p.stderr.readline())
        assert m
        status, _, body = raw(m.group(1), "POST", "/v1/completions",
                              {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0})
        assert status == 200
        lib = localinfer.load(smollm2_path, n_ctx=128, cache_type_k="q8_0", cache_type_v="q8_0")
        want = lib.generate("The capital of France is", max_tokens=8, temperature=0).text
        assert body["choices"][0]["text"] == want
    finally:
        p.kill()
        p.wait()


@needs_c
def test_prefix_cache_reuses_quantized_blocks(smollm2_path):
    """The server's prefix cache keeps a quantized cache's raw rows: a restored prefix gives the same
    logits as computing it, and blocks of another cache type are never restored into it."""
    from localinfer.batching.prefix_cache import PrefixCache
    types = KVCacheTypes("q8_0", "q4_0")
    with GGUFFile(smollm2_path) as f:
        m = build_model(f, "c")
        tokens = np.random.default_rng(2).integers(0, m.config.n_vocab, 69)
        computed = m.new_cache(128, types)
        m.forward(tokens[:64], computed)
        want = m.forward(tokens[64:], computed)
        store = PrefixCache(max_bytes=64 << 20, block_size=32)
        assert store.store(tokens[:64], computed) == 2
        restored = m.new_cache(128, types)
        assert store.restore(tokens, restored, limit=68) == 64
        np.testing.assert_array_equal(m.forward(tokens[64:], restored), want)
        other = m.new_cache(128, KVCacheTypes("q8_0", "q8_0"))
        assert store.restore(tokens, other, limit=68) == 0


def test_bench_and_perplexity_take_the_cache_types(smollm2_path, tmp_path):
    """bench's worker loads the model with the types and says so in its rows (llama-bench's type_k /
    type_v); perplexity runs with them (q8_0 keys and values: a finite PPL near the f16 cache's)."""
    import json
    r = subprocess.run(CLI + ["bench", str(smollm2_path), "-p", "4", "-n", "2", "-r", "1", "-t", "1", "-o", "json",
                              "-ctk", "q8_0", "-ctv", "q4_0"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert [(row["type_k"], row["type_v"]) for row in rows] == [("q8_0", "q4_0")] * 2
    text = tmp_path / "t.txt"
    text.write_text("It is a truth universally acknowledged, that a single man in possession of a good fortune. " * 40)
    ppl = {}
    for t in ("f16", "q8_0"):
        p = subprocess.run(CLI + ["perplexity", str(smollm2_path), "-f", str(text), "-c", "128", "--chunks", "2",
                                  "-t", "1", "-ctk", t, "-ctv", t], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        ppl[t] = float(re.search(r"PPL = ([\d.]+)", p.stdout).group(1))
    assert abs(ppl["q8_0"] / ppl["f16"] - 1) < 0.05  # docs/quality.md: q8_0 within +0.3% on real text
