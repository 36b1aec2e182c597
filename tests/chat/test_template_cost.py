"""The budget is the rendering thread's CPU time, grown with the input: a render that waits for
a core spends nothing, and a long conversation gets the time its size needs."""
from __future__ import annotations

import time

import pytest

from localinfer.chat import sandbox as template_sandbox
from localinfer.chat.sandbox import RENDER_CPU_SECONDS, Budget, LimitedEnvironment, running_under


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
