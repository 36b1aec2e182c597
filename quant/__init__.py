"""GGML quant formats: the registry of tensor types and numpy reference dequantizers.

The weight quantizers (``quantizers``, ``quantize_basic``, ``quantize_kquants``), the
mix policy (``mixes``) and the file pipeline (``quantize_file``) are imported on demand:
they need numba, which inference does not.
"""

from .formats import FORMATS, QuantFormat, UnsupportedQuantType, dequantize, get_format, row_nbytes

__all__ = ["FORMATS", "QuantFormat", "UnsupportedQuantType", "get_format", "dequantize", "row_nbytes"]
