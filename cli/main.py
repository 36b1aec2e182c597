"""The `localinfer` command: run (chat), pull, list, info, bench (speed, serve, spec, grammar, restart, tokenize, embed), serve, embed, rerank, perplexity, quantize, quality, convert, imatrix."""
from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
import warnings

import click
from click.core import ParameterSource

from localinfer.sampling.params import SamplingParams as D   # the sampling defaults

from .common import (cache_type_options, load_model, model_file_options, process_escapes, set_threads,
                     speculative_options)
from .progress import ByteProgress
from .prompt_cache import checked_path


class _LazyGroup(click.Group):
    """A group whose commands in `lazy` (name -> module of this package holding a command of that
    name) are imported when one is asked for: `localinfer run` starts without importing the
    server's, the benchmarks' and the converters' code (~13 ms warm, twice that cold)."""

    def __init__(self, *args, lazy: dict[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy and name not in self.commands:
            import importlib
            module = importlib.import_module(f"{__package__}.{self.lazy[name]}")
            self.add_command(getattr(module, name), name)
        return super().get_command(ctx, name)


_LAZY_COMMANDS = {"bench": "bench_group", "convert": "convert", "embed": "embed", "imatrix": "imatrix",
                  "perplexity": "perplexity", "quality": "quality", "quantize": "quantize", "rerank": "rerank",
                  "serve": "serve"}


@click.group(cls=_LazyGroup, lazy=_LAZY_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="localinfer")
def main():
    """localinfer: run GGUF language models locally on the CPU."""
    # Ctrl-C means something to every command (stop an answer, keep the finished benchmarks, stop
    # the server), so it is always caught, as llama.cpp's tools do: a process started from a
    # script without job control inherits SIGINT ignored, and would otherwise not stop at all.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    warnings.showwarning = _one_line_warning


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    """A warning (n_ctx past the trained length, the numpy path) as one line, like the errors."""
    click.echo(f"Warning: {message}", err=True)


@main.command()
@click.argument("model", required=False)
@model_file_options
@click.option("-p", "--prompt", help="Answer this one message and exit.")
@click.option("-f", "--file", "prompt_file", type=click.File("r", encoding="utf-8"), default=None,
              help="Answer the message in this file and exit (llama.cpp's -f).")
@click.option("-e/--no-escape", "--escape", "escape", default=True, show_default=True,
              help="Read \\n, \\t, \\\\, \\xHH ... in -p/-f as the characters they stand for, as llama.cpp does.")
@click.option("-n", "--max-tokens", "--n-predict", type=int, default=-1, show_default=True,
              help="Most tokens per answer (-1: until the model stops or the context is full).")
@click.option("--temp", "temperature", type=float, default=D.temperature, show_default=True, help="0 is greedy.")
@click.option("--top-k", type=int, default=D.top_k, show_default=True)
@click.option("--top-p", type=float, default=D.top_p, show_default=True)
@click.option("--min-p", type=float, default=D.min_p, show_default=True)
@click.option("--repeat-penalty", type=float, default=D.repeat_penalty, show_default=True)
@click.option("--seed", type=int, default=None, help="Same seed, same answer.")
@click.option("-t", "--threads", type=click.IntRange(1), default=None, help="CPU threads.")
@click.option("-c", "--ctx-size", type=click.IntRange(16), default=None, help="Context length in tokens.")
@click.option("--system", "-sys", "--system-prompt", default=None, help="System prompt.")
@click.option("--raw", "-no-cnv", "--no-conversation", is_flag=True,
              help="Plain text completion of the prompt, no chat template.")
@click.option("-v", "--verbose", is_flag=True,
              help="Print time to first token and tokens/s after an answer (an interactive chat does unless --quiet).")
@click.option("-q", "--quiet", is_flag=True, help="Interactive chat: no timings line after each answer.")
@click.option("-j", "--json-schema", default=None, metavar="SCHEMA",
              help="Answers are JSON that validates against this JSON Schema (given as JSON, as llama.cpp's is).")
@click.option("-jf", "--json-schema-file", type=click.File("r", encoding="utf-8"), default=None,
              help="The same, with the schema in this file.")
@click.option("--grammar", default=None, metavar="GBNF", help="Answers follow this grammar (llama.cpp's GBNF).")
@click.option("--grammar-file", type=click.File("r", encoding="utf-8"), default=None,
              help="Answers follow the grammar in this file (GBNF).")
@click.option("--prompt-cache", type=click.Path(dir_okay=False), default=None, callback=checked_path,
              help="Keep the KV state in this file: a later run reuses the prompt (or continues the chat) it holds.")
@speculative_options
@cache_type_options
def run(model, prompt, prompt_file, escape, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed,
        threads, ctx_size, system, raw, verbose, quiet, json_schema, json_schema_file, grammar, grammar_file,
        prompt_cache, speculative, cache_type_k, cache_type_v, gpu):
    """Chat with MODEL (a catalog name or a .gguf path; default: the catalog default).

    Interactive in a terminal (/bye exits, /clear starts over, /? lists the commands, Ctrl-C stops an
    answer). With -p or -f, or with text piped on stdin, answers once and exits. llama.cpp's
    -m, -f, -e, -ngl, --n-predict, -sys and -no-cnv mean what they mean there."""
    set_threads(threads)
    from .chat_loop import answer, interactive

    if verbose and quiet:
        raise click.UsageError("--verbose and --quiet ask for opposite things: give one")
    if prompt is not None and prompt_file is not None:
        raise click.UsageError("give the prompt once: -p TEXT or -f FILE")
    if prompt_file is not None:
        prompt = prompt_file.read()
    if prompt is not None and escape:
        prompt = process_escapes(prompt)
    constraints = [name for name, v in (("--json-schema", json_schema), ("--json-schema-file", json_schema_file),
                                        ("--grammar", grammar), ("--grammar-file", grammar_file)) if v is not None]
    if len(constraints) > 1:
        raise click.UsageError(f"give one of {' and '.join(constraints)}: each constrains every answer")
    if max_tokens < -1:  # before the model loads: -1 is "no limit" (llama.cpp's), another negative a mistake
        raise click.ClickException(f"-n/--max-tokens must be -1 (until the context is full) or >= 0, "
                                   f"got {max_tokens}")
    try:
        llm = load_model(model, ctx_size, threads, speculative, cache_type_k, cache_type_v, gpu)
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        raise click.ClickException(str(e))
    options = dict(max_tokens=max_tokens, temperature=temperature, top_k=top_k,
                   top_p=top_p, min_p=min_p, repeat_penalty=repeat_penalty, seed=seed)
    if constraints:
        options["grammar"] = _constraint(llm, json_schema, json_schema_file, grammar, grammar_file)
    if prompt is None and not sys.stdin.isatty():
        prompt = sys.stdin.read().strip()  # the newline that ends piped text is not part of the message
    try:
        if prompt is not None:
            if not prompt.strip():
                raise click.ClickException("the prompt is empty")
            answer(llm, prompt, system=system, raw=raw, verbose=verbose, prompt_cache=prompt_cache, **options)
        else:
            source = click.get_current_context().get_parameter_source
            given = {name for name in options if name == "grammar" or source(name) == ParameterSource.COMMANDLINE}
            interactive(llm, system=system, verbose=verbose or not quiet, prompt_cache=prompt_cache, given=given,
                        **options)
    except ValueError as e:  # ContextFullError, ChatTemplateError, NonFiniteLogitsError ...: one line each
        raise click.ClickException(str(e))


def _constraint(llm, json_schema, json_schema_file, grammar, grammar_file):
    """The one constraint given (run has checked), compiled once for every answer of the run."""
    from localinfer.constrain import GrammarError, compile_grammar
    if json_schema is not None:
        try:
            json.loads(json_schema)
        except json.JSONDecodeError as e:
            hint = (f"; {json_schema} is a file: use --json-schema-file" if os.path.isfile(json_schema) else "")
            raise click.UsageError(f"--json-schema takes the schema itself, as JSON ({e}){hint}") from None
    name, kind, text = (("--json-schema", "json_schema", json_schema) if json_schema is not None else
                        (json_schema_file.name, "json_schema", json_schema_file.read()) if json_schema_file else
                        ("--grammar", "gbnf", grammar) if grammar is not None else
                        (grammar_file.name, "gbnf", grammar_file.read()))
    try:
        return compile_grammar(llm.tokenizer, **{kind: text})
    except GrammarError as e:
        raise click.ClickException(f"{name}: {e}")


@main.command()
@click.argument("name")
@click.option("--force", is_flag=True, help="Fetch again even if cached.")
def pull(name, force):
    """Fetch model NAME into the cache (checksum verified): a catalog name, or a Hugging Face
    hf.co/USER/REPO[:QUANT] (into huggingface_hub's cache; the `hf` extra)."""
    from localinfer.files.fetch import FetchError, ModelNotFoundError, pull as do_pull
    try:
        path = do_pull(name, progress=ByteProgress(f"pulling {name}"), force=force)
    except (ModelNotFoundError, FetchError, OSError) as e:
        raise click.ClickException(str(e))
    click.echo(str(path))


@main.command(name="list")
def list_models():
    """Known models, and which are in the cache."""
    from localinfer.files.fetch import cache_dir, cached_path, is_cached, load_catalog
    default, entries = load_catalog()
    click.echo(f"{'NAME':<12} {'SIZE':>9}  {'CACHED':<6}  DESCRIPTION")
    for name, e in entries.items():
        mark = "*" if name == default else " "
        click.echo(f"{name + mark:<12} {e.size / 2**20:>7.1f}Mi  {'yes' if is_cached(e) else 'no':<6}  {e.description}")
    click.echo(f"\n* default model; cache: {cache_dir()}")


@main.command()
@click.argument("model", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--template", is_flag=True, help="Print the whole chat template.")
@click.option("--memory", "memory", is_flag=True,
              help="Load the model, generate one token, and print where its memory goes.")
def info(model, as_json, template, memory):
    """Architecture, quant types, sizes and chat template of MODEL."""
    from localinfer.describe import describe
    from localinfer.files.fetch import resolve_model
    from localinfer.files.gguf_file import GGUFFile
    try:
        with GGUFFile(resolve_model(model, progress=ByteProgress(f"pulling {model}"))) as f:
            d = describe(f)
        if memory:
            d["memory"] = _memory(d["path"])
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        raise click.ClickException(str(e))
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    click.echo(f"file          {d['path']} ({d['file_size'] / 2**20:.1f} MiB, GGUF v{d['gguf_version']})")
    click.echo(f"name          {d['name']}")
    active = f", {d['n_active_params'] / 1e6:.1f}M active per token" if d["n_active_params"] != d["n_params"] else ""
    click.echo(f"architecture  {d['architecture']}  ({d['n_params'] / 1e6:.1f}M parameters{active}, "
               f"{d['n_tensors']} tensors)")
    for k, v in d["hyperparameters"].items():
        click.echo(f"  {k:<38} {v}")
    click.echo("tensor types")
    for t, n in d["tensor_types"].items():
        click.echo(f"  {t:<8} {n:>4} tensors  {d['tensor_bytes'][t] / 2**20:8.2f} MiB")
    tok = d["tokenizer"]
    click.echo(f"tokenizer     {tok['model']} (pre {tok['pre']}), {tok['n_vocab']} tokens, "
               f"bos {tok['bos_id']}, eos {tok['eos_id']}")
    if memory:
        m = d["memory"]
        click.echo(f"memory        (after one generated token; MiB; RSS {m['rss'] / 2**20:.1f})")
        for k in ("weights_mapped", "weight_copies", "kv_cache", "prefix_cache", "scratch"):
            shown = "not counted" if m[k] is None else f"{m[k] / 2**20:8.2f}"
            click.echo(f"  {k:<14} {shown}")
    t = d["chat_template"]
    if not t:
        click.echo("chat template (none in the file: the architecture's built-in format is used)")
    elif template:
        click.echo("chat template\n" + t)
    else:
        click.echo(f"chat template {len(t)} characters (--template prints it)")


def _memory(path: str) -> dict:
    """Model.memory() after a one-token generation, and this process's RSS then (0 without /proc)."""
    import localinfer
    with localinfer.load(path) as m:
        m.generate("Hello", max_tokens=1, temperature=0)
        out = m.memory()
        try:
            with open("/proc/self/statm") as f:
                out["rss"] = int(f.read().split()[1]) * os.sysconf("SC_PAGESIZE")
        except OSError:
            out["rss"] = 0
    return out


def entry() -> None:
    """The `localinfer` program: the command, then a quick exit. Python's own shutdown frees the
    model's objects one by one (its vocabulary alone is ~100k), which took 45-70 ms of a 0.45 s
    one-shot run (SmolLM2) after the answer was out; the OS frees the process at once. What must
    happen at exit still does, in Python's order: other threads joined (threading's shutdown),
    atexit handlers and weakref finalizers run, output flushed."""
    try:
        main()  # standalone: always ends in SystemExit
        status = 0
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    try:
        shutdown = getattr(threading, "_shutdown", None)   # CPython's: joins the non-daemon threads
        if shutdown is not None:
            shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:   # a reader that went away (`| head`): nothing more to say to it
        pass
    os._exit(status)


if __name__ == "__main__":
    entry()
