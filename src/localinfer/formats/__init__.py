"""GGML's tensor formats: the type numbers (``ggml``), the registry of block layouts with numpy
reference dequantizers (``registry``), the basic quantizers the KV cache uses (``quantize_basic``)
and the activation quantizers the C kernels must match (``activations``).

The runtime's own copy of what a GGUF file's tensors mean; the offline tools in ``quant/`` (the
weight quantizers, mixes, converters) build on it, never the reverse.
"""

from .registry import FORMATS, ImatrixRequired, QuantFormat, UnsupportedQuantType, dequantize, get_format, row_nbytes

__all__ = ["FORMATS", "ImatrixRequired", "QuantFormat", "UnsupportedQuantType", "dequantize", "get_format",
           "row_nbytes"]
