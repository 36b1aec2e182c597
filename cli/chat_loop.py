"""The terminal chat: one-shot answers and the interactive loop."""
from __future__ import annotations

import sys

import click

HELP = "/bye exits, /clear starts over, /? lists the commands; Ctrl-C stops an answer, Ctrl-D exits."


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


def answer(llm, prompt: str, system: str | None, raw: bool, verbose: bool, prompt_cache: str | None = None,
           **options) -> None:
    if not raw:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        prompt = llm.chat_tokens(messages)
    if prompt_cache is None:
        _print_stream(llm.stream(prompt, **options), verbose)
        return
    from .prompt_cache import context_for, save
    ctx = context_for(llm, prompt_cache)
    _print_stream(llm.stream(prompt, context=ctx, **options), verbose)
    save(ctx, prompt_cache)


class _AtPrompt(Exception):
    """Ctrl-C while the prompt waited for a line."""


def _read_line(prompt: str = ">>> ") -> str | None:
    try:
        return input(prompt)
    except EOFError:
        return None
    except KeyboardInterrupt:
        raise _AtPrompt from None


class _Chat:
    """The interactive loop's state: the session, and whether timings are shown (/set verbose)."""

    def __init__(self, session, verbose: bool, prompt_cache: str | None = None):
        self.session, self.verbose, self.prompt_cache = session, verbose, prompt_cache


def _turn(chat: _Chat) -> bool:
    """Reads one message (or command) and acts on it; False when the user is done."""
    from localinfer import ContextFullError

    from .chat_commands import command, read_message
    line = _read_line()
    text = None if line is None else read_message(line, lambda: _read_line("... "))
    if text is None:
        sys.stdout.write("\n")
        return False
    text = text.strip()
    if not text:
        return True
    session = chat.session
    if text.startswith("/"):
        reply = command(session, text)
        if reply is None:
            return False
        click.echo(reply.text, err=True)
        if reply.verbose is not None:
            chat.verbose = reply.verbose
    else:
        verbose, prompt_cache = chat.verbose, chat.prompt_cache
        try:
            _print_stream(session.stream(text), verbose)
            if prompt_cache is not None:
                from .prompt_cache import save
                save(session, prompt_cache)
        except ContextFullError as e:  # the session has already dropped the message that did not fit
            click.echo(f"[{e}; /clear to start over]", err=True)
        except ValueError as e:  # the file's template failed, the model gave NaN ...; the message was dropped too
            click.echo(f"Error: {e}", err=True)
    return True


def interactive(llm, system: str | None, verbose: bool, prompt_cache: str | None = None, given=None,
                **options) -> None:
    """given: the names of `options` set on the command line; with --prompt-cache the others are the
    saved conversation's, where it has them."""
    try:
        import readline  # noqa: F401  (line editing and history for input())
    except ImportError:
        pass
    if prompt_cache is not None:
        from .prompt_cache import session_for
        session = session_for(llm, prompt_cache, system, options, set(options) if given is None else given)
    else:
        session = llm.chat_session(system=system, **options)
    click.echo(f"localinfer: {llm.architecture} model {llm.path} loaded, context {llm.n_ctx} tokens. {HELP}",
               err=True)
    going, chat = True, _Chat(session, verbose, prompt_cache)
    while going:
        # Ctrl-C never ends the program here, wherever it lands: at the prompt it says how to
        # leave, during an answer _print_stream stops the answer, anywhere else (templating,
        # tokenizing, between statements) the turn is dropped and the prompt comes back
        try:
            going = _turn(chat)
        except _AtPrompt:
            click.echo("\n(use /bye or Ctrl-D to exit)", err=True)
        except KeyboardInterrupt:
            click.echo("", err=True)
