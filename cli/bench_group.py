"""`localinfer bench`: every measurement of the runtime under one command.

`localinfer bench FILE ...` is llama-bench's speed test (`bench speed`, the default when the first
argument is not one of the subcommands); `bench serve`, `bench spec`, `bench grammar`, `bench restart`,
`bench tokenize` and `bench embed` measure the server, speculative decoding, constrained decoding, a
restarted server's TTFT, the tokenizers and the encoders' embedding throughput.
"""
from __future__ import annotations

import click

from .bench import bench as speed
from .bench_embed import bench_embed
from .bench_grammar import bench_grammar
from .bench_restart import bench_restart
from .bench_serve import bench_serve
from .bench_spec import bench_spec
from .bench_tokenize import bench_tokenize

DEFAULT = "speed"


class _DefaultToSpeed(click.Group):
    """A group whose first argument, when it names no subcommand, is the speed test's (a model); a
    bare `bench` is the speed test's too, whose error names what to give."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = [DEFAULT, *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultToSpeed)
def bench():
    """Measure the runtime: `bench FILE...` is llama-bench's pp/tg test (`bench speed --help`);
    the subcommands measure the server, speculative and constrained decoding, restarts and tokenizing."""


for command in (speed, bench_serve, bench_spec, bench_grammar, bench_restart, bench_tokenize, bench_embed):
    bench.add_command(command)
