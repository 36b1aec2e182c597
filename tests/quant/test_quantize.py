"""Weight quantization: the quantizers, the mix policy, and `localinfer quantize` end to end.

The legacy quantizers are checked bit for bit against a scalar transcription of
ggml's quantize_row_*_ref rounding (below) and against gguf-py's numpy
quantizers; the k-quants by their round-trip error. tests/quant/test_quantize_llamacpp.py
compares whole files with a llama-quantize binary when one is available.
"""
from __future__ import annotations

import errno
import math
import os

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as T
from gguf import quants as gguf_quants

import synthetic_gguf
from localinfer.cli.main import main
from localinfer.files.gguf_file import GGUFFile
from localinfer.formats import dequantize
from localinfer.quant.mixes import FILE_TYPES, ModelShape, fallback_type, get_file_type, plan_tensor_types, use_more_bits
from localinfer.quant.quantizers import QUANTIZERS, quantize
from synthetic_gguf import metadata_equal

f32 = np.float32
LEGACY = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
KQUANTS = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]


def _blocks(n, size, seed=0):
    """Random blocks at many scales, rounded through fp16 as a real F16 model's weights are."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, size)) * rng.uniform(1e-4, 4, (n, 1))
    return x.astype(np.float16).astype(np.float32)


def _edge_blocks(size):
    """All zero, all -0.0, one outlier of either sign, ties on the max, exact halves after scaling."""
    b = np.zeros((8, size), np.float32)
    b[1] = -0.0
    b[2, 5] = -3.0
    b[3, :] = 0.25
    b[3, 7] = 2.0
    b[4, ::2], b[4, 1::2] = 1.0, -1.0  # |max| tie: the first one (+1) decides the sign of d
    b[5] = np.arange(size, dtype=np.float32) - size / 2  # many values at .5 after scaling
    b[6] = np.linspace(-127, 127, size, dtype=np.float32) / 127 * 0.5
    b[7, 0] = 1e-30  # subnormal fp16 scale
    return b


# --- a scalar transcription of ggml's reference quantizers, one float32 step at a time ---------

def _f16(v):
    return np.array([v], np.float32).astype("<f2").view(np.uint8).tobytes()


def _first_absmax(x):
    amax, mx = f32(0), f32(0)
    for v in x:
        if amax < abs(v):
            amax, mx = abs(v), v
    return mx


def _first_min_max(x):
    mn, mx = f32(np.finfo(np.float32).max), f32(-np.finfo(np.float32).max)
    for v in x:
        if v < mn:
            mn = v
        if v > mx:
            mx = v
    return mn, mx


def _pack(q, bits5):
    qs = bytes((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4) for j in range(16))
    if not bits5:
        return qs
    qh = sum(((q[j] >> 4) & 1) << j for j in range(32))
    return qh.to_bytes(4, "little") + qs


def ref_block(x, qtype):
    x = [f32(v) for v in x]
    if qtype == T.Q8_0:
        amax = f32(0)
        for v in x:
            amax = max(amax, abs(v))
        d = amax / f32(127)
        i = f32(1) / d if d else f32(0)
        roundf = [int(math.copysign(math.floor(abs(v * i) + 0.5), v * i)) for v in x]  # exact for float32 inputs
        return _f16(d) + bytes(r & 0xFF for r in roundf)
    if qtype in (T.Q4_0, T.Q5_0):
        nmax, off = (8, f32(8.5)) if qtype == T.Q4_0 else (16, f32(16.5))
        d = _first_absmax(x) / f32(-nmax)
        i = f32(1) / d if d else f32(0)
        q = [min(2 * nmax - 1, int(v * i + off)) for v in x]  # int(): C's truncating (int8_t) cast
        return _f16(d) + _pack(q, qtype == T.Q5_0)
    mn, mx = _first_min_max(x)
    levels = 15 if qtype == T.Q4_1 else 31
    d = (mx - mn) / f32(levels)
    i = f32(1) / d if d else f32(0)
    q = [int((v - mn) * i + f32(0.5)) for v in x]
    if qtype == T.Q4_1:
        q = [min(15, v) for v in q]
    return _f16(d) + _f16(mn) + _pack(q, qtype == T.Q5_1)


@pytest.mark.parametrize("qtype", LEGACY, ids=lambda t: t.name)
def test_legacy_types_match_ggml_reference_rounding(qtype):
    x = np.concatenate([_edge_blocks(32), _blocks(120, 32, seed=int(qtype))])
    ours = quantize(x, qtype)
    for row, want in zip(x, (ref_block(b, qtype) for b in x)):
        got = quantize(row[None], qtype)[0].tobytes()
        assert got == want, (qtype.name, row)
    assert ours.tobytes() == b"".join(ref_block(b, qtype) for b in x)


@pytest.mark.parametrize("qtype", LEGACY, ids=lambda t: t.name)
def test_legacy_types_match_gguf_py(qtype):
    # gguf-py follows the same reference (except that an all -0.0 block gives d = +0.0 there)
    x = _blocks(20000, 32, seed=7)
    ours = quantize(x.reshape(-1, 256), qtype)
    np.testing.assert_array_equal(ours.reshape(-1), gguf_quants.quantize(x.reshape(-1, 256), qtype).reshape(-1))


def test_float_targets():
    x = np.array([[1.0, -2.5, 1e-8, 65519.0, 3.14159265, np.inf, -0.0, 1 + 2**-9]], np.float32)
    np.testing.assert_array_equal(quantize(x, T.F32).view(np.float32), x)
    np.testing.assert_array_equal(quantize(x, T.F16).view(np.float16), x.astype(np.float16))
    bf16 = quantize(x, T.BF16).view(np.uint16)
    np.testing.assert_array_equal(bf16, gguf_quants.quantize(x, T.BF16).view(np.uint16))
    nan = quantize(np.array([[np.nan]], np.float32), T.BF16).view(np.uint16)
    assert (nan & 0x7F80) == 0x7F80 and nan & 0x7F  # a NaN stays a NaN


# Upper bounds on the relative RMS error of a round trip on Gaussian blocks (ggml's own
# results there are ~0.30, 0.15, 0.072, 0.036, 0.018).
KQUANT_MAX_REL_RMSE = {T.Q2_K: 0.33, T.Q3_K: 0.17, T.Q4_K: 0.08, T.Q5_K: 0.04, T.Q6_K: 0.02}


@pytest.mark.parametrize("qtype", KQUANTS, ids=lambda t: t.name)
def test_kquants_round_trip(qtype):
    x = _blocks(512, 256, seed=int(qtype))
    q = quantize(x, qtype)
    y = dequantize(q, qtype, x.shape)
    rel = np.sqrt(((y - x) ** 2).mean(axis=1) / (x**2).mean(axis=1))
    assert np.median(rel) < KQUANT_MAX_REL_RMSE[qtype] * 0.95
    assert rel.max() < KQUANT_MAX_REL_RMSE[qtype] * 1.2
    # edge blocks: zeros stay zeros, nothing becomes NaN, one outlier survives
    e = _edge_blocks(256)
    ye = dequantize(quantize(e, qtype), qtype, e.shape)
    assert np.isfinite(ye).all()
    np.testing.assert_array_equal(ye[:2], 0)
    assert ye[2, 5] == pytest.approx(-3.0, rel=0.05)
    # quantizing is deterministic and independent of the other blocks (threads)
    np.testing.assert_array_equal(quantize(x[:3], qtype), q[:3])


def test_fp16_rounding_inside_the_kquant_kernels():
    from localinfer.quant.kquant_search import fp16_round
    rng = np.random.default_rng(1)
    v = np.concatenate([rng.standard_normal(3000) * 10.0 ** rng.integers(-9, 5, 3000),
                        [0.0, -0.0, 65504.0, 65519.9, 65520.0, 2**-24, 2**-25, 3 * 2**-26, 6.1e-5]]).astype(np.float32)
    got = np.array([fp16_round(f32(a)) for a in v], np.float32)
    with np.errstate(over="ignore"):  # 65520 and up become inf, as they should
        np.testing.assert_array_equal(got, v.astype(np.float16).astype(np.float32))


# IQ1_M without an imatrix (ggml's weights x^2; three levels per weight, 3-bit sub-block scales):
# its worst element is off by up to ~0.93 of the row's largest value (ggml's bytes, checked)
_MAX_ERROR_OF_MAX = {T.IQ1_M: 1.0}


def test_every_registered_quantizer_inverts_its_dequantizer():
    for qtype in QUANTIZERS:
        x = _blocks(4, 512, seed=3)
        y = dequantize(quantize(x, qtype), qtype, x.shape)
        assert np.abs(y - x).max() <= _MAX_ERROR_OF_MAX.get(qtype, 0.6) * np.abs(x).max(), qtype.name


def test_row_length_must_fit_the_blocks():
    with pytest.raises(ValueError, match="multiple of the Q4_K block size 256"):
        quantize(np.zeros((2, 320), np.float32), T.Q4_K)


# --- the mix policy -------------------------------------------------------------------------------

def test_file_type_names():
    assert get_file_type("q4_k").name == "Q4_K_M" and get_file_type("Q4_K_M").ftype == 15
    assert get_file_type("Q8_0").ftype == 7 and get_file_type("F16").ftype == 1
    assert get_file_type("IQ2_M").ftype == 29 and get_file_type("IQ2_M").default == T.IQ2_S
    assert get_file_type("mxfp4_moe").default == T.MXFP4
    with pytest.raises(ValueError, match="unsupported target type 'NVFP4'.*Q4_K_M"):
        get_file_type("NVFP4")


def test_fallbacks_for_row_lengths():
    assert fallback_type(T.Q4_K, 256) == T.Q4_K
    assert [fallback_type(t, 320) for t in (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K)] == \
        [T.Q4_0, T.Q4_0, T.Q5_0, T.Q5_1, T.Q8_0]
    assert fallback_type(T.Q4_K, 100) == T.F16


def test_q4_k_m_plan_for_a_32_layer_llama():
    shapes = [("token_embd.weight", (32000, 4096)), ("output.weight", (32000, 4096)), ("output_norm.weight", (4096,))]
    for i in range(32):
        shapes += [(f"blk.{i}.attn_v.weight", (1024, 4096)), (f"blk.{i}.ffn_down.weight", (4096, 14336)),
                   (f"blk.{i}.attn_q.weight", (4096, 4096)), (f"blk.{i}.attn_norm.weight", (4096,))]
    plan = plan_tensor_types([(n, T.F16 if len(s) == 2 else T.F32, s) for n, s in shapes], FILE_TYPES["Q4_K_M"],
                             ModelShape("llama", 32, 32, 8))
    more = [i for i in range(32) if use_more_bits(i, 32)]
    assert more == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    for i in range(32):
        want = T.Q6_K if i in more else T.Q4_K
        assert plan[f"blk.{i}.attn_v.weight"] == want and plan[f"blk.{i}.ffn_down.weight"] == want
        assert plan[f"blk.{i}.attn_q.weight"] == T.Q4_K and plan[f"blk.{i}.attn_norm.weight"] == T.F32
    assert plan["output.weight"] == T.Q6_K and plan["token_embd.weight"] == T.Q4_K  # untied
    assert plan["output_norm.weight"] == T.F32


# --- the command ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    path = tmp_path_factory.mktemp("synthetic") / "synthetic-f16.gguf"
    return path, synthetic_gguf.write(path)


def _run(*args):
    return CliRunner().invoke(main, ["quantize", "-q", *map(str, args)])


def _only(path, *names):
    assert sorted(p.name for p in path.iterdir()) == sorted(names)


def test_cli_q8_0_keeps_metadata_and_sets_file_type(synthetic, tmp_path):
    src, weights = synthetic
    out = tmp_path / "q8.gguf"
    r = _run(src, out, "q8_0")
    assert r.exit_code == 0, r.output
    with GGUFFile(src) as a, GGUFFile(out) as b:
        assert b.metadata["general.file_type"] == 7 and b.metadata["general.quantization_version"] == 2
        for k, v in a.metadata.items():
            if k != "general.file_type":  # numeric arrays are numpy views (files/gguf_file.py): compare as arrays
                assert np.array_equal(b.metadata[k], v) if isinstance(v, np.ndarray) else b.metadata[k] == v, k
                assert b.metadata_types[k] == a.metadata_types[k], k
        assert list(b.tensors) == sorted(a.tensors, key=lambda n: (int(n.split(".")[1]) if n.startswith("blk.") else -1, n))
        for name, x in weights.items():
            t = b.tensors[name]
            assert t.ggml_type == (T.Q8_0 if x.ndim == 2 else T.F32), name
            y = dequantize(b.tensor_data(name), t.ggml_type, t.shape)
            np.testing.assert_array_equal(quantize(x, t.ggml_type), quantize(y, t.ggml_type))  # stable
            assert np.abs(y - x).max() <= np.abs(x).max() / 127, name
    assert os.stat(out).st_mode & 0o777 == 0o666 & ~_umask()
    _only(tmp_path, "q8.gguf")


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


def test_cli_q4_k_m_mix(synthetic, tmp_path):
    src, _ = synthetic
    out = tmp_path / "q4km.gguf"
    r = _run(src, out, "Q4_K_M")
    assert r.exit_code == 0, r.output
    with GGUFFile(out) as f:
        types = {n: t.ggml_type for n, t in f.tensors.items()}
        assert f.metadata["general.file_type"] == 15
    more = [i for i in range(8) if use_more_bits(i, 8)]  # [0, 3, 6, 7]
    assert more == [0, 3, 6, 7]
    assert types["token_embd.weight"] == T.Q6_K  # tied with the output
    for i in range(8):
        assert types[f"blk.{i}.attn_v.weight"] == (T.Q6_K if i in more else T.Q4_K)
        # rows of 320: Q6_K falls back to Q8_0, Q4_K to Q5_0
        assert types[f"blk.{i}.ffn_down.weight"] == (T.Q8_0 if i in more else T.Q5_0)
        assert types[f"blk.{i}.ffn_up.weight"] == T.Q4_K
        assert types[f"blk.{i}.attn_norm.weight"] == T.F32


def test_cli_takes_a_catalog_name(smollm2_path, tmp_path):
    """IN may be a catalog name, as `run`'s MODEL (the model is cached by the fixture: no download here)."""
    r = _run("--allow-requantize", "smollm2", tmp_path / "f16.gguf", "F16")
    assert r.exit_code == 0, r.output
    with GGUFFile(tmp_path / "f16.gguf") as f, GGUFFile(smollm2_path) as src:
        assert f.tensors.keys() == src.tensors.keys()
    _only(tmp_path, "f16.gguf")


def test_cli_requantize_needs_the_flag(synthetic, tmp_path):
    src, weights = synthetic
    q = tmp_path / "q4_0.gguf"
    assert _run(src, q, "Q4_0").exit_code == 0
    r = _run(q, tmp_path / "again.gguf", "Q8_0")
    assert r.exit_code != 0 and "is already quantized (Q6_K)" in r.output and "--allow-requantize" in r.output
    _only(tmp_path, "q4_0.gguf")
    r = _run("--allow-requantize", q, tmp_path / "f16.gguf", "F16")
    assert r.exit_code == 0, r.output
    with GGUFFile(tmp_path / "f16.gguf") as f, GGUFFile(q) as fq:
        name = "blk.3.attn_q.weight"
        want = dequantize(fq.tensor_data(name), T.Q4_0, fq.tensors[name].shape).astype(np.float16)
        np.testing.assert_array_equal(f.tensor_data(name), want)
        assert f.metadata["general.file_type"] == 1


def test_cli_unsupported_type_leaves_nothing(synthetic, tmp_path):
    src, _ = synthetic
    for bad in ("Q7_K", "NVFP4", ""):
        r = _run(src, tmp_path / "out.gguf", bad)
        assert r.exit_code != 0 and "unsupported target type" in r.output and "Q4_K_M" in r.output
    _only(tmp_path)


def test_cli_q2_k_s_needs_an_imatrix(synthetic, tmp_path):
    src, _ = synthetic
    r = _run(src, tmp_path / "out.gguf", "Q2_K_S")
    assert r.exit_code != 0 and "importance matrix" in r.output
    _only(tmp_path)


def test_cli_corrupt_input_leaves_nothing(synthetic, tmp_path):
    src, _ = synthetic
    data = src.read_bytes()
    cases = {"truncated.gguf": data[: len(data) // 2], "magic.gguf": b"GGXF" + data[4:], "tiny.gguf": b"GGUF"}
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
        r = _run(tmp_path / name, tmp_path / "out.gguf", "Q8_0")
        assert r.exit_code != 0, name
        assert "truncated" in r.output or "not a GGUF file" in r.output, r.output
    r = _run(tmp_path / "missing.gguf", tmp_path / "out.gguf", "Q8_0")
    assert r.exit_code != 0 and "is neither a file nor a known model name" in r.output
    _only(tmp_path, *cases)


def test_cli_nan_weights_are_a_corrupt_file(tmp_path):
    src = tmp_path / "nan.gguf"
    synthetic_gguf.write(src)
    with GGUFFile(src) as f:
        t = f.tensors["blk.5.ffn_up.weight"]
        offset = t.offset + 7 * t.shape[-1] * 2 + 10  # row 7, element 5 of an F16 tensor
    with open(src, "r+b") as fh:
        fh.seek(offset)
        fh.write(np.array([np.nan], np.float16).tobytes())
    for target in ("Q4_K_M", "F16"):  # converted or copied as it is
        r = _run(src, tmp_path / "out.gguf", target)
        assert r.exit_code != 0 and "'blk.5.ffn_up.weight' has NaN or infinite values (row 7)" in r.output, r.output
    _only(tmp_path, "nan.gguf")


def test_cli_refuses_to_overwrite_its_input(synthetic, tmp_path):
    src, _ = synthetic
    r = _run(src, src, "Q8_0")
    assert r.exit_code != 0 and "is the input file" in r.output


class _FullDisk:
    """A file whose device fills up after `room` bytes."""

    def __init__(self, f, room):
        self.f, self.room = f, room

    def write(self, data):
        n = memoryview(data).nbytes
        if n > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= n
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)


def test_full_disk_leaves_nothing(synthetic, tmp_path, monkeypatch):
    from localinfer.quant import gguf_out
    src, _ = synthetic
    real_fdopen = os.fdopen
    monkeypatch.setattr(gguf_out.os, "fdopen", lambda fd, mode: _FullDisk(real_fdopen(fd, mode), 1 << 20))
    r = _run(src, tmp_path / "out.gguf", "Q8_0")
    assert r.exit_code != 0 and "no space left" in r.output, r.output
    _only(tmp_path)


def test_not_enough_free_space_is_caught_up_front(synthetic, tmp_path, monkeypatch):
    import shutil
    from localinfer.quant import quantize_file
    src, _ = synthetic
    monkeypatch.setattr(quantize_file.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 << 20, 9 << 20, 1 << 20))
    r = _run(src, tmp_path / "out.gguf", "F16")
    assert r.exit_code != 0 and "not enough disk space" in r.output, r.output
    _only(tmp_path)


def test_interrupt_leaves_nothing(synthetic, tmp_path, monkeypatch):
    from localinfer.quant import quantize_file
    src, _ = synthetic
    calls = []

    def interrupted(x, qtype):
        calls.append(qtype)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return quantize(x, qtype)

    monkeypatch.setattr(quantize_file, "quantize", interrupted)
    with pytest.raises(KeyboardInterrupt):
        quantize_file.quantize_file(src, tmp_path / "out.gguf", "Q4_0")
    _only(tmp_path)


# --- a real model -----------------------------------------------------------------------------------

def _kl(p_logits, q_logits):
    """Mean KL(p || q) over positions, in nats."""
    lp = p_logits - p_logits.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    lq = q_logits - q_logits.max(-1, keepdims=True)
    lq -= np.log(np.exp(lq).sum(-1, keepdims=True))
    return float((np.exp(lp) * (lp - lq)).sum(-1).mean())


@pytest.mark.slow
def test_smollm2_round_trips_and_q8_0_keeps_the_logits(smollm2_path, tmp_path):
    import localinfer
    f16, q41, q8 = tmp_path / "smol-f16.gguf", tmp_path / "smol-q4_1.gguf", tmp_path / "smol-q8_0.gguf"
    assert _run("--allow-requantize", smollm2_path, f16, "F16").exit_code == 0
    # Q4_1 -> F16 -> Q4_1 gives back the original file's tensors and metadata, bit for bit
    assert _run(f16, q41, "Q4_1").exit_code == 0
    with GGUFFile(smollm2_path) as a, GGUFFile(q41) as b:
        assert metadata_equal(b.metadata, a.metadata)
        for name, t in a.tensors.items():
            assert b.tensors[name].ggml_type == t.ggml_type, name
            np.testing.assert_array_equal(b.tensor_data(name), a.tensor_data(name), err_msg=name)
    assert _run(f16, q8, "Q8_0").exit_code == 0
    prompt = "The capital of France is Paris, and the capital of Italy is"
    orig, quant = localinfer.load(str(smollm2_path)), localinfer.load(str(q8))
    ids = orig.tokenize(prompt)
    a, b = orig.logits(ids), quant.logits(ids)
    assert (a.argmax(-1) == b.argmax(-1)).mean() >= 0.9
    assert _kl(a, b) < 0.02  # measured: 0.007
