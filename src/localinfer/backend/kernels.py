"""The C/SIMD kernels (``localinfer._kernels``, built by cffi from ``csrc/``) behind a checked API.

Every argument is validated here, before C sees it -- dtype, contiguity,
alignment, shapes, byte counts against the type's block size -- so bad input is
a ``TypeError``/``ValueError`` naming the problem, never a crash. The C calls
release the GIL (cffi does so for every call), and take numpy buffers without
copying them: a raw GGUF tensor view (read-only uint8, shape ``(n_out,
row_bytes)``, as ``GGUFFile.tensor_data`` returns it) goes to ``matmul`` as is.

If the extension was not built (no C compiler at install time), importing this
module still works: ``available()`` is False, ``unavailable_reason()`` says why,
and every kernel call raises ``KernelsUnavailable``.

    y = kernels.matmul(w_raw, GGMLQuantizationType.Q4_1, x)     # x (m, k) or (k,)
    mat = kernels.prepare(w_raw, GGMLQuantizationType.Q4_1)      # check the weights once,
    y = mat.matmul(x, out=y)                                     # then per call only x / out
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
from ..formats.ggml import GGMLType as T

from ..formats import UnsupportedQuantType

try:
    from .. import _kernels

    _ffi, _lib = _kernels.ffi, _kernels.lib
    _REASON: str | None = None
except ImportError as _err:  # not built: the numpy path is used instead
    _ffi = _lib = None
    _REASON = (
        f"the C kernels (localinfer._kernels) are not built or cannot be loaded ({_err}); "
        "reinstall localinfer with a C compiler available to get them"
    )

__all__ = [
    "KernelsUnavailable", "available", "unavailable_reason", "isa", "supported_isas", "built_isas",
    "set_threads", "get_threads", "batched_rows", "matmul", "prepare", "PreparedMatrix", "repack_layout",
    "LAYOUT_ROWS", "LAYOUT_X4",
    "dequantize_row",
    "quantize_activations", "ACTIVATION_TYPES", "memory_bandwidth", "quantize_kv", "attention_kv", "KV_CACHE_TYPES",
]

MAX_THREADS = 256
# Activation (vec_dot) formats quantize_activations can produce.
ACTIVATION_TYPES = (T.Q8_0, T.Q8_1, T.Q8_K, T.F32, T.F16, T.BF16)
# Element types of the KV cache (kv/cache_types.py) that quantize_kv writes and attention_kv reads.
KV_CACHE_TYPES = (T.F16, T.Q8_0, T.Q4_0)
# The C status codes (li_status in csrc/localinfer.h, read from the module): exception, meaning.
_ERRORS = {} if _lib is None else {
    _lib.LI_EINVAL: (ValueError, "invalid argument"),
    _lib.LI_ETYPE: (UnsupportedQuantType, "unsupported type"),
    _lib.LI_ENOMEM: (MemoryError, "out of memory"),
    _lib.LI_EISA: (ValueError, "ISA not available"),
}


class KernelsUnavailable(RuntimeError):
    """The C kernels were not built; use the numpy path (localinfer.formats / ops_reference)."""


def available() -> bool:
    """Whether the C kernels are built and loaded."""
    return _lib is not None


def unavailable_reason() -> str | None:
    """Why the kernels are unavailable, or None when they are available."""
    return _REASON


def _need_lib():
    if _lib is None:
        raise KernelsUnavailable(_REASON)
    return _lib


def c_module():
    """(ffi, lib) of the compiled module, for callers that build C structs of their own (arch/fused.py,
    tokenizer/merge_c.py); KernelsUnavailable when the kernels are not built."""
    _need_lib()
    return _ffi, _lib


def _check(rc: int, what: str) -> None:
    """The one place a C status becomes an exception (every wrapper here, backend/ops.py and arch/fused.py
    pass theirs through it). The wrappers check arguments first, so anything but LI_ENOMEM is a
    bug in a wrapper; the message still names the call and the code."""
    if rc != 0:
        exc, meaning = _ERRORS.get(rc, (RuntimeError, "unknown status"))
        raise exc(f"{what} failed in C: {meaning} ({rc})")


check_status = _check  # the name for callers outside this package


# --- ISA and threads ------------------------------------------------------------------------


def isa() -> str:
    """The kernel variant in use: 'generic', 'avx2', 'avx512' or 'neon'."""
    return _ffi.string(_need_lib().li_isa_name()).decode()


def built_isas() -> list[str]:
    """The variants this build contains, lowest first."""
    return _ffi.string(_need_lib().li_isa_built()).decode().split(",")


def supported_isas() -> list[str]:
    """The variants this build contains and this CPU can run, lowest first."""
    lib = _need_lib()
    return [name for name in built_isas() if lib.li_isa_supported(name.encode()) == 1]


def _force_isa(name: str) -> str:
    """Switch the variant (tests and benchmarks); returns the previous one. Not for use while
    other threads run kernels. The environment variable LOCALINFER_ISA does this at load time."""
    lib = _need_lib()
    if not isinstance(name, str):
        raise TypeError(f"an ISA name is a str, got {type(name).__name__}")
    status = lib.li_isa_supported(name.encode())
    if status == -1:
        raise ValueError(f"unknown ISA {name!r}; this build has {', '.join(built_isas())}")
    if status == 0:
        raise ValueError(f"this CPU cannot run the {name!r} kernels; it supports {', '.join(supported_isas())}")
    previous = isa()
    _check(lib.li_force_isa(name.encode()), "force_isa")
    return previous


@contextlib.contextmanager
def _isa(name: str) -> Iterator[None]:
    previous = _force_isa(name)
    try:
        yield
    finally:
        _force_isa(previous)


def _check_threads(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"a thread count is an int, got {type(n).__name__} {n!r}")
    if not 1 <= n <= MAX_THREADS:
        raise ValueError(f"thread count must be between 1 and {MAX_THREADS}, got {n}")
    return int(n)


def set_threads(n: int) -> None:
    """Threads used by matmul (the calling thread counts as one)."""
    _check(_need_lib().li_set_threads(_check_threads(n)), "set_threads")


def get_threads() -> int:
    """Threads matmul uses; by default the physical cores this process may run on."""
    return int(_need_lib().li_get_threads())


STREAM_AHEAD_MAX = 1 << 20  # csrc/core/li.h LI_STREAM_AHEAD_MAX


def set_stream_ahead(n_bytes: int) -> int:
    """How many bytes ahead of its reads a dot that streams a weight matrix prefetches (the repacked
    x4 dots, and the row dots the ISA table names; csrc/core/li.h), for the whole process; 0: none,
    the hardware prefetcher alone. For benchmarks: the default comes from this CPU's L2 size (2 KiB
    on a 512 KiB L2, 4 KiB on a 2 MiB one; csrc/core/matmul.c). Returns the previous value."""
    if isinstance(n_bytes, bool) or not isinstance(n_bytes, (int, np.integer)):
        raise TypeError(f"a prefetch distance is an int of bytes, got {type(n_bytes).__name__}")
    if not 0 <= n_bytes <= STREAM_AHEAD_MAX:
        raise ValueError(f"prefetch distance must be between 0 and {STREAM_AHEAD_MAX} bytes, got {n_bytes}")
    old = _need_lib().li_set_stream_ahead(int(n_bytes))
    _check(old if old < 0 else 0, "set_stream_ahead")
    return int(old)


GEMM_MIN_ROWS = 6  # csrc/core/matmul.c LI_GEMM_MIN_M: matmul's default GEMV/GEMM switch


@contextlib.contextmanager
def gemv_rows(m: int) -> Iterator[None]:
    """Inside: matmul on this thread uses the GEMV for up to m rows, each row's result with the bits
    of a 1-row call (by default 6 rows or more go through the GEMM, 3 or more of a repacked matrix
    through a 16-row kernel where its type has one: both round otherwise). Speculative decoding
    verifies its drafted tokens with this, so they round as decode steps (speculative/verify.py)."""
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 1 <= m <= 4096:
        raise ValueError(f"gemv_rows takes 1..4096 rows, got {m!r}")
    lib = _need_lib()
    old = lib.li_set_gemm_min_rows(max(int(m) + 1, GEMM_MIN_ROWS))
    _check(old if old < 0 else 0, "gemv_rows")
    try:
        yield
    finally:
        lib.li_set_gemm_min_rows(old)


@contextlib.contextmanager
def batched_rows() -> Iterator[None]:
    """Inside: matmul and attention on this thread take their batched paths (the GEMM; V widened once
    per call) for any number of rows, so each row has the bits it has in a pass of many rows, where
    each row's result is independent of the others. A prompt whose first tokens' K/V come from a cache
    computes its remaining rows so, and its logits are bitwise those of the whole prompt at once
    (batching/engine.py). Outranks gemv_rows while inside."""
    lib = _need_lib()
    old = lib.li_set_batched_rows(1)
    try:
        yield
    finally:
        lib.li_set_batched_rows(old)


def set_pool_alone(on: bool) -> bool:
    """on: the C calls of this thread run on it alone, never on the pool's workers, so that a
    background job (arch/deferred_repack.py) leaves the pool to the forward passes. Per thread;
    returns the previous setting."""
    return bool(_need_lib().li_set_pool_alone(1 if on else 0))


# --- validation helpers ---------------------------------------------------------------------

_F32 = np.dtype(np.float32)
_TYPE_INFO: dict[int, tuple[T, int, int, int]] = {}


def _type_info(qtype, what: str = "weight") -> tuple[T, int, int, int]:
    """(type, block size, bytes per block, vec_dot type) from the C traits table."""
    if isinstance(qtype, bool) or not isinstance(qtype, (int, np.integer)):
        raise TypeError(f"a {what} type is a GGML type (localinfer.formats.ggml.GGMLType) or int, got {type(qtype).__name__} {qtype!r}")
    key = int(qtype)
    info = _TYPE_INFO.get(key)
    if info is not None:
        return info
    lib = _need_lib()
    try:
        qt = T(key)
    except ValueError:
        raise UnsupportedQuantType(f"{key} is not a GGML type") from None
    out = _ffi.new("int[3]")
    rc = lib.li_type_info(key, out, out + 1, out + 2)
    if rc == lib.LI_ETYPE:
        raise UnsupportedQuantType(f"the C kernels do not handle {what} type {qt.name}")
    _check(rc, "type_info")
    info = _TYPE_INFO[key] = (qt, int(out[0]), int(out[1]), int(out[2]))
    return info


def _check_array(a, name: str, dtypes: tuple, *, writable: bool = False) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(a).__name__}")
    if not a.dtype.isnative and a.dtype.newbyteorder("=") in dtypes:
        raise TypeError(f"{name} has non-native byte order {a.dtype}; use {name}.astype({a.dtype.newbyteorder('=')})")
    if a.dtype not in dtypes:
        want = " or ".join(str(np.dtype(d)) for d in dtypes)
        raise TypeError(f"{name} must have dtype {want}, got {a.dtype}")
    flags = a.flags
    if not flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous; np.ascontiguousarray({name}) makes a contiguous copy")
    if not flags.aligned:
        raise ValueError(f"{name} is not aligned for its dtype; np.array({name}) makes an aligned copy")
    if writable and not flags.writeable:
        raise ValueError(f"{name} must be writable")
    return a


def _buffer(a: np.ndarray, name: str, align: int):
    """cffi view of a checked array (no copy), its start address checked against `align`."""
    buf = _ffi.from_buffer(a)
    if a.size and int(_ffi.cast("uintptr_t", buf)) % align:
        raise ValueError(
            f"{name} starts at an address that is not a multiple of {align} bytes "
            f"(GGUF tensor data always is); np.array({name}) makes an aligned copy"
        )
    return buf


def _raw_alignment(qt: T) -> int:
    """Raw rows are read in place through C structs: f32 values, or the fp16 fields of blocks
    (all at even offsets of even-sized blocks). GGUF tensor data is 32-byte aligned."""
    return 4 if qt == T.F32 else 2


# --- matmul ---------------------------------------------------------------------------------


_FLOAT_ARRAY = _ffi.typeof("float[]") if _ffi is not None else None
_from_buffer = _ffi.from_buffer if _ffi is not None else None


LAYOUT_ROWS, LAYOUT_X4 = 0, 1  # csrc/localinfer.h's li_layout


def repack_layout(wtype) -> int:
    """The layout `prepare(..., repack=True)` builds for wtype on the active ISA: LAYOUT_X4 (groups of
    four rows interleaved for the decode GEMV, core/repack.c) or LAYOUT_ROWS (nothing to gain)."""
    qt = _type_info(wtype)[0]
    return int(_need_lib().li_layout_for(int(qt)))


def layout_same_bits(wtype) -> bool:
    """Whether repack_layout(wtype) gives, for any number of activation rows, the bits of the rows as
    they are mapped on the active ISA (li_layout_same_bits): then a matrix of wtype can be repacked
    while in use without changing a result (arch/deferred_repack.py)."""
    qt = _type_info(wtype)[0]
    return bool(_need_lib().li_layout_same_bits(int(qt)))


def _anonymous(nbytes: int) -> np.ndarray:
    """nbytes of page-aligned anonymous memory (uint8), huge pages asked for where the OS has them:
    a repacked matrix is read end to end every decode step, and 2 MiB pages spare the TLB."""
    import mmap
    # private: MAP_SHARED anonymous memory is shmem, which takes no transparent huge pages
    buf = mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        try:
            buf.madvise(advice)
        except OSError:
            pass  # transparent huge pages off: 4 KiB pages work the same
    return np.frombuffer(buf, dtype=np.uint8, count=nbytes)


class PreparedMatrix:
    """A weight matrix checked once: W (n_out, k) as raw GGUF rows (uint8 (n_out, row_bytes)) of
    any supported type, or float32 / float16 (n_out, k) for F32 / F16. Holds W without copying,
    unless `repack` and the active ISA has a faster layout for the type (repack_layout): then a
    copy in that layout (anonymous memory) is what the kernels read (`data`), `layout` says which,
    and `w` is None: the caller's rows are not kept (a mapped tensor's pages can be released).
    For callers that build C structs of their own (arch/fused.py): `pointer` (a cffi pointer to
    `data`, kept alive by this object), `wtype_id` (the GGML type number), `layout`, `row_bytes`.
    A matrix `stacked` from several tensors that are not repacked keeps them where they are, as
    `parts` (`data` and `w` None); then `part_pointers` and `part_rows` are the C arrays that say
    where (li_matmul_parts), and `pointer` is the first part's."""

    REPACK_PIECE_BYTES = 8 << 20  # repacked this much at a time, each piece's source handed to on_repacked
    PART_ROWS = 16  # every part but the last a multiple of this (csrc/localinfer.h li_matmul_parts)

    def __init__(self, w: np.ndarray, wtype, repack: bool = False, on_repacked=None) -> None:
        qt, block, type_size, vec_dot_type = _type_info(wtype)
        if vec_dot_type < 0:
            raise UnsupportedQuantType(f"{qt.name} is an activation format, not a weight type the kernels multiply")
        if not isinstance(w, np.ndarray):
            raise TypeError(f"w must be a numpy array, got {type(w).__name__}")
        native = {T.F32: np.float32, T.F16: np.float16}.get(qt)
        dtypes = (np.uint8,) if native is None else (np.uint8, native)
        _check_array(w, "w", dtypes)
        if w.ndim != 2:
            raise ValueError(f"w must be 2-D (n_out, row_bytes) raw rows or (n_out, k) floats, got shape {w.shape}")
        if w.dtype == np.uint8:
            row_bytes = w.shape[1]
            if row_bytes % type_size:
                raise ValueError(
                    f"{qt.name} rows must be whole blocks of {type_size} bytes, got rows of {row_bytes} bytes"
                )
            k = row_bytes // type_size * block
        else:
            k, row_bytes = w.shape[1], w.shape[1] * w.itemsize
        self.w, self.wtype, self.n_out, self.k, self.row_bytes = w, qt, int(w.shape[0]), int(k), int(row_bytes)
        self.wtype_id = int(qt)
        self.layout = LAYOUT_ROWS
        data = w
        if repack and w.dtype == np.uint8 and w.size and self.n_out % 4 == 0:
            layout = _lib.li_layout_for(int(qt))
            if layout != LAYOUT_ROWS:
                data = _anonymous(w.nbytes).reshape(w.shape)
                self._repack_into(w, data, layout, on_repacked)
                self.layout = int(layout)
                self.w = None
        self.data = data  # what the kernels read: w, or its repacked copy
        self.pointer = _buffer(data, "w", _raw_alignment(qt)) if w.size else None
        start = int(_ffi.cast("uintptr_t", self.pointer)) if w.size else 0
        self._w_ranges = [(start, start + w.nbytes)]   # the bytes out must not overlap
        self.parts = self.part_pointers = self.part_rows = None

    def _repack_into(self, w: np.ndarray, dst: np.ndarray, layout: int, on_repacked) -> None:
        """Rows w (whole groups of four, this matrix's type and width) into dst (as many bytes) in
        `layout`, a piece at a time, calling on_repacked(lo, hi) with the bytes of w done so far."""
        src, out = _buffer(w, "w", _raw_alignment(self.wtype)), _ffi.from_buffer(dst)
        n_rows = int(w.shape[0])
        rows = max(4, self.REPACK_PIECE_BYTES // self.row_bytes // 4 * 4)  # whole groups per piece
        for r in range(0, n_rows, rows):
            n, at = min(rows, n_rows - r), r * self.row_bytes
            _check(_lib.li_repack(self.wtype_id, layout, src + at, self.row_bytes, n, out + at),
                   f"repack of {self.wtype.name} {self.shape}")
            if on_repacked is not None:  # e.g. the mapped pages of what was just copied go back
                on_repacked(at, at + n * self.row_bytes)

    @classmethod
    def stacked(cls, parts: list[np.ndarray], wtype, repack: bool = False, on_repacked=None) -> "PreparedMatrix":
        """One matrix whose rows are those of `parts` (raw rows of one type and width) in order.
        Where the rows get repacked, each part is repacked straight into its place in the one copy,
        calling on_repacked(i, lo, hi) with the bytes of part i done so far. Else the parts stay
        where they are (`parts`: read in one call, li_matmul_parts) when there are at most
        LI_MAX_PARTS of them and all but the last have a multiple of PART_ROWS rows; else they are
        concatenated. Concatenating first and then repacking would take the weights' bytes of
        fresh memory twice, which the OS must zero (on a VM, also back): most of the load time of
        an 8B Q8_0 file."""
        if not isinstance(parts, (list, tuple)) or not parts:
            raise ValueError("parts must be a non-empty list of arrays")
        for i, p in enumerate(parts):
            if not isinstance(p, np.ndarray):
                raise TypeError(f"parts[{i}] must be a numpy array, got {type(p).__name__}")
            if p.ndim != 2 or p.shape[1:] != parts[0].shape[1:] or p.dtype != parts[0].dtype:
                raise ValueError(f"parts must be 2-D arrays of one dtype and width: parts[{i}] is {p.dtype} "
                                 f"{p.shape}, parts[0] {parts[0].dtype} {parts[0].shape}")
        n_rows = sum(int(p.shape[0]) for p in parts)
        layout = repack_layout(wtype) if repack else LAYOUT_ROWS
        direct = (layout != LAYOUT_ROWS and parts[0].dtype == np.uint8 and parts[0].shape[1] > 0 and n_rows > 0
                  and all(p.shape[0] % 4 == 0 for p in parts))
        if not direct:
            in_place = (len(parts) <= _lib.LI_MAX_PARTS and parts[0].shape[1] > 0 and all(p.shape[0] > 0 for p in parts)
                        and all(p.shape[0] % cls.PART_ROWS == 0 for p in parts[:-1]))
            return cls._in_parts(parts, wtype) if in_place else cls(np.concatenate(parts), wtype, repack)
        data = _anonymous(n_rows * parts[0].shape[1]).reshape(n_rows, parts[0].shape[1])
        mat = cls(data, wtype)   # checks the type and width; the rows are filled below
        r0 = 0
        for i, p in enumerate(parts):
            done = None if on_repacked is None else (lambda lo, hi, i=i: on_repacked(i, lo, hi))
            mat._repack_into(p, data[r0:r0 + p.shape[0]], layout, done)
            r0 += p.shape[0]
        mat.layout, mat.w = int(layout), None
        return mat

    def repacked(self, on_piece=None) -> "PreparedMatrix | None":
        """This matrix (row-major: one array, or parts) copied into the active ISA's repacked layout,
        as `prepare(..., repack=True)` or `stacked(..., repack=True)` would have built it at load; None
        where that leaves it row-major. on_piece() is called after each piece repacked: it may raise to
        stop the copy (arch/deferred_repack.py stops a repack that way when the model closes)."""
        if self.layout != LAYOUT_ROWS or repack_layout(self.wtype) == LAYOUT_ROWS:
            return None
        if self.parts is None:
            mat = PreparedMatrix(self.w, self.wtype, True, on_piece and (lambda lo, hi: on_piece()))
        else:
            mat = PreparedMatrix.stacked(self.parts, self.wtype, True, on_piece and (lambda i, lo, hi: on_piece()))
        return mat if mat.layout != LAYOUT_ROWS else None

    @classmethod
    def _in_parts(cls, parts: list[np.ndarray], wtype) -> "PreparedMatrix":
        """The rows of `parts` as one matrix that reads each where it is (no copy)."""
        checked = [cls(p, wtype) for p in parts]   # each part's type, width and alignment
        rows = [c.n_out for c in checked]
        mat = checked[0]   # the first part, grown into the whole
        mat.part_pointers = _ffi.new("const void *[]", [c.pointer for c in checked])
        mat.part_rows = _ffi.new("int64_t[]", rows)
        mat._w_ranges = [r for c in checked for r in c._w_ranges]
        mat.n_out, mat.parts, mat.data, mat.w = sum(rows), list(parts), None, None
        mat._others = checked[1:]   # keep the other parts' buffers alive
        return mat

    @property
    def shape(self) -> tuple[int, int]:
        return self.n_out, self.k

    def matmul(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """x (m, k) or (k,) float32 -> x @ W^T: float32 (m, n_out) or (n_out,)."""
        # the common case in a few attribute reads; anything unusual gets the full check
        if not (type(x) is np.ndarray and x.dtype == _F32 and x.flags.c_contiguous and x.flags.aligned):
            _check_array(x, "x", (np.float32,))
        ndim = x.ndim
        if ndim not in (1, 2) or x.shape[-1] != self.k:
            raise ValueError(f"x must have shape (m, {self.k}) or ({self.k},) for W of shape {self.shape}, got {x.shape}")
        m = 1 if ndim == 1 else x.shape[0]
        out_shape = (self.n_out,) if ndim == 1 else (m, self.n_out)
        out_given = out is not None
        if out is None:
            out = np.empty(out_shape, dtype=_F32)
        elif not (type(out) is np.ndarray and out.dtype == _F32 and out.flags.c_contiguous
                  and out.flags.aligned and out.flags.writeable):
            _check_array(out, "out", (np.float32,), writable=True)
        if out.shape != out_shape:
            raise ValueError(f"out must have shape {out_shape}, got {out.shape}")
        if out.size == 0:
            return out
        if self.k == 0:
            out.fill(0.0)
            return out
        xb = _from_buffer(_FLOAT_ARRAY, x)     # a ctype object and no keyword: the cheapest call
        ob = _from_buffer(_FLOAT_ARRAY, out)   # writability checked above
        if out_given:
            o0, x0 = int(_ffi.cast("uintptr_t", ob)), int(_ffi.cast("uintptr_t", xb))
            if (o0 < x0 + x.nbytes and x0 < o0 + out.nbytes) or any(o0 < w1 and w0 < o0 + out.nbytes
                                                                    for w0, w1 in self._w_ranges):
                raise ValueError("out must not overlap x or w")
        if self.parts is None:
            rc = _lib.li_matmul_layout(self.wtype_id, self.layout, self.pointer, self.row_bytes, self.n_out, self.k,
                                       xb, m, ob)
        else:
            rc = _lib.li_matmul_parts(self.wtype_id, self.layout, self.part_pointers, self.part_rows,
                                      len(self.parts), self.row_bytes, self.k, xb, m, ob)
        if rc:
            _check(rc, f"matmul of {self.wtype.name} {self.shape}")
        return out


def prepare(w: np.ndarray, wtype, repack: bool = False, on_repacked=None) -> PreparedMatrix:
    """Check W once for repeated matmuls (the forward pass keeps one per linear layer); with
    `repack`, in the active ISA's decode layout where it has one, calling on_repacked(lo, hi) with
    the byte range of w copied so far, piece by piece (PreparedMatrix)."""
    return PreparedMatrix(w, wtype, repack, on_repacked)


def matmul(w: np.ndarray, wtype, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """y = x @ W^T with W quantized: see PreparedMatrix. x float32 (m, k) or (k,)."""
    return PreparedMatrix(w, wtype).matmul(x, out)


# --- rows -----------------------------------------------------------------------------------


def dequantize_row(raw: np.ndarray, wtype, n: int) -> np.ndarray:
    """n elements of `wtype` (raw bytes, or float32/float16 for F32/F16) -> float32 (n,)."""
    qt, block, type_size, _ = _type_info(wtype, "tensor")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n is an int, got {type(n).__name__}")
    if n < 0 or n % block:
        raise ValueError(f"n = {n} is not a non-negative multiple of the {qt.name} block size {block}")
    native = {T.F32: np.float32, T.F16: np.float16}.get(qt)
    _check_array(raw, "raw", (np.uint8,) if native is None else (np.uint8, native))
    need = n // block * type_size
    if raw.nbytes != need:
        raise ValueError(f"{n} {qt.name} elements take {need} bytes, got {raw.nbytes} bytes (shape {raw.shape})")
    out = np.empty(n, dtype=np.float32)
    if n:
        src = _buffer(raw, "raw", _raw_alignment(qt))
        _check(_lib.li_dequantize_row(int(qt), src, _ffi.from_buffer("float[]", out, require_writable=True), n), "dequantize_row")
    return out


def quantize_activations(x: np.ndarray, act_type) -> np.ndarray:
    """float32 (k,) or (m, k) -> raw rows of an activation type (Q8_0, Q8_1, Q8_K, F32, F16, BF16):
    uint8 (row_bytes,) or (m, row_bytes), exactly what matmul feeds the dot products."""
    qt, block, type_size, _ = _type_info(act_type, "activation")
    if qt not in ACTIVATION_TYPES:
        raise UnsupportedQuantType(f"{qt.name} is not an activation type; use one of {', '.join(t.name for t in ACTIVATION_TYPES)}")
    _check_array(x, "x", (np.float32,))
    if x.ndim not in (1, 2):
        raise ValueError(f"x must be 1-D or 2-D, got shape {x.shape}")
    k = x.shape[-1]
    if k % block:
        raise ValueError(f"row length {k} is not a multiple of the {qt.name} block size {block}")
    rows = x.reshape(-1, k)
    row_bytes = k // block * type_size
    out = np.empty((rows.shape[0], row_bytes), dtype=np.uint8)
    for i in range(rows.shape[0]):
        if k:
            _check(_lib.li_quantize_row(int(qt), _ffi.from_buffer("float[]", rows[i]), _ffi.from_buffer(out[i], require_writable=True), k), "quantize_activations")
    return out.reshape(row_bytes) if x.ndim == 1 else out


def quantize_kv(x: np.ndarray, cache_type) -> np.ndarray:
    """float32 (n,) -> n values of a KV cache type (Q8_0, Q4_0, F16) as raw bytes (n / block * type_size,),
    in one C call (ggml's reference rounding; a row of the cache is whole blocks, so quantizing the
    concatenated rows is quantizing each row)."""
    qt, block, type_size, _ = _type_info(cache_type, "KV cache")
    if qt not in KV_CACHE_TYPES:
        raise UnsupportedQuantType(f"{qt.name} is not a KV cache type; use one of {', '.join(t.name for t in KV_CACHE_TYPES)}")
    _check_array(x, "x", (np.float32,))
    if x.ndim != 1 or x.shape[0] % block:
        raise ValueError(f"x must be 1-D with a multiple of {block} values for {qt.name}, got shape {x.shape}")
    out = np.empty(x.shape[0] // block * type_size, dtype=np.uint8)
    if x.size:
        _check(_lib.li_quantize_row(int(qt), _ffi.from_buffer("float[]", x), _ffi.from_buffer(out, require_writable=True),
                                    x.shape[0]), "quantize_kv")
    return out


def check_sinks(sinks, n_head: int) -> np.ndarray | None:
    """Attention sink logits as C reads them: float32 (n_head,), contiguous; None stays None. -inf
    is allowed (no sink for that head); NaN is refused (it would make every probability NaN)."""
    if sinks is None:
        return None
    s = np.ascontiguousarray(sinks, dtype=np.float32)
    if s.shape != (n_head,):
        raise ValueError(f"sinks must have shape ({n_head},), one logit per query head, got {s.shape}")
    if np.isnan(s).any() or (s == np.inf).any():
        raise ValueError("sinks must be finite or -inf")
    return s


def attention_kv(q: np.ndarray, k: np.ndarray, k_type, v: np.ndarray, v_type, q_positions: np.ndarray, scale: float,
                 window: int = 0, softcap: float = 0.0, key_start: int = 0, sinks=None) -> np.ndarray:
    """Causal attention over a cache of K rows of `k_type` and V rows of `v_type` (F16, Q8_0, Q4_0),
    read in place by C (csrc/core/attention_kv.c). q: float32 (n, n_head, head_dim); k, v: (n_kv,
    n_head_kv, head_dim) float16 or (n_kv, n_head_kv, row bytes) uint8 blocks; key j at position
    key_start + j; sinks: (n_head,) logits in each head's softmax denominator (gpt-oss), or None.
    Returns float32 (n, n_head, head_dim)."""
    lib = _need_lib()
    _check_array(q, "q", (np.float32,))
    if q.ndim != 3:
        raise ValueError(f"q must be (n, n_head, head_dim), got shape {q.shape}")
    n, n_head, head_dim = q.shape
    kinds = []
    for name, a, t in (("k", k, k_type), ("v", v, v_type)):
        qt, block, type_size, _ = _type_info(t, "KV cache")
        if qt not in KV_CACHE_TYPES:
            raise UnsupportedQuantType(f"{name}: {qt.name} is not a KV cache type; use one of "
                                       f"{', '.join(t.name for t in KV_CACHE_TYPES)}")
        _check_array(a, name, (np.float16,) if qt == T.F16 else (np.uint8,))
        if head_dim % block:
            raise ValueError(f"{name}: head_dim {head_dim} is not a multiple of the {qt.name} block size {block}")
        width = head_dim if qt == T.F16 else head_dim // block * type_size
        if a.ndim != 3 or a.shape[2] != width:
            raise ValueError(f"{name} must be (n_kv, n_head_kv, {width}) for {qt.name} rows of {head_dim} values, "
                             f"got shape {a.shape}")
        kinds.append(qt)
    if k.shape[:2] != v.shape[:2] or k.shape[1] == 0 or n_head % k.shape[1]:
        raise ValueError(f"attention: q {q.shape}, k {k.shape}, v {v.shape} do not fit together")
    pos = _check_array(q_positions, "q_positions", (np.int64,))
    if pos.shape != (n,):
        raise ValueError(f"q_positions must have shape ({n},), got {pos.shape}")
    for name, val in (("window", window), ("key_start", key_start)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 0:
            raise ValueError(f"{name} must be a non-negative int, got {val!r}")
    sinks = check_sinks(sinks, n_head)
    out = np.empty_like(q)
    if n:
        _check(lib.li_attention_kv(_ffi.from_buffer("float[]", q), int(kinds[0]), _ffi.from_buffer(k), int(kinds[1]),
                                   _ffi.from_buffer(v), _ffi.from_buffer("float[]", out, require_writable=True), n, n_head,
                                   k.shape[1], head_dim, k.shape[0], _ffi.from_buffer("int64_t[]", pos), int(key_start),
                                   float(scale), int(window), float(softcap or 0.0),
                                   _ffi.NULL if sinks is None else _ffi.from_buffer("float[]", sinks)), "attention_kv")
    return out


# --- memory bandwidth -----------------------------------------------------------------------


def memory_bandwidth(n_bytes: int, reps: int = 5, copy: bool = True) -> dict:
    """Best-of-`reps` bandwidth of the kernels' thread pool (get_threads() threads) streaming a
    buffer of `n_bytes` (csrc/core/membw.c): {"read_bps", "copy_bps" (read + write bytes; None without
    `copy`)}. Give more than the last-level cache, or the figure is the cache's; `copy` allocates
    the buffer twice."""
    lib = _need_lib()
    for name, v in (("n_bytes", n_bytes), ("reps", reps)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} is an int, got {type(v).__name__} {v!r}")
    if not 1 << 20 <= n_bytes <= 1 << 40:
        raise ValueError(f"n_bytes must be between 1 MiB and 1 TiB, got {n_bytes}")
    if not 1 <= reps <= 1000:
        raise ValueError(f"reps must be between 1 and 1000, got {reps}")
    read = _ffi.new("double *")
    copied = _ffi.new("double *") if copy else _ffi.NULL
    _check(lib.li_membw(int(n_bytes), int(reps), read, copied), "memory_bandwidth")
    return {"read_bps": float(read[0]), "copy_bps": float(copied[0]) if copy else None}


# --- GGUF string arrays ---------------------------------------------------------------------


def string_array(buf, pos: int, count: int, max_len: int) -> tuple[list[str], int] | None:
    """The `count` strings of a GGUF string array at buf[pos:] and the offset after it, walked in C
    and decoded in one call (core/strings.c); None where that cannot say exactly what is there (an
    element out of bounds, a NUL byte inside a string, invalid UTF-8), for the caller's per-string
    loop to read or to name the bad element."""
    lib = _need_lib()
    if count <= 0 or not 0 <= pos <= len(buf):
        return None
    src = _ffi.from_buffer("uint8_t[]", buf)
    n_out, has_nul = _ffi.new("int64_t *"), _ffi.new("int32_t *")
    if lib.li_string_array(src, len(buf), pos, count, max_len, _ffi.NULL, n_out, has_nul) < 0:
        return None
    out = bytearray(n_out[0])
    end = lib.li_string_array(src, len(buf), pos, count, max_len, _ffi.from_buffer("uint8_t[]", out), n_out, has_nul)
    if end < 0 or has_nul[0]:
        return None
    try:
        return out.decode("utf-8").split("\0"), end
    except UnicodeDecodeError:
        return None
