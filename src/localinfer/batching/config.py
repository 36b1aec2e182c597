"""How a batching engine is set up: one EngineConfig, and the flags generated from it.

    EngineConfig(n_slots=2, n_ctx=1024)        # field names are Engine's parameters, in its units
    start_engine(model, config)                # the one factory: Model.engine, served models, Ray replicas

Each field that the command line sets carries a `Flag` (its names, help, range and unit); cli/config_options.py
turns those into click options and `flag_fields` reads the same names from text (Ray's app builder),
so a setting has one name per layer and its unit is converted in one place (`Flag.scale`: a flag in
MiB, a field in bytes). Nothing here imports click or numpy: the command line reads the defaults
without loading either.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

MIB = 1 << 20


@dataclass(frozen=True)
class Flag:
    """A config field's command-line option: what cli/config_options.py and from_flags need."""

    names: tuple[str, ...]  # "-np", "--parallel": the last long one names it in from_flags ("parallel")
    help: str
    type: str = "int"  # "int" | "float" | "str" | "path" | "bool" | "choice" | "list" (comma-separated)
    low: float | None = None  # the smallest value (inclusive)
    high: float | None = None  # the largest value (inclusive)
    scale: int = 1  # field value = flag value * scale (MIB: a flag in MiB for a field in bytes)
    choices: tuple[str, ...] = ()
    envvar: str | None = None
    metavar: str | None = None

    @property
    def key(self) -> str:
        """The flag's name as a keyword: --prefix-cache-dir-size -> prefix_cache_dir_size."""
        return [n for n in self.names if n.startswith("--")][-1][2:].replace("-", "_")

    def to_field(self, value: Any) -> Any:
        """A flag's value (already of its type) -> the field's."""
        if value is None or self.scale == 1:
            return value
        return value * self.scale

    def to_flag(self, value: Any) -> Any:
        """A field's value -> the flag's (the default a help text shows)."""
        if value is None or self.scale == 1:
            return value
        return value // self.scale

    def parse(self, text: Any) -> Any:
        """A value given as text (or already typed) -> the flag's value, checked; ValueError names the flag."""
        if text is None:
            return None
        try:
            if self.type == "int":
                if isinstance(text, bool) or (isinstance(text, float) and not text.is_integer()):
                    raise ValueError
                value = int(text)
            elif self.type == "float":
                value = float(text)
            elif self.type == "bool":
                value = text if isinstance(text, bool) else {"true": True, "1": True, "false": False,
                                                             "0": False}[str(text).lower()]
            elif self.type == "list":
                value = tuple(x.strip() for x in text.split(",") if x.strip()) if isinstance(text, str) else tuple(text)
            else:
                value = str(text)
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{self.key} must be a{'n' * (self.type == 'int')} {self.type}, got {text!r}") from None
        if self.low is not None and value < self.low or self.high is not None and value > self.high:
            bounds = f">= {self.low:g}" if self.high is None else f"between {self.low:g} and {self.high:g}"
            raise ValueError(f"{self.key} must be {bounds}, got {value!r}")
        if self.choices and value not in self.choices:
            raise ValueError(f"{self.key} must be one of {', '.join(self.choices)}, got {value!r}")
        return value


def flag(default: Any, *names: str, help: str, **kw) -> Any:
    """A dataclass field with `default` that the command line sets through `names`."""
    return dataclasses.field(default=default, metadata={"flag": Flag(names, help, **kw)})


def flags(cls) -> list[tuple[dataclasses.Field, Flag]]:
    """The fields of config class `cls` that have a flag, in order."""
    return [(f, f.metadata["flag"]) for f in dataclasses.fields(cls) if "flag" in f.metadata]


def flag_fields(cls, values: Mapping[str, Any]) -> dict:
    """{field name: value} of config class `cls` from flag keys and values as text (`{"parallel": "4",
    "prefix_cache": "0"}`), each parsed, checked and converted as the command line does; the flags
    not given are left out. Keys that are not cls's flags are ignored (the caller refuses what
    nobody takes)."""
    return {f.name: spec.to_field(spec.parse(values[spec.key]))
            for f, spec in flags(cls) if values.get(spec.key) is not None}


def flag_keys(cls) -> set[str]:
    return {spec.key for _, spec in flags(cls)}


@dataclass(frozen=True)
class EngineConfig:
    """The batching engine's settings (Engine's parameters of the same names, in its units)."""

    n_slots: int = flag(4, "-np", "--parallel", low=1, high=256,
                        help="Slots: requests generated together, one batched forward pass per step.")
    n_ctx: int | None = flag(None, "-c", "--ctx-size", low=16,
                             help="Context of each slot in tokens (prompt + answer); default: the model's, "
                                  "at most 4096.")
    max_queue: int | None = flag(64, "--queue", low=0,
                                 help="Requests that may wait for a slot; beyond that the server answers 503 "
                                      "with Retry-After.")  # None: unbounded (the library's engine)
    prefix_cache_bytes: int = flag(256 * MIB, "--prefix-cache", low=0, scale=MIB,
                                   help="MiB of K/V kept for reuse by requests that share a prompt prefix (0: off).")
    prefix_cache_dir: str | None = flag(None, "--prefix-cache-dir", type="path",
                                        help="Also keep the prefix cache's blocks in this folder, so a restarted "
                                             "server reuses them.")
    prefix_cache_dir_bytes: int = flag(4096 * MIB, "--prefix-cache-dir-size", low=1, scale=MIB,
                                       help="MiB of this model's blocks the --prefix-cache-dir folder holds at most.")
    prefill_chunk: int = 512  # prompt tokens computed per step in all (a long prompt never stalls decoding long)
    prefix_block: int = 32  # tokens per prefix-cache block
    completion_cache_tokens: int = 1 << 16  # tokens of finished deterministic answers kept for repeats (0: off)

    def __post_init__(self):
        if self.prefix_cache_dir is not None and not self.prefix_cache_bytes:
            raise ValueError("a prefix cache folder (--prefix-cache-dir) needs the prefix cache (--prefix-cache > 0)")

    def engine_args(self, model) -> dict:
        """Engine's keyword arguments for a loaded Model: n_ctx defaults to the model's."""
        args = dataclasses.asdict(self)
        args["n_ctx"] = int(self.n_ctx or model.n_ctx)
        if self.prefix_cache_dir is not None:
            args["model_identity"] = model.compute_identity
        return args


def start_engine(model, config: EngineConfig = EngineConfig()):
    """A running Engine over a loaded Model (localinfer.Model): its runtime, tokenizer, KV cache type
    and speculative decoding, with `config`'s settings."""
    from .engine import Engine
    return Engine(model.serialized, model.tokenizer, kv_dtype=model.kv_dtype, speculative=model.speculative,
                  draft_runtime=model._draft_runtime(), **config.engine_args(model))
