"""localinfer: a CPU-first local LLM inference runtime for GGUF models.

    import localinfer
    model = localinfer.load()                       # the default model (fetched on first use)
    print(model.generate("The capital of France is", max_tokens=16, temperature=0).text)

The modules at this level are the runtime core (model, generation, KV cache, sampling, chat, the GGUF
reader, the C bindings and their numpy reference); the subpackages hold one responsibility each
(arch, chat, tokenizer, constrain, batching, serve, measure; cli, quant and models come from the top-level folders).

`import localinfer` itself imports nothing else: each public name is imported from its module the
first time it is used (PEP 562), so a program that only imports the package (a CLI's --help, an
app that loads a model later) does not pay for numpy, gguf or jinja2 up front.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_EXPORTS = {  # public name -> the module that defines it
    "load": ".model", "Model": ".model", "ModelClosedError": ".model",
    "ChatSession": ".chat.session", "ChatTemplateError": ".chat.template",
    "FetchError": ".files.fetch", "ModelNotFoundError": ".files.fetch",
    "GenerationChunk": ".generate", "GenerationResult": ".generate", "Timings": ".generate",
    "GGUFError": ".files.gguf_file", "ContextFullError": ".kv.cache", "ContextMemoryError": ".kv.cache",
    "NonFiniteLogitsError": ".sampling.samplers",
    "compile_grammar": ".constrain", "GrammarError": ".constrain",
    "TokenLogprob": ".sampling.logprobs", "LogitBiasError": ".sampling.logit_bias",
    "StateFileError": ".kv.state_file", "StateMismatchError": ".kv.state_file",
}
__all__ = ["load", "Model", "ChatSession", "GenerationResult", "GenerationChunk", "Timings",
           "GGUFError", "ContextFullError", "ChatTemplateError", "ModelNotFoundError", "FetchError",
           "ModelClosedError", "compile_grammar", "GrammarError", "TokenLogprob", "LogitBiasError",
           "StateFileError", "StateMismatchError", "ContextMemoryError", "NonFiniteLogitsError"]

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from .chat.session import ChatSession
    from .chat.template import ChatTemplateError
    from .constrain import GrammarError, compile_grammar
    from .files.fetch import FetchError, ModelNotFoundError
    from .generate import GenerationChunk, GenerationResult, Timings
    from .files.gguf_file import GGUFError
    from .kv.cache import ContextFullError, ContextMemoryError
    from .sampling.logit_bias import LogitBiasError
    from .sampling.logprobs import TokenLogprob
    from .model import Model, ModelClosedError, load
    from .sampling.samplers import NonFiniteLogitsError
    from .kv.state_file import StateFileError, StateMismatchError


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'localinfer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
