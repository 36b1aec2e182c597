"""Click options generated from a config class's fields (localinfer.batching.config.Flag): one
definition of each setting's name, help, range, default and unit for the library, the command line
and Ray's app builder.

    @config_options(EngineConfig, "engine")      # --parallel, --ctx-size, --queue, --prefix-cache ...
    def serve(engine: EngineConfig, ...): ...    # the command gets the built object, in its units
"""
from __future__ import annotations

import dataclasses
import functools

import click

from localinfer.batching.config import flags


def _click_type(spec):
    if spec.type == "int":
        return click.IntRange(spec.low, spec.high) if spec.low is not None or spec.high is not None else int
    if spec.type == "float":
        return click.FloatRange(spec.low, spec.high) if spec.low is not None or spec.high is not None else float
    if spec.type == "choice":
        return click.Choice(spec.choices)
    if spec.type == "path":
        return click.Path(file_okay=False)
    return str  # "str", and "list" (comma-separated, split by Flag.parse)


def _option(field: dataclasses.Field, spec, dest: str):
    default = field.default if field.default is not dataclasses.MISSING else None
    shown = spec.to_flag(default)
    if spec.type == "bool":
        return click.option(*spec.names, dest, is_flag=True, default=bool(default), help=spec.help)
    if spec.type == "list":
        shown = ",".join(default) if default else None
    return click.option(*spec.names, dest, type=_click_type(spec), default=shown, envvar=spec.envvar,
                        metavar=spec.metavar, show_default=shown is not None and spec.envvar is None, help=spec.help)


def config_options(cls, param: str):
    """A decorator: an option per flagged field of `cls`; the command gets `param`=cls(...) instead."""
    specs = flags(cls)

    def decorate(command):
        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            given = {f.name: kwargs.pop(f"{param}__{f.name}") for f, _ in specs}
            values = {f.name: spec.to_field(spec.parse(given[f.name])) for f, spec in specs if given[f.name] is not None}
            try:
                built = cls(**values)
            except ValueError as e:
                raise click.UsageError(str(e)) from None
            return command(*args, **{param: built}, **kwargs)

        for f, spec in reversed(specs):
            wrapper = _option(f, spec, f"{param}__{f.name}")(wrapper)
        return wrapper

    return decorate
