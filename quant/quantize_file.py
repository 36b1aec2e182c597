"""Quantize a whole GGUF file: `quantize_file(IN, OUT, "Q4_K_M")`.

What ``llama-quantize IN OUT TYPE`` does, streamed: plan every tensor's type
(``mixes``), write the header with the input's metadata (``general.file_type``
and ``general.quantization_version`` set), then each tensor, a slab of rows at
a time: copied when its type does not change, else dequantized to float32
(``formats.dequantize``) and quantized (``quantizers.quantize``).

Everything that can be checked before writing is: the target type, the input
file (``GGUFError`` for a corrupt one), the tensor types, requantization, the
free disk space. The output is written through ``AtomicFile``, so on any
error or Ctrl-C nothing is left at OUT.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from gguf import GGMLQuantizationType as T

from localinfer.files.gguf_file import GGUFFile

from localinfer.formats.registry import FORMATS, dequantize, get_format, row_nbytes
from .gguf_out import AtomicFile, TensorEntry, data_size, encode_header, encode_kv_str, encode_kv_u32
from .imatrix_file import Imatrix, ImatrixError, check_imatrix_path
from .mixes import ModelShape, category, get_file_type, plan_tensor_types, requires_imatrix, sort_key
from .quantizers import can_quantize_to, needs_imatrix, quantize

GGML_QNT_VERSION = 2  # ggml.h: the version of the quantized block formats
# Elements dequantized and quantized per step: a few times this in float32 is the working memory.
SLAB_ELEMENTS = 1 << 22
_FLOAT_TYPES = (T.F32, T.F16, T.BF16)
_SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")
# What llama-quantize records about the imatrix it used (tools/quantize/quantize.cpp); it cuts
# the two strings to 127 bytes (a fixed char[128] in llama_model_kv_override).
KEY_IMATRIX_FILE, KEY_IMATRIX_DATASET = "quantize.imatrix.file", "quantize.imatrix.dataset"
KEY_IMATRIX_N_ENTRIES, KEY_IMATRIX_N_CHUNKS = "quantize.imatrix.entries_count", "quantize.imatrix.chunks_count"
_IMATRIX_KEYS = (KEY_IMATRIX_FILE, KEY_IMATRIX_DATASET, KEY_IMATRIX_N_ENTRIES, KEY_IMATRIX_N_CHUNKS)


class QuantizeError(ValueError):
    """The quantization cannot be done as asked; the message says why and what to do."""


@dataclass
class QuantizeResult:
    path: Path
    file_type: str
    n_tensors: int
    bytes_in: int
    bytes_out: int
    seconds: float
    types: Counter = field(default_factory=Counter)  # output tensor type name -> count
    fallbacks: list[str] = field(default_factory=list)  # tensors whose row length forced another type


def _check_paths(src: Path, dst: Path) -> None:
    if dst.exists() and dst.is_dir():
        raise QuantizeError(f"output {dst} is a directory")
    if not dst.parent.is_dir():
        raise QuantizeError(f"output directory {dst.parent} does not exist")
    if dst.exists() and src.exists() and os.path.samefile(src, dst):
        raise QuantizeError(f"output {dst} is the input file; choose another name")


def _imatrix_entries(path: str, im: Imatrix) -> list[tuple[str, bytes]]:
    """llama-quantize's record of the imatrix, in its order: the file name as given, the
    first dataset, the entry count, the chunk count (when known)."""
    def cut(s: str) -> str:
        return s.encode()[:127].decode("utf-8", "ignore")

    out = [(KEY_IMATRIX_FILE, encode_kv_str(KEY_IMATRIX_FILE, cut(path)))]
    if im.datasets:
        out.append((KEY_IMATRIX_DATASET, encode_kv_str(KEY_IMATRIX_DATASET, cut(im.datasets[0]))))
    out.append((KEY_IMATRIX_N_ENTRIES, encode_kv_u32(KEY_IMATRIX_N_ENTRIES, len(im.entries))))
    if im.chunk_count > 0:
        out.append((KEY_IMATRIX_N_CHUNKS, encode_kv_u32(KEY_IMATRIX_N_CHUNKS, im.chunk_count)))
    return out


def _metadata_entries(f: GGUFFile, ftype: int, extra: list[tuple[str, bytes]] = ()) -> list[bytes]:
    """The input's metadata verbatim, split keys dropped, then quantization_version and file_type,
    then `extra` (key, encoded entry) pairs.

    Like llama-quantize (gguf_set_val removes a key and appends it), the set keys go
    last, in this order, so that the whole file can come out byte for byte the same.
    """
    replaced = {"general.quantization_version", "general.file_type", *(k for k, _ in extra)}
    entries = [f.raw_bytes(*span) for key, span in f.metadata_spans.items()
               if key not in _SPLIT_KEYS and key not in replaced]
    return entries + [encode_kv_u32("general.quantization_version", GGML_QNT_VERSION),
                      encode_kv_u32("general.file_type", ftype)] + [e for _, e in extra]


def _load_imatrix(path) -> Imatrix:
    try:
        im = check_imatrix_path(path)
    except (ImatrixError, OSError) as e:
        raise QuantizeError(f"cannot read the imatrix {path}: {e}") from e
    for name, e in im.entries.items():
        if not np.isfinite(e.sums).all():
            raise QuantizeError(f"imatrix {path}: entry {name!r} has non-finite values")
    return im


def _imatrix_for(im: Imatrix | None, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """The tensor's importance weights, (n_mat, ne0) with one row per expert, or None where the
    imatrix has no entry for it. A size that does not fit is an error (llama-quantize's rule;
    the token embedding only is let through without, since no matmul reads it)."""
    w = im.weights_for(name) if im is not None else None
    if w is None:
        return None
    n_mat = shape[-3] if len(shape) >= 3 else 1
    if w.size != n_mat * shape[-1]:
        if category(name) == "token_embd":
            return None
        raise QuantizeError(f"imatrix entry for {name!r} has {w.size} values; the tensor needs "
                            f"{n_mat} x {shape[-1]}: was the imatrix made for another model?")
    return w.reshape(n_mat, shape[-1])


def quantize_file(src: str | os.PathLike, dst: str | os.PathLike, target: str, *, allow_requantize: bool = False,
                  pure: bool = False, imatrix: str | os.PathLike | None = None,
                  progress: Callable[[int, int], None] | None = None) -> QuantizeResult:
    """Write `dst`: `src` with its weights in the file type `target` (e.g. "Q8_0", "Q4_K_M", "F16").

    `imatrix`: an importance matrix file (GGUF or legacy .dat, `localinfer imatrix` or
    llama-imatrix): the types that can use one weight their errors by it, as
    ``llama-quantize --imatrix`` does, and the file records it in ``quantize.imatrix.*``.

    `progress(done, total)` is called with input bytes processed. Raises
    `UnsupportedQuantType` for an unknown target, `GGUFError` for a corrupt input,
    `QuantizeError` for anything else that stops it, `DiskFullError` if the disk fills.
    """
    t0 = time.monotonic()
    ft = get_file_type(target)
    src, dst = Path(src), Path(dst)
    _check_paths(src, dst)
    im = _load_imatrix(imatrix) if imatrix is not None else None
    with GGUFFile(src) as f:
        infos = sorted(f.tensors.values(), key=lambda t: sort_key(t.name))
        result = QuantizeResult(dst, ft.name, len(infos), sum(t.nbytes for t in infos), 0, 0.0)
        plan = plan_tensor_types([(t.name, t.ggml_type, t.shape) for t in infos], ft,
                                 ModelShape.from_metadata(f.metadata), pure=pure, fallbacks=result.fallbacks,
                                 has_imatrix=bool(im and im.entries))
        entries, weights = [], {}
        # a missing imatrix first, for every tensor: it is what the user can fix, whatever else is wrong
        for t in infos:
            if plan[t.name] != t.ggml_type:
                weights[t.name] = _imatrix_for(im, t.name, t.shape)
                _check_imatrix_need(t.name, plan[t.name], ft, im, imatrix, weights[t.name])
        for t in infos:
            new = plan[t.name]
            if new != t.ggml_type:
                _check_conversion(t.name, t.ggml_type, new, allow_requantize)
            entries.append(TensorEntry(t.name, new, t.shape, row_nbytes(new, t.shape[-1]) * (t.n_elements // t.shape[-1])))
            result.types[new.name] += 1

        extra = _imatrix_entries(os.fspath(imatrix), im) if im is not None else []
        header, _ = encode_header(_metadata_entries(f, ft.ftype, extra), entries, f.alignment)
        total = len(header) + data_size(entries, f.alignment)
        free = shutil.disk_usage(dst.parent).free
        if total > free:
            raise QuantizeError(f"not enough disk space for {dst}: it needs {total / 2**20:.1f} MiB, "
                                f"{free / 2**20:.1f} MiB are free")

        done = 0
        with AtomicFile(dst) as out:
            out.write(header)
            for t, e in zip(infos, entries):
                for nbytes in _write_tensor(f, t, e.ggml_type, out, weights.get(t.name)):
                    done += nbytes
                    if progress:
                        progress(done, result.bytes_in)
                out.pad_to(f.alignment)
            result.bytes_out = out.written
    result.seconds = time.monotonic() - t0
    return result


def _check_imatrix_need(name: str, new: T, ft, im: Imatrix | None, path, weights: np.ndarray | None) -> None:
    """llama-quantize's refusal: the grid types (and Q2_K in Q2_K_S) without importance weights; and,
    for the tensors it exempts (embeddings, output), a type whose quantizer cannot run without them
    (IQ1_S, IQ2_XXS, IQ2_XS: ggml would assert halfway through the file)."""
    if not (requires_imatrix(name, new, ft) or needs_imatrix(new)) or weights is not None:
        return
    if im is not None:
        raise QuantizeError(f"{ft.name} needs an importance matrix for {name!r} ({new.name}) and "
                            f"the imatrix {path} has no entry for it: was it made for another model?")
    raise QuantizeError(f"{ft.name} needs an importance matrix for tensors like {name!r} ({new.name}): "
                        f"make one with `localinfer imatrix` and pass it with --imatrix, "
                        f"or choose a type that needs none (Q2_K, Q3_K_S, IQ3_S, IQ4_XS)")


def _check_conversion(name: str, cur: T, new: T, allow_requantize: bool) -> None:
    get_format(cur)  # UnsupportedQuantType naming the type if we cannot read it
    if not can_quantize_to(new):
        raise QuantizeError(f"tensor {name!r}: cannot write type {new.name}")
    if cur not in _FLOAT_TYPES and not allow_requantize:
        raise QuantizeError(f"tensor {name!r} is already quantized ({cur.name}); requantizing loses quality, "
                            f"pass --allow-requantize to do it anyway")


def _write_tensor(f: GGUFFile, t, new: T, out: AtomicFile, qw: np.ndarray | None = None):
    """Write one tensor's data, a slab of rows at a time; yields the input bytes done per slab.
    `qw` (n_mat, ne0): importance weights, row r of the tensor using qw[r // rows per matrix].

    Every slab that we can read is checked for NaN / inf first (llama.cpp's loader
    validates rows the same way): a bit-flipped weight or scale is a corrupt file,
    not something to quantize into a model that silently produces garbage.
    """
    ncols = t.shape[-1]
    n_rows = t.n_elements // ncols
    raw = f.tensor_data(t.name).reshape(n_rows, -1).view(np.uint8)  # (rows, bytes per row), zero-copy
    readable = int(t.ggml_type) in FORMATS
    step = max(1, SLAB_ELEMENTS // ncols)
    rows_per_mat = n_rows // (qw.shape[0] if qw is not None else 1)
    # a slab never straddles two experts' matrices: each has its own importance weights
    starts = [s for m in range(0, n_rows, rows_per_mat) for s in range(m, m + rows_per_mat, step)]
    for r in starts:
        rows = raw[r : min(r + step, (r // rows_per_mat + 1) * rows_per_mat)]
        x = dequantize(rows, t.ggml_type, (rows.shape[0], ncols)) if readable else None
        if x is not None and not np.isfinite(x).all():
            bad = r + int(np.nonzero(~np.isfinite(x).all(axis=1))[0][0])
            raise QuantizeError(f"{f.path}: tensor {t.name!r} has NaN or infinite values (row {bad}): "
                                f"the file is corrupt")
        if new == t.ggml_type:
            out.write(memoryview(rows).cast("B"))
        else:
            q = quantize(x, new) if qw is None else quantize(x, new, qw[r // rows_per_mat])
            out.write(memoryview(q).cast("B"))
        yield rows.nbytes
