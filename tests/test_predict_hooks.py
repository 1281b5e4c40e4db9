"""The prediction model's comm-hook terms: the hook's own work (measured on one rank,
between its hand-over and its end), its several collectives, and backward waiting for the
previous bucket where the hook is serialized (PowerSGD on gloo)."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.analysis.prediction import Link, Timeline, _without_hook_draw, predict_step

# 1 GB/s, no latency: a bucket of 10 MB takes 10 ms at 2 nodes (bus factor 1).
LINK = Link(busbw_Bps=1e9)


def _record(hook: str = "powersgd", serialized: bool = True, device: str = "cpu",
            issued=(0.105, 0.205), done=(0.125, 0.245)) -> dict:
    return {"allreduce_calls_per_step": 6, "env": {"torch_threads": 1},
            "config": {"distributed": {"device": device, "comm_hook": hook}},
            "bucket_timeline": {"ready_s": [0.1, 0.2], "issued_s": list(issued),
                                "done_s": list(done), "sent_bytes": [1e6, 1e6],
                                "step_s": 0.3, "serialized": serialized}}


def test_the_hooks_work_is_read_from_the_one_rank_timeline():
    timeline = Timeline.of(_record(device="cuda"))
    # On a GPU: done - issued, from the later of issued and the previous bucket's end.
    assert timeline.hook_s == pytest.approx((0.02, 0.04))
    assert timeline.calls_per_bucket == 3
    assert timeline.handover_s == (0.105, 0.205)
    # The tail starts after the one rank's last hook: 0.3 - 0.245.
    assert timeline.tail_s == pytest.approx(0.055)


def test_on_cpu_the_hook_beside_backward_counts_at_its_fair_share():
    """Bucket 0's hook ran from 0.105 to 0.125 while backward still ran (until 0.205) on
    the one CPU: it had half of it, so 10 ms of work. Bucket 1's ran alone: 40 ms."""
    timeline = Timeline.of(_record(device="cpu"))
    assert timeline.compute_cpus == 1
    assert timeline.hook_s == pytest.approx((0.01, 0.04))


@pytest.mark.parametrize("serialized", [False, True])
def test_a_free_link_gives_back_the_one_rank_step(serialized):
    """The one-rank step already ran bucket 0's hook beside backward (0.105-0.125, half the
    CPU each): backward alone reached bucket 1 10 ms sooner. The model starts from backward
    alone and charges the hook where it runs, so with nothing to send (an endless link)
    it gives back the step it started from; counted twice, it said 10 ms more."""
    timeline = Timeline.of(_record(device="cpu", serialized=serialized))
    assert timeline.ready_s == pytest.approx((0.1, 0.19))
    assert timeline.step_s == pytest.approx(0.29) and timeline.tail_s == pytest.approx(0.055)
    free = Link(busbw_Bps=1e18)
    assert predict_step(timeline, free, 2).step_s == pytest.approx(0.3, abs=1e-6)


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 0.5)), min_size=1, max_size=20),
       st.lists(st.floats(0, 2), min_size=1, max_size=10), st.integers(1, 8))
def test_the_draw_taken_out_is_each_stretch_of_hook_work_beside_backward(buckets, times,
                                                                         cpus):
    """Bisection over the stretches gives what summing every one of them gives."""
    issued = tuple(sorted(i for i, _ in buckets))
    done = tuple(i + d for i, (_, d) in zip(issued, buckets, strict=True))
    undrawn = _without_hook_draw(issued, done, cpus)
    stretches, previous = [], 0.0
    for issue, finish in zip(issued, done, strict=True):
        start = max(issue, previous)
        stretches.append((start, max(start, min(finish, issued[-1]))))
        previous = max(previous, finish)
    for t in times:
        beside = sum(max(0.0, min(t, end) - start) for start, end in stretches)
        assert undrawn(t) == pytest.approx(t - beside / (cpus + 1), abs=1e-12)


def test_on_gpus_the_hook_takes_nothing_from_backward():
    timeline = Timeline.of(_record(device="cuda"))
    assert timeline.ready_s == (0.1, 0.2) and timeline.step_s == 0.3


def test_the_hooks_work_lengthens_the_step_where_it_is_exposed():
    with_hook = Timeline.of(_record(device="cuda", serialized=False))
    without = dataclasses.replace(with_hook, hook_s=(0.0, 0.0))
    longer = predict_step(with_hook, LINK, 2).step_s - predict_step(without, LINK, 2).step_s
    # The last bucket's 40 ms of hook work comes after backward: all of it shows.
    assert longer == pytest.approx(0.04, abs=1e-6)


def test_three_collectives_per_bucket_pay_three_latencies():
    timeline = Timeline((0.1,), (3e6,), 0.1, calls_per_bucket=3.0)
    one_call = dataclasses.replace(timeline, calls_per_bucket=1.0)
    slow = Link(busbw_Bps=1e9, latency_s=0.01)
    # 3 MB at 1 GB/s is 3 ms either way; three calls add two more 10 ms latencies.
    assert predict_step(timeline, slow, 2).step_s - predict_step(one_call, slow, 2).step_s \
        == pytest.approx(0.02)


def test_a_serialized_hook_holds_backward_at_the_next_bucket():
    """Bucket 0 (ready 0.1) takes 150 ms to sync; bucket 1 is ready at 0.2. Serialized,
    backward waits at 0.2 until bucket 0 is done (0.25), then hands bucket 1 over; not
    serialized, backward goes on and bucket 1 waits in the queue instead."""
    base = Timeline((0.1, 0.2), (150e6, 1e6), 0.3, issued_s=(0.1, 0.2), hook_s=(0.0, 0.0),
                    done_last_s=0.2)
    free = predict_step(base, LINK, 2)
    held = predict_step(dataclasses.replace(base, serialized=True), LINK, 2)
    assert free.stolen_s == pytest.approx(0.0)
    assert held.stolen_s == pytest.approx(0.05)   # backward ended at 0.25, not 0.2
    # Either way bucket 1 starts at 0.25 and ends at 0.251: the step is the same here...
    assert held.step_s == pytest.approx(free.step_s)
    # ...but backward's own work after the barrier now comes later: with 0.1 s more of it
    # after bucket 1's ready, the held step is 50 ms longer.
    later = dataclasses.replace(base, ready_s=(0.1, 0.2), issued_s=(0.1, 0.3), step_s=0.4,
                                done_last_s=0.3)
    assert predict_step(dataclasses.replace(later, serialized=True), LINK, 2).step_s \
        - predict_step(later, LINK, 2).step_s == pytest.approx(0.05)


def test_records_without_issued_times_keep_the_hook_in_the_gaps():
    rec = _record()
    del rec["bucket_timeline"]["issued_s"]
    timeline = Timeline.of(rec)
    assert timeline.hook_s is None and timeline.issued_s is None
    assert timeline.tail_s == pytest.approx(0.1)   # after the last ready, as before


def test_four_emulated_hosts_on_two_cpus_have_half_a_cpu_each(monkeypatch):
    from bench.host import netlab

    monkeypatch.setattr(netlab.os, "cpu_count", lambda: 2)
    assert netlab.Lab(4, 10**9).cpu_share == 0.5
    assert netlab.Lab(2, 10**9).cpu_share == 1.0
    assert netlab.Lab(4, 10**9).env()["BENCH_LINK_CPU_SHARE"] == "0.5"


@pytest.mark.parametrize(("value", "share"), [("0.5", 0.5), ("1", 1.0), ("0", None),
                                               ("nan", None), ("2", None), ("x", None)])
def test_the_record_carries_the_cpu_share_only_when_it_is_one(monkeypatch, value, share):
    from bench import provenance

    monkeypatch.setenv("BENCH_LINK_RATE", "1gbit")
    monkeypatch.setenv("BENCH_LINK_CPU_SHARE", value)
    assert provenance.link().get("cpu_share") == share


def test_on_half_a_cpu_gloos_cpu_work_takes_twice_as_long():
    """A CPU-bound all-reduce (the wire is fast, gloo's copies are not) after backward:
    at half a CPU it takes twice the time."""
    link = Link(busbw_Bps=1e12, cpu_s_per_bus_byte=1e-9)
    timeline = Timeline((0.1,), (50e6,), 0.1, compute_cpus=1)
    whole = predict_step(timeline, link, 2)
    half = predict_step(dataclasses.replace(timeline, cpu_share=0.5), link, 2)
    assert whole.step_s == pytest.approx(0.15)
    assert half.step_s == pytest.approx(0.2)
    rec = {"config": {"distributed": {"device": "cpu"}}, "env": {
        "torch_threads": 1, "link": {"rate": "1gbit", "rate_bps": 10**9, "kind": "emulated",
                                     "cpu_share": 0.5}},
           "bucket_timeline": {"ready_s": [0.1], "sent_bytes": [1.0], "step_s": 0.1}}
    assert Timeline.of(rec).cpu_share == 0.5


def _events(trace, what):
    return [t for kind, _, t in trace if kind == what]


def test_the_trace_sets_the_serialized_wait_where_the_model_puts_it():
    """The held example above, traced: backward reaches bucket 1 at 0.2, waits for bucket
    0 (done at 0.25), and only then does its 0.1 s of work before the hand-over (0.35)."""
    base = Timeline((0.1, 0.2), (150e6, 1e6), 0.4, issued_s=(0.1, 0.3), hook_s=(0.0, 0.0),
                    done_last_s=0.3, serialized=True)
    trace: list = []
    held = predict_step(base, LINK, 2, trace)
    assert held == predict_step(base, LINK, 2)          # tracing changes nothing
    assert _events(trace, "ready") == pytest.approx([0.1, 0.2])
    assert _events(trace, "done") == pytest.approx([0.25, 0.351])
    assert _events(trace, "issued") == pytest.approx([0.1, 0.35])
    assert _events(trace, "sending") == pytest.approx([0.1, 0.35])


def handed_over(gaps) -> tuple[list[float], list[float], float]:
    """Each bucket's ready and hand-over times from (gap before it, hook's part, ...)
    tuples, one after the other, and where the last hand-over is."""
    ready, issued, t = [], [], 0.0
    for gap, hook_part, *_ in gaps:
        t += gap
        ready.append(t)
        t += hook_part
        issued.append(t)
    return ready, issued, t


@given(st.lists(st.tuples(st.floats(0.001, 0.2), st.floats(0, 0.05), st.floats(1e3, 5e7)),
                min_size=1, max_size=6),
       st.floats(0, 0.1), st.booleans(), st.sampled_from([None, 1, 4]),
       st.lists(st.floats(1e3, 1e7), max_size=2))
def test_the_traced_marks_keep_order_and_end_where_the_step_says(gaps, tail, serialized,
                                                                 cpus, broadcasts):
    """Any timeline: each bucket has one event of each kind, ready <= issued <= sending <=
    done, buckets are sent in order, and the step is the later of the last hand-over and
    the last done, after the forward's broadcasts, plus the tail."""
    ready, issued, t = handed_over(gaps)
    timeline = Timeline(tuple(ready), tuple(sent for _, _, sent in gaps), t + tail,
                        calls_per_bucket=3.0 if serialized else 1.0, compute_cpus=cpus,
                        issued_s=tuple(issued), hook_s=tuple(0.001 for _ in gaps),
                        done_last_s=t, serialized=serialized,
                        broadcast_bytes=tuple(broadcasts))
    trace: list = []
    p = predict_step(timeline, Link(busbw_Bps=1e9, latency_s=1e-4), 2, trace)
    assert p == predict_step(timeline, Link(busbw_Bps=1e9, latency_s=1e-4), 2)
    kinds = ("ready", "issued", "sending", "done")
    for bucket in range(len(gaps)):
        marks = [[t for kind, b, t in trace if kind == what and b == bucket] for what in kinds]
        assert all(len(m) == 1 for m in marks)
        r, i, s, d = (m[0] for m in marks)
        assert r <= i + 1e-9 and i <= s + 1e-9 and s <= d + 1e-9
        if bucket:
            assert s >= _events(trace, "done")[bucket - 1] - 1e-9
    end = max(_events(trace, "issued")[-1], _events(trace, "done")[-1])
    assert p.step_s == pytest.approx(end + timeline.tail_s, abs=1e-9)
