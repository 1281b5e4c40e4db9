"""The acceptance run's timing on the rank side (``bench.rank.accept``): how a figure's
repeats are timed and aligned, on one process (no process group)."""
from __future__ import annotations

import math

import pytest
import torch

from bench.accept_config import AcceptConfig
from bench.rank import accept
from bench.rank.distributed import DistContext

CPU = torch.device("cpu")


def fake_clock(monkeypatch, first_call_s: float, later_call_s: float):
    """``accept.time.perf_counter`` advanced by the calls only: the first timed call takes
    ``first_call_s``, every later one ``later_call_s``. Returns the log of calls and the
    call to time."""
    now = [0.0]
    log: list[str] = []

    class Clock:
        @staticmethod
        def perf_counter() -> float:
            return now[0]

    def call() -> None:
        log.append("call")
        # the warm call and the timed one take first_call_s; the repeats later_call_s
        now[0] += first_call_s if len(log) <= 2 else later_call_s

    monkeypatch.setattr(accept, "time", Clock)
    return log, call


@pytest.mark.parametrize("one_call_s, calls", [
    (0.0, accept.MAX_CALLS),      # a call timed at nothing: at most MAX_CALLS
    (1e-9, accept.MAX_CALLS),
    (0.3, 2),                     # 0.6 s, not 0.3 s
    (0.4, 2),                     # ceil, not round or int: 0.8 s, not 0.4 s
    (0.2, 3),
    (2.0, 1),                     # longer than REPEAT_S: once
])
def test_a_repeat_batches_calls_to_last_at_least_repeat_s(monkeypatch, one_call_s, calls):
    """A repeat shorter than REPEAT_S spans few periods of a CPU quota, and its share of
    them is noise: a call of 0.4 s is batched twice (0.8 s), not once."""
    assert accept.REPEAT_S == 0.5
    log, call = fake_clock(monkeypatch, one_call_s, one_call_s)
    timed = accept.timed_repeats(call, CPU, repeats=3)
    assert len(log) == 2 + 3 * calls
    assert len(timed.seconds) == 3 and len(timed.cpus) == 3
    if calls < accept.MAX_CALLS:
        assert calls * one_call_s >= accept.REPEAT_S
        assert math.ceil(accept.REPEAT_S / one_call_s) == calls


@pytest.mark.parametrize("shares", [(1.0, 1.0, 1.0), (1.0, 0.25, 1.0), (0.4, 0.4, 0.4),
                                    (1.0, 3e-5, 1.0)])   # a rank stopped for most of one
def test_each_repeat_records_the_cpu_time_the_process_got(monkeypatch, shares):
    """A repeat in which other load or a quota held the rank off its CPU for part of the
    time records that part: the CPU seconds of the process over the repeat's wall seconds,
    each repeat its own (a blip in one repeat is not spread over the others)."""
    log, call = fake_clock(monkeypatch, 0.25, 0.25)
    cpu = [0.0]
    repeat_of_call = {}     # call number -> repeat (the warm and timing calls: none)
    for repeat in range(3):
        for k in range(2):
            repeat_of_call[3 + 2 * repeat + k] = repeat

    def timed_call() -> None:
        call()
        repeat = repeat_of_call.get(len(log))
        cpu[0] += 0.25 * (shares[repeat] if repeat is not None else 1.0)

    monkeypatch.setattr(accept, "_process_cpu_s", lambda: cpu[0])
    timed = accept.timed_repeats(timed_call, CPU, repeats=3)
    assert timed.seconds == [0.25] * 3
    assert timed.cpus == pytest.approx(list(shares))
    assert timed.cpu_field() == {"cpus": pytest.approx(list(shares), rel=1e-3)}
    assert all(c > 0 for c in timed.cpu_field()["cpus"])     # the schema's figures are > 0


def test_a_repeat_of_no_wall_time_records_no_cpu_time(monkeypatch):
    """A clock that did not move gives no share; the figure then carries no ``cpus``
    rather than a division by zero or a share of nothing."""
    _, call = fake_clock(monkeypatch, 0.0, 0.0)
    timed = accept.timed_repeats(call, CPU, repeats=2)
    assert timed.cpus == [None, None] and timed.cpu_field() == {}


def test_every_repeat_starts_after_its_alignment():
    """The alignment runs once per repeat, before that repeat's first call and after the
    previous one's last (the warm and the timing call come before any)."""
    events: list[str] = []
    accept.timed_repeats(lambda: events.append("call"), CPU, repeats=4,
                         align=lambda: events.append("align"))
    calls = (len(events) - 2 - 4) // 4
    assert events == ["call", "call"] + (["align"] + ["call"] * calls) * 4


def one_rank() -> DistContext:
    return DistContext(rank=0, local_rank=0, world_size=1, local_world_size=1, node_rank=0,
                       device=CPU, backend="gloo")


def tiny() -> AcceptConfig:
    return AcceptConfig.from_args(["--stages", "device", "--device", "cpu", "--repeats", "2",
                                   "--matmul-size", "16", "--memory-size", "1MiB",
                                   "--train-steps", "1", "--train-batch", "2"])


def test_the_device_stage_aligns_every_repeat_of_every_figure(monkeypatch):
    monkeypatch.setattr(accept, "REPEAT_S", 0.0)
    barriers = []
    monkeypatch.setattr(accept, "barrier", lambda ctx: barriers.append(ctx.rank))
    (mine,) = accept.device_stage(tiny(), one_rank())
    assert list(mine["figures"]) == accept.figure_names(CPU)
    assert len(barriers) == 2 * len(mine["figures"])
    assert "not aligned" not in mine["note"]
    # On the CPU, each figure's repeats carry the CPU time the rank got, and the record its
    # threads: what the verdict judges the figures per CPU of time by.
    assert mine["threads"] == torch.get_num_threads()
    for figure in mine["figures"].values():
        assert len(figure["cpus"]) == len(figure["values"]) == 2
        assert all(0 < c <= 2 * mine["threads"] + 1 for c in figure["cpus"]), figure


def test_ranks_timing_different_figures_are_not_aligned_and_say_so(monkeypatch):
    """A CPU rank beside CUDA ranks (gloo) would pass fewer barriers than they do and hang
    the stage: no repeat is aligned then, and the note says why."""
    monkeypatch.setattr(accept, "REPEAT_S", 0.0)
    barriers = []
    monkeypatch.setattr(accept, "barrier", lambda ctx: barriers.append(ctx.rank))
    gathered = iter([[accept.figure_names(CPU),
                      [*accept.figure_names(CPU), "host-to-device pinned"]]])
    monkeypatch.setattr(accept, "all_gather_objects",
                        lambda ctx, obj: next(gathered, [obj]))
    (mine,) = accept.device_stage(tiny(), one_rank())
    assert barriers == []
    assert "repeats not aligned across ranks" in mine["note"], mine["note"]
    assert "2 different sets of figures" in mine["note"]


def test_the_figure_names_follow_the_device():
    assert accept.figure_names(CPU) == ["matmul fp32", "memory bandwidth", "training"]
