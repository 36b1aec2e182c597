"""The interactive chat's slash commands, as Ollama's `ollama run` has them, and its multi-line input.

    /set parameter NAME VALUE   (or /set NAME VALUE) temperature, top_k, top_p, min_p, repeat_penalty,
                                seed, num_predict (max tokens per answer; -1: no limit)
    /set system TEXT            a new system prompt, the conversation kept
    /set verbose | /set quiet   timings after each answer, or not
    /show info | parameters | system
    /clear  /bye (or /exit)  /help  /?
    \"\"\"                         starts a message of several lines, until a line that ends with \"\"\"

A line that starts with / and is no command is refused with a hint, not sent to the model.
"""
from __future__ import annotations

from dataclasses import dataclass

HELP = """Commands:
  /set parameter NAME VALUE   temperature, top_k, top_p, min_p, repeat_penalty, seed, num_predict
  /set system TEXT            a new system prompt (the conversation stays)
  /set verbose | quiet        timings after each answer, or not
  /show info | parameters | system
  /clear                      start over
  /bye, /exit                 exit (Ctrl-D too)
Ctrl-C stops an answer. \"\"\" starts a message of several lines; end it with \"\"\"."""

INF = float("inf")
# Ollama's parameter names -> the session's option, how the value is read, and its range
PARAMETERS = {"temperature": ("temperature", float, 0.0, INF), "top_k": ("top_k", int, 0, INF),
              "top_p": ("top_p", float, 0.0, 1.0), "min_p": ("min_p", float, 0.0, 1.0),
              "repeat_penalty": ("repeat_penalty", float, 1e-6, INF), "seed": ("seed", int, -INF, INF),
              "num_predict": ("max_tokens", int, -1, INF)}

MULTILINE = '"""'


@dataclass
class Reply:
    """What a command did: `text` to show the user; `verbose` the new timings setting, if it changed."""
    text: str
    verbose: bool | None = None


def read_message(first: str, read_more) -> str | None:
    """`first` as typed, or, when it opens a \"\"\" block, the lines up to the one that closes it
    (read_more() -> the next line, None at the end of input). None: input ended inside the block."""
    if not first.lstrip().startswith(MULTILINE):
        return first
    lines = [first.lstrip()[len(MULTILINE):]]
    while not lines[-1].rstrip().endswith(MULTILINE) or len(lines) == 1 and not lines[0].strip():
        line = read_more()
        if line is None:
            return None
        lines.append(line)
    lines[-1] = lines[-1].rstrip()[:-len(MULTILINE)]
    return "\n".join(lines).strip("\n")


def _set(session, args: list[str], text: str) -> Reply:
    """args: the words after /set; text: all that follows /set, as typed."""
    if not args:
        return Reply("Usage: /set parameter NAME VALUE, /set system TEXT, /set verbose, /set quiet")
    what, rest = args[0], args[1:]
    if what in ("verbose", "quiet") and not rest:
        return Reply(f"Set '{what}' mode.", verbose=what == "verbose")
    if what == "system":
        system = text.strip()[len("system"):].strip()
        session.set_system(system or None)
        return Reply("Set system message." if system else "Cleared system message.")
    if what == "parameter":
        what, rest = (rest[0], rest[1:]) if rest else ("", [])
    if what not in PARAMETERS:
        return Reply(f"Unknown parameter '{what}'. Parameters: {', '.join(PARAMETERS)}")
    if len(rest) != 1:
        return Reply(f"Usage: /set parameter {what} VALUE")
    option, read, lo, hi = PARAMETERS[what]
    try:
        value = read(rest[0])
    except ValueError:
        return Reply(f"'{rest[0]}' is not {'an integer' if read is int else 'a number'} ({what})")
    if not lo <= value <= hi:
        return Reply(f"{what} must be {f'between {lo} and {hi}' if hi < INF else f'at least {lo}'}, got {rest[0]}")
    session.defaults[option] = value
    return Reply(f"Set parameter '{what}' to '{rest[0]}'")


def _show(session, args: list[str]) -> Reply:
    what = args[0] if args else ""
    model = session.model
    if what == "info":
        from localinfer.describe import describe
        d = describe(model.gguf)
        lines = [f"  {'architecture':<20}{model.architecture}", f"  {'file':<20}{model.path}",
                 f"  {'context length':<20}{model.n_ctx} (trained {model.runtime.config.n_ctx_train})",
                 f"  {'tensor types':<20}{', '.join(f'{k} {v}' for k, v in d['tensor_types'].items())}"]
        return Reply("Model\n" + "\n".join(lines))
    if what == "parameters":
        shown = {name: session.defaults.get(spec[0]) for name, spec in PARAMETERS.items()}
        return Reply("Parameters\n" + "\n".join(f"  {k:<20}{v}" for k, v in shown.items() if v is not None))
    if what == "system":
        return Reply(session.system or "No system message was specified.")
    return Reply("Usage: /show info, /show parameters, /show system")


def command(session, text: str) -> Reply | None:
    """Acts on a slash command; None for /bye (Ollama's /exit too). A line that is not a command is never
    passed here."""
    name, *args = text.split()
    after = text.strip()[len(name):]
    if name in ("/bye", "/exit"):
        return None
    if name == "/clear":
        session.clear()
        return Reply("(conversation cleared)")
    if name in ("/help", "/?"):
        return Reply(HELP)
    if name == "/set":
        return _set(session, args, after)
    if name == "/show":
        return _show(session, args)
    return Reply(f"Unknown command '{name}'. Type /? for help")
