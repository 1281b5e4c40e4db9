"""The acceptance run's timing on the rank side (``bench.rank.accept``): how a figure's
repeats are timed, without a process group."""
from __future__ import annotations

import math
import time

import pytest
import torch

from bench.rank import accept

CPU = torch.device("cpu")


def test_a_repeat_batches_calls_to_last_at_least_repeat_s(monkeypatch):
    """A call of two thirds of REPEAT_S is batched twice, not once: a repeat shorter than
    REPEAT_S spans few periods of a CPU quota, and its share of them is noise."""
    monkeypatch.setattr(accept, "REPEAT_S", 0.06)
    calls = []

    def work() -> None:
        calls.append(time.perf_counter())
        time.sleep(0.04)

    seconds = accept.timed_repeats(work, CPU, repeats=3)
    per_repeat = (len(calls) - 2) // 3          # two warm calls first
    assert len(calls) == 2 + 3 * per_repeat
    assert per_repeat == 2, per_repeat
    assert all(s * per_repeat >= accept.REPEAT_S for s in seconds), seconds


def test_every_repeat_starts_after_its_alignment(monkeypatch):
    """The device stage aligns the ranks before each repeat (a barrier): the alignment runs
    once per repeat, before that repeat's first call and after the previous one's last."""
    monkeypatch.setattr(accept, "REPEAT_S", 0.0)      # one call per repeat
    events: list[str] = []
    seconds = accept.timed_repeats(lambda: events.append("call"), CPU, repeats=4,
                                   align=lambda: events.append("align"))
    assert len(seconds) == 4
    assert events == ["call", "call"] + ["align", "call"] * 4


@pytest.mark.parametrize("one_call_s", [0.0, 1e-9, 0.3, 2.0])
def test_calls_per_repeat_stay_in_bounds(monkeypatch, one_call_s):
    """A call timed at nothing is batched at most MAX_CALLS times; one longer than
    REPEAT_S once."""
    ticks = iter([0.0, one_call_s] + [float(n) for n in range(10_000_000)])
    monkeypatch.setattr(accept.time, "perf_counter", lambda: next(ticks))
    count = []
    accept.timed_repeats(lambda: count.append(1), CPU, repeats=1)
    expected = accept.MAX_CALLS if one_call_s < accept.REPEAT_S / accept.MAX_CALLS else \
        max(1, math.ceil(accept.REPEAT_S / one_call_s))
    assert len(count) - 2 == expected
