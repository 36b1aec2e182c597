"""Weights as the architectures use them: linear layers, embeddings and vectors.

A `WeightLoader` decides once, per backend, what a linear layer is:
  - "reference": `DenseLinear`, the tensor dequantized to float32 at load and multiplied with
    numpy (the readable oracle);
  - "c": `KernelLinear`, the raw quantized rows straight from the mmap, multiplied by the C
    kernels with activations quantized once per matmul.
The architecture code only calls `layer.wq(x)`, so swapping the backend never touches it.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
from typing import Callable, Iterator

import numpy as np

from ..files.gguf_file import GGUFError, GGUFFile
from ..files.read_ahead import read_ahead
from ..formats import dequantize

BACKENDS = ("reference", "c")

# A callable (names, expert, x) that sees every linear layer's input before its matmul: `names`
# the GGUF tensors whose rows the layer holds (several for a stacked q/k/v), `expert` the expert's
# index in a 3-D tensor (else None), x (m, n_in). The importance matrix (measure/imatrix.py) is made
# this way; a context variable, so that it sees only the forward passes of the thread that set it.
MatmulObserver = Callable[[tuple, "int | None", np.ndarray], None]
_observer: contextvars.ContextVar[MatmulObserver | None] = contextvars.ContextVar("matmul_observer", default=None)


@contextlib.contextmanager
def observe_matmuls(fn: MatmulObserver) -> Iterator[None]:
    """Call `fn` with each linear layer's input during the block. The layers then run one by one
    (DecoderModel skips the fused C layer stack, which has no per-matmul hook)."""
    token = _observer.set(fn)
    try:
        yield
    finally:
        _observer.reset(token)


def observing() -> bool:
    return _observer.get() is not None


def _observe(layer, x: np.ndarray) -> None:
    fn = _observer.get()
    if fn is not None:
        fn(layer.names, layer.expert, x)


class DenseLinear:
    """y = x @ W.T (+ b), W float32 (n_out, n_in)."""

    def __init__(self, w: np.ndarray, bias: np.ndarray | None = None, names: tuple = (), expert: int | None = None):
        self.w, self.bias = w, bias
        self.shape = w.shape
        self.names, self.expert = names, expert  # for observe_matmuls

    def __call__(self, x: np.ndarray) -> np.ndarray:
        _observe(self, x)
        y = x @ self.w.T
        return y if self.bias is None else y + self.bias


class KernelLinear:
    """y = x @ W.T (+ b), W the GGUF's quantized rows (n_out, row_bytes), multiplied in C."""

    def __init__(self, prepared, bias: np.ndarray | None = None, names: tuple = (), expert: int | None = None):
        self.mat, self.bias = prepared, bias
        self.shape = prepared.shape
        self.names, self.expert = names, expert  # for observe_matmuls

    def __call__(self, x: np.ndarray) -> np.ndarray:
        _observe(self, x)
        y = self.mat.matmul(np.ascontiguousarray(x, dtype=np.float32))
        return y if self.bias is None else y + self.bias


Linear = DenseLinear | KernelLinear  # both are callables x (m, n_in) -> x @ W.T (m, n_out)


class Embedding:
    """Rows of a (n_vocab, n_embd) table, dequantized only for the tokens asked for."""

    def __init__(self, raw: np.ndarray, qtype, shape: tuple[int, int], read_rows: Callable | None = None):
        self.raw, self.qtype, self.shape = raw, qtype, shape
        self.read_rows = read_rows   # rows -> their raw bytes, read from the file (gguf_file.RowReader)

    def __call__(self, tokens: np.ndarray) -> np.ndarray:
        rows = self.read_rows(tokens) if self.read_rows is not None else self.raw[tokens]
        return dequantize(rows, self.qtype, (len(tokens), self.shape[1]))


class WeightLoader:
    def __init__(self, f: GGUFFile, backend: str = "reference", repack: bool = False):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
        if backend == "c":
            from ..backend import kernels
            if not kernels.available():
                raise RuntimeError(kernels.unavailable_reason())
        self.f, self.backend = f, backend
        # repack: matrices in the active ISA's decode layout (kernels.repack_layout), copied out of
        # the mmap whose pages are then released (an embedding table that is also the output
        # matrix faults back in only the rows it looks up)
        self.repack = bool(repack) and backend == "c"
        self.copied_bytes = 0  # weights held outside the mmap: stacked, dequantized, float32 vectors
        self.repacked_bytes = 0  # of those, matrices in a repacked layout
        self.repacked_tensors: set[str] = set()
        # KernelLinears left as mapped for now, whose repacked layout gives the same bits: repacked
        # after load, in the background (arch/deferred_repack.py)
        self.deferred: list[KernelLinear] = []
        self.embedding_names: set[str] = set()   # tables whose rows are looked up (embedding)
        self.ahead = None  # a files.read_ahead.ReadAhead over the file while it loads (build_with_loader)
        if backend == "c":
            from ..backend import ops
            self.ops = ops  # the layer ops in C, same signatures as the reference
        else:
            from ..backend import ops_reference
            self.ops = ops_reference

    def _info(self, name: str, shape: tuple[int, ...]):
        info = self.f.tensors.get(name)
        if info is None:
            raise GGUFError(f"{self.f.path}: missing tensor {name!r}")
        if tuple(info.shape) != tuple(shape):
            raise GGUFError(f"{self.f.path}: tensor {name!r} has shape {info.shape}, expected {tuple(shape)}")
        return info

    def has(self, name: str) -> bool:
        return name in self.f.tensors

    def tensor_data(self, name: str) -> np.ndarray:
        """The file's tensor (GGUFFile.tensor_data), the read-ahead told where the load has got to."""
        if self.ahead is not None and self.f.part_of(name) is self.f and name in self.f.tensors:
            self.ahead.at(self.f.tensors[name].offset)
        return self.f.tensor_data(name)

    def vector(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """A small tensor (norm weights, biases) as float32."""
        info = self._info(name, shape)
        raw = self.tensor_data(name)
        out = dequantize(raw, info.ggml_type, info.shape)
        self.copied_bytes += 0 if np.may_share_memory(out, raw) else out.nbytes  # F32 stays a view
        return out

    def optional_vector(self, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
        return self.vector(name, shape) if self.has(name) else None

    def linear(self, name: str, shape: tuple[int, int], bias: str | None = None):
        """The matrix `name` (n_out, n_in) as a callable x -> x @ W.T (+ the bias tensor `bias`)."""
        info = self._info(name, shape)
        b = self.optional_vector(bias, (shape[0],)) if bias else None
        if self.backend == "c":
            from ..formats import UnsupportedQuantType
            try:
                later = self._later(info.ggml_type)
                mat = self._prepared(name, info.ggml_type, self.repack and not later)
            except UnsupportedQuantType:
                pass  # a type the C core lacks: this one layer runs on the reference path
            else:
                return self._maybe_later(KernelLinear(mat, b, (name,)), later)
        raw = self.tensor_data(name)
        dense = DenseLinear(dequantize(raw, info.ggml_type, info.shape), b, (name,))
        self.copied_bytes += 0 if np.may_share_memory(dense.w, raw) else dense.w.nbytes
        return dense

    def experts(self, name: str, shape: tuple[int, int, int], bias: str | None = None) -> list:
        """The 3-D expert tensor `name` (n_expert, n_out, n_in) as one linear layer per expert,
        each with its row of the (n_expert, n_out) tensor `bias` when the file has it (gpt-oss).
        Each expert's rows are a contiguous slice of the tensor, so on the C backend every
        layer is a view of the mmap and a forward pass reads only the experts it calls."""
        info = self._info(name, shape)
        raw = self.tensor_data(name)  # (n_expert, n_out, row_bytes), or floats for F32/F16
        b = self.optional_vector(bias, shape[:2]) if bias else None  # (n_expert, n_out)
        bias_of = [None if b is None else b[e] for e in range(shape[0])]
        if self.backend == "c":
            from ..backend import kernels
            from ..formats import UnsupportedQuantType
            try:
                return [KernelLinear(kernels.prepare(raw[e], info.ggml_type), bias_of[e], (name,), e)
                        for e in range(shape[0])]
            except UnsupportedQuantType:
                pass  # a type the C core lacks: these experts run on the reference path
        dense = [DenseLinear(dequantize(raw[e], info.ggml_type, shape[1:]), bias_of[e], (name,), e)
                 for e in range(shape[0])]
        self.copied_bytes += sum(0 if np.may_share_memory(d.w, raw) else d.w.nbytes for d in dense)
        return dense

    def stacked_linear(self, names: list[str], shapes: list[tuple[int, int]], biases: list[str]):
        """One matrix whose rows are those of `names` in order, or None where stacking does not pay
        or does not fit: only the C backend stacks (one matmul call and one activation quantization
        instead of several; each row's result is the same bits as alone), and only matrices of one
        type and width, with a bias on all or none. Where the rows are repacked, the stacked rows are a
        copy outside the mmap (repacked straight from each tensor: PreparedMatrix.stacked) and the
        mapped pages they came from are released, so the weights are held once; else the tensors
        are read where they are mapped, as the parts of one matrix (or, where they cannot be, copied
        the same way)."""
        if self.backend != "c":
            return None
        infos = [self._info(n, s) for n, s in zip(names, shapes)]
        if len({i.ggml_type for i in infos}) != 1 or len({s[1] for s in shapes}) != 1:
            return None
        has_bias = [self.has(b) for b in biases]
        if any(has_bias) and not all(has_bias):
            return None
        from ..backend import kernels
        from ..formats import UnsupportedQuantType
        b = np.concatenate([self.vector(bn, (s[0],)) for bn, s in zip(biases, shapes)]) if all(has_bias) else None
        try:
            later = self._later(infos[0].ggml_type)
            mat = kernels.PreparedMatrix.stacked([self.tensor_data(n) for n in names], infos[0].ggml_type,
                                                 self.repack and not later,
                                                 lambda i, lo, hi: self.f.release_bytes(names[i], lo, hi))
        except UnsupportedQuantType:
            return None
        if mat.parts is not None:   # read where they are mapped: nothing copied, nothing to release
            return self._maybe_later(KernelLinear(mat, b, tuple(names)), later)
        for n in names:
            self.f.release(n)
        self.copied_bytes += mat.data.nbytes
        if mat.layout != kernels.LAYOUT_ROWS:
            self.repacked_bytes += mat.data.nbytes
            self.repacked_tensors.update(names)
        return KernelLinear(mat, b, tuple(names))

    def _later(self, wtype) -> bool:
        """Whether a matrix of wtype is repacked after load rather than now: its repacked layout gives
        the row-major bits, so the swap changes no result (kernels.layout_same_bits)."""
        from ..backend import kernels
        return self.repack and kernels.layout_same_bits(wtype)

    def _maybe_later(self, linear: KernelLinear, later: bool) -> KernelLinear:
        if later:
            self.deferred.append(linear)
        return linear

    def layout_rounds(self) -> bool:
        """Whether a matrix repacked so far gives other GEMV bits than its mapped rows would."""
        if not self.repacked_tensors:
            return False
        from ..backend import kernels
        return any(not kernels.layout_same_bits(self.f.tensors[n].ggml_type) for n in self.repacked_tensors)

    def repack_tied_now(self) -> None:
        """Repacks now the deferred matrices that are also an embedding table (a tied output; after the
        whole load, so the order of the two does not matter). The lookups read the table's rows from
        the file, never through the mapping; a forward pass on the mapped matrix would bring the whole
        table in, and its copy after load would then hold it twice for a while (gemma3's 178 MB, 74% of
        its file). Copied now, piece by piece, its mapped pages go as they are copied."""
        for linear in [lin for lin in self.deferred if set(lin.names) & self.embedding_names]:
            self.deferred.remove(linear)
            (name,) = linear.names
            linear.mat = self._prepared(name, linear.mat.wtype, True)

    def _prepared(self, name: str, wtype, repack: bool):
        """Tensor `name` for the C kernels (kernels.prepare); where repacked, its mapped pages go back piece
        by piece as they are copied, and it is counted (_count_repacked)."""
        from ..backend import kernels
        mat = kernels.prepare(self.tensor_data(name), wtype, repack, lambda lo, hi: self.f.release_bytes(name, lo, hi))
        self._count_repacked(mat, [name])
        return mat

    def _count_repacked(self, mat, names: list[str]) -> None:
        """A matrix copied into a repacked layout: its mapped pages are released, its bytes counted."""
        from ..backend import kernels
        if mat.layout == kernels.LAYOUT_ROWS:
            return
        for n in names:
            self.f.release(n)
        self.copied_bytes += mat.data.nbytes
        self.repacked_bytes += mat.data.nbytes
        self.repacked_tensors.update(names)

    def optional_linear(self, name: str, shape: tuple[int, int], bias: str | None = None):
        return self.linear(name, shape, bias) if self.has(name) else None

    def embedding(self, name: str, shape: tuple[int, int]) -> Embedding:
        self.embedding_names.add(name)
        info = self._info(name, shape)
        raw = self.tensor_data(name)
        if raw.ndim != 2:   # a float table: numpy's own rows
            return Embedding(raw, info.ggml_type, info.shape)
        return Embedding(raw, info.ggml_type, info.shape, self.f.row_reader(name))


def build_with_loader(cls, f: GGUFFile, config, backend: str, repack: bool):
    """cls(config, weights, ops) with its weights read by a WeightLoader, and the loader's account of the
    memory they took outside the mapping (weight_copy_bytes, repacked_bytes: Model.memory reports them):
    the frame every architecture's from_gguf shares, decoder or encoder."""
    loader = WeightLoader(f, backend, repack)
    # the copies overlap the disk's reading (files/read_ahead.py): the file's data section, to its end
    loader.ahead = read_ahead(f.path, f.data_offset, os.path.getsize(f.path)) if loader.repack else None
    with loader.ahead or contextlib.nullcontext():
        weights = cls.load_weights(loader, config)
        loader.repack_tied_now()
    loader.ahead = None
    model = cls(config, weights, loader.ops)
    model.weight_copy_bytes = loader.copied_bytes
    model.repacked_bytes, model.repacked_tensors = loader.repacked_bytes, frozenset(loader.repacked_tensors)
    # whether a matrix's layout gives its GEMV rows other bits than the mapped rows (prefix caches are
    # keyed by it); the deferred ones give the same bits
    model.layout_rounds = loader.layout_rounds()
    from .deferred_repack import DeferredRepack
    model.weights_version = 0   # bumped by each swap: DecoderModel rebuilds its fused layers
    model.deferred_repack = DeferredRepack(model, f, loader.deferred)   # Model starts it
    return model
