"""Matrices repacked after load (arch/deferred_repack.py): on an ISA whose repacked layout gives the
mapped rows' bits (AVX2 Q8_0), the loader leaves them mapped and they are copied and swapped in one by
one afterwards. Every logit is the same before, between and after the swaps; the fused C layers follow
each swap; a swapped matrix's mapped pages go back only once no forward pass that may read them runs,
an encoder's pass as a decoder's; and a model closed mid-repack stops it.

The model is tests/synthetic_gguf.py's random llama with every matrix in Q8_0 (gguf-py's quantizer),
the output untied, so that the layers' stacked q|k|v and gate|up, their wo and down, and the output
matrix are each deferred."""
from __future__ import annotations

import dataclasses
import os
import time

import gguf.quants
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

import synthetic_gguf as sg
from localinfer.arch import build_model
from localinfer.backend import kernels
from localinfer.files.gguf_file import GGUFFile
from localinfer.model import Model

pytestmark = pytest.mark.skipif(not kernels.available() or "avx2" not in kernels.supported_isas(),
                                reason="needs the C kernels' AVX2 variant (its repacked Q8_0 has the row-major bits)")

SHAPE = dataclasses.replace(sg.LLAMA, untied=True)


@pytest.fixture(autouse=True)
def _avx2():
    """AVX2 whatever this CPU's best ISA is: its Q8_0 is the type repacked after load."""
    with kernels._isa("avx2"):
        assert kernels.layout_same_bits(T.Q8_0)
        yield


@pytest.fixture(scope="module")
def q8_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("deferred") / "llama-q8_0.gguf"
    out = {}
    for name, x in sg.tensors(seed=3, shape=SHAPE).items():
        x = x.astype(np.float32)
        out[name] = (gguf.quants.quantize(x, T.Q8_0), T.Q8_0) if x.ndim == 2 and name != "token_embd.weight" else x
    sg.write_file(path, out, SHAPE)
    return path


def _runtime(path, repack: bool):
    f = GGUFFile(path)
    return f, build_model(f, "c", repack=repack)


def _decode(rt, cache, tokens):
    return np.concatenate([rt.forward(np.array([t]), cache) for t in tokens])


def test_every_logit_is_the_same_before_between_and_after_the_swaps(q8_path):
    _, mapped = _runtime(q8_path, repack=False)
    f, rt = _runtime(q8_path, repack=True)
    repack = rt.deferred_repack
    n = SHAPE.n_layer
    assert repack.pending == 4 * n + 1   # q|k|v, wo, gate|up, down per layer, and the output
    assert rt.repacked_bytes == 0 and not rt.layout_rounds
    prompt, steps = np.array([1, 5, 9, 2, 7, 3, 11]), [4, 8, 6, 10, 12, 13]
    want_cache, got_cache = mapped.new_cache(64), rt.new_cache(64)
    want = [mapped.forward(prompt, want_cache), _decode(mapped, want_cache, steps[:3]),
            _decode(mapped, want_cache, steps[3:])]
    got = [rt.forward(prompt, got_cache)]
    for _ in range(repack.pending // 2):
        assert repack.swap_next()
    got.append(_decode(rt, got_cache, steps[:3]))
    while repack.swap_next():
        pass
    assert repack.pending == 0 and rt.weights_version == 4 * n + 1
    got.append(_decode(rt, got_cache, steps[3:]))
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32))
    assert rt.fused_layers() is not None and rt._fused_version == rt.weights_version
    assert all(layer.attn.wqkv.mat.layout == kernels.LAYOUT_X4 for layer in rt.weights.layers)
    assert rt.weights.output.mat.layout == kernels.LAYOUT_X4
    assert {"output.weight", "blk.0.attn_q.weight", "blk.0.ffn_up.weight"} <= set(rt.repacked_tensors)
    assert "output.weight" in f.released and not rt.layout_rounds   # the same bits: prefix caches still fit


def test_pages_go_back_only_after_the_passes_that_may_read_them(q8_path):
    f, rt = _runtime(q8_path, repack=True)
    repack = rt.deferred_repack
    with repack.forward_pass():
        assert repack.swap_next()
        first = set(rt.repacked_tensors)
        assert first and not first & f.released   # a pass that began before the swap may read them
        with repack.forward_pass():   # a second pass, overlapping
            assert repack.swap_next()
        assert not set(rt.repacked_tensors) & f.released
    assert set(rt.repacked_tensors) <= f.released
    assert repack.swap_next()
    assert set(rt.repacked_tensors) <= f.released   # no pass running: at once


def test_a_model_repacks_after_load_and_stops_when_closed(q8_path):
    with Model(q8_path, n_ctx=64) as m:
        repack = m.runtime.deferred_repack
        assert m.wait_repacked(timeout=600)
        assert repack.pending == 0 and repack.error is None
        assert m.runtime.weights.output.mat.layout == kernels.LAYOUT_X4
        memory = m.memory()
        assert memory["weight_copies"] >= m.runtime.repacked_bytes > 0
    m = Model(q8_path, n_ctx=64)
    repack = m.runtime.deferred_repack
    m.close()   # wherever the thread was, it is gone and the rest stays as mapped
    assert repack._thread is None or not repack._thread.is_alive()
    assert repack.wait(0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_wait_for_the_parents_thread(q8_path):
    f, rt = _runtime(q8_path, repack=True)
    repack = rt.deferred_repack
    with repack.forward_pass():   # the thread swaps one matrix, then waits for this pass to end
        repack.start()
        while rt.weights_version < 1 and not repack.wait(0):
            time.sleep(0.001)
        pid = os.fork()
        if pid == 0:   # the child: no repack thread, the rest as mapped, forward passes as before
            code = 0 if repack.wait(0) and repack.pending == 0 else 1
            try:
                rt.forward(np.array([1, 2]), rt.new_cache(16))
            except BaseException:
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert repack.wait(600) and repack.pending == 0 and repack.error is None


def test_without_repack_nothing_is_deferred(q8_path):
    with Model(q8_path, n_ctx=64, repack=False) as m:
        assert m.runtime.deferred_repack.pending == 0 and m.wait_repacked(0)


def test_an_output_that_is_the_embedding_table_is_repacked_at_load(smollm2_path):
    """SmolLM2's Q8_0 token_embd is also its output matrix: the lookups read it from the file, so it is
    copied at load, piece by piece, rather than brought in whole by a pass and copied after."""
    f, rt = _runtime(smollm2_path, repack=True)
    assert rt.weights.output.mat.layout == kernels.LAYOUT_X4 and "token_embd.weight" in f.released
    assert "token_embd.weight" in rt.repacked_tensors and not rt.layout_rounds
    assert all("token_embd.weight" not in lin.names for lin in rt.deferred_repack._todo)


def test_an_encoders_pass_keeps_the_pages_it_may_read(tmp_path):
    """An encoder's pass counts as running as a decoder's does: a matrix swapped in during it keeps its
    mapped pages until the pass ends, and the pass's vectors are those of the mapped layout."""
    from localinfer.arch.encoder import EncoderBatch
    from tiny_encoders import tiny_encoder

    path = tiny_encoder("tiny-rerank", tmp_path, outtype="q8_0")
    _, mapped = _runtime(path, repack=False)
    f, rt = _runtime(path, repack=True)
    repack = rt.deferred_repack
    assert repack.pending > 1
    batch = EncoderBatch.pad([[5, 6, 7, 9], [8, 4]])
    hidden, seen = rt.hidden, {}

    def swapping_hidden(b):   # one matrix swapped in while the pass runs
        before = set(f.released)   # (a stack of rows not in 16s was copied, and released, at load)
        assert repack.swap_next()
        seen["swapped"] = set(rt.repacked_tensors) - before
        seen["during"] = seen["swapped"] & f.released
        return hidden(b)

    rt.hidden = swapping_hidden
    for pooling in ("mean", "rank"):
        got = rt.pooled(batch, pooling)
        assert seen["swapped"] and seen.pop("during") == set()   # kept while the pass that began before ran
        assert seen.pop("swapped") <= f.released   # released when it ended
        np.testing.assert_array_equal(np.asarray(got).view(np.uint8),
                                      np.asarray(mapped.pooled(batch, pooling)).view(np.uint8))
