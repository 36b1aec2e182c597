"""Ollama's response shapes: answers of /api/chat and /api/generate (whole, or NDJSON lines), and
the model listings of /api/tags, /api/ps and /api/show.

An answer's last object has done: true, done_reason ("stop", "length"; "load"/"unload" for an
empty request) and the timings in nanoseconds: total_duration (from the request's arrival),
load_duration (waiting for the model), prompt_eval_count/_duration (the prompt's tokens and its
prefill), eval_count/eval_duration (the answer's tokens; the duration is the decoding passes after
the first token, which comes out of the prompt's pass). `context` (a token list to continue
from) is left out: a continuation sends its text. Tool calls are Ollama's
{"function": {"name", "arguments": {...}}}, streamed in one line each once complete. Logprobs, when
asked for, are each line's tokens' as the OpenAI chat route writes them: token, logprob, bytes and
top_logprobs.
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from datetime import datetime, timezone
from functools import lru_cache

import numpy as np

from ..chat.template import template_for
from ..formats.ggml import FILE_TYPE_NAMES
from ..files.gguf_file import GGUFFile
from ..sampling.params import SamplingParams
from .choices import LogprobFormat
from .registry import ModelUnavailableError, file_error_reason
from . import tool_calls

DONE_REASON = {"stop": "stop", "length": "length", "context_full": "length"}
MAX_INFO_STRING = 1024  # model_info strings longer than this (a chat template) are shown as null


def rfc3339(unix: float | None = None) -> str:
    """Unix time as RFC 3339 in UTC with microseconds, as Ollama writes its timestamps."""
    t = datetime.fromtimestamp(time.time() if unix is None else unix, timezone.utc)
    return t.isoformat(timespec="microseconds").replace("+00:00", "Z")


def ns(seconds: float) -> int:
    return max(0, int(round(seconds * 1e9)))


class AnswerShaper:
    """The Ollama objects of one /api/chat or /api/generate answer. started: time.perf_counter()
    when the request arrived; load_s: seconds it waited for its model."""

    def __init__(self, kind: str, model_name: str, started: float, load_s: float, tools=None, tokenizer=None):
        """tools: the job's ToolSetup, when tools are on offer; tokenizer: to write logprobs, when asked for."""
        self.kind, self.model_name, self.started, self.load_s = kind, model_name, started, load_s
        self.logprobs = LogprobFormat(tokenizer, "chat") if tokenizer is not None else None
        self.tools = tool_calls.ToolAnswer(tools) if tools is not None else None
        self.calls: list[dict] = []  # OpenAI-shaped calls as their deltas arrive (tools on offer)
        self.n_sent = 0  # of self.calls, those already streamed

    def _head(self) -> dict:
        return {"model": self.model_name, "created_at": rfc3339()}

    def _content(self, text: str, calls: list[dict] | None = None) -> dict:
        if self.kind == "generate":
            return {"response": text}
        message = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        return {"message": message}

    def _read(self, text: str, finished: bool) -> str:
        """The content in newly generated text; tool calls go to self.calls."""
        if self.tools is None:
            return text
        content = []
        for d in self.tools.deltas(text, finished):
            if "content" in d:
                content.append(d["content"])
            elif "id" in d["tool_calls"][0]:
                self.calls.append(dict(d["tool_calls"][0]["function"]))
            else:
                self.calls[-1]["arguments"] += d["tool_calls"][0]["function"]["arguments"]
        return "".join(content)

    def _ollama_calls(self, calls: list[dict]) -> list[dict]:
        """Calls with their arguments as an object; one whose arguments are not a JSON object (cut
        off by the token limit) is left out, and done_reason "length" says so."""
        out = []
        for c in calls:
            try:
                arguments = json.loads(c["arguments"] or "{}")
            except json.JSONDecodeError:
                continue
            if isinstance(arguments, dict):
                out.append({"function": {"name": c["name"], "arguments": arguments}})
        return out

    def _logprobs(self, entries) -> dict:
        """Ollama's "logprobs": per token its string, logprob, bytes and top_logprobs (as the OpenAI
        chat route's content entries; the end-of-generation token left out)."""
        if self.logprobs is None:
            return {}
        return {"logprobs": self.logprobs.format(entries or [])["content"]}

    def pieces(self, text: str, finished: bool = False, logprobs=None) -> list[dict]:
        """The stream lines for generated text (the finishing line apart): its content (with its
        tokens' logprobs, when asked for), and the tool calls that are complete (the ones before
        the last, or all of them once `finished`)."""
        content, scored = self._read(text, finished), self._logprobs(logprobs)
        lines = ([{**self._head(), **self._content(content), **scored, "done": False}]
                 if content or scored.get("logprobs") else [])
        complete = len(self.calls) if finished else max(len(self.calls) - 1, self.n_sent)
        if complete > self.n_sent:
            calls = self._ollama_calls(self.calls[self.n_sent:complete])
            self.n_sent = complete
            if calls:
                lines.append({**self._head(), **self._content("", calls), "done": False})
        return lines

    def _stats(self, finish: str, request, n_generated: int) -> dict:
        t = request.timings
        return {"done": True, "done_reason": DONE_REASON[finish], "total_duration": ns(time.perf_counter() - self.started),
                "load_duration": ns(self.load_s), "prompt_eval_count": len(request.prompt),
                "prompt_eval_duration": ns(t.prefill_s), "eval_count": n_generated, "eval_duration": ns(t.decode_s)}

    def last(self, finish: str, request, n_generated: int) -> dict:
        """A stream's last line: no content, the done_reason and the timings."""
        return {**self._head(), **self._content(""), **self._stats(finish, request, n_generated)}

    def whole(self, text: str, finish: str, request, n_generated: int, logprobs=None) -> dict:
        """A whole answer ("stream": false); logprobs: its tokens' TokenLogprobs, when asked for."""
        content = self._read(text, finished=True)
        return {**self._head(), **self._content(content, self._ollama_calls(self.calls)), **self._logprobs(logprobs),
                **self._stats(finish, request, n_generated)}


def load_answer(kind: str, model_name: str, unloaded: bool) -> dict:
    """The answer to an empty request, which only loads (or, with keep_alive 0, unloads) a model."""
    content = {"response": ""} if kind == "generate" else {"message": {"role": "assistant", "content": ""}}
    return {"model": model_name, "created_at": rfc3339(), **content, "done": True,
            "done_reason": "unload" if unloaded else "load"}


# -- what a model file is -------------------------------------------------------------------------
def human_count(n: int) -> str:
    """A parameter count the way Ollama writes one: 135M, 1.2B, 70B."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            v = n / scale
            return f"{v:.0f}{unit}" if v >= 10 or v == int(v) else f"{v:.1f}{unit}"
    return str(n)


def file_type_name(metadata: dict, tensors) -> str:
    """The quantization named by general.file_type (Q4_K_M ...); without one, the commonest
    tensor type among the weight matrices."""
    ftype = metadata.get("general.file_type")
    name = FILE_TYPE_NAMES.get(ftype) if isinstance(ftype, int) else None
    if name is None:
        counts = Counter(t.ggml_type.name for t in tensors.values() if len(getattr(t, "shape", ())) >= 2)
        return counts.most_common(1)[0][0] if counts else "unknown"
    return name


@lru_cache(maxsize=64)
def _file_facts(path: str, mtime: float, size: int) -> dict:
    """What /api/show and the listings say about a GGUF file (read once per version of the file)."""
    with GGUFFile(path) as f:
        metadata = dict(f.metadata)
        n_params = sum(t.n_elements for t in f.tensors.values())
        quant = file_type_name(metadata, f.tensors)
    arch = metadata.get("general.architecture", "unknown")
    info = {}
    for k, v in metadata.items():  # Ollama's model_info: the scalars; long arrays and strings as null
        if isinstance(v, (list, tuple, np.ndarray)):
            info[k] = None if len(v) > 64 else list(v.tolist() if isinstance(v, np.ndarray) else v)
        elif isinstance(v, str) and len(v) > MAX_INFO_STRING:
            info[k] = None
        else:
            info[k] = v.item() if hasattr(v, "item") else v
    info["general.parameter_count"] = n_params
    details = {"parent_model": "", "format": "gguf", "family": arch, "families": [arch],
               "parameter_size": human_count(n_params), "quantization_level": quant}
    return {"details": details, "model_info": info, "template": template_for(metadata), "arch": arch,
            "context_length": metadata.get(f"{arch}.context_length")}


def file_facts(path: str) -> dict:
    st = os.stat(path)
    return {**_file_facts(os.path.realpath(path), st.st_mtime, st.st_size), "modified_at": rfc3339(st.st_mtime)}


def _entry_facts(entry) -> dict:
    """file_facts of a served model's file, or ModelUnavailableError naming why it cannot be read
    (not where it is): one bad file fails its own requests, never a listing of all."""
    if entry.unavailable:
        raise ModelUnavailableError(entry.name, entry.unavailable)
    try:
        return file_facts(entry.path)
    except Exception as e:  # changed since the pool checked it
        raise ModelUnavailableError(entry.name, file_error_reason(entry.path, e)) from None


def tags_entry(entry) -> dict:
    """One registry.ModelEntry in /api/tags; one whose file cannot be read is marked, with why."""
    out = {"name": entry.name, "model": entry.name, "size": entry.size_bytes}
    if entry.path:
        try:
            facts = _entry_facts(entry)
        except ModelUnavailableError as e:
            out["status"] = {"available": False, "error": e.reason}
            return out
        out.update(modified_at=facts["modified_at"], details=facts["details"])
    return out


def ps_entry(entry, n_ctx: int | None) -> dict:
    """One loaded model in /api/ps (all in memory, none on an accelerator: size_vram 0)."""
    out = {**tags_entry(entry), "size_vram": 0}
    if entry.expires_at is not None:
        out["expires_at"] = rfc3339(min(entry.expires_at, 253402300799.0))  # "forever": the year 9999
    if n_ctx is not None:
        out["context_length"] = n_ctx
    return out


def show(entry, n_ctx: int | None) -> dict:
    """/api/show: a Modelfile-like description of a served model."""
    if not entry.path:
        raise ValueError(f"the model '{entry.name}' has no file to describe")
    facts = _entry_facts(entry)
    defaults = SamplingParams()
    params = {"temperature": defaults.temperature, "top_k": defaults.top_k, "top_p": defaults.top_p,
              "min_p": defaults.min_p, "repeat_penalty": defaults.repeat_penalty,
              "repeat_last_n": defaults.repeat_last_n}
    if n_ctx is not None:
        params["num_ctx"] = n_ctx
    parameters = "\n".join(f"{k:<16}{v}" for k, v in params.items())
    template = facts["template"] or ""
    # the file's name, not its path: where the server keeps its files is none of a client's business
    modelfile = (f"# Modelfile of a model served by localinfer\nFROM {os.path.basename(entry.path)}\n"
                 f"TEMPLATE \"\"\"{template}\"\"\"\n"
                 + "".join(f"PARAMETER {k} {v}\n" for k, v in params.items()))
    capabilities = _capabilities(facts["arch"], template)
    license_ = facts["model_info"].get("general.license")
    return {"license": license_ if isinstance(license_, str) else "", "modelfile": modelfile,
            "parameters": parameters, "template": template, "details": facts["details"],
            "model_info": facts["model_info"], "capabilities": capabilities, "modified_at": facts["modified_at"]}


def _capabilities(arch, template: str) -> list[str]:
    """Ollama's words for what a model does: an encoder (bert, nomic-bert ...) "embedding" only."""
    from ..arch import is_encoder
    if is_encoder(arch):
        return ["embedding"]
    return ["completion"] + (["tools"] if "tools" in template else [])


def embed_answer(model_name: str, vectors: list, n_prompt: int, started: float, load_s: float) -> dict:
    return {"model": model_name, "embeddings": [[float(x) for x in v] for v in vectors],
            "total_duration": ns(time.perf_counter() - started), "load_duration": ns(load_s),
            "prompt_eval_count": n_prompt}


def version() -> dict:
    from .. import __version__
    return {"version": __version__}
