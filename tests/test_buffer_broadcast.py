"""DDP's broadcast of rank 0's buffers before every forward (issue 29): what the rank
records, and what the prediction charges for it on N nodes.

Measured on two emulated hosts at 5 Gbit/s (resnet18 at 32 px, batch 16, three interleaved
repeats): the forward pass took 14 ms longer with DDP's default ``broadcast_buffers`` than
without; the one-node run the prediction starts from has no peer to wait for.
"""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from bench.analysis.prediction import Link, Timeline, predict_step
from bench.rank.traffic import buffer_broadcasts

# 1 GB/s with 2 ms per call: what a buffer broadcast costs is nearly all latency.
LINK = Link(busbw_Bps=1e9, latency_s=0.002)


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _batchnorm_net() -> nn.Module:
    # Two BatchNorms: running mean and variance (float32, 16 channels each: 64 bytes per
    # tensor) and num_batches_tracked (int64, 8 bytes each).
    return nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.Linear(16, 16),
                         nn.BatchNorm1d(16))


def test_a_model_with_batchnorm_broadcasts_its_buffers_one_dtype_per_call(one_rank_group):
    ddp = DistributedDataParallel(_batchnorm_net())
    assert buffer_broadcasts(ddp) == [4 * 64, 2 * 8]


def test_a_model_without_buffers_or_with_the_broadcast_off_makes_none(one_rank_group):
    assert buffer_broadcasts(DistributedDataParallel(nn.Linear(4, 4))) == []
    with pytest.warns(FutureWarning):   # torch 2.14 renames the option; the old one still works
        ddp = DistributedDataParallel(_batchnorm_net(), broadcast_buffers=False)
    assert buffer_broadcasts(ddp) == []


@pytest.mark.parametrize("limit, expected", [
    (128, [128, 16, 128]),   # two float32 tensors of 64 bytes a call
    # A bucket closes once it reaches the limit, with the tensor that crossed it: 100
    # bytes still take two float32 tensors a call, not one.
    (100, [128, 16, 128]),
    (8, [64, 8, 64, 64, 8, 64]),   # every tensor alone
])
def test_buffers_past_ddps_bucket_size_take_more_calls(one_rank_group, limit, expected):
    ddp = DistributedDataParallel(_batchnorm_net())
    ddp.broadcast_bucket_size = limit
    assert sorted(buffer_broadcasts(ddp)) == sorted(expected)


def _timeline(broadcast=()) -> Timeline:
    # One bucket of 10 MB ready at 0.1 s, the step at 0.15 s; on a GPU (no CPU cost).
    return Timeline(ready_s=(0.1,), sent_bytes=(1e7,), step_s=0.15,
                    broadcast_bytes=tuple(broadcast))


def test_each_broadcast_waits_one_latency_and_its_bytes_per_tree_level():
    without = predict_step(_timeline(), LINK, 4)
    with_buffers = predict_step(_timeline([38400, 160]), LINK, 4)
    # Two calls, each 2 ms plus its bytes over log2(4) = 2 levels at 1 GB/s.
    expected = 2 * 0.002 + 2 * (38400 + 160) / 1e9
    assert with_buffers.buffers_s == pytest.approx(expected)
    assert with_buffers.step_s - without.step_s == pytest.approx(expected)
    # One node waits for no peer: its timeline holds its local copy already.
    assert predict_step(_timeline([38400, 160]), LINK, 1).step_s == pytest.approx(0.15)


def test_gradient_accumulation_broadcasts_once_a_step():
    """DDP skips the broadcast in a forward that follows one under no_sync (the earlier
    micro-batches run under it), so a step of 3 micro-batches broadcasts once."""
    accumulated = _timeline([1000]).accumulated(3)
    assert accumulated.broadcast_bytes == (1000,)
    assert predict_step(accumulated, LINK, 2).buffers_s == pytest.approx(0.002 + 1e-6)


def test_a_real_ddp_broadcasts_once_per_accumulated_step(one_rank_group):
    """What the model assumes, on torch itself: three forwards, the first two under
    no_sync as the trainer runs them, then a fourth that starts the next step."""
    ddp = DistributedDataParallel(_batchnorm_net())
    calls = []
    real = dist._broadcast_coalesced

    def spy(group, tensors, size, src):
        calls.append(len(tensors))
        return real(group, tensors, size, src)

    dist._broadcast_coalesced = spy
    try:
        for micro in range(3):
            if micro < 2:
                with ddp.no_sync():
                    ddp(torch.randn(4, 4)).sum().backward()
            else:
                ddp(torch.randn(4, 4)).sum().backward()
        assert len(calls) == 1
        ddp(torch.randn(4, 4)).sum().backward()
        assert len(calls) == 2
    finally:
        dist._broadcast_coalesced = real


def test_the_record_carries_the_broadcasts_and_older_records_have_none():
    rec = {"bucket_timeline": {"ready_s": [0.1], "sent_bytes": [1e7], "step_s": 0.15,
                               "broadcast_bytes": [38400, 160]}}
    assert Timeline.of(rec).broadcast_bytes == (38400, 160)
    del rec["bucket_timeline"]["broadcast_bytes"]
    assert Timeline.of(rec).broadcast_bytes == ()
    rec["bucket_timeline"]["broadcast_bytes"] = None   # the schema lets a record say null
    assert Timeline.of(rec).broadcast_bytes == ()


@pytest.mark.parametrize("value, accepted", [
    ([38400, 160], True), ([], True), (None, True),
    (["38400"], False), ([-1], False), ([[1]], False), ([1e300], False), ([True], False),
])
def test_the_schema_takes_only_byte_counts(value, accepted):
    """Records are untrusted: what reaches Timeline.of has passed the schema, and the
    schema takes a list of non-negative integers (or null) and nothing else."""
    from bench import record
    from tests.test_predict import _record

    rec = _record(1, "none", 1e6, 100.0)
    rec["bucket_timeline"]["broadcast_bytes"] = value
    assert (record.problem_of(rec) is None) is accepted


@given(sizes=st.lists(st.integers(0, 10**9), max_size=8),
       nodes=st.integers(1, 64), latency=st.floats(0, 1), busbw=st.floats(1e3, 1e12))
def test_the_charge_is_never_negative_and_zero_on_one_node(sizes, nodes, latency, busbw):
    link = Link(busbw_Bps=busbw, latency_s=latency)
    p = predict_step(dataclasses.replace(_timeline(), broadcast_bytes=tuple(sizes)), link,
                     nodes)
    base = predict_step(_timeline(), link, nodes)
    assert math.isfinite(p.step_s) and p.buffers_s >= 0
    assert p.step_s == pytest.approx(base.step_s + p.buffers_s)
    if nodes == 1 or not sizes:
        assert p.buffers_s == 0


def test_a_real_ddp_forward_runs_after_the_recorded_broadcasts(one_rank_group):
    """What the function reports is what DDP really broadcasts: the forward of a BatchNorm
    net calls the coalesced broadcast with exactly those tensors."""
    ddp = DistributedDataParallel(_batchnorm_net())
    seen = []
    real = dist._broadcast_coalesced

    def spy(group, tensors, size, src):
        seen.append(sorted(t.numel() * t.element_size() for t in tensors))
        return real(group, tensors, size, src)

    dist._broadcast_coalesced = spy
    try:
        ddp(torch.randn(4, 4))
    finally:
        dist._broadcast_coalesced = real
    assert len(seen) == 1 and sum(seen[0]) == sum(buffer_broadcasts(ddp))
