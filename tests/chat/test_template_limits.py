"""Chat templates are data from a downloaded file: each hostile one fails fast with a clear
ChatTemplateError (through the API, a loaded model, the CLI and the server), and every honest
one renders exactly as Jinja's own sandbox renders it."""
from __future__ import annotations

import json
import socket
import threading
import time

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jinja2.sandbox import ImmutableSandboxedEnvironment

import localinfer
import synthetic_gguf as sg
from localinfer.chat import sandbox as template_sandbox
from localinfer.chat.template import CHATML_TEMPLATE, GEMMA_TEMPLATE, ChatTemplate, ChatTemplateError
from localinfer.cli import chat_loop
from localinfer.cli.main import main
from localinfer.serve.app import BackgroundServer
from localinfer.chat.sandbox import RENDER_CPU_SECONDS, Budget, LimitedEnvironment, running_under

from serve_helpers import connect, post_bytes, raw

pytestmark = pytest.mark.slow  # each hostile template runs to its budget

# A hostile template must fail within its CPU budget, not hang: the bound is loose (a hang never
# ends, and pytest-timeout stops one). Renders run in the calling thread, so its CPU time is
# what they spent, however busy the machine is.
FAST = 10 * RENDER_CPU_SECONDS
USER = [{"role": "user", "content": "hi"}]

# The findings, and their relatives: each would hang, spin or allocate gigabytes unbounded.
HOSTILE = {
    "constant power (folded at compile time)": "{{ (7 ** (10 ** 10)) > 1 }}",
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "nested empty loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "loops that skip every item": "{% for i in range(100000) %}{% for j in range(100000) if false %}"
                                  "{% endfor %}{% endfor %}",
    "lipsum": "{{ lipsum(n=100000000) }}",
    "strftime_now format": "{{ strftime_now('%Y' * 10000000) }}",
    "strftime_now format, short of the size limit": "{{ strftime_now('%Y' * 1000) }}",
    "string repetition": "{{ 'a' * 10**10 }}",
    "list repetition": "{{ [1] * 10**10 }}",
    "center filter": "{{ ''|center(10**10) }}",
    "center filter, constant argument": "{{ ''|center(10000000000) }}",
    "str method padding": "{{ 'x'.rjust(10000000000) }}",
    "int.to_bytes": "{{ (1).to_bytes(10000000000, 'big') }}",
    "printf width": "{{ '%10000000000d' % 1 }}",
    "printf star width": "{{ '%*d' % (10000000000, 1) }}",
    "format filter width": "{{ '%10000000000s'|format('a') }}",
    "str.format width": "{{ '{:>{w}}'.format(1, w=10000000000) }}",
    "indent filter": "{{ ('x\n' * 1000000)|indent(1000000) }}",
    "wordwrap filter": "{{ ('x ' * 1000000)|wordwrap(1, wrapstring='y' * 1000) }}",
    "str.replace": "{{ ('a' * 1000000).replace('', 'b' * 1000) }}",
    "str.expandtabs": "{{ ('\t' * 1000000).expandtabs(1000000) }}",
    "str.join": "{% set s = 'x' * 1000000 %}{{ s.join([s] * 1000) }}",
    "shared references written out": "{% set a = range(100000)|list %}{{ [a] * 100000 }}",
    "shared references as JSON": "{% set a = range(100000)|list %}{{ ([a] * 100000)|tojson }}",
    "shared references joined": "{% set a = (range(100000)|list)|string %}{{ ([a] * 100000)|join(',') }}",
    "shared references in ~": "{% set a = range(100000)|list %}{{ 'x' ~ [a] * 100000 }}",
    "doubling a string": "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
                         "{% endfor %}",
    "keeping many big strings": "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
                                "{% set ns.l = ns.l + [('x' * 4000000)[i:]] %}{% endfor %}",
    "quadratic sum": "{{ [[1] * 1000] * 1000|sum(start=[]) }}",
    "round's power of ten": "{{ 1.5|round(1000000000, 'floor') }}",
    "batch fill": "{{ [1]|batch(10000000000, 'x')|list }}",
    "slice count": "{{ [1]|slice(10000000000)|list }}",
    "exponential macro": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
    "recursive macro": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "a long output": "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}",
    "template text in loops": "{% for i in range(100000) %}{% for j in range(100) %}" + "x" * 1000 +
                              "{% endfor %}{% endfor %}",
}


def _fails_fast(render, match="chat template", within=FAST):
    start = time.thread_time()
    with pytest.raises(ChatTemplateError, match=match) as e:
        render()
    elapsed = time.thread_time() - start
    assert elapsed < within, f"took {elapsed:.2f} s of CPU time"
    assert "\n" not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("source", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_template_fails_fast(source):
    start = time.thread_time()
    t = ChatTemplate(source)  # never compiles here: loading a model must not run the template
    assert time.thread_time() - start < FAST
    _fails_fast(lambda: t.render(USER))
    _fails_fast(lambda: t.render(USER))  # and again: no state is left behind


def test_limit_errors_name_the_limit():
    assert "4096 bits" in _fails_fast(lambda: ChatTemplate(HOSTILE["constant power (folded at compile time)"])
                                      .render(USER), "exceeded its limits")
    with pytest.MonkeyPatch.context() as mp:  # whichever limit is lower is the one named
        mp.setattr(template_sandbox, "RENDER_CPU_SECONDS", 1000.0)
        assert "1000000 steps" in _fails_fast(lambda: ChatTemplate(HOSTILE["nested loops"]).render(USER),
                                              "exceeded its limits", within=1000.0)
        mp.setattr(template_sandbox, "RENDER_CPU_SECONDS", 0.05)
        assert "s of CPU time" in _fails_fast(lambda: ChatTemplate(HOSTILE["nested loops"]).render(USER),
                                              "exceeded its limits")
    assert "characters" in _fails_fast(lambda: ChatTemplate(HOSTILE["string repetition"]).render(USER),
                                       "exceeded its limits")
    assert "items" in _fails_fast(lambda: ChatTemplate(HOSTILE["list repetition"]).render(USER), "exceeded its limits")
    assert "undefined" in _fails_fast(lambda: ChatTemplate(HOSTILE["lipsum"]).render(USER))
    assert "ZeroDivisionError" in _fails_fast(lambda: ChatTemplate("{{ 1 / 0 }}").render(USER))


def test_nothing_unbounded_is_folded_at_compile_time():
    """Jinja evaluates constant expressions while compiling; operators, filters and tests must
    all wait for the render (and its budget)."""
    with running_under(Budget()):
        code = LimitedEnvironment().compile("{{ 3 ** 41 }}{{ 'ab'|upper }}{{ 'ab'|center(9) }}"
                                            "{{ 7 is divisibleby 7 }}{{ -(2) }}", raw=True)
    for folded in (str(3 ** 41), "'AB'", "'   ab    '", "True", "-2"):
        assert folded not in code


def test_limits_grow_with_the_input():
    """A huge but honest conversation passes: the size limits scale with the messages."""
    big = "word " * (1 << 20)  # 5 MiB, past the fixed allowance for one string
    text = ChatTemplate(CHATML_TEMPLATE).render([{"role": "user", "content": big}] * 3)
    assert len(text) > 3 * len(big)
    many = [{"role": ("user", "assistant")[i % 2], "content": f"m{i}"} for i in range(20000)]
    assert ChatTemplate(GEMMA_TEMPLATE).render(many).count("<start_of_turn>") == 20001


# -- honest templates render as Jinja's own sandbox renders them --------------------------------------
def _plain_render(source, messages, bos_token="<s>", eos_token="</s>", **extra):
    """How templates were rendered before the limits: the same environment, minus the budget."""
    from localinfer.chat.template import _raise_exception, _strftime_now, _tojson
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
    env.filters["tojson"] = _tojson
    return env.from_string(source).render(messages=messages, add_generation_prompt=True, bos_token=bos_token,
                                          eos_token=eos_token, **extra)


LLAMA3_STYLE = """{{- bos_token }}
{%- if not date_string is defined %}{%- set date_string = strftime_now("%Y") %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}{%- set messages = messages[1:] %}
{%- else %}{%- set system_message = "" %}{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Year: " + date_string + "\\n\\n" }}
{%- if tools is not none %}
    {{- "You have these functions:\\n\\n" }}
    {%- for t in tools %}{{- t | tojson(indent=4) }}{{- "\\n\\n" }}{%- endfor %}
{%- endif %}
{{- system_message }}{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if message.role in ['user', 'system'] or (message.role == 'assistant' and message.tool_calls is not defined) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}
        {{- message['content'] | trim + '<|eot_id|>' }}
    {%- elif message.tool_calls is defined %}
        {%- for tool_call in message.tool_calls %}
            {%- set tool_call = tool_call.function if tool_call.function is defined else tool_call %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' + tool_call.arguments | tojson + '}<|eot_id|>' }}
        {%- endfor %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}
"""

QWEN_STYLE = """{%- if tools %}
    {{- '<|im_start|>system\\n' + (messages[0].content + '\\n\\n' if messages[0].role == 'system' else '') }}
    {{- "# Tools\\n<tools>" }}{%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not message.content.startswith('<tool_response>') %}
        {%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- if '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- if loop.index0 > ns.last_query_index %}
                {{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content }}
            {%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}
        {%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

MISTRAL_STYLE = """{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}
{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, roles must alternate user/assistant') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}{{- ' [INST] ' + message['content'] + ' [/INST]' }}{%- endif %}
    {%- else %}{{- ' ' + message['content'] + eos_token}}{%- endif %}
{%- endfor %}
"""

# The rest of the language real templates reach for, in one template.
KITCHEN_SINK = """{% macro turn(m, sep=': ') -%}{{ m.role|upper ~ sep ~ m.content|replace('a', 'A') }}{%- endmacro %}
{% set c = cycler('odd', 'even') %}{% set j = joiner(' | ') %}
{% for m in messages %}{{ j() }}{{ c.next() }} {{ loop.index }}/{{ loop.length }} {{ turn(m) }}
{% if loop.last %}{% break %}{% endif %}{% endfor %}
{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(', ') }}
{{ messages|map(attribute='role')|unique|sort|list }} {{ messages|length }} {{ messages|first|tojson }}
{{ (messages|last).content|title|center(30) }}|{{ 'x'|indent(2, true) }}|{{ '%s-%05.1f'|format('a', 2.5) }}
{{ '{} {:>6} {name}'.format(1, 'b', name=messages[0].role) }} {{ '%d%%' % 50 }} {{ 2 ** 10 }} {{ 7 // 2 }}
{{ [1, 2, 3][::-1] }} {{ {'b': 1, 'a': 2}|dictsort }} {{ range(10)|batch(3)|list }} {{ [3, 1, 2]|sum }}
{{ (10 ** 20) % 7 }} {{ 'abc' * 3 }} {{ [0] * 3 }} {{ -(messages|length) }} {{ 'a,b'.split(',')|reverse|list }}
{% set x %}{% for i in range(3) %}{{ i }}{% else %}none{% endfor %}{% endset %}{{ x|trim }} {{ x|wordcount }}
{% for i in [1, [2, [3]]] recursive %}{% if i is iterable %}{{ loop(i) }}{% else %}{{ i }}{% endif %}{% endfor %}
{{ messages[0].content is string }} {{ 'us' in messages[0].role }} {{ none|default('dflt') }} {{ 1.5|round }}
{{ messages|groupby('role')|map(attribute='grouper')|list }} {{ 'a\tb'.expandtabs(4) }} {{ '-'.join(['x', 'y']) }}
{% filter upper %}filtered {{ messages[0].role }}{% endfilter %} {{ 'tab'|wordwrap(2) }} {{ 'x'.zfill(3) }}
"""

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
CONVERSATION = [
    {"role": "system", "content": "  You are helpful.  "},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "<think>\nLet me look.\n</think>\n\nIt is sunny."},
    {"role": "user", "content": "And in Rome? ünïcödé \u2603"},
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
                                                                     "arguments": {"city": "Rome"}}}]},
]


@pytest.mark.parametrize("source, extra", [
    (GEMMA_TEMPLATE, {}), (CHATML_TEMPLATE, {}), (LLAMA3_STYLE, {"tools": TOOLS}), (LLAMA3_STYLE, {"tools": None}),
    (QWEN_STYLE, {"tools": TOOLS}), (QWEN_STYLE, {}), (KITCHEN_SINK, {}),
], ids=["gemma", "chatml", "llama3-tools", "llama3", "qwen-tools", "qwen", "kitchen-sink"])
def test_honest_templates_render_as_before(source, extra):
    got = ChatTemplate(source, "<s>", "</s>").render(CONVERSATION, **extra)
    assert got == _plain_render(source, CONVERSATION, **extra)
    assert got.strip()


def test_real_template_of_the_test_model_renders_as_before(load_ref):
    ref = load_ref("chat")
    t = ChatTemplate(ref["template"], ref["bos_token"], ref["eos_token"])
    assert t.render(ref["messages"]) == ref["formatted_prompt"]
    messages = [{"role": ("user", "assistant")[i % 2], "content": f"turn {i} " * 20} for i in range(2000)]
    start = time.thread_time()
    assert t.render(messages) == _plain_render(ref["template"], messages, ref["bos_token"], ref["eos_token"])
    assert time.thread_time() - start < RENDER_CPU_SECONDS / 2  # far inside the budget, not near it


def test_template_errors_stay_template_errors():
    _fails_fast(lambda: ChatTemplate(MISTRAL_STYLE).render(CONVERSATION[1:2] * 2), "roles must alternate")
    assert ChatTemplate(MISTRAL_STYLE, "<s>", "</s>").render(CONVERSATION[1:3]) == \
        _plain_render(MISTRAL_STYLE, CONVERSATION[1:3])
    _fails_fast(lambda: ChatTemplate("{{ messages.__class__.__mro__ }}").render(USER))
    _fails_fast(lambda: ChatTemplate("x" * (2 << 20)).render(USER), "invalid chat template")


# -- fuzz ---------------------------------------------------------------------------------------------
_ATOMS = ["0", "1", "3", "12", "-2", "1000000", "10 ** 9", "'a'", "'xy '", "''", "[1, 2]", "[]", "none",
          "messages", "messages[0]", "messages[0].content", "m", "m.content", "range(5)", "range(100000)",
          "{'k': 'v'}", "ns.v", "true"]
_BINOPS = ["+", "-", "*", "**", "%", "//", "~", "==", "in", "and"]
_FILTERS = ["length", "string", "upper", "list", "first", "last", "join", "join(',')", "tojson", "trim",
            "center(9)", "center(1000000000)", "indent(4)", "replace('a', 'bb')", "batch(2)|list", "reverse|list",
            "sum", "unique|list", "format(1)", "default(3)", "int", "title", "items|list", "map('upper')|list",
            "slice(3)|list", "wordwrap(3)", "selectattr('role')|list", "dictsort", "e", "count", "abs"]


def _expressions():
    return st.recursive(
        st.sampled_from(_ATOMS),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(_BINOPS), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            st.tuples(inner, st.sampled_from(_FILTERS)).map(lambda t: f"({t[0]}|{t[1]})"),
            st.tuples(inner, inner).map(lambda t: f"{t[0]}[{t[1]}]"),
            inner.map(lambda e: f"[{e}, {e}]")),
        max_leaves=6)


def _statements():
    expr = _expressions()
    return st.recursive(
        st.one_of(expr.map(lambda e: f"{{{{ {e} }}}}"), expr.map(lambda e: f"{{% set ns.v = {e} %}}"),
                  st.just("text ")),
        lambda inner: st.one_of(
            st.tuples(expr, st.lists(inner | st.sampled_from(["{{ loop.index }}", "{% break %}"]), max_size=3)).map(
                lambda t: f"{{% for m in {t[0]} %}}{''.join(t[1])}{{% endfor %}}"),
            st.tuples(expr, st.lists(inner, max_size=3)).map(
                lambda t: f"{{% if {t[0]} %}}{''.join(t[1])}{{% endif %}}")),
        max_leaves=5)


_messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]),
                                            "content": st.text(max_size=20)}), min_size=1, max_size=4)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_statements(), min_size=1, max_size=4), _messages)
def test_fuzz_any_template_renders_or_fails_within_the_budget(body, messages):
    source = "{% set ns = namespace(v=0) %}{% set m = messages[0] %}" + "".join(body)
    with pytest.MonkeyPatch.context() as mp:  # a shorter deadline keeps the examples that meet it quick
        mp.setattr(template_sandbox, "RENDER_CPU_SECONDS", 0.2)
        start = time.thread_time()
        try:
            out = ChatTemplate(source).render(messages)
        except ChatTemplateError as e:
            assert "\n" not in str(e) and str(e).startswith(("chat template", "invalid chat template"))
        else:
            assert isinstance(out, str)
        assert time.thread_time() - start < FAST


# Only operations that stay small, so that Jinja's own sandbox can render whatever the limited one does.
_SMALL_ATOMS = [a for a in _ATOMS if a not in ("1000000", "10 ** 9", "range(100000)")]
_SMALL_FILTERS = [f for f in _FILTERS if f != "center(1000000000)"]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(_SMALL_ATOMS), st.sampled_from(["+", "~", "==", "in", "-"]),
                          st.sampled_from(_SMALL_ATOMS), st.sampled_from(_SMALL_FILTERS)), min_size=1, max_size=4),
       _messages)
def test_fuzz_small_templates_render_exactly_as_jinja_does(exprs, messages):
    source = "{% set ns = namespace(v=0) %}{% for m in messages %}" + "".join(
        f"{{{{ (({a} {op} {b})|{f}) }}}}|" for a, op, b, f in exprs) + "{% endfor %}"
    try:
        want = _plain_render(source, messages)
    except Exception:
        with pytest.raises(ChatTemplateError):
            ChatTemplate(source, "<s>", "</s>").render(messages)
    else:
        assert ChatTemplate(source, "<s>", "</s>").render(messages) == want


# -- a model file with a hostile template: it loads, --raw works, chat fails with a message -------------
def _write_model(path, chat_template: str):
    """synthetic_gguf's random llama, with one-character tokens (so text tokenizes) and a template."""
    chars = [chr(c) for c in range(33, 127)] + ["\u0120"]  # byte-level BPE's space
    sg.write(path, tokens=chars + [f"t{i}" for i in range(len(chars), sg.N_VOCAB)], merges=["t 1"],
             more=lambda w: w.add_chat_template(chat_template))
    return path


@pytest.fixture(scope="module")
def hostile_path(tmp_path_factory):
    return _write_model(tmp_path_factory.mktemp("hostile") / "hostile.gguf", HOSTILE["nested loops"])


@pytest.fixture(scope="module")
def folding_path(tmp_path_factory):
    return _write_model(tmp_path_factory.mktemp("folding") / "folding.gguf",
                        HOSTILE["constant power (folded at compile time)"])


def test_model_with_hostile_template_loads_and_generates_raw(folding_path, hostile_path):
    for path in (folding_path, hostile_path):
        start = time.thread_time()
        model = localinfer.load(str(path), n_ctx=64)
        assert time.thread_time() - start < FAST
        assert model.generate("hi", max_tokens=2, temperature=0).tokens
        _fails_fast(lambda: model.chat_tokens(USER), "exceeded its limits")
        _fails_fast(lambda: model.chat_session().send("hi"), "exceeded its limits")


def test_cli_prints_error_not_traceback(folding_path, hostile_path):
    for path in (folding_path, hostile_path):
        start = time.thread_time()
        r = CliRunner().invoke(main, ["run", str(path), "-p", "hi", "-n", "2"])
        assert r.exit_code == 1 and time.thread_time() - start < 2 * FAST
        assert r.output.startswith("Error: chat template exceeded its limits") and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["run", str(folding_path), "--raw", "-p", "hi", "-n", "2", "--temp", "0"])
    assert r.exit_code == 0, r.output


def test_interactive_chat_reports_template_errors_and_goes_on(folding_path, monkeypatch, capsys):
    session = localinfer.load(str(folding_path), n_ctx=64).chat_session()
    monkeypatch.setattr("builtins.input", lambda prompt: "hi")
    assert chat_loop._turn(chat_loop._Chat(session, verbose=False)) is True
    assert capsys.readouterr().err.startswith("Error: chat template exceeded its limits")
    assert session.messages == []  # the turn was dropped


# -- the server: a 400, and no thread left spinning -----------------------------------------------------
def _handler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if "process_request" in t.name]


def _no_handler_threads_within(seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _handler_threads():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_server_answers_400_and_keeps_no_thread(hostile_path):
    model = localinfer.load(str(hostile_path), n_ctx=64)
    with BackgroundServer(model, "hostile", port=0, n_slots=1, n_ctx=64) as s:
        start = time.monotonic()
        status, _, body = raw(s.url, "POST", "/v1/chat/completions", {"messages": USER, "max_tokens": 2})
        assert status == 400 and time.monotonic() - start < FAST, body
        assert set(body["error"]) == {"message", "type", "param", "code"}
        assert body["error"]["type"] == "invalid_request_error" and body["error"]["param"] == "messages"
        assert body["error"]["message"].startswith("chat template exceeded its limits")

        # A client that gives up before the answer: the render still ends within its budget.
        body = json.dumps({"messages": USER}).encode()
        for _ in range(3):
            with connect(s.url, timeout=5) as c:
                c.sendall(post_bytes("/v1/chat/completions", body))
                time.sleep(0.05)
            with pytest.raises((TimeoutError, socket.timeout)):
                raw(s.url, "POST", "/v1/chat/completions", {"messages": USER}, timeout=0.1)
        assert _no_handler_threads_within(2 * FAST), [t.name for t in _handler_threads()]

        status, _, body = raw(s.url, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
        assert status == 200, body
