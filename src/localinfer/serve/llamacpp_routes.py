"""llama-server's own token routes, in its request and response shapes, for the clients and scripts
written against it:

    POST /tokenize        {"content": str | [str | id ...], "add_special": false, "parse_special": true,
                           "with_pieces": false}          -> {"tokens": [id ...] or [{"id", "piece"} ...]}
    POST /detokenize      {"tokens": [id ...]}            -> {"content": str}
    POST /apply-template  {"messages": [...]}             -> {"prompt": the rendered chat, as /v1/chat/completions
                                                              would prefill it}
    POST /chat/completions/input_tokens  a chat request -> {"input_tokens": its prompt's tokens, "object"}
    GET  /props           {"default_generation_settings", "total_slots", "model_alias", "modalities",
                           "chat_template", "bos_token", "eos_token", "build_info"}, and the page's
                           "model" and "n_ctx"; no "model_path" (a client needs no server's file names)
    GET  /slots           [{"id", "id_task", "n_ctx", "is_processing", "n_tokens", "next_token": {...}}, ...]
    POST /slots/ID?action=save|restore  {"filename": NAME}   a slot's K/V to and from --slot-save-path/NAME
    POST /slots/ID?action=erase                              (batching/slot_files.py)
    POST /rerank /reranking (and under /v1)  a re-ranker's scores of documents for a query (rerank.py)

A piece that is not valid UTF-8 on its own (a byte token) comes as its byte values, as llama-server
sends it. Errors are OpenAI-shaped 400s naming the field, as on the other routes.
"""
from __future__ import annotations

import os
import re

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import api, rerank as rerank_api
from ..chat.template import ChatTemplateError
from . import jobs
from .openai_routes import read_json, requested_model, run_passes


def _flag(body: dict, name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise api.bad(f"'{name}' must be true or false, got {type(value).__name__}", name)
    return value


def _ids(model, values, name: str) -> list[int]:
    if not isinstance(values, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in values):
        raise api.bad(f"'{name}' must be a list of token ids", name)
    unknown = [t for t in values if not 0 <= t < model.n_vocab]
    if unknown:
        raise api.bad(f"'{name}' holds unknown token id {unknown[0]} (the vocabulary has {model.n_vocab})", name)
    return values


def _tokens(model, body: dict) -> dict:
    content = body.get("content")
    if content is None:
        return {"tokens": []}  # as llama-server answers a body without content
    add_special, parse_special = _flag(body, "add_special", False), _flag(body, "parse_special", True)
    with_pieces = _flag(body, "with_pieces", False)
    parts = content if isinstance(content, list) else [content]
    tokens: list[int] = []
    for i, part in enumerate(parts):  # llama.cpp's tokenize_mixed: texts and ids, BOS only before a first text
        if isinstance(part, str):
            tokens += model.tokenize(part, add_special=add_special and i == 0, parse_special=parse_special)
        elif isinstance(part, int) and not isinstance(part, bool):
            tokens += _ids(model, [part], "content")
        else:
            raise api.bad("'content' must be a string or a list of strings and token ids", "content")
    if not with_pieces:
        return {"tokens": tokens}
    out = []
    for t in tokens:
        piece = model.tokenizer.token_to_bytes(t)
        try:
            shown = piece.decode("utf-8")
        except UnicodeDecodeError:
            shown = list(piece)
        out.append({"id": t, "piece": shown})
    return {"tokens": out}


def _content(model, body: dict) -> dict:
    ids = _ids(model, body.get("tokens", []), "tokens")
    # llama-server's tokens_to_str: the pieces as they are, specials rendered, no leading space removed
    data = b"".join(model.tokenizer.token_to_bytes(t) for t in ids)
    return {"content": data.decode("utf-8", errors="replace")}


def _count(model, body: dict) -> dict:
    tokens = api.chat_prompt(body, model, 1 << 31)[0]   # counted whatever the context (the body's size bounds it)
    return {"input_tokens": len(tokens), "object": "response.input_tokens"}


async def input_tokens(request: Request) -> Response:
    body = await read_json(request)
    async with request.app.state.registry.lease(requested_model(body)) as served:
        return JSONResponse(await run_in_threadpool(_count, served.model, body))


def _prompt(model, body: dict) -> dict:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise api.bad("'messages' must be a non-empty list of {'role': ..., 'content': ...} objects", "messages")
    try:
        return {"prompt": model.apply_chat_template(messages, add_generation_prompt=True)}
    except ChatTemplateError as e:
        raise api.bad(str(e), "messages") from None


def _route(work):
    async def handler(request: Request) -> Response:
        body = await read_json(request)
        async with request.app.state.registry.lease(requested_model(body)) as served:
            return JSONResponse(await run_in_threadpool(work, served.model, body))
    return handler


tokenize, detokenize, apply_template = _route(_tokens), _route(_content), _route(_prompt)


async def rerank(request: Request) -> Response:
    body = await read_json(request)
    async with request.app.state.registry.lease(requested_model(body)) as served:
        job = await run_in_threadpool(rerank_api.parse_rerank, body, served.model, served.name, served.engine.n_ctx)
        await jobs.unless_disconnected(request.receive, run_passes(job, served.model))
    return JSONResponse(job.response())


def props_json(name: str, model, n_ctx: int, n_slots: int) -> dict:
    """llama-server's /props for one served model."""
    from dataclasses import asdict
    from importlib.metadata import PackageNotFoundError, version

    from ..sampling.params import SamplingParams
    from .webui import props
    try:
        build = f"localinfer {version('localinfer')}"
    except PackageNotFoundError:
        build = "localinfer"
    t = model.tokenizer
    defaults = {k: v for k, v in asdict(SamplingParams()).items() if isinstance(v, (int, float, type(None)))}
    return {**props(name, n_ctx, n_slots),
            "default_generation_settings": {"n_ctx": n_ctx, "params": {**defaults, "n_predict": -1}},
            "model_alias": name, "modalities": {"vision": False, "audio": False},
            "chat_template": model.chat_template.source or "",
            "bos_token": t.token_text(t.bos_id) if t.bos_id is not None else "",
            "eos_token": t.token_text(t.eos_id) if t.eos_id is not None else "", "build_info": build}


async def slots(request: Request) -> Response:
    async with request.app.state.registry.lease(request.query_params.get("model")) as served:
        return JSONResponse(served.engine.slot_states())


_FILENAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,254}")


async def slot_action(request: Request) -> Response:
    """llama-server's slot save / restore / erase, in its answer shapes."""
    from ..batching import slot_files
    from ..batching.engine import EngineClosedError
    from ..kv.session_state import model_identity
    folder = request.app.state.config.slot_save_path
    action = request.query_params.get("action")
    if action not in ("save", "restore", "erase"):
        raise api.bad("'action' must be save, restore or erase", "action")
    if folder is None and action != "erase":
        raise api.ApiError(501, "this server keeps no slot files: start it with --slot-save-path DIR",
                           "not_supported_error")
    try:
        index = int(request.path_params["id_slot"])
    except ValueError:
        raise api.bad("the slot id must be a number", "id_slot") from None
    body = await read_json(request) if action != "erase" else {}
    filename = body.get("filename")
    if action != "erase" and (not isinstance(filename, str) or not _FILENAME.fullmatch(filename) or ".." in filename):
        raise api.bad("'filename' must be a plain file name (letters, digits, '.', '_' and '-')", "filename")
    async with request.app.state.registry.lease(request.query_params.get("model")) as served:
        engine = served.engine

        def run() -> dict:
            if action == "erase":
                return {"id_slot": index, **slot_files.erase(engine, index)}
            path = os.path.join(folder, filename)
            identity = model_identity(served.model.gguf)
            if action == "save":
                done = slot_files.save(engine, index, path, identity)
                return {"id_slot": index, "filename": filename, "n_saved": done["n_saved"],
                        "n_written": done["n_written"], "timings": {"save_ms": done["ms"]}}
            if not os.path.isfile(path):
                raise api.ApiError(404, f"no slot file {filename!r} in the --slot-save-path folder", param="filename")
            done = slot_files.restore(engine, index, path, identity)
            return {"id_slot": index, "filename": filename, "n_restored": done["n_restored"],
                    "n_read": done["n_read"], "timings": {"restore_ms": done["ms"]}}

        try:
            return JSONResponse(await run_in_threadpool(run))
        except IndexError as e:
            raise api.bad(str(e), "id_slot") from None
        except slot_files.SlotBusyError as e:
            raise api.ApiError(503, str(e), "unavailable_error", headers={"Retry-After": "1"}) from None
        except (slot_files.NoPrefixCacheError, ValueError) as e:  # a file for another model, or damaged
            raise api.bad(str(e), "filename") from None
        except EngineClosedError as e:
            raise api.ApiError(503, str(e), "unavailable_error") from None
