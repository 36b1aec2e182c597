"""llama-cpp-python's high-level API over localinfer: change one import,

    from localinfer.compat.llama_cpp import Llama      # was: from llama_cpp import Llama

and a script's `Llama(model_path=...)`, `llm(prompt)`, `llm.create_chat_completion(messages)`,
`llm.tokenize(b"...")` and their dict results work as llama-cpp-python 0.3's do, on localinfer's
engine. For code that imports llama_cpp itself (LangChain's LlamaCpp, LlamaIndex's LlamaCPP),
`localinfer.compat.llama_cpp.install()` makes `import llama_cpp` (and its submodules below) this.

    llama.py              Llama: the constructor, one context, vocabulary, state, generation
    completion.py         create_completion's prompt (fill-in-the-middle too) and answer shapes, logprobs
    chat.py               create_chat_completion: chat formats, tools, response_format
    llama_chat_format.py  the named chat formats ("chatml", "llama-2", ...) and the default rule
    options.py            the constructor's keyword arguments, which llama-cpp-python names mean what here
    state.py              save_state / load_state (LlamaState)
    pretrained.py         Llama.from_pretrained through huggingface_hub
    llama_grammar.py, llama_types.py, llama_speculative.py   the submodules programs import

What differs from llama-cpp-python is listed in README.md ("From llama-cpp-python").
"""
from __future__ import annotations

import sys

from .llama import Llama, LLAMA_DEFAULT_SEED
from .llama_grammar import LlamaGrammar
from .llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding
from .options import GGML_TYPE_F16, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0
from .state import LlamaState

LLAMA_POOLING_TYPE_UNSPECIFIED, LLAMA_POOLING_TYPE_NONE, LLAMA_POOLING_TYPE_MEAN = -1, 0, 1
LLAMA_POOLING_TYPE_CLS, LLAMA_POOLING_TYPE_LAST = 2, 3
__version__ = "0.3.36"  # the llama-cpp-python release whose API this follows

_SUBMODULES = ("llama", "llama_grammar", "llama_types", "llama_chat_format", "llama_speculative")


def install() -> None:
    """Make `import llama_cpp` (and llama_cpp.llama, .llama_grammar, .llama_types, .llama_chat_format,
    .llama_speculative) give this shim in this process, for libraries that import llama_cpp
    themselves. Call it before they import it; a real llama_cpp imported already is replaced."""
    import importlib
    sys.modules["llama_cpp"] = sys.modules[__name__]
    for name in _SUBMODULES:
        sys.modules[f"llama_cpp.{name}"] = importlib.import_module(f"{__name__}.{name}")


__all__ = ["Llama", "LlamaGrammar", "LlamaState", "LlamaDraftModel", "LlamaPromptLookupDecoding",
           "LLAMA_DEFAULT_SEED", "GGML_TYPE_F16", "GGML_TYPE_Q4_0", "GGML_TYPE_Q8_0", "install"]
