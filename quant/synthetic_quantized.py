"""Quantized synthetic files written directly, for shapes whose F16 file does not fit a disk.

    write_quantized(get_shape("qwen3moe-30b-a3b"), path, "Q4_K_M")   # ~17 GB, no 61 GB F16 first

synthetic.py makes a quantized file by quantizing its F16 file, as llama-quantize would. For
Qwen3-30B-A3B's shape that F16 file is 61 GB, so this writes the quantized tensors straight
away, streamed tensor by tensor through `AtomicFile` (memory stays a few MB).

What the bytes are: every tensor gets the type llama-quantize's mix gives it (mixes.py's plan,
the same call quantize_file makes). Per (type, row length), one slab of SLAB_ROWS rows of
`normal * WEIGHT_SCALE` (seeded) is quantized once with quant.quantizers; a tensor's rows are
that slab's rows in turn, starting at a row that depends on the tensor's index (so neighbouring
tensors differ). Every block is therefore a real quantization of Gaussian weights (sane scales,
finite values), but the weights repeat: they measure speed only. Norms are ones and the router
and other float tensors are random F32 as in synthetic.py.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import numpy as np
from gguf import GGMLQuantizationType as T

from .formats import row_nbytes
from .gguf_out import AtomicFile, TensorEntry, data_size, encode_header
from .mixes import ModelShape, get_file_type, plan_tensor_types
from .quantizers import quantize
from .synthetic import (ALIGNMENT, TOKENIZER_MODEL, WEIGHT_SCALE, Shape, SyntheticError, _tensor_slabs,
                        metadata_entries, tensor_specs)

SLAB_ROWS = 1024  # rows quantized per (type, row length); part of the bytes a seed gives
_ROW_STRIDE = 7919  # a prime: tensor i starts at slab row (i * _ROW_STRIDE) % SLAB_ROWS


def planned_types(s: Shape, ftype: str) -> dict[str, T]:
    """Tensor name -> the type llama-quantize's `ftype` mix gives it in a file of shape `s`."""
    ft = get_file_type(ftype)
    model = ModelShape(s.arch, s.n_layer, s.n_head, s.n_head_kv, s.n_expert)
    return plan_tensor_types([(t.name, t.ggml_type, t.shape) for t in tensor_specs(s)], ft, model)


def _slab(qtype: T, n_cols: int, seed: int) -> np.ndarray:
    """(2 * SLAB_ROWS, row bytes) uint8: the quantized slab twice, so any SLAB_ROWS rows from any
    start are one contiguous window."""
    rng = np.random.default_rng([seed, int(qtype), n_cols])
    x = rng.standard_normal((SLAB_ROWS, n_cols), dtype=np.float32) * WEIGHT_SCALE
    q = quantize(x, qtype).reshape(SLAB_ROWS, -1)
    return np.concatenate([q, q])


def write_quantized(s: Shape, path: str | Path, ftype: str, seed: int = 0, tokenizer_path=None,
                    progress: Callable[[int, int], None] | None = None) -> Path:
    """Write the `ftype` (e.g. "Q4_K_M") file of shape `s` at `path` (atomically), tensor by tensor."""
    from localinfer.gguf_file import GGUFFile

    path = Path(path)
    ft = get_file_type(ftype)
    if tokenizer_path is None:
        from localinfer.fetch import resolve_model
        tokenizer_path = resolve_model(TOKENIZER_MODEL)
    specs, plan = tensor_specs(s), planned_types(s, ft.name)
    entries = [TensorEntry(t.name, plan[t.name], t.shape,
                           row_nbytes(plan[t.name], t.shape[-1]) * (t.n_elements // t.shape[-1])) for t in specs]
    with GGUFFile(tokenizer_path) as tok:
        header, _ = encode_header(metadata_entries(s, seed, tok, ft.ftype), entries, ALIGNMENT)
    total = len(header) + data_size(entries, ALIGNMENT)
    free = shutil.disk_usage(path.parent).free
    if total > free:
        raise SyntheticError(f"not enough disk space for {path}: it needs {total / 2**30:.2f} GiB, "
                             f"{free / 2**30:.2f} GiB are free")
    slabs: dict[tuple[T, int], np.ndarray] = {}
    with AtomicFile(path) as out:
        out.write(header)
        for i, (spec, entry) in enumerate(zip(specs, entries)):
            if entry.ggml_type == spec.ggml_type:  # kept as written unquantized: norms, router, biases
                for chunk in _tensor_slabs(s, spec, i, seed):
                    out.write(chunk)
            else:
                n_cols = spec.shape[-1]
                key = (entry.ggml_type, n_cols)
                if key not in slabs:
                    slabs[key] = _slab(entry.ggml_type, n_cols, seed)
                slab, left, at = slabs[key], spec.n_elements // n_cols, (i * _ROW_STRIDE) % SLAB_ROWS
                while left:
                    take = min(left, SLAB_ROWS)
                    out.write(memoryview(slab[at:at + take]).cast("B"))
                    left, at = left - take, (at + take) % SLAB_ROWS
                    if progress:
                        progress(out.written, total)
            out.pad_to(ALIGNMENT)
    return path
