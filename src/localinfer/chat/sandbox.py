"""A Jinja2 sandbox with a budget: templates from downloaded files rendered under limits they cannot pass.

Jinja2's ImmutableSandboxedEnvironment keeps a template away from Python internals and from
mutating its inputs, but not from spending: `{{ 'a' * 10**10 }}` allocates 10 GB, nested loops
run for hours, and `{{ 7 ** 10 ** 10 }}` hangs the *compile* (Jinja folds constant expressions).
LimitedEnvironment adds a budget per render (and per compile): the rendering thread's CPU time,
a count of steps, caps on the size of every string, list and integer and on all of them
together, each growing with the input. None is wall-clock time, which a busy machine spends for
the template: a render that fits its budget on an idle machine fits it under any load. A
template that passes one gets LimitExceeded naming the limit.

How each limit is enforced, in one place:
- No compile-time evaluation of anything unbounded: every operator is intercepted and every
  filter and test is wrapped as a context-taking function, and Jinja folds none of these. What
  it still folds (literals, item lookups, `~` of literals) is bounded by the source's size.
- Steps: every hook the sandbox offers (calls, attribute and item lookups, operators,
  comparisons, filters, tests), every loop iteration (the code generator starts each loop body
  with one) and every output piece counts against the step limit; every few steps, and after
  every large piece of work, the thread's CPU time is checked against the CPU limit.
- One step never runs long: the CPU check runs between steps, so each single call is bounded
  before it runs. Methods of strings run from an allowlist of linear-time ones (codecs from an
  allowlist too: punycode and idna are quadratic), comparisons and the sorting filters first
  measure what they compare, and the filters with a superlinear worst case take bounded input
  (wordwrap) or are removed (pprint). The costliest step is then one linear pass over the
  largest value allowed.
- Sizes: a value is checked where it is made (the result of every operator, call and filter)
  and, where something turns it into text (output, `~`, the serializing filters, `%`,
  `str.format`), by its written-out size, which counts a shared reference each time it is
  reached: `[big] * 100000` is a short list that prints as 100000 bigs.
- The few operations whose result can be far larger than their inputs (`**`, `*`, padding
  widths, `replace`, `join`, printf widths, ...) are checked from their arguments before they
  run: Python cannot be interrupted inside one allocation.
"""
from __future__ import annotations

import codecs
import contextlib
import contextvars
import functools
import inspect
import itertools
import operator
import re
import time
import types
from collections import abc
from typing import Any, Iterator, Mapping

from jinja2 import nodes, pass_context
from jinja2.compiler import CodeGenerator, optimizeconst
from jinja2.runtime import markup_join, str_join
from jinja2.sandbox import (ImmutableSandboxedEnvironment, SandboxedEscapeFormatter, SandboxedFormatter,
                            SecurityError)
from jinja2.utils import Namespace, _PassArg
from markupsafe import Markup

# -- limits ----------------------------------------------------------------------------------------
# Real chat templates (ChatML, Llama 3, Gemma, Mistral, Qwen with tools and tojson) render a
# conversation in well under a millisecond, in tens of steps per message, and make strings a
# few times the size of the messages. Each limit is orders of magnitude above that, and low
# enough that one render holds at most one core for a second and a few hundred MB. The size
# limits grow with the input (the messages and other variables, measured as serialized
# characters), so a huge but honest conversation is never stopped by a limit meant for the
# template: it reaches the context-length check instead.
RENDER_CPU_SECONDS = 1.0      # the thread's CPU time per render and per compile; + the two below
CPU_SECONDS_PER_INPUT_ITEM = 200e-6  # honest templates spend 5-20 us per input item (20,000 messages:
CPU_SECONDS_PER_INPUT_CHAR = 60e-9   # 0.5-2 s) and ~3 ns per character: both with ten times the room
CPU_CHECK_STEPS = 32          # the CPU clock is a system call (~0.5 us): read it every 32 steps
CPU_CHECK_WORK = 1 << 16      # and after any one piece of work this large
MAX_WORDWRAP_CHARS = 1 << 16  # textwrap is quadratic in a long word: 64K chars is ~0.2 s at width 1
MAX_STEPS = 1_000_000         # hook calls, loop iterations and output pieces; + 64 per input item
MAX_CHARS = 4 << 20           # characters in one string, serialized value or the output; + 4 x input
MAX_ITEMS = 1_000_000         # items in one list, tuple or dict; + 4 x input
PRODUCED_FACTOR = 16          # all strings and lists made in one render: 16 x the one-value limits
MAX_INT_BITS = 4096           # any counter or index fits; arithmetic on it costs microseconds
MAX_SOURCE_CHARS = 1 << 20    # the largest real templates (tool-calling ones) are tens of KB
MAX_MESSAGE_CHARS = 300       # error messages stay one readable line


class LimitExceeded(Exception):
    """A template passed a limit. Not a ValueError, so no Jinja filter that catches ValueError
    swallows it (and the budget remembers it anyway)."""


def one_line(text: Any, limit: int = MAX_MESSAGE_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _walk(value: Any, limit: int | None = None, indent: int = 0) -> tuple[int, int]:
    """(serialized size, item count) of `value`: an upper bound, roughly, on the length of its
    str(), repr() or JSON (with `indent` spaces per nesting level when indented). Shared
    references count each time they are reached, as serializing them costs. Stops with
    LimitExceeded as soon as the size passes `limit`, so it costs at most O(limit)."""
    if isinstance(value, (str, bytes)):
        n = len(value) + 2
        if limit is not None and n > limit:
            raise LimitExceeded(f"a value longer than {limit} characters (limit per value)")
        return n, 1
    total, count = 0, 0
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        count += 1
        if isinstance(v, (str, bytes)):
            n = len(v)
        elif v is None or isinstance(v, (bool, float)):
            n = 24
        elif isinstance(v, int):
            n = v.bit_length() // 3 + 2  # decimal digits, with room for the sign
        elif isinstance(v, range):
            n = 16 + len(v) * (max(abs(v.start), abs(v.stop)).bit_length() // 3 + 4)
        elif isinstance(v, abc.Mapping):
            n = 2
            stack.extend(zip(v.keys(), itertools.repeat(depth + 1)))
            stack.extend(zip(v.values(), itertools.repeat(depth + 1)))
        elif isinstance(v, (list, tuple, set, frozenset, abc.MappingView)):
            n = 2
            stack.extend(zip(v, itertools.repeat(depth + 1)))
        elif isinstance(v, Namespace):
            n = 16
            stack.append((v._Namespace__attrs, depth))
        else:  # Undefined, macros, loop and cycler objects, generators: short reprs
            n = 64
        total += n + 2 + (1 + indent * depth if indent else 0)
        if limit is not None and total > limit:
            raise LimitExceeded(f"a value longer than {limit} characters when written out (limit per value)")
    return total, count


class Budget:
    """What one render (or compile) may still spend. Failing is sticky: once a limit is passed,
    every later step fails too."""

    def __init__(self, input_chars: int = 0, input_items: int = 0):
        # The CPU time of the thread that makes the budget, which is the one that renders: the
        # honest cost of a render grows with its input, and time spent waiting for a core is not
        # the template's.
        self.cpu_seconds = (RENDER_CPU_SECONDS + CPU_SECONDS_PER_INPUT_ITEM * input_items
                            + CPU_SECONDS_PER_INPUT_CHAR * input_chars)
        self.cpu_deadline = time.thread_time() + self.cpu_seconds
        self.steps_left = MAX_STEPS + 64 * input_items
        self.max_chars = MAX_CHARS + 4 * input_chars
        self.max_items = MAX_ITEMS + 4 * input_chars
        self.max_produced = PRODUCED_FACTOR * (self.max_chars + self.max_items)
        self.produced_left = self.max_produced
        self.error: str | None = None

    @classmethod
    def for_input(cls, variables: Mapping[str, Any]) -> "Budget":
        chars, items = _walk(variables)
        return cls(chars, items)

    def fail(self, message: str):
        if self.error is None:
            self.error = message
        raise LimitExceeded(self.error)

    def step(self) -> None:
        if self.error is not None:
            raise LimitExceeded(self.error)
        self.steps_left -= 1
        if self.steps_left < 0:
            self.fail(f"more than {MAX_STEPS} steps (limit per render)")
        if self.steps_left % CPU_CHECK_STEPS == 0:
            self.check_cpu()

    def check_cpu(self) -> None:
        if time.thread_time() > self.cpu_deadline:
            self.fail(f"used more than {self.cpu_seconds:.3g} s of CPU time (limit per render)")

    def spend(self, n: int) -> None:
        """Counts characters and items made (or, for comparisons and searches, gone through)."""
        self.produced_left -= n
        if self.produced_left < 0:
            self.fail(f"made more than {self.max_produced} characters and items in all (limit per render)")
        if n >= CPU_CHECK_WORK:
            self.check_cpu()

    def check_chars(self, n: int, what: str = "a string") -> None:
        if n > self.max_chars:
            self.fail(f"{what} longer than {self.max_chars} characters (limit per value)")

    def check_items(self, n: int) -> None:
        if n > self.max_items:
            self.fail(f"a list of more than {self.max_items} items (limit per value)")

    def check_int_bits(self, bits: int) -> None:
        if bits > MAX_INT_BITS:
            self.fail(f"an integer of more than {MAX_INT_BITS} bits (limit per value)")

    def measure(self, value: Any, indent: int = 0) -> int:
        if isinstance(value, (str, bytes)):  # the common case, without the walk
            n = len(value) + 2
            if n > self.max_chars:
                self.fail(f"a value longer than {self.max_chars} characters (limit per value)")
            return n
        try:
            size, count = _walk(value, self.max_chars, indent)
        except LimitExceeded as e:
            self.fail(str(e))
        if count >= CPU_CHECK_WORK >> 6:  # the walk itself was a piece of work (~0.3 us an item)
            self.check_cpu()
        return size

    def produce(self, value: Any) -> Any:
        """Checks a value an operation just made and counts it against the render's total."""
        if isinstance(value, (str, bytes)):
            self.check_chars(len(value))
            self.spend(len(value))
        elif isinstance(value, (list, tuple, dict, set, frozenset)):
            self.check_items(len(value))
            self.spend(len(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            self.check_int_bits(value.bit_length())
        elif isinstance(value, abc.Iterator):
            return self._stepping(value)  # a lazy filter result (map, select, batch ...)
        return value

    def _stepping(self, iterator: Iterator) -> Iterator:
        for item in iterator:
            self.step()
            yield item


# The budget of the render running in this thread (a context variable, so concurrent renders in
# server threads each see their own).
_BUDGET: contextvars.ContextVar[Budget] = contextvars.ContextVar("template_budget")


def current_budget() -> Budget:
    b = _BUDGET.get(None)
    if b is None:  # LimitedEnvironment's templates run only inside running_under()
        raise LimitExceeded("a template ran outside a budget")
    return b


@contextlib.contextmanager
def running_under(budget: Budget) -> Iterator[Budget]:
    """Compile or render a LimitedEnvironment template inside this."""
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def _int(x: Any) -> int:
    return x if isinstance(x, int) else 0


def _digits(text: str) -> int:
    return int(text) if len(text) <= 9 else 1 << 40


# -- checks before operations that grow their result -------------------------------------------------
_PRINTF_SPEC = re.compile(r"%(?:\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d+))?")
_FORMAT_NUMBER = re.compile(r"\d+")


def _check_printf(b: Budget, fmt: str, args: Any) -> None:
    """`fmt % args`: the format, the arguments written out, and every width and precision."""
    total, star = len(fmt) + b.measure(args), False
    for m in _PRINTF_SPEC.finditer(fmt):
        for g in m.groups():
            if g == "*":
                star = True
            elif g:
                total += _digits(g)
    if star:  # widths taken from the arguments
        values = args if isinstance(args, tuple) else (args,)
        total += sum(abs(v) for v in values if isinstance(v, int))
    b.check_chars(total, "a formatted string")


def _check_power(b: Budget, base: Any, exp: Any) -> None:
    if isinstance(base, int) and isinstance(exp, int) and exp > 0 and abs(base) > 1:
        b.check_int_bits(base.bit_length() * min(exp, 1 << 40))


def _check_repeat(b: Budget, left: Any, right: Any) -> None:
    seq, times = (left, right) if isinstance(right, int) else (right, left)
    if isinstance(times, int) and isinstance(seq, (str, bytes, list, tuple)):
        n = len(seq) * max(times, 0)
        b.check_chars(n) if isinstance(seq, (str, bytes)) else b.check_items(n)


def _replace_size(s: Any, old: Any, new: Any, count: Any) -> int:
    if not (isinstance(s, (str, bytes)) and type(old) is type(new) and isinstance(old, type(s[:0]))):
        return 0  # the call itself reports the wrong types
    hits = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(s) + hits * max(len(new) - len(old), 0)


def _materialize(b: Budget, iterable: Any) -> list:
    items = list(itertools.islice(iterable, b.max_items + 1))
    b.check_items(len(items))
    return items


def _check_join(b: Budget, sep: Any, items: list) -> None:
    b.check_chars(sum(b.measure(x) for x in items) + len(str(sep)) * max(len(items) - 1, 0))


# Methods of str, bytes and Markup a template may call: each runs in time linear in its
# inputs and its result, so that one call costs at most a pass over the largest value allowed.
# Any other is refused before it runs, so a method a new Python adds waits for a look at its cost.
_TEXT_METHODS = frozenset((
    "capitalize", "casefold", "center", "count", "encode", "decode", "endswith", "expandtabs", "find",
    "format", "format_map", "hex", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit",
    "isidentifier", "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust",
    "lower", "lstrip", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust",
    "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title",
    "translate", "upper", "zfill", "escape", "striptags", "unescape"))
# Codecs a template may encode or decode with (by codecs.lookup's name), with the most each makes
# per character under the error handlers allowed. Others are refused: punycode (and idna, built
# on it) is quadratic in its input, `namereplace` writes ~30 characters per character.
_CODECS = {"utf-8": 4, "ascii": 1, "iso8859-1": 1, "utf-16": 4, "utf-16-le": 4, "utf-16-be": 4, "utf-32": 4,
           "utf-32-le": 4, "utf-32-be": 4}
_CODEC_ERRORS = {"strict": 1, "ignore": 1, "replace": 3, "surrogateescape": 1, "surrogatepass": 1,
                 "backslashreplace": 10, "xmlcharrefreplace": 10}  # `&#1114111;`, `\U0010ffff`


# What Jinja's generated code passes to Context.call besides the call's own arguments.
_JINJA_CALL_KWARGS = ("_loop_vars", "_block_vars")


def _check_codec(b: Budget, owner: Any, args: tuple, kwargs: dict) -> None:
    encoding = args[0] if args else kwargs.get("encoding", "utf-8")
    errors = args[1] if len(args) > 1 else kwargs.get("errors", "strict")
    try:
        name = codecs.lookup(encoding).name if isinstance(encoding, str) and len(encoding) < 64 else None
    except LookupError:
        return  # the call itself says the codec is unknown
    if name not in _CODECS:
        b.fail(f"the codec {one_line(encoding, 40)!r} (only utf-8, utf-16, utf-32, ascii and latin-1 run in a template)")
    if not isinstance(errors, str) or errors not in _CODEC_ERRORS:
        b.fail(f"the codec error handler {one_line(errors, 40)!r} (only {', '.join(_CODEC_ERRORS)} run in a template)")
    b.check_chars(len(owner) * _CODECS[name] * _CODEC_ERRORS[errors], "an encoded or decoded value")


def _method_guard(b: Budget, owner: Any, name: str, args: tuple, kwargs: dict) -> tuple:
    """Before a builtin method of str, bytes, int, list, tuple or dict runs: refuses the string
    methods that are not linear-time, counts what the call goes through, and checks the ones
    whose result can outgrow their inputs (the others make results at most a small multiple of
    their already bounded inputs)."""
    kwargs = {k: v for k, v in kwargs.items() if k not in _JINJA_CALL_KWARGS}
    a = args + tuple(kwargs.values())
    if isinstance(owner, (str, bytes)):
        if name not in _TEXT_METHODS:
            b.fail(f"the {type(owner).__name__} method {name} (not among the linear-time methods a template may call)")
        b.spend(len(owner) + sum(b.measure(x) for x in a))  # a search or a copy of each
    elif isinstance(owner, (list, tuple, dict)) and name in ("count", "index"):
        b.spend(b.measure(owner) + sum(b.measure(x) for x in a))  # compares items, as deep as they go
    if name in ("encode", "decode") and isinstance(owner, (str, bytes)):
        _check_codec(b, owner, args, kwargs)
    elif name in ("center", "ljust", "rjust", "zfill") and a:
        b.check_chars(max(len(owner), _int(a[0])))
    elif name == "expandtabs":
        tabs = owner.count("\t" if isinstance(owner, str) else b"\t")
        b.check_chars(len(owner) + tabs * max(_int(a[0]) if a else 8, 1))
    elif name in ("split", "rsplit") and a and isinstance(a[0], type(owner)) and a[0]:
        # as many items as separators, counted at the speed of a search rather than of a list
        limit = _int(a[1]) if len(a) > 1 else -1
        hits = owner.count(a[0])
        b.check_items((hits if limit < 0 else min(hits, limit)) + 1)
    elif name == "replace" and len(a) >= 2:
        b.check_chars(_replace_size(owner, a[0], a[1], a[2] if len(a) > 2 else -1))
    elif name == "join" and len(args) == 1:
        items = _materialize(b, args[0])
        _check_join(b, owner, items)
        args = (items,)
    elif name == "translate" and a and isinstance(a[0], (Mapping, list, tuple)):
        values = a[0].values() if isinstance(a[0], Mapping) else a[0]
        longest = max((len(v) for v in values if isinstance(v, (str, bytes))), default=1)
        b.check_chars(len(owner) * max(longest, 1))
    elif name == "to_bytes" and isinstance(owner, int):
        b.check_chars(_int(a[0]) if a else 1, "a bytes value")
    return args


# Filters that grow their result past their inputs: checked from their bound arguments.
def _guard_center(b, a):
    b.check_chars(max(b.measure(a["value"]), _int(a["width"])))


def _guard_indent(b, a):
    width = a["width"]
    width = len(width) if isinstance(width, str) else _int(width)
    text = str(a["s"])
    b.check_chars(len(text) + (text.count("\n") + 1) * width)


def _guard_format(b, a):
    _check_printf(b, str(a["value"]), a["kwargs"] or tuple(a["args"]))


def _guard_join(b, a):
    a["value"] = _materialize(b, a["value"])
    _check_join(b, a["d"], a["value"])


def _guard_replace(b, a):  # the filter writes all three out as text first
    b.check_chars(_replace_size(str(a["s"]), str(a["old"]), str(a["new"]), a["count"]))


def _guard_round(b, a):
    if a["method"] != "common":  # ceil and floor compute 10 ** precision
        _check_power(b, 10, a["precision"])


def _guard_sum(b, a):
    if not isinstance(a["start"], (int, float)):
        b.fail("sum with a start that is not a number (adding lists or strings one by one is quadratic)")


def _guard_batch(b, a):
    b.check_items(_int(a["linecount"]))


def _guard_wordwrap(b, a):
    text, wrap = str(a["s"]), a["wrapstring"]
    if len(text) > MAX_WORDWRAP_CHARS:  # textwrap copies a long word once per piece it breaks off
        b.fail(f"wordwrap of more than {MAX_WORDWRAP_CHARS} characters (limit per call)")
    b.check_chars(len(text) + (len(text) // 2 + 1) * (len(wrap) if isinstance(wrap, str) else 1))


def _guard_tojson(b, a):
    indent = a["indent"]
    b.measure(a["value"], len(indent) if isinstance(indent, str) else _int(indent))


_FILTER_GUARDS = {"center": _guard_center, "indent": _guard_indent, "format": _guard_format, "join": _guard_join,
                  "replace": _guard_replace, "round": _guard_round, "sum": _guard_sum, "batch": _guard_batch,
                  "wordwrap": _guard_wordwrap, "tojson": _guard_tojson}
# Filters that never write their arguments out as text nor compare them; every other filter's
# arguments are measured first (`string`, `tojson`, `join`, `safe`, `upper` ... all serialize;
# `sort`, `unique`, `min`, `groupby` ... compare items as deep as they go, and a list of one long
# string shared a million times is short but slow to sort).
_STRUCTURAL_FILTERS = {"length", "count", "first", "last", "list", "items", "map", "select", "reject",
                       "selectattr", "rejectattr", "reverse", "default", "d", "attr", "batch", "slice",
                       "random", "abs", "int", "float", "round"}
# Jinja helpers no chat template uses, whose output size is not worth bounding.
# pprint too: it writes each nested level out once per level above it.
_REMOVED_GLOBALS, _REMOVED_FILTERS = ("lipsum",), ("urlize", "pprint")


def _pass_first(pass_arg, context) -> tuple:
    if pass_arg is _PassArg.context:
        return (context,)
    if pass_arg is _PassArg.eval_context:
        return (context.eval_ctx,)
    if pass_arg is _PassArg.environment:
        return (context.environment,)
    return ()


def _limited_filter(name: str, func):
    pass_arg = _PassArg.from_obj(func)
    guard, sig = _FILTER_GUARDS.get(name), None
    if guard is not None:
        sig = inspect.signature(func)
        params = list(sig.parameters.values())
        sig = sig.replace(parameters=params[1:] if pass_arg is not None else params)
    serializes = name not in _STRUCTURAL_FILTERS

    @pass_context  # a context-taking filter is never folded at compile time
    def limited(context, *args, **kwargs):
        b = current_budget()
        b.step()
        if serializes:
            for v in itertools.chain(args, kwargs.values()):
                b.measure(v)
        if sig is not None:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                pass  # the filter itself says what is wrong with the call
            else:
                bound.apply_defaults()
                guard(b, bound.arguments)
                args, kwargs = bound.args, bound.kwargs
        return b.produce(func(*_pass_first(pass_arg, context), *args, **kwargs))

    return limited


_SCALARS = (str, bytes, int, float, type(None))
_COMPARE = {"eq": operator.eq, "ne": operator.ne, "gt": operator.gt, "gteq": operator.ge, "lt": operator.lt,
            "lteq": operator.le, "in": lambda a, b: a in b, "notin": lambda a, b: a not in b}


def _check_compare(b: Budget, op: str, left: Any, right: Any) -> None:
    """Counts what `left op right` goes through, before it runs: two lists of one long string
    shared a million times are short to write but slow to compare."""
    if op in ("in", "notin"):
        if isinstance(right, (str, bytes)):  # a substring search
            b.spend(len(right) + (len(left) if isinstance(left, (str, bytes)) else 0))
        elif isinstance(right, (abc.Mapping, abc.Set, range)):  # a hash or arithmetic
            b.spend(b.measure(left))
        else:  # compares the left side with each item
            b.spend(b.measure(right))
    elif isinstance(left, _SCALARS) or isinstance(right, _SCALARS):  # at most the shorter string
        b.spend(min(len(left) if isinstance(left, (str, bytes)) else 0,
                    len(right) if isinstance(right, (str, bytes)) else 0))
    else:
        b.spend(min(b.measure(left), b.measure(right)))


# Tests that compare their arguments, by the operator they apply.
_COMPARING_TESTS = {"eq": "eq", "equalto": "eq", "==": "eq", "ne": "ne", "!=": "ne", "lt": "lt",
                    "lessthan": "lt", "<": "lt", "le": "lteq", "<=": "lteq", "gt": "gt", "greaterthan": "gt",
                    ">": "gt", "ge": "gteq", ">=": "gteq", "in": "in"}


def _limited_test(name: str, func):
    pass_arg = _PassArg.from_obj(func)
    op = _COMPARING_TESTS.get(name)

    @pass_context
    def limited(context, *args, **kwargs):
        b = current_budget()
        b.step()
        if op is not None and len(args) == 2:
            _check_compare(b, op, *args)
        return func(*_pass_first(pass_arg, context), *args, **kwargs)

    return limited


@pass_context
def _finalize(context, value):
    """Every `{{ ... }}` value on its way to text."""
    b = current_budget()
    b.step()
    b.spend(b.measure(value))
    return value


class _LimitedFormatterMixin:
    """str.format under the budget: each field's width and written-out value is checked and
    counted before it is formatted."""

    def convert_field(self, value, conversion):
        current_budget().measure(value)
        return super().convert_field(value, conversion)

    def format_field(self, value, format_spec):
        b = current_budget()
        b.step()
        n = max([b.measure(value)] + [_digits(d) for d in _FORMAT_NUMBER.findall(format_spec)])
        b.check_chars(n, "a formatted field")
        b.spend(n)
        return super().format_field(value, format_spec)


class _LimitedFormatter(_LimitedFormatterMixin, SandboxedFormatter):
    pass


class _LimitedEscapeFormatter(_LimitedFormatterMixin, SandboxedEscapeFormatter):
    pass


class _LimitedCodeGenerator(CodeGenerator):
    def visit_For(self, node, frame):
        # Each iteration is a step, and pays for the template text its body may write (text is
        # output as a constant, past every hook).
        text = sum(len(t.data) for t in node.find_all(nodes.TemplateData))
        step = nodes.ExprStmt(nodes.Call(nodes.EnvironmentAttribute("limited_loop_step"),
                                         [nodes.Const(text)], [], None, None), lineno=node.lineno)
        node.body = [step, *node.body]
        super().visit_For(node, frame)

    @optimizeconst  # comparisons of constants are still folded: they are bounded by the source
    def visit_Compare(self, node, frame):
        # `a < b < c` as limited_compare(a, 'lt', b, ('lt', lambda: c)), which counts each
        # comparison first; like Python's chain, an operand after the first two is evaluated only
        # when the comparisons before it hold.
        first, *rest = node.ops
        self.write("environment.limited_compare(")
        self.visit(node.expr, frame)
        self.write(f", {first.op!r}, ")
        self.visit(first.expr, frame)
        for operand in rest:
            self.write(f", ({operand.op!r}, lambda: ")
            self.visit(operand.expr, frame)
            self.write(")")
        self.write(")")

    def visit_Concat(self, node, frame):  # `a ~ b`: str() of each side, measured first
        self.write("environment.limited_concat(context, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class LimitedEnvironment(ImmutableSandboxedEnvironment):
    # Intercepted operators run through call_binop/call_unop and are never folded at compile time.
    intercepted_binops = frozenset(ImmutableSandboxedEnvironment.default_binop_table)
    intercepted_unops = frozenset(ImmutableSandboxedEnvironment.default_unop_table)
    code_generator_class = _LimitedCodeGenerator

    def __init__(self, extra_globals: Mapping[str, Any] | None = None,
                 extra_filters: Mapping[str, Any] | None = None, **options):
        """extra_globals, extra_filters: added to Jinja's own (the filters wrapped like Jinja's);
        options: as for jinja2.Environment, except finalize, which the budget takes."""
        super().__init__(finalize=_finalize, **options)
        for name in _REMOVED_GLOBALS:
            self.globals.pop(name, None)
        for name in _REMOVED_FILTERS:
            self.filters.pop(name, None)
        self.globals.update(extra_globals or {})
        self.filters.update(extra_filters or {})
        self.filters = {name: _limited_filter(name, f) for name, f in self.filters.items()}
        self.tests = {name: _limited_test(name, f) for name, f in self.tests.items()}

    def call_binop(self, context, operator, left, right):
        b = current_budget()
        b.step()
        if operator == "**":
            _check_power(b, left, right)
        elif operator == "*":
            _check_repeat(b, left, right)
        elif operator == "%" and isinstance(left, str):
            _check_printf(b, left, right)
        return b.produce(self.binop_table[operator](left, right))

    def call_unop(self, context, operator, arg):
        current_budget().step()
        return self.unop_table[operator](arg)

    def getattr(self, obj, attribute):
        current_budget().step()
        return super().getattr(obj, attribute)

    def getitem(self, obj, argument):
        b = current_budget()
        b.step()
        value = super().getitem(obj, argument)
        return b.produce(value) if isinstance(argument, slice) else value  # a slice is a new value

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (Jinja's own signature)
        b = current_budget()
        b.step()
        if not __self.is_safe_callable(__obj):
            raise SecurityError(f"{__obj!r} is not safely callable")
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, (str, bytes, int, list, tuple, dict)) and \
                isinstance(__obj, (types.BuiltinMethodType, types.MethodType)):
            args = _method_guard(b, owner, __obj.__name__, args, kwargs)
        return b.produce(__context.call(__obj, *args, **kwargs))

    def wrap_str_format(self, value):
        """The sandbox's str.format wrapper, with a formatter that checks each field."""
        if not isinstance(value, (types.MethodType, types.BuiltinMethodType)) or \
                value.__name__ not in ("format", "format_map") or not isinstance(value.__self__, str):
            return None
        f_self = value.__self__
        if isinstance(f_self, Markup):
            formatter = _LimitedEscapeFormatter(self, escape=f_self.escape)
        else:
            formatter = _LimitedFormatter(self)
        is_format_map = value.__name__ == "format_map"

        def wrapper(*args, **kwargs):
            if is_format_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one positional argument")
                args, kwargs = (), args[0]
            return type(f_self)(formatter.vformat(f_self, args, kwargs))

        return functools.update_wrapper(wrapper, value)

    # called by the code _LimitedCodeGenerator writes
    def limited_loop_step(self, text_chars: int) -> None:
        current_budget().spend(text_chars)

    def limited_compare(self, left: Any, op: str, right: Any, *later: tuple) -> Any:
        b = current_budget()
        b.step()
        _check_compare(b, op, left, right)
        result = _COMPARE[op](left, right)
        for op, operand in later:
            if not result:
                break
            left, right = right, operand()
            b.step()
            _check_compare(b, op, left, right)
            result = _COMPARE[op](left, right)
        return result

    def limited_concat(self, context, values: tuple) -> str:
        b = current_budget()
        b.step()
        b.check_chars(sum(b.measure(v) for v in values))
        return b.produce((markup_join if context.eval_ctx.autoescape else str_join)(values))

