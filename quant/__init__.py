"""GGML quant formats: the registry of tensor types and numpy reference dequantizers."""

from .formats import FORMATS, QuantFormat, UnsupportedQuantType, dequantize, get_format, row_nbytes

__all__ = ["FORMATS", "QuantFormat", "UnsupportedQuantType", "get_format", "dequantize", "row_nbytes"]
