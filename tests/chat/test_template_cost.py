"""No single call inside a chat template outruns the budget, and the budget is the rendering
thread's CPU time: each slow call is refused (or bounded) before it runs, so it stops within a
fraction of the CPU limit, and a render that waits for a core spends nothing."""
from __future__ import annotations

import time

import pytest

from localinfer.chat import sandbox as template_sandbox
from localinfer.chat.sandbox import RENDER_CPU_SECONDS, Budget, LimitedEnvironment, running_under
from localinfer.chat.template import ChatTemplate, ChatTemplateError

USER = [{"role": "user", "content": "hi"}]
CJK = "".join(chr(0x4E00 + i) for i in range(3000))  # 3000 distinct characters: punycode's worst case

# Each is one call that, unchecked, holds a core for seconds to hours, with the words its error
# must name. CPU seconds before the cost checks (2-core x86, busy): punycode 31, idna, wordwrap(1)
# of one long word, and sorting, searching, counting or comparing a list of one long string
# shared a million times each > 12 (stopped there); wordwrap(1) over 2 MB 1.7.
SLOW_CALLS = {
    "punycode": ("{{ (cjk * 20).encode('punycode') }}", "codec 'punycode'"),
    "idna (punycode per label)": ("{{ (cjk * 20).encode('idna') }}", "codec 'idna'"),
    "codec named by an alias": ("{{ (cjk * 20).encode('PUNYCODE') }}", "codec"),
    "namereplace (30 characters per character)": ("{{ ('\u4e00' * 1000000).encode('ascii', 'namereplace') }}",
                                                  "error handler 'namereplace'"),
    "wordwrap(1) over 2 MB": ("{{ ('x ' * 1000000)|wordwrap(1) }}", "wordwrap of more than"),
    "wordwrap(1) of one long word": ("{{ ('a' * 1000000)|wordwrap(1) }}", "wordwrap of more than"),
    "str.center": ("{{ 'x'.center(10**8) }}", "characters"),
    "printf width": ("{{ '%99999999s' % 'x' }}", "characters"),
    "str.format width": ("{{ '{:>99999999}'.format('x') }}", "characters"),
    "split into more items than allowed": ("{{ ('a,' * 2000000).split(',')|length }}", "items"),
    "sort of one long string shared": ("{% set s = 'x' * 4000000 %}{{ ([s] * 1000000)|sort|length }}", "characters"),
    "unique of one long string shared": ("{% set s = 'x' * 4000000 %}{{ ([s] * 1000000)|unique|list|length }}",
                                         "characters"),
    "in over one long string shared": ("{% set s = 'x' * 4000000 %}{% set t = s[:-1] ~ 'y' %}"
                                       "{{ t in [s] * 1000000 }}", "characters"),
    "== of lists of equal long strings": ("{% set s = 'x' * 4000000 %}{% set t = s[:-1] ~ 'x' %}"
                                              "{{ [s] * 1000000 == [t] * 1000000 }}", "characters"),
    "'in' test over one long string shared": ("{% set s = 'x' * 4000000 %}{% set t = s[:-1] ~ 'y' %}"
                                              "{{ t is in ([s] * 1000000) }}", "characters"),
    "list.count of one long string shared": ("{% set s = 'x' * 4000000 %}{% set t = s[:-1] ~ 'y' %}"
                                             "{{ ([s] * 1000000).count(t) }}", "characters"),
    "pprint (quadratic in nesting)": ("{{ [[[[1]]]]|pprint }}", "No filter named 'pprint'"),
}


@pytest.mark.parametrize("source, names", SLOW_CALLS.values(), ids=SLOW_CALLS.keys())
def test_a_slow_call_is_refused_before_it_runs(source, names):
    t = ChatTemplate(source)
    start = time.thread_time()
    with pytest.raises(ChatTemplateError, match="chat template") as e:
        t.render(USER, cjk=CJK)
    spent = time.thread_time() - start
    assert names in str(e.value) and "\n" not in str(e.value)
    assert spent < RENDER_CPU_SECONDS, f"{spent:.2f} s of CPU time"  # refused, not interrupted


def test_many_linear_calls_stop_at_the_budget():
    """Calls that each go through a long string add up: the work is counted, not only the steps."""
    source = "{% set s = 'x' * 4000000 %}{% for i in range(100000) %}{{ s.count('y') }}{{ 'y' in s }}{% endfor %}"
    start = time.thread_time()
    with pytest.raises(ChatTemplateError, match="characters and items in all"):
        ChatTemplate(source).render(USER)
    assert time.thread_time() - start < RENDER_CPU_SECONDS


def test_honest_calls_still_run():
    source = ("{{ 'h\u00e9'.encode('utf-8')|length }} {{ 'h\u00e9'.encode('latin1').decode('LATIN-1') }} "
              "{{ 'a b'.split()|length }} {{ 'a,b,c'.split(',', 1) }} {{ 'x'.encode('ascii', 'xmlcharrefreplace') }} "
              "{{ ['a', 'b'].index('b') }} {{ 'b' in ['a', 'b'] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} "
              "{{ 'k' in {'k': 1} }} {{ 2 in range(3) }} {{ 'ab' not in 'xaby' }} {{ [1, [2]] == [1, [2]] }} "
              "{{ 'tab wrap'|wordwrap(3) }} {{ 'b' is in 'abc' }} {{ 1 is eq 1 }} "
              "{{ 1 > 2 > nope.x }}")  # as in Python's chain, nope.x is never evaluated
    assert ChatTemplate(source).render(USER) == (
        "3 h\u00e9 2 ['a', 'b,c'] b'x' 1 True True False True True False True tab\nwra\np True True False")


def test_the_budget_is_cpu_time_not_waiting():
    """A render that waits (for a core on a busy machine, here for a sleep) spends none of its
    CPU budget: under the old wall-clock deadline this render failed."""
    env = LimitedEnvironment(extra_globals={"wait": lambda: time.sleep(0.03)})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(template_sandbox, "RENDER_CPU_SECONDS", 0.1)
        with running_under(Budget()) as budget:  # 160 steps: the CPU clock is read a few times
            template = env.from_string("{% for i in range(40) %}{{ wait() }}{{ i }}{% endfor %}")
            assert template.render() == "".join(f"None{i}" for i in range(40))
        assert budget.steps_left < template_sandbox.MAX_STEPS - 3 * template_sandbox.CPU_CHECK_STEPS


def test_the_cpu_budget_grows_with_the_input():
    """The CPU allowance comes from the input's size, never from this machine's speed."""
    many = [{"role": "user", "content": f"m{i}"} for i in range(20000)]
    small, large = Budget.for_input({"messages": many[:1]}), Budget.for_input({"messages": many})
    assert small.cpu_seconds < RENDER_CPU_SECONDS * 1.01
    assert large.cpu_seconds > small.cpu_seconds + 20000 * 4 * template_sandbox.CPU_SECONDS_PER_INPUT_ITEM
