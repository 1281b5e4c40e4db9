"""Buckets syncing at once: gloo runs each collective on one of its worker threads (two by
default), so on CPU a bucket's all-reduce starts at its hand-over while the one before it is
still under way. Calls that mostly wait overlap; calls that fill the link share it; every
call's CPU work comes out of backward while backward runs (issue 29)."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.analysis.prediction import (
    GLOO_WORKER_THREADS,
    Link,
    Timeline,
    _shared,
    predict_step,
)
from tests.test_predict_hooks import handed_over

# 1 GB/s of bus bandwidth, 2 ms a call: 10 MB fill the link for 10 ms at 2 nodes.
LINK = Link(busbw_Bps=1e9, latency_s=0.002)


def _events(trace: list, what: str) -> list[float]:
    return [t for kind, _, t in trace if kind == what]


def _two_buckets(sent: float, in_flight: int, cpus: int | None = 1) -> Timeline:
    # Bucket 0 handed over at 10 ms, bucket 1 at 11 ms, backward over at 11 ms.
    return Timeline((0.010, 0.011), (sent, sent), 0.012, compute_cpus=cpus,
                    in_flight=in_flight)


def test_a_bucket_starts_at_its_hand_over_while_the_one_before_syncs():
    trace: list = []
    predict_step(_two_buckets(1e3, 2), LINK, 2, trace)
    assert _events(trace, "sending") == pytest.approx([0.010, 0.011])
    # Two calls of 2 ms that mostly wait overlap: done at 12 and 13 ms, not 12 and 14.
    assert _events(trace, "done") == pytest.approx([0.012, 0.013], abs=1e-5)
    one_at_a_time: list = []
    predict_step(_two_buckets(1e3, 1), LINK, 2, one_at_a_time)
    assert _events(one_at_a_time, "sending") == pytest.approx([0.010, 0.012], abs=1e-5)
    assert _events(one_at_a_time, "done") == pytest.approx([0.012, 0.014], abs=1e-5)


def test_calls_that_fill_the_link_share_it():
    """Two 100 MB calls (100 ms of bytes each) at once end when they would one after the
    other: the link carries as many bytes a second either way."""
    at_once: list = []
    predict_step(_two_buckets(100e6, 2), LINK, 2, at_once)
    after: list = []
    predict_step(_two_buckets(100e6, 1), LINK, 2, after)
    assert max(_events(at_once, "done")) == pytest.approx(max(_events(after, "done")),
                                                          rel=0.03)
    # Sharing, bucket 0 ends later than alone, and no faster than the link allows.
    assert _events(at_once, "done")[0] > _events(after, "done")[0] + 0.05


def test_a_second_calls_cpu_work_comes_out_of_backward():
    """On one CPU: bucket 0 fills the link for 100 ms; bucket 1, 1 kB, handed over at 11
    ms, syncs at once beside it and its 1 ms of CPU comes out of backward, which goes on
    to 16 ms. One at a time it would wait for bucket 0, after backward."""
    link = dataclasses.replace(LINK, cpu_latency_s=0.001)
    timeline = Timeline((0.010, 0.011, 0.016), (100e6, 1e3, 1e3), 0.020, compute_cpus=1,
                        in_flight=2)
    both = predict_step(timeline, link, 2)
    alone = predict_step(dataclasses.replace(timeline, in_flight=1), link, 2)
    # Its 2 ms at half the CPU (the fair share; no measurement beside compute here).
    assert both.stolen_s == pytest.approx(alone.stolen_s + 0.001, abs=1e-4)


def test_on_gpus_and_for_a_serialized_hook_one_bucket_syncs_at_a_time():
    record = {"bucket_timeline": {"ready_s": [0.01, 0.02], "sent_bytes": [1e6, 1e6],
                                  "buffer_bytes": [2e6, 2e6], "step_s": 0.03, "steps": 5},
              "config": {"distributed": {"device": "cpu"}}, "env": {"torch_threads": 1}}
    assert Timeline.of(record).in_flight == GLOO_WORKER_THREADS == 2
    record["bucket_timeline"]["collective_threads"] = 4
    assert Timeline.of(record).in_flight == 4
    record["bucket_timeline"]["serialized"] = True
    assert Timeline.of(record).in_flight == 1
    record["bucket_timeline"]["serialized"] = False
    record["config"]["distributed"]["device"] = "cuda"
    assert Timeline.of(record).in_flight == 1


def test_sharing_is_whole_for_one_call_and_capped_by_the_link_and_the_cpus():
    assert _shared([(0.5, 100.0)], [0.05], 1) == 1.0          # one call: its own pace
    assert _shared([(0.1, 100.0), (0.1, 100.0)], [0.001, 0.001], 1) == 1.0  # 10% each
    assert _shared([(0.1, 100.0), (0.1, 100.0)], [0.008, 0.008], 1) == pytest.approx(1 / 1.6)
    assert _shared([(0.8, 100.0), (0.7, 100.0)], [0.0, 0.0], 1) == pytest.approx(1 / 1.5)


@given(st.lists(st.tuples(st.floats(0.001, 0.05), st.floats(0, 0.01), st.floats(1e3, 5e7)),
                min_size=1, max_size=6),
       st.sampled_from([1, 2, 3]), st.sampled_from([None, 1, 2]),
       st.floats(0, 0.01), st.floats(0, 2e-8))
def test_never_more_in_flight_than_the_threads_and_each_starts_in_order(
        gaps, in_flight, cpus, latency, cpu_per_byte):
    ready, issued, t = handed_over(gaps)
    timeline = Timeline(tuple(ready), tuple(sent for _, _, sent in gaps), t + 0.01,
                        compute_cpus=cpus, issued_s=tuple(issued), in_flight=in_flight)
    link = Link(busbw_Bps=1e9, latency_s=latency, cpu_latency_s=latency / 2,
                cpu_s_per_bus_byte=cpu_per_byte)
    trace: list = []
    p = predict_step(timeline, link, 2, trace)
    sending, done = _events(trace, "sending"), {b: t for k, b, t in trace if k == "done"}
    assert len(sending) == len(done) == len(gaps)
    assert sending == sorted(sending)
    for bucket, start in enumerate(sending):
        assert start >= issued[bucket] - 1e-9 and done[bucket] >= start - 1e-9
        syncing = sum(1 for b in range(bucket) if done[b] > start + 1e-9)
        assert syncing < in_flight
    assert p.step_s >= max(max(done.values()), timeline.backward_end_s) - 1e-9
