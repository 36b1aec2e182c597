"""localinfer: a CPU-first local LLM inference runtime for GGUF models.

    import localinfer
    model = localinfer.load()                       # the default model (fetched on first use)
    print(model.generate("The capital of France is", max_tokens=16, temperature=0).text)
"""
from .chat import ChatSession
from .chat_template import ChatTemplateError
from .fetch import FetchError, ModelNotFoundError
from .generate import GenerationChunk, GenerationResult, Timings
from .gguf_file import GGUFError
from .kv_cache import ContextFullError
from .model import Model, load

__version__ = "0.1.0"
__all__ = ["load", "Model", "ChatSession", "GenerationResult", "GenerationChunk", "Timings",
           "GGUFError", "ContextFullError", "ChatTemplateError", "ModelNotFoundError", "FetchError"]
