"""`run --prompt-cache FILE` (llama.cpp's flag): the KV state of the last run kept in a file.

One-shot (-p or piped): the file's context is loaded when it exists, so the part of the new
prompt it already holds (a long system prompt, a document) is not computed again; after the
answer the context (prompt and answer) is written back. Interactive: the saved conversation
is continued with its own sampling settings and grammar (unless this command line gives others),
and written after every turn. A file for another model, cache or context size,
or a damaged one, is reported and ignored (then overwritten), never used. A path that is not a
regular file (a FIFO, a device such as /dev/null, a directory) is refused before the model loads:
the file is replaced on every save, and what is there must be a file to replace.
"""
from __future__ import annotations

import os

import click


def checked_path(ctx, param, path: str | None) -> str | None:
    """The option's callback: a usage error naming the path when it is no regular file's place."""
    if path is not None:
        from localinfer.files.regular_file import NotRegularFileError, check_replaceable
        try:
            check_replaceable(path)
        except NotRegularFileError as e:
            raise click.BadParameter(f"{e}: it is replaced on every save, so it must be a file or nothing")
    return path


def _load(obj, path: str, what: str) -> bool:
    from localinfer import StateFileError
    if not os.path.exists(path):
        return False
    try:
        obj.load(path)
    except (StateFileError, OSError) as e:  # damaged, for another model, unreadable: start afresh
        click.echo(f"[--prompt-cache: not using {what}: {e}]", err=True)
        return False
    return True


def context_for(llm, path: str):
    """A Context holding what `path` saved, or an empty one."""
    ctx = llm.new_context()
    _load(ctx, path, "the saved prompt")
    return ctx


def session_for(llm, path: str, system: str | None, options: dict, given: set):
    """A ChatSession continuing the conversation saved in `path`, or a new one. Its generation options:
    those `given` on this command line, else the saved conversation's (so a resumed chat answers as it
    would have), else the command's defaults."""
    session = llm.chat_session(system=system, **{k: v for k, v in options.items() if k in given})
    if _load(session, path, "the saved conversation"):
        turns = sum(m.get("role") == "user" for m in session.messages)
        click.echo(f"(continuing the conversation saved in {path}: {turns} messages, "
                   f"{len(session.context.tokens)} tokens cached)", err=True)
    for name, value in options.items():
        session.defaults.setdefault(name, value)
    return session


def save(obj, path: str) -> None:
    try:
        obj.save(path)
    except (OSError, ValueError) as e:  # a full disk, a FIFO put there since, a header too deep
        click.echo(f"[--prompt-cache: cannot write {path}: {e}]", err=True)
