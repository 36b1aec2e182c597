"""Tokenizers built from GGUF vocab metadata, token-for-token compatible with llama.cpp."""

from .detokenizer import StreamingDetokenizer
from .tokenizer import TOKENIZER_MODELS, Tokenizer, TooManyTokensError

__all__ = ["Tokenizer", "StreamingDetokenizer", "TOKENIZER_MODELS", "TooManyTokensError"]
