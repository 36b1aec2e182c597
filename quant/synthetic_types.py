"""The file types a synthetic model can be written in: llama-quantize's mixes, plus "pure" types.

    synthetic_file_type("Q4_K_M")  # -> (llama-quantize's Q4_K_M, pure=False): its per-tensor mix
    synthetic_file_type("MXFP4")   # -> (MXFP4_MOE's ftype, pure=True): every matrix MXFP4

Why a pure MXFP4: llama-quantize's only MXFP4 file type, MXFP4_MOE (gpt-oss), gives MXFP4 to expert
tensors alone and Q8_0 to every other matrix, so a dense shape in that mix is a Q8_0 file. llama.cpp's
CPU backend runs MXFP4 matmuls on any tensor, and `llama-quantize --pure ... MXFP4_MOE` writes every
matrix (token embedding included) as MXFP4: that is the file "MXFP4" names here, so a dense 1B shape
measures the MXFP4 dot product in both runtimes.
"""
from __future__ import annotations

from gguf import GGMLQuantizationType as T

from .mixes import FileType, get_file_type

MOSTLY_MXFP4_MOE = 38  # llama_ftype LLAMA_FTYPE_MOSTLY_MXFP4_MOE (include/llama.h)

# name -> the file type whose default every quantizable tensor gets (llama-quantize --pure)
PURE_FILE_TYPES = {"MXFP4": FileType("MXFP4", MOSTLY_MXFP4_MOE, T.MXFP4)}


def synthetic_file_type(name: str) -> tuple[FileType, bool]:
    """(file type, pure) for a synthetic file type name: a pure type above, else llama-quantize's mix
    of that name (UnsupportedQuantType naming it if neither)."""
    key = name.strip().upper()
    if key in PURE_FILE_TYPES:
        return PURE_FILE_TYPES[key], True
    return get_file_type(key), False
