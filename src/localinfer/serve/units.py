"""Durations and sizes as users write them: Ollama's `keep_alive` ("5m", "1h30m", 300, -1) and
memory budgets ("2GiB", "1500MB"). Both come from command lines and request bodies, so a value
that is not understood is an error naming what is accepted, never a guess."""
from __future__ import annotations

import math
import re

_MAX_TEXT = 64  # characters: longer is not a duration or a size anyone means
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_NUMBER = re.compile(r"[+-]?(\d+(?:\.\d*)?|\.\d+)")
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)")
_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


class DurationError(ValueError):
    """A keep-alive duration that cannot be read."""


class SizeError(ValueError):
    """A byte size that cannot be read."""


def parse_duration(value, what: str = "keep_alive") -> float:
    """Seconds from Ollama's keep_alive forms: a number of seconds (300, 0.5, "300"), or Go's
    duration syntax ("5m", "1h30m", "10s", "500ms", "-1m"). A negative value means "forever" and
    is returned as -1.0; 0 means "unload as soon as idle". Ollama reads a string with Go's
    time.ParseDuration, which needs a unit; a bare number as a string is accepted here too, as
    seconds, since that is what a command line gives."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise DurationError(f"{what} must be a number of seconds or a duration such as '5m', got {value!r:.60}")
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > _MAX_TEXT:
            raise DurationError(f"{what} must be a number of seconds or a duration such as '5m' or '1h30m', "
                                f"got {value!r:.60}")
        seconds = float(text) if _NUMBER.fullmatch(text) else _go_duration(text, what)
    else:
        seconds = float(value)
    if not math.isfinite(seconds):
        raise DurationError(f"{what} must be finite (a negative value means forever), got {value!r:.60}")
    return -1.0 if seconds < 0 else seconds


def _go_duration(text: str, what: str) -> float:
    sign, body = (-1.0, text[1:]) if text[:1] == "-" else (1.0, text[1:] if text[:1] == "+" else text)
    total, pos = 0.0, 0
    for part in _DURATION_PART.finditer(body):
        if part.start() != pos:
            break
        total += float(part.group(1)) * _DURATION_UNITS[part.group(2)]
        pos = part.end()
    if pos == 0 or pos != len(body):
        raise DurationError(f"{what}: cannot read {text!r} as a duration: use a number of seconds or units "
                            "h, m, s, ms (e.g. '5m', '1h30m', '10s', '-1' for forever)")
    return sign * total


def format_duration(seconds: float) -> str:
    """The way parse_duration reads it back: "forever", "0s", "5m", "1h30m", "2.5s"."""
    if seconds < 0:
        return "forever"
    if seconds != int(seconds) or seconds < 60:
        return f"{seconds:g}s"
    h, rest = divmod(int(seconds), 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{n}{u}" for n, u in ((h, "h"), (m, "m"), (s, "s")) if n) or "0s"


def parse_size(value, what: str = "max_memory") -> int:
    """Bytes from "2GiB", "1500MB", "512 MiB" or a plain integer (bytes): decimal units
    (kB, MB, GB, TB: powers of 1000) and binary ones (KiB, MiB, GiB, TiB: powers of 1024), any case.
    A bare K/M/G is refused: it means 1000 to some and 1024 to others. The size must be positive."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SizeError(f"{what} must be a size such as '2GiB' or '1500MB', got {value!r:.60}")
    if isinstance(value, int):
        number, unit = value, ""
    else:
        m = _SIZE.fullmatch(value.strip()) if len(value) <= _MAX_TEXT else None
        if m is None or m.group(2).lower() not in _SIZE_UNITS:
            raise SizeError(f"{what}: cannot read {value!r:.60} as a size: use a number and one of B, kB, MB, GB, "
                            "TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), e.g. '2GiB'")
        number, unit = float(m.group(1)), m.group(2).lower()
    size = int(number * _SIZE_UNITS[unit])
    if size <= 0:
        raise SizeError(f"{what} must be more than 0 bytes, got {value!r:.60}")
    return size
