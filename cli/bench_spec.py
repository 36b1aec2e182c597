"""`localinfer bench spec`: decode speed with a draft model and with prompt lookup against plain decoding."""
from __future__ import annotations

import click

from .common import set_threads


@click.command(name="spec")
@click.option("--pair", "pairs", multiple=True, type=click.Choice(["smollm2", "gemma3"]),
              help="A demo pair (made from the catalog file on first use): smollm2 = F16 target + Q4_0 draft, "
                   "gemma3 = Q8_0 target + Q4_0 draft. Default: both, unless --target is given.")
@click.option("--target", default=None, metavar="FILE", help="A target model file instead of a pair.")
@click.option("--draft", default=None, metavar="FILE", help="Its draft model (with --target).")
@click.option("-n", "--n-gen", "n_tokens", type=click.IntRange(1), default=256, show_default=True)
@click.option("-t", "--threads", type=click.IntRange(1), default=2, show_default=True)
@click.option("--draft-max", type=click.IntRange(1, 64), default=8, show_default=True)
@click.option("--draft-p-min", type=click.FloatRange(0, 1), default=0.75, show_default=True)
@click.option("--lookup-ngram", type=click.IntRange(0, 16), default=4, show_default=True)
@click.option("-r", "--repetitions", "reps", type=click.IntRange(1), default=2, show_default=True)
@click.option("-p", "--prompt", default=None, help="The user message (default: a rewrite-this-paragraph request).")
def bench_spec(pairs, target, draft, n_tokens, threads, draft_max, draft_p_min, lookup_ngram, reps, prompt):
    """Greedy decode tokens/s: plain, with the draft model, with prompt lookup (same run), the
    acceptance rates, and whether the tokens are the plain ones (they must be). Prints markdown."""
    set_threads(threads)
    from localinfer.backend import kernels
    from localinfer.measure.bench_spec import REWRITE_PROMPT, bench_pair, cpu_name, demo_pair, markdown

    runs = []
    if target:
        runs.append(("custom", target, draft))
    for pair in pairs or ([] if target else ["smollm2", "gemma3"]):
        click.echo(f"{pair}: preparing the demo files ...", err=True)
        t, d = demo_pair(pair)
        runs.append((pair, str(t), str(d)))
    cpu = f"{cpu_name()}, ISA {kernels.isa() if kernels.available() else 'numpy'}"
    for name, t, d in runs:
        click.echo(f"{name}: {t} (draft {d})", err=True)
        rows = bench_pair(t, d, n_tokens, threads, lookup_ngram, draft_max, draft_p_min, reps,
                          prompt or REWRITE_PROMPT, log=lambda m: click.echo(m, err=True))
        settings = f"--draft-max {draft_max} --draft-p-min {draft_p_min} --lookup-ngram {lookup_ngram}"
        click.echo(markdown(name, t, d, rows, threads, cpu, settings) + "\n")
