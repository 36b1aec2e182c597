"""Tokenizers built from GGUF vocab metadata, token-for-token compatible with llama.cpp."""

from .detokenizer import StreamingDetokenizer
from .tokenizer import TOKENIZER_MODELS, TokenizedPair, Tokenizer, TooManyTokensError

__all__ = ["Tokenizer", "TokenizedPair", "StreamingDetokenizer", "TOKENIZER_MODELS", "TooManyTokensError"]
