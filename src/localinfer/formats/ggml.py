"""GGML's tensor types and GGUF's value and token types: the numbers the file format fixes.

The values are those of the GGUF specification (ggml/docs/gguf.md) and ggml.h's `enum ggml_type`;
the names are gguf-py's, so a member compares and hashes equal to gguf-py's member of the same
type (both are ints). They live here so that reading a model never imports gguf-py (~50 ms of
start-up); the offline tools in `quant/` that write GGUF files through gguf-py keep using it.
"""
from __future__ import annotations

from enum import IntEnum


class GGMLType(IntEnum):
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41


T = GGMLType
# type -> (elements per block, bytes per block)
QUANT_SIZES: dict[GGMLType, tuple[int, int]] = {
    T.F32: (1, 4), T.F16: (1, 2), T.Q4_0: (32, 18), T.Q4_1: (32, 20), T.Q5_0: (32, 22), T.Q5_1: (32, 24),
    T.Q8_0: (32, 34), T.Q8_1: (32, 40), T.Q2_K: (256, 84), T.Q3_K: (256, 110), T.Q4_K: (256, 144),
    T.Q5_K: (256, 176), T.Q6_K: (256, 210), T.Q8_K: (256, 292), T.IQ2_XXS: (256, 66), T.IQ2_XS: (256, 74),
    T.IQ3_XXS: (256, 98), T.IQ1_S: (256, 50), T.IQ4_NL: (32, 18), T.IQ3_S: (256, 110), T.IQ2_S: (256, 82),
    T.IQ4_XS: (256, 136), T.I8: (1, 1), T.I16: (1, 2), T.I32: (1, 4), T.I64: (1, 8), T.F64: (1, 8),
    T.IQ1_M: (256, 56), T.BF16: (1, 2), T.TQ1_0: (256, 54), T.TQ2_0: (256, 66), T.MXFP4: (32, 17),
    T.NVFP4: (64, 36), T.Q1_0: (128, 18),
}


class GGUFValueType(IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


class TokenType(IntEnum):
    """tokenizer.ggml.token_type: llama.cpp's llama_token_type"""
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


# general.file_type (llama.cpp's llama_ftype) -> the name llama.cpp and Ollama show
FILE_TYPE_NAMES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
    37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0", 1024: "GUESSED",
}


class TokenizerKeys:
    """tokenizer.ggml.* metadata keys (gguf-py's Keys.Tokenizer names); SEP_ID keeps the spec's spelling"""
    MODEL = "tokenizer.ggml.model"
    PRE = "tokenizer.ggml.pre"
    LIST = "tokenizer.ggml.tokens"
    TOKEN_TYPE = "tokenizer.ggml.token_type"
    SCORES = "tokenizer.ggml.scores"
    MERGES = "tokenizer.ggml.merges"
    BOS_ID = "tokenizer.ggml.bos_token_id"
    EOS_ID = "tokenizer.ggml.eos_token_id"
    EOT_ID = "tokenizer.ggml.eot_token_id"
    EOM_ID = "tokenizer.ggml.eom_token_id"
    UNK_ID = "tokenizer.ggml.unknown_token_id"
    SEP_ID = "tokenizer.ggml.seperator_token_id"
    PAD_ID = "tokenizer.ggml.padding_token_id"
    MASK_ID = "tokenizer.ggml.mask_token_id"
    FIM_PRE_ID = "tokenizer.ggml.fim_pre_token_id"
    FIM_SUF_ID = "tokenizer.ggml.fim_suf_token_id"
    FIM_MID_ID = "tokenizer.ggml.fim_mid_token_id"
    FIM_PAD_ID = "tokenizer.ggml.fim_pad_token_id"
    FIM_REP_ID = "tokenizer.ggml.fim_rep_token_id"
    FIM_SEP_ID = "tokenizer.ggml.fim_sep_token_id"
    PREFIX_ID = "tokenizer.ggml.prefix_token_id"
    SUFFIX_ID = "tokenizer.ggml.suffix_token_id"
    MIDDLE_ID = "tokenizer.ggml.middle_token_id"
    ADD_BOS = "tokenizer.ggml.add_bos_token"
    ADD_EOS = "tokenizer.ggml.add_eos_token"
    ADD_SEP = "tokenizer.ggml.add_sep_token"
    ADD_PREFIX = "tokenizer.ggml.add_space_prefix"
    TOKEN_TYPE_COUNT = "tokenizer.ggml.token_type_count"


class TokenizerKeysBeyondGGUFPy(TokenizerKeys):
    """TokenizerKeys and llama.cpp's keys (src/llama-arch.cpp, llama_model_chat_template) that gguf-py 0.19
    does not name yet; TokenizerKeys itself stays gguf-py's, name for name (tests/gguf/test_ggml_constants.py)."""

    CLS_ID = "tokenizer.ggml.cls_token_id"  # written by converters; llama.cpp takes [CLS] from BOS_ID
    NORMALIZER_LOWERCASE = "tokenizer.ggml.normalizer.lowercase"  # WordPiece (BertNormalizer) options
    NORMALIZER_STRIP_ACCENTS = "tokenizer.ggml.normalizer.strip_accents"
    RERANK_TEMPLATE = "tokenizer.chat_template.rerank"  # the chat template named "rerank"
