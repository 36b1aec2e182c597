"""The terminal chat: one-shot answers and the interactive loop."""
from __future__ import annotations

import sys

import click

HELP = "/bye exits, /clear starts over, /help shows this; Ctrl-C stops an answer, Ctrl-D exits."


def _print_stream(chunks, verbose: bool) -> None:
    """Streams the chunks to stdout; Ctrl-C stops the answer (the generator is closed)."""
    timings, finish = None, None
    try:
        for chunk in chunks:
            if chunk.text:
                sys.stdout.write(chunk.text)
                sys.stdout.flush()
            if chunk.finish_reason:
                timings, finish = chunk.timings, chunk.finish_reason
    except KeyboardInterrupt:
        finish = "interrupted"
    finally:
        chunks.close()
    sys.stdout.write("\n")
    sys.stdout.flush()
    if finish == "context_full":
        click.echo("[context full: /clear to start over, or use a larger --ctx-size]", err=True)
    if verbose and timings is not None:
        click.echo(f"[{timings.summary()}]", err=True)


def answer(llm, prompt: str, system: str | None, raw: bool, verbose: bool, **options) -> None:
    if raw:
        chunks = llm.stream(prompt, **options)
    else:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        chunks = llm.stream(llm.chat_tokens(messages), **options)
    _print_stream(chunks, verbose)


def _read_line() -> str | None:
    try:
        return input(">>> ")
    except EOFError:
        return None


def interactive(llm, system: str | None, verbose: bool, **options) -> None:
    from localinfer import ContextFullError
    try:
        import readline  # noqa: F401  (line editing and history for input())
    except ImportError:
        pass
    session = llm.chat_session(system=system, **options)
    click.echo(f"localinfer: {llm.architecture} model {llm.path} loaded, context {llm.n_ctx} tokens. {HELP}",
               err=True)
    while True:
        try:
            line = _read_line()
        except KeyboardInterrupt:
            click.echo("\n(use /bye or Ctrl-D to exit)", err=True)
            continue
        if line is None or line.strip() == "/bye":
            if line is None:
                sys.stdout.write("\n")
            return
        text = line.strip()
        if not text:
            continue
        if text == "/clear":
            session.clear()
            click.echo("(conversation cleared)", err=True)
            continue
        if text in ("/help", "/?"):
            click.echo(HELP, err=True)
            continue
        try:
            _print_stream(session.stream(text), verbose)
        except KeyboardInterrupt:  # Ctrl-C before the answer started (templating, tokenizing)
            click.echo("", err=True)
        except ContextFullError as e:  # the session has already dropped the message that did not fit
            click.echo(f"[{e}; /clear to start over]", err=True)
