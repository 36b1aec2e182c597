"""load(repack=...): the matrices the ISA has x4 dots for (gemma3's Q8_0, Q4_K and Q6_K ffn_down,
SmolLM2's Q8_0 embedding, which is also its output matrix) are copied into the decode layout, at load
or, where that layout gives the same bits (AVX2 Q8_0), just after (arch/deferred_repack.py), and their
mapped pages released; the logits agree with the mapped layout's up to the GEMV's float rounding."""
from __future__ import annotations

import numpy as np
import pytest

import localinfer
from localinfer.backend import kernels

pytestmark = pytest.mark.skipif(not kernels.available() or kernels.isa() not in ("avx2", "avx512"),
                                reason="repacking needs the C kernels' AVX2 or AVX-512 variant")


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def pair(request, smollm2_path, gemma3_path):
    path = {"smollm2": smollm2_path, "gemma3": gemma3_path}[request.param]
    on, off = localinfer.load(str(path), n_ctx=256, repack=True), localinfer.load(str(path), n_ctx=256, repack=False)
    assert on.wait_repacked(timeout=600)
    yield on, off
    on.close()
    off.close()


def test_repacked_weights_replace_their_mapped_pages(pair):
    on, off = pair
    assert on.runtime.repacked_bytes > 0 and off.runtime.repacked_bytes == 0
    m_on, m_off = on.memory(), off.memory()
    # the repacked bytes moved from the mapping to the copies: the total held stays the same
    assert m_off["weights_mapped"] - m_on["weights_mapped"] >= on.runtime.repacked_bytes - (1 << 20)
    assert m_on["weight_copies"] - m_off["weight_copies"] == on.runtime.repacked_bytes
    # prefix blocks of one are not the other's bits, unless every repacked matrix keeps them
    rounds = any(not kernels.layout_same_bits(on.gguf.tensors[n].ggml_type) for n in on.runtime.repacked_tensors)
    assert on.runtime.layout_rounds == rounds
    assert (on.compute_identity != off.compute_identity) == rounds


def test_decode_logits_agree_with_the_mapped_layout(pair):
    """The decode step's logits of the two layouts differ by rounding carried through every layer; the
    yardstick is the same model's own rounding gap between its decode GEMV and its prefill GEMM
    (measured here: on gemma3 up to ~1 logit, README "Python"), which repacking must not exceed much."""
    on, off = pair
    ids = on.tokenize("The capital of France, the country, is")  # >= 6 tokens: a GEMM prefill
    rows = []
    for model in (on, off):
        ctx = model.new_context()
        ctx.append(ids[:-1])
        rows.append(ctx.append(ids[-1:])[-1])  # one token: the decode GEMV
    prefill = off.new_context().append(ids)[-1]  # the whole prompt at once: the GEMM for every matrix
    gemv_vs_gemm = float(np.abs(rows[1] - prefill).max())
    scale = float(np.abs(rows[1]).max())
    assert float(np.abs(rows[0] - rows[1]).max()) <= 2 * gemv_vs_gemm + 1e-3 * scale
    assert int(np.argmax(rows[0])) == int(np.argmax(rows[1]))


def test_the_environment_switch(monkeypatch, smollm2_path):
    monkeypatch.setenv("LOCALINFER_REPACK", "maybe")
    with pytest.raises(ValueError, match="LOCALINFER_REPACK"):
        localinfer.load(str(smollm2_path))
    monkeypatch.setenv("LOCALINFER_REPACK", "0")
    with localinfer.load(str(smollm2_path), n_ctx=64) as model:
        assert model.runtime.repacked_bytes == 0
