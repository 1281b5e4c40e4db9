"""The prediction formula against hand-computed cases, and the CLI around it."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import record
from bench.analysis.prediction import Link, Timeline, levers, predict_step, scaling
from tests.conftest import REPO

GBIT = Link.nominal(1_000_000_000)          # 125e6 bytes/s, no latency


def test_one_bucket_cannot_hide():
    # Ready at 0.1 s, step ends 0.05 s after it; 125 MB at 125 MB/s over 2 nodes = 1 s.
    timeline = Timeline(ready_s=(0.1,), sent_bytes=(125e6,), step_s=0.15)
    p = predict_step(timeline, GBIT, 2)
    assert p.comm_s == pytest.approx(1.0)
    assert p.step_s == pytest.approx(0.1 + 1.0 + 0.05)
    assert p.exposed_s == pytest.approx(1.0) and p.hidden_share == pytest.approx(0.0)
    # 4 nodes: the ring moves 2(4-1)/4 = 1.5x the bytes.
    assert predict_step(timeline, GBIT, 4).step_s == pytest.approx(0.1 + 1.5 + 0.05)
    assert predict_step(timeline, GBIT, 1).step_s == pytest.approx(0.15)


def test_an_early_bucket_hides_behind_backward():
    # Bucket 0 (0.1 s of traffic) is ready at 0.1 s and done at 0.2 s, long before bucket 1
    # is ready at 0.5 s; bucket 1 then takes 0.1 s; the optimizer's 0.1 s follows.
    timeline = Timeline(ready_s=(0.1, 0.5), sent_bytes=(12.5e6, 12.5e6), step_s=0.6)
    p = predict_step(timeline, GBIT, 2)
    assert p.step_s == pytest.approx(0.7)
    assert p.comm_s == pytest.approx(0.2) and p.exposed_s == pytest.approx(0.1)
    assert p.hidden_share == pytest.approx(0.5)


def test_buckets_queue_behind_each_other():
    # Both ready at once: 0.1 s each, one after the other.
    timeline = Timeline(ready_s=(0.5, 0.5), sent_bytes=(12.5e6, 12.5e6), step_s=0.5)
    assert predict_step(timeline, GBIT, 2).step_s == pytest.approx(0.7)


def test_latency_is_paid_per_all_reduce():
    # PowerSGD: 3 all-reduces per bucket of 1 MB each: 3 x (10 ms + 1e6 / 125e6 s) = 54 ms.
    link = Link.nominal(1_000_000_000, latency_s=0.010)
    timeline = Timeline(ready_s=(0.2,), sent_bytes=(3e6,), step_s=0.2, calls_per_bucket=3)
    assert predict_step(timeline, link, 2).step_s == pytest.approx(0.2 + 0.054)


def test_speedup_and_efficiency():
    timeline = Timeline(ready_s=(0.1,), sent_bytes=(125e6,), step_s=0.15)
    s = scaling(timeline, GBIT, 2, samples_per_step_node=16)
    assert s.samples_per_s == pytest.approx(32 / 1.15)
    assert s.speedup == pytest.approx((32 / 1.15) / (16 / 0.15))
    assert s.efficiency == pytest.approx(s.speedup / 2)


def test_lever_timelines():
    timeline = Timeline(ready_s=(0.1, 0.4), sent_bytes=(10.0, 30.0), step_s=0.5)
    accumulated = timeline.accumulated(4)          # 3 more forward+backward of 0.4 s first
    assert accumulated.ready_s == pytest.approx((1.3, 1.6))
    assert accumulated.step_s == pytest.approx(1.7)
    doubled = timeline.scaled_batch(2)              # compute doubles, the 0.1 s tail does not
    assert doubled.ready_s == pytest.approx((0.2, 0.8)) and doubled.step_s == pytest.approx(0.9)
    assert timeline.compressed(0.5).sent_bytes == (5.0, 15.0)


def test_link_from_an_allreduce_record():
    # 4 ranks: each moves 2(4-1)/4 = 1.5x the 64 MB message; 48 ms of CPU for it.
    rec = {"world_size": 4, "env": {"link": {"rate_bps": 10**9}},
           "sizes": [{"size_bytes": 1024, "time_s": 0.002, "cpu_time_s": 0.001,
                      "busbw_GBps": 0.0005},
                     {"size_bytes": 64_000_000, "time_s": 0.8, "cpu_time_s": 0.048,
                      "busbw_GBps": 0.12}]}
    link = Link.from_allreduce(rec)
    # The latency: the 1 KiB message's time less its own wire time (1.5 x 1024 B / busbw).
    assert link.latency_s == pytest.approx(0.002 - 1.5 * 1024 / 0.12e9)
    assert link.busbw_Bps == pytest.approx(0.12e9)
    assert link.rate_bps == 10**9 and link.efficiency == pytest.approx(0.96)
    assert link.cpu_latency_s == 0.001
    assert link.cpu_s_per_bus_byte == pytest.approx(0.048 / (1.5 * 64e6))
    # 2 nodes, 10 MB: 1 ms + 0.5 ns/byte x 1 x 10 MB = 6 ms.
    assert link.allreduce_cpu_s(10e6, 2) == pytest.approx(0.006)
    # The planned upgrade: the same efficiency, latency and CPU cost on a 5 Gbit wire.
    upgrade = link.at_rate(5 * 10**9)
    assert upgrade.busbw_Bps == pytest.approx(5e9 / 8 * 0.96)
    assert (upgrade.latency_s, upgrade.cpu_s_per_bus_byte) == \
        (link.latency_s, link.cpu_s_per_bus_byte)
    # Records from before the sweep measured CPU time: no CPU cost.
    for size in rec["sizes"]:
        del size["cpu_time_s"]
    assert Link.from_allreduce(rec).allreduce_cpu_s(10e6, 2) == 0


# 12.5 MB takes 0.1 s on the 1 Gbit wire (2 nodes) and 0.08 s of one CPU.
BUSY_GBIT = dataclasses.replace(GBIT, cpu_s_per_bus_byte=0.08 / 12.5e6)


def test_all_reduce_cpu_work_slows_backward_on_one_cpu():
    timeline = Timeline(ready_s=(0.1, 0.3), sent_bytes=(12.5e6, 12.5e6), step_s=0.4,
                        compute_cpus=1)
    p = predict_step(timeline, BUSY_GBIT, 2)
    # From 0.1 s bucket 0 wants 0.8 of the CPU and gets half: its 0.08 s of CPU take
    # 0.16 s (done at 0.26 s), while backward runs at half speed (0.08 s of work done).
    # Backward's last 0.12 s then run alone: it ends at 0.38 s, 0.08 s late. Bucket 1 has
    # the CPU to itself (0.8 of it): wire speed, 0.38 to 0.48 s. The optimizer: 0.58 s.
    assert p.step_s == pytest.approx(0.58)
    assert p.stolen_s == pytest.approx(0.08) and p.exposed_s == pytest.approx(0.1)
    assert p.comm_s == pytest.approx(0.16 + 0.1)
    # On a GPU the same all-reduces cost backward nothing: 0.1-0.2 s, 0.3-0.4 s, then 0.1 s.
    on_gpu = dataclasses.replace(timeline, compute_cpus=None)
    assert predict_step(on_gpu, BUSY_GBIT, 2).step_s == pytest.approx(0.5)


# Measured beside compute: 12.5 MB took 0.125 s there and 0.1 s of the compute's CPU.
BESIDE = Link(busbw_Bps=1e8, cpu_s_per_bus_byte=0.1 / 12.5e6)


def test_what_was_measured_beside_compute_replaces_the_fair_share():
    timeline = Timeline(ready_s=(0.1, 0.3), sent_bytes=(12.5e6, 12.5e6), step_s=0.4,
                        compute_cpus=1)
    link = dataclasses.replace(BUSY_GBIT, beside=BESIDE)
    p = predict_step(timeline, link, 2)
    # Bucket 0 beside backward, as measured: 0.1-0.225 s, taking 0.8 of the CPU, so
    # backward does 0.025 s of work meanwhile (not the fair share's half). Its last 0.175 s
    # alone: it ends at 0.4 s, 0.1 s late. Bucket 1 has the CPU to itself (the sweep alone):
    # 0.4-0.5 s. The optimizer: 0.6 s.
    assert p.step_s == pytest.approx(0.6) and p.stolen_s == pytest.approx(0.1)
    assert p.comm_s == pytest.approx(0.125 + 0.1)
    # Without the measurement, the fair share (test above): 0.58 s.
    assert predict_step(timeline, BUSY_GBIT, 2).step_s == pytest.approx(0.58)
    # On a GPU neither is charged.
    on_gpu = dataclasses.replace(timeline, compute_cpus=None)
    assert predict_step(on_gpu, link, 2).step_s == pytest.approx(0.5)


def test_a_faster_wire_cannot_take_more_than_every_cpu():
    timeline = Timeline(ready_s=(0.1, 0.3), sent_bytes=(12.5e6, 12.5e6), step_s=0.4,
                        compute_cpus=1)
    fast = dataclasses.replace(BUSY_GBIT, beside=BESIDE).faster(10)
    assert fast.beside is not None and fast.beside.busbw_Bps == pytest.approx(1e9)
    p = predict_step(timeline, fast, 2)
    # Beside backward bucket 0 would take 0.0125 s but loses it 0.1 s of compute: it takes
    # the whole CPU for 0.1 s, and backward waits (ends at 0.4 s). Bucket 1 alone is
    # CPU-bound: 0.08 s. Then the 0.1 s tail.
    assert p.stolen_s == pytest.approx(0.1) and p.step_s == pytest.approx(0.58)


def test_the_link_beside_compute_is_read_from_the_sweep_and_moves_with_it():
    rows = [{"size_bytes": 1024, "time_s": 0.002, "cpu_time_s": 0.001, "busbw_GBps": 0.0005,
             "beside_compute": {"time_s": 0.004, "compute_lost_s": 0.0015}},
            {"size_bytes": 64_000_000, "time_s": 0.8, "cpu_time_s": 0.048, "busbw_GBps": 0.12,
             "beside_compute": {"time_s": 1.0, "compute_lost_s": 0.096}}]
    rec = {"world_size": 4, "env": {"link": {"rate_bps": 10**9}}, "sizes": rows}
    beside = Link.from_allreduce(rec).beside
    assert beside is not None and "beside compute" in beside.source
    # Its own figures: the times there, and the compute lost as the CPU cost.
    assert beside.busbw_Bps == pytest.approx(1.5 * 64e6 / 1.0)
    assert beside.latency_s == pytest.approx(0.004 - 1.5 * 1024 / (1.5 * 64e6))
    assert beside.cpu_latency_s == 0.0015
    assert beside.cpu_s_per_bus_byte == pytest.approx(0.096 / (1.5 * 64e6))
    upgrade = Link.from_allreduce(rec).at_rate(5 * 10**9)
    assert upgrade.beside is not None and upgrade.beside.rate_bps == 5 * 10**9
    assert upgrade.beside.busbw_Bps == pytest.approx(beside.busbw_Bps * 5)
    # A sweep that did not measure every size beside compute has no such link.
    del rows[0]["beside_compute"]
    assert Link.from_allreduce(rec).beside is None


def test_the_band_ends_take_the_extremes_beside_compute_too():
    from bench.analysis.predict import LinkRange

    def sweep(latency_beside: float, lost: float) -> dict:
        return _sweep([{"size_bytes": 1024, "time_s": 0.001, "cpu_time_s": 0.0005,
                        "busbw_GBps": 0.001,
                        "beside_compute": {"time_s": latency_beside, "compute_lost_s": lost}},
                       {"size_bytes": 50_000_000, "time_s": 0.5, "cpu_time_s": 0.04,
                        "busbw_GBps": 0.1,
                        "beside_compute": {"time_s": 0.6, "compute_lost_s": 0.05}}])

    calm, busy = sweep(0.002, 0.001), sweep(0.003, 0.0005)
    calm["lockstep"] = [{"compute_s": 0.3, "wait_s": 0.002, "syncs": 12}]
    busy["lockstep"] = [{"compute_s": 0.3, "wait_s": 0.009, "syncs": 12}]
    links = LinkRange.of_sweeps([calm, busy])
    # The slow end waits as long as the sweep that waited most, the fast end the least.
    assert links.slow.lockstep == ((0.3, 0.009),) and links.fast.lockstep == ((0.3, 0.002),)
    slow, fast = links.slow.beside, links.fast.beside
    assert slow is not None and fast is not None
    assert slow.latency_s > fast.latency_s and slow.cpu_latency_s == 0.001
    assert fast.cpu_latency_s == 0.0005
    # One sweep without it: the ends have none, as the point (the latest) has.
    links = LinkRange.of_sweeps([sweep(0.002, 0.001), _sweep(
        [{"size_bytes": 1024, "time_s": 0.001, "cpu_time_s": 0.0005, "busbw_GBps": 0.001}])])
    assert links.slow.beside is None and links.point.beside is None


def test_the_sync_wait_is_read_from_the_lockstep_probe():
    link = dataclasses.replace(GBIT, lockstep=((0.1, 0.002), (0.4, 0.012)), lockstep_ranks=2)
    assert link.sync_wait_s(0.05, 2) == pytest.approx(0.001)     # in proportion below
    assert link.sync_wait_s(0.2, 2) == pytest.approx(0.002 + 0.01 / 3)   # between
    assert link.sync_wait_s(0.8, 2) == pytest.approx(0.024)      # in proportion above
    # Four nodes wait for the slowest of four: 1.03 / 0.56 of the two-rank figure.
    assert link.sync_wait_s(0.4, 4) == pytest.approx(0.012 * 1.0294 / 0.5642, rel=1e-3)
    assert link.sync_wait_s(0.4, 1) == 0 and GBIT.sync_wait_s(0.4, 2) == 0


def test_expected_maxima_of_normal_draws():
    from bench.analysis.prediction import expected_max_normal

    # Tabulated values (Harter 1961): 2 draws 0.5642, 3 0.8463, 4 1.0294, 10 1.5388.
    for count, value in [(2, 0.5642), (3, 0.8463), (4, 1.0294), (10, 1.5388)]:
        assert expected_max_normal(count) == pytest.approx(value, abs=1e-4)
    assert expected_max_normal(1) == 0


def test_each_sync_waits_for_the_slowest_rank_and_what_follows_moves():
    timeline = Timeline(ready_s=(0.1, 0.3), sent_bytes=(0.0, 0.0), step_s=0.4)
    # No buffers: the stretch to the gradient sync is the whole step (the 0.1 s tail of
    # the step before, then forward and backward): 0.4 s, late by a tenth of it.
    slowest, late = timeline.slowest_rank(lambda stretch: 0.1 * stretch)
    assert late == pytest.approx(0.04)
    assert slowest.ready_s == pytest.approx((0.1 + 0.04 / 3, 0.34))
    assert slowest.step_s == pytest.approx(0.44) and slowest.tail_s == pytest.approx(0.1)
    # With buffers the step has two syncs: the broadcast ends the tail's stretch.
    with_buffers = dataclasses.replace(timeline, broadcast_bytes=(100.0,))
    assert with_buffers.slowest_rank(lambda stretch: 0.1 * stretch)[1] == pytest.approx(0.03)
    # Serialized (PowerSGD on gloo): backward waits at every bucket, each a sync.
    serialized = dataclasses.replace(timeline, serialized=True)
    slowest, late = serialized.slowest_rank(lambda stretch: 0.1 * stretch)
    # Stretches: 0.1 + 0.1 (the tail before) = 0.2 s, then 0.2 s: 0.02 s late at each.
    assert late == pytest.approx(0.04) and slowest.ready_s == pytest.approx((0.12, 0.34))


def test_only_the_last_syncs_wait_falls_after_a_ranks_backward():
    """A rank's own backward ends before the slowest rank's; it waits that lateness out in
    the gradient sync. Only the last sync's: a serialized bucket's wait falls inside
    backward, the buffer broadcast's before forward."""
    timeline = Timeline(ready_s=(0.1, 0.3), sent_bytes=(0.0, 0.0), step_s=0.4)
    link = dataclasses.replace(GBIT, lockstep=((0.4, 0.04),), lockstep_ranks=2)
    plain = predict_step(timeline, link, 2)
    assert plain.skew_after_backward_s == pytest.approx(plain.skew_s) == pytest.approx(0.04)
    # Buffers: 0.3 s of compute to the gradient sync (0.03 late), 0.1 s to the broadcast.
    buffered = predict_step(dataclasses.replace(timeline, broadcast_bytes=(100.0,)), link, 2)
    assert buffered.skew_s == pytest.approx(0.04)
    assert buffered.skew_after_backward_s == pytest.approx(0.03)
    # Serialized: 0.02 s late at each of two buckets; the last one's after backward.
    serialized = predict_step(dataclasses.replace(timeline, serialized=True), link, 2)
    assert serialized.skew_s == pytest.approx(0.04)
    assert serialized.skew_after_backward_s == pytest.approx(0.02)
    assert predict_step(timeline, GBIT, 2).skew_after_backward_s == 0   # no probe
    assert predict_step(timeline, link, 1).skew_after_backward_s == 0   # no peer


def test_the_prediction_charges_the_lockstep_waits():
    timeline = Timeline(ready_s=(0.1, 0.3), sent_bytes=(0.0, 0.0), step_s=0.4)
    link = dataclasses.replace(GBIT, lockstep=((0.4, 0.04),), lockstep_ranks=2)
    two, four = predict_step(timeline, link, 2), predict_step(timeline, link, 4)
    assert two.skew_s == pytest.approx(0.04) and two.step_s == pytest.approx(0.44)
    assert four.skew_s == pytest.approx(0.04 * 1.0294 / 0.5642, rel=1e-3)
    # With buffers: 0.3 s to the gradient sync, 0.1 s (the optimizer) to the broadcast.
    buffered = dataclasses.replace(timeline, broadcast_bytes=(100.0,))
    assert predict_step(buffered, link, 2).skew_s == pytest.approx(0.04)
    assert predict_step(timeline, GBIT, 2).skew_s == 0      # no probe, no charge
    rec = _sweep([{"size_bytes": 1024, "time_s": 0.001, "busbw_GBps": 0.001}])
    rec["lockstep"] = [{"compute_s": 0.3, "wait_s": 0.006, "syncs": 12},
                       {"compute_s": 0.01, "wait_s": 0.001, "syncs": 40}]
    measured = Link.from_allreduce(rec)
    assert measured.lockstep == ((0.01, 0.001), (0.3, 0.006)) and measured.lockstep_ranks == 2


def test_a_workloads_own_lockstep_probe_scales_its_waits_and_no_others():
    from bench.analysis.prediction import workload_key

    resnet = workload_key("resnet18", 32, 16, 4096, 8, "fp32")
    assert resnet == ("resnet18", 32, 16, None, None, "fp32")   # width, depth: the mlp's only
    # Matmuls wait 3 ms after 0.04 s and 0.8 ms after 0.16 s, as noisy as two hosts of one
    # CPU read them; resnet18's own 0.2 s steps 12 ms: its every stretch waits in proportion
    # to its length, whatever the matmuls' curve does there.
    link = dataclasses.replace(GBIT, lockstep=((0.04, 0.003), (0.16, 0.0008)),
                               lockstep_ranks=2, workload_lockstep=((resnet, 0.2, 0.012),))
    assert link.sync_wait_s(0.2, 2, resnet) == pytest.approx(0.012)
    assert link.sync_wait_s(0.1, 2, resnet) == pytest.approx(0.006)
    assert link.sync_wait_s(0.04, 2, resnet) == pytest.approx(0.0024)
    assert link.sync_wait_s(0.4, 4, resnet) == pytest.approx(0.024 * 1.0294 / 0.5642, rel=1e-3)
    # Another workload, or none named: the matmuls' waits.
    other = workload_key("resnet18", 32, 32, None, None, "fp32")
    assert link.sync_wait_s(0.1, 2, other) == pytest.approx(0.0019)
    assert link.sync_wait_s(0.1, 2) == pytest.approx(0.0019)
    # The workload's probe alone: its wait in proportion to the stretch.
    alone = dataclasses.replace(link, lockstep=())
    assert alone.sync_wait_s(0.1, 2, resnet) == pytest.approx(0.006)
    assert alone.sync_wait_s(0.1, 2, other) == 0 and alone.sync_wait_s(0.1, 1, resnet) == 0


@given(st.lists(st.floats(1e-4, 1.0), min_size=1, max_size=8),
       st.floats(1e-3, 1.0), st.floats(0.0, 0.1), st.integers(2, 16))
def test_a_probed_workloads_step_waits_as_long_cut_into_stretches_as_whole(
        stretches, probe_compute, probe_wait, nodes):
    """The slowest rank's lead grows with the compute since the last sync: a serialized
    hook's several hand-overs a step wait, in all, what one sync after the whole would."""
    from bench.analysis.prediction import workload_key

    resnet = workload_key("resnet18", 32, 32, None, None, "fp32")
    link = dataclasses.replace(GBIT, lockstep=((0.04, 0.003), (0.16, 0.0008)),
                               lockstep_ranks=2,
                               workload_lockstep=((resnet, probe_compute, probe_wait),))
    parts = sum(link.sync_wait_s(stretch, nodes, resnet) for stretch in stretches)
    assert parts == pytest.approx(link.sync_wait_s(sum(stretches), nodes, resnet), rel=1e-9,
                                  abs=1e-15)


def test_the_sweeps_workload_probe_reaches_the_prediction_of_that_workload():
    from bench.analysis.prediction import workload_of

    rec = _sweep([{"size_bytes": 1024, "time_s": 0.001, "busbw_GBps": 0.001}])
    rec["lockstep"] = [{"compute_s": 0.1, "wait_s": 0.002, "syncs": 40}]
    rec["lockstep_workload"] = {"model": "resnet18", "image_size": 32, "batch_size": 16,
                                "mlp_width": None, "mlp_depth": None, "compute_s": 0.1,
                                "wait_s": 0.006, "syncs": 25}
    link = Link.from_allreduce(rec)
    run = _record(1, "none", 0.0, 100.0)
    run["config"]["model"].update(model="resnet18", image_size=32)
    run["precision"] = "fp32"
    timeline = Timeline.of(run)
    assert timeline.workload == workload_of(run) == link.workload_lockstep[0][0]
    # The one 0.15 s step (no buffers): the matmuls' 3 ms, three times over for resnet18.
    assert predict_step(timeline, link, 2).skew_s == pytest.approx(0.009)
    bigger = dataclasses.replace(timeline, workload=workload_of({**run,
                                                                 "batch_size_per_device": 32}))
    assert predict_step(bigger, link, 2).skew_s == pytest.approx(0.003)


def test_hosts_in_phase_stretch_the_one_node_timeline_of_their_workload_on_cpu():
    from bench.analysis.predict import LinkRange
    from bench.analysis.prediction import workload_of

    def sweep(pairs: list[list[float]]) -> dict:
        rec = _sweep([{"size_bytes": 1024, "time_s": 1e-9, "busbw_GBps": 1e6}])
        rec["lockstep_workload"] = {"model": "resnet18", "image_size": 32, "batch_size": 16,
                                    "mlp_width": None, "mlp_depth": None, "compute_s": 0.1,
                                    "wait_s": 0.0, "syncs": 25, "phase_pairs": pairs}
        return rec

    # Pairs of (in phase, out of phase): ratios 1.1, 1.2 and 1.0; their median, 1.1.
    link = Link.from_allreduce(sweep([[0.22, 0.2], [0.24, 0.2], [0.2, 0.2]]))
    run = _record(1, "none", 0.0, 100.0)
    run["config"]["model"].update(model="resnet18", image_size=32)
    run["precision"] = "fp32"
    timeline = dataclasses.replace(Timeline.of(run), compute_cpus=1)
    assert link.in_phase_factor(workload_of(run)) == pytest.approx(1.1)
    # A link that costs nothing: the N-node step is the one-node step, 1.1 times as long.
    assert predict_step(timeline, link, 2).step_s == pytest.approx(1.1 * timeline.step_s)
    # Another workload, GPUs (their compute is not the hosts' CPUs), one node: as measured.
    other = dataclasses.replace(timeline, workload=workload_of({**run,
                                                                "batch_size_per_device": 32}))
    assert predict_step(other, link, 2).step_s == pytest.approx(timeline.step_s)
    on_gpu = dataclasses.replace(timeline, compute_cpus=None)
    assert predict_step(on_gpu, link, 2).step_s == pytest.approx(timeline.step_s)
    assert predict_step(timeline, link, 1).step_s == pytest.approx(timeline.step_s)
    # Over sweeps: the point the median sweep's, the band's ends the slowest and fastest.
    links = LinkRange.of_sweeps([sweep([[0.26, 0.2]]), sweep([[0.2, 0.2]]),
                                 sweep([[0.22, 0.2]])])
    key = workload_of(run)
    assert links.point.in_phase_factor(key) == pytest.approx(1.1)
    assert links.slow.in_phase_factor(key) == pytest.approx(1.3)
    assert links.fast.in_phase_factor(key) == pytest.approx(1.0)


def test_the_optimizer_in_phase_stretches_the_tail_and_forward_and_backward_their_own():
    """A probe that timed the optimizer apart: forward and backward are each pair's step
    less its optimizer (in phase over out: 0.9 / 0.9 and 0.2 / 0.2: 1.0), the
    optimizer its own (0.1 / 0.05 and 0.09 / 0.06, median 1.75): the one-node timeline's
    backward keeps its pace, its tail (the optimizer) takes 1.75 times as long."""
    from bench.analysis.predict import LinkRange
    from bench.analysis.prediction import workload_of

    def sweep(steps: list[list[float]], optimizer: list[list[float]]) -> dict:
        rec = _sweep([{"size_bytes": 1024, "time_s": 1e-9, "busbw_GBps": 1e6}])
        rec["lockstep_workload"] = {"model": "resnet18", "image_size": 32, "batch_size": 16,
                                    "mlp_width": None, "mlp_depth": None, "compute_s": 0.1,
                                    "wait_s": 0.0, "syncs": 25, "phase_pairs": steps,
                                    "optimizer_phase_pairs": optimizer}
        return rec

    rec = sweep([[1.0, 0.95], [0.29, 0.26]], [[0.1, 0.05], [0.09, 0.06]])
    assert record.problem_of(rec) is None
    link = Link.from_allreduce(rec)
    run = _record(1, "none", 0.0, 100.0)
    run["config"]["model"].update(model="resnet18", image_size=32)
    run["precision"] = "fp32"
    key = workload_of(run)
    assert link.in_phase_factor(key) == pytest.approx(1.0)
    assert link.in_phase_tail_factor(key) == pytest.approx(1.75)
    timeline = dataclasses.replace(Timeline.of(run), compute_cpus=1)
    assert timeline.tail_s > 0
    # A link that costs nothing: the one-node step, its tail 1.75 times as long.
    assert predict_step(timeline, link, 2).step_s == pytest.approx(
        timeline.step_s + 0.75 * timeline.tail_s)
    # A sweep whose probe did not time the optimizer apart: its steps' ratio for both.
    older = Link.from_allreduce(sweep([[1.1, 1.0]], []))
    assert older.in_phase_factor(key) == older.in_phase_tail_factor(key) == pytest.approx(1.1)
    # Over sweeps: each figure's median sweep for the point, the slowest and fastest ends.
    links = LinkRange.of_sweeps([sweep([[1.0, 1.0]], [[0.2, 0.1]]),
                                 sweep([[1.0, 1.0]], [[0.1, 0.1]]),
                                 sweep([[1.0, 1.0]], [[0.15, 0.1]])])
    assert links.point.in_phase_tail_factor(key) == pytest.approx(1.5)
    assert links.slow.in_phase_tail_factor(key) == pytest.approx(2.0)
    assert links.fast.in_phase_tail_factor(key) == pytest.approx(1.0)


def test_a_stretched_timeline_keeps_its_buckets_apart_from_its_tail():
    timeline = Timeline((0.1, 0.2), (1e6, 1e6), 0.3, issued_s=(0.11, 0.22),
                        hook_s=(0.01, 0.02), done_last_s=0.25)
    assert timeline.tail_s == pytest.approx(0.05)
    both = timeline.stretched(1.1, 2.0)
    # Backward's compute and the hook's chains at 1.1; its synchronous parts (0.01, 0.02)
    # and the optimizer at 2: bucket 1 is reached after 0.19 of compute and bucket 0's
    # part, 0.209 + 0.02; the last chain (0.03) follows bucket 1's hand-over.
    assert both.ready_s == pytest.approx((0.11, 0.229))
    assert both.issued_s == pytest.approx((0.13, 0.269))
    assert both.done_last_s == pytest.approx(0.269 + 0.033)
    assert both.hook_s == pytest.approx((0.011, 0.022))
    assert both.tail_s == pytest.approx(0.1) and both.step_s == pytest.approx(0.402)
    # Without the hook's split (a record from before it): every bucket time at 1.1.
    bare = Timeline((0.1, 0.2), (1e6, 1e6), 0.3).stretched(1.1, 2.0)
    assert bare.ready_s == pytest.approx((0.11, 0.22))
    assert bare.tail_s == pytest.approx(0.2) and bare.step_s == pytest.approx(0.42)
    assert timeline.stretched(1.1) == timeline.stretched(1.1, 1.1)
    assert timeline.stretched(1.1).step_s == pytest.approx(0.33)
    assert timeline.stretched(1.0, 1.0) is timeline


_SPANS = st.lists(st.tuples(st.floats(1e-4, 0.05), st.floats(0.0, 0.02), st.floats(0.0, 0.02)),
                  min_size=1, max_size=6)


def _timeline_of(spans: list[tuple[float, float, float]], chain: float, tail: float
                 ) -> Timeline:
    """Backward's thread as (compute up to a bucket, its synchronous part, its chain's work)
    per bucket, the last chain ``chain`` after the last hand-over, then ``tail``."""
    ready, issued, at = [], [], 0.0
    for compute, part, _ in spans:
        ready.append(at + compute)
        issued.append(ready[-1] + part)
        at = issued[-1]
    done_last = at + chain
    return Timeline(tuple(ready), tuple(1e6 for _ in spans), done_last + tail,
                    issued_s=tuple(issued), hook_s=tuple(work for *_, work in spans),
                    done_last_s=done_last)


@given(_SPANS, st.floats(0.0, 0.02), st.floats(1e-4, 0.05), st.floats(0.5, 2.0),
       st.floats(0.5, 2.0))
def test_a_stretch_paces_compute_and_chains_by_one_ratio_and_the_rest_by_the_other(
        spans, chain, tail, factor, tail_factor):
    timeline = _timeline_of(spans, chain, tail)
    both = timeline.stretched(factor, tail_factor)
    # Built again from the same parts, each at its own pace, it is the same timeline.
    paced = _timeline_of([(c * factor, p * tail_factor, w * factor) for c, p, w in spans],
                         chain * factor, tail * tail_factor)
    assert both.ready_s == pytest.approx(paced.ready_s)
    assert both.issued_s == pytest.approx(paced.issued_s)
    assert both.hook_s == pytest.approx(paced.hook_s)
    assert both.done_last_s == pytest.approx(paced.done_last_s)
    assert both.step_s == pytest.approx(paced.step_s)
    assert both.tail_s == pytest.approx(tail * tail_factor)
    # One ratio for all: every time that many times as long.
    even = timeline.stretched(factor, factor)
    assert even.issued_s == pytest.approx(tuple(t * factor for t in timeline.issued_s))
    assert even.step_s == pytest.approx(timeline.step_s * factor)


def test_a_cpu_bound_all_reduce_is_slower_than_the_wire():
    # 0.2 s of CPU for 0.1 s of wire: alone it takes its CPU time.
    link = dataclasses.replace(GBIT, cpu_s_per_bus_byte=0.2 / 12.5e6)
    timeline = Timeline(ready_s=(0.1,), sent_bytes=(12.5e6,), step_s=0.1, compute_cpus=1)
    assert predict_step(timeline, link, 2).step_s == pytest.approx(0.3)


def test_more_cpus_leave_backward_more():
    timeline = Timeline(ready_s=(0.1, 0.3), sent_bytes=(12.5e6, 12.5e6), step_s=0.4,
                        compute_cpus=2)
    # Two compute threads and gloo's on 2 CPUs: gloo gets at most 2/3 of a CPU, so bucket 0
    # takes 0.08 / (2/3) = 0.12 s; backward runs at (2 - 2/3) / 2 = 2/3 speed meanwhile
    # (0.08 s of work), ends 0.12 s later at 0.34 s; bucket 1 0.34-0.44 s; step 0.54 s.
    p = predict_step(timeline, BUSY_GBIT, 2)
    assert p.step_s == pytest.approx(0.54) and p.stolen_s == pytest.approx(0.04)


def test_the_timeline_knows_where_it_computed():
    rec = _record(1, "none", 1.0, 1.0)
    assert Timeline.of(rec).compute_cpus is None
    rec["config"]["distributed"]["device"] = "cpu"
    rec["env"] = {"torch_threads": 3}
    assert Timeline.of(rec).compute_cpus == 3


REFERENCE = REPO / "results" / "reference" / "emulated-cpu"


def _reference(name: str) -> dict:
    """The first record of a committed reference file: a real, schema-valid record (the
    readers skip anything else)."""
    return json.loads((REFERENCE / name).read_text().splitlines()[0])


def _record(nnodes: int, hook: str, sent: float, samples_per_s: float) -> dict:
    """A real single-node resnet18 record, changed into the run a test describes: on a GPU
    (no CPU cost charged), one bucket ready at 0.1 s of a 0.15 s step."""
    rec = _reference("1gbit.jsonl")
    rec["config"]["distributed"].update(device="cuda", grad_accum=1)
    rec["env"].update(link={"rate": "1gbit", "rate_bps": 10**9, "kind": "emulated"}
                      if nnodes > 1 else None, nnodes=nnodes)
    rec.update(nnodes=nnodes, nproc_per_node=1, world_size=nnodes, comm_hook=hook,
               batch_size_per_device=16, global_batch_size=16 * nnodes,
               samples_per_s=samples_per_s, allreduce_calls_per_step=1,
               bucket_timeline={"ready_s": [0.1], "sent_bytes": [sent], "buffer_bytes": [1],
                                "step_s": 0.15, "steps": 5})
    return rec


def _sweep(sizes: list[dict]) -> dict:
    """A real 2-rank all-reduce record on a 1 Gbit link, with these message sizes."""
    rec = _reference("1gbit-comm.jsonl")
    rec["sizes"] = [{"count": row["size_bytes"] // 4, "algbw_GBps": row["busbw_GBps"],
                     "wrong": 0, **row} for row in sizes]
    return rec


def test_the_test_records_are_valid():
    from bench import record

    for rec in (_record(1, "none", 1.0, 1.0), _record(2, "powersgd", 1.0, 1.0),
                _sweep([{"size_bytes": 1024, "time_s": 0.001, "busbw_GBps": 0.001}])):
        assert record.problem_of(rec) is None


def test_levers_name_compression_when_the_link_dominates():
    rec = _record(1, "none", 125e6, 100)
    ranked = levers(rec, GBIT, 2, {"powersgd": _record(1, "powersgd", 0.5e6, 100)})
    assert ranked[0].name == "comm-hook powersgd"
    assert [lever.name for lever in ranked][-1] == "as measured"


def test_cli_puts_the_measurement_beside_the_prediction(tmp_path):
    results = tmp_path / "runs.jsonl"
    # Predicted 2-node rate: 32 / 1.15 = 27.83 samples/s; measured 25.
    lines = [_record(1, "none", 125e6, 106.7), _record(2, "none", 125e6, 25.0)]
    results.write_text("".join(json.dumps(r) + "\n" for r in lines))
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(results),
                           "--link", "1gbit", "--nodes", "2"], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # One repeat, a nominal link: the band is the point.
    assert cells[1] == "1150.0 [1150.0-1150.0]" and cells[2] == "27.8 [27.8-27.8]"
    assert cells[8] == "25.0 (n=1)" and cells[9] == f"{25.0 / (32 / 1.15):.2f}"
    assert cells[10] == "outside band (below)"
    assert "band: none, the point alone (1 ok 1-node repeat; the link adds no width: a " \
        "nominal link): run the 1-node cell again (bench matrix --repeats 3)" in proc.stdout
    assert "most help:" in proc.stdout


def test_cli_without_a_single_node_run_is_a_user_error(tmp_path):
    results = tmp_path / "runs.jsonl"
    results.write_text(json.dumps(_record(2, "none", 1.0, 1.0)) + "\n")
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(results),
                           "--link", "1gbit"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "single-node" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(results),
                           "--link", "fast"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "--link=fast" in proc.stderr


def test_cli_needs_a_link(tmp_path):
    results = tmp_path / "runs.jsonl"
    results.write_text(json.dumps(_record(1, "none", 1.0, 1.0)) + "\n")
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(results)],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "--link" in proc.stderr and "--link-from" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(results),
                           "--link-from", str(results), "--latency", "0.001"],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "--latency=0.001" in proc.stderr \
        and "drop --latency" in proc.stderr


def test_cli_moves_a_measured_link_to_the_planned_rate(tmp_path):
    results, comm = tmp_path / "runs.jsonl", tmp_path / "comm.jsonl"
    rec = _record(1, "none", 125e6, 106.7)
    rec["config"]["distributed"]["device"] = "cpu"
    results.write_text(json.dumps(rec) + "\n")
    # Measured on 1 Gbit: 0.9 Gbit/s busbw (90%), 40 ms of CPU per 50 MB.
    sweep = _sweep([{"size_bytes": 1024, "time_s": 0.001, "cpu_time_s": 0.0005,
                     "busbw_GBps": 0.001},
                    {"size_bytes": 50_000_000, "time_s": 50e6 / 0.1125e9,
                     "cpu_time_s": 0.04, "busbw_GBps": 0.1125}])
    assert sweep["world_size"] == 2 and sweep["env"]["link"]["rate_bps"] == 10**9
    comm.write_text(json.dumps(sweep) + "\n")
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(results),
                           "--link-from", str(comm), "--link", "5gbit", "--nodes", "2"],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "5 Gbit/s at the 90% efficiency" in proc.stdout
    assert "0.50 ms per call + 0.80 ns per byte moved (taken from backward's CPUs)" \
        in proc.stdout


def test_the_median_repeat_stands_for_the_setup():
    from bench.analysis.predict import single_node_runs

    repeats = [_repeat(step) for step in (0.16, 0.20, 0.17, 0.18)]
    (chosen,) = single_node_runs(repeats).values()
    # The record is the lower middle in samples/s (the slower of the middle steps 0.17 and
    # 0.18); its step is the median of the four.
    assert chosen["samples_per_s"] == pytest.approx(16 / 0.18)
    assert chosen["bucket_timeline"]["step_s"] == pytest.approx(0.175)


def test_each_time_of_the_point_timeline_is_its_median_over_the_repeats():
    """Backward and the hook's work vary apart: the point takes each time's median, so one
    repeat's slow hook or slow backward does not come along with its step."""
    from bench.analysis.predict import single_node_runs

    # (ready, issued = done, step): hooks of 30, 80 and 50 ms; the middle step (0.19 s)
    # has the slowest hook.
    parts = [(0.10, 0.13, 0.16), (0.11, 0.19, 0.19), (0.12, 0.17, 0.21)]
    repeats = []
    for ready, issued, step in parts:
        rec = _repeat(step, sent=1e5, hook="powersgd")
        rec["bucket_timeline"].update(ready_s=[ready], issued_s=[issued], done_s=[issued])
        repeats.append(rec)
    (chosen,) = single_node_runs(repeats).values()
    timeline = chosen["bucket_timeline"]
    assert (*timeline["ready_s"], *timeline["issued_s"], *timeline["done_s"],
            timeline["step_s"]) == pytest.approx((0.11, 0.17, 0.17, 0.19))
    assert Timeline.of(chosen).hook_s == (0.0,) and Timeline.of(chosen).issued_s == (0.17,)
    # Repeats whose buckets differ in number keep the middle repeat's own times.
    repeats[0]["bucket_timeline"].update(ready_s=[0.05, 0.10], issued_s=[0.06, 0.13],
                                         done_s=[0.06, 0.13], sent_bytes=[5e4, 5e4])
    timeline = next(iter(single_node_runs(repeats).values()))["bucket_timeline"]
    assert (timeline["ready_s"], timeline["issued_s"]) == ([0.11], [0.19])


def test_the_median_repeat_is_ranked_by_the_step_the_prediction_starts_from():
    """A one-process run trains without DDP: its samples/s leaves the comm hook's work out.
    The repeat the point starts from is the median by its timeline's step, which holds it."""
    from bench.analysis.predict import single_node_runs

    # The median by samples/s (390) had the slowest hook; the median step is 0.070 s.
    repeats = [_record(1, "powersgd", 1e5, rate) for rate in (400.0, 390.0, 380.0)]
    for rec, step in zip(repeats, (0.060, 0.090, 0.070), strict=True):
        rec["bucket_timeline"]["step_s"] = step
    (chosen,) = single_node_runs(repeats).values()
    assert (chosen["bucket_timeline"]["step_s"], chosen["samples_per_s"]) == (0.070, 380.0)


@pytest.mark.parametrize("stamped_by", [None, "host_clock", "cuda_events"])
def test_a_gpu_timeline_must_come_from_cuda_events(tmp_path, stamped_by):
    """On a GPU the host clock stamps when the CPU queued a bucket, not when the GPU had
    it: such a timeline hides the overlap, so predict skips it and says why."""
    gpu = _record(1, "none", 125e6, 106.7)
    gpu["peak_memory_kind"] = "cuda_max_allocated"
    if stamped_by:
        gpu["bucket_timeline"]["stamped_by"] = stamped_by
    results = tmp_path / "runs.jsonl"
    results.write_text(json.dumps(gpu) + "\n")
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(results),
                           "--link", "1gbit", "--nodes", "2"], cwd=REPO, capture_output=True,
                          text=True)
    if stamped_by == "cuda_events":
        assert proc.returncode == 0, proc.stderr
        assert "skipped" not in proc.stderr
    else:
        assert proc.returncode == 2
        assert "1 GPU record(s) skipped" in proc.stderr and "CUDA events" in proc.stderr


def _repeat(step_s: float, sent: float = 125e6, hook: str = "none") -> dict:
    """A single-node repeat whose step took ``step_s`` (one bucket ready at 0.1 s), with the
    samples/s that step gives, so that the median by samples/s is the median step."""
    rec = _record(1, hook, sent, 16 / step_s)
    rec["bucket_timeline"]["step_s"] = step_s
    return rec


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_no_lever_is_superlinear(nodes):
    # Almost nothing to send: every lever scales nearly linearly, and accumulation (4x the
    # samples per step for 3 more backwards of 0.1 s, not 4x the 0.15 s step) does more on
    # one node already. Against the plain run, its row would have read superlinear.
    rec = _repeat(0.15, sent=1e3)
    ranked = levers(rec, GBIT, nodes, {"powersgd": _repeat(0.12, sent=1e2, hook="powersgd")})
    plain = 16 / 0.15
    accum = next(lever for lever in ranked if lever.name == "grad-accum 4")
    assert accum.samples_per_s / plain > nodes       # the old row's "speedup"
    for lever in ranked:
        assert lever.speedup <= nodes * (1 + 1e-9), lever.name
        assert lever.speedup == pytest.approx(lever.samples_per_s / lever.base_samples_per_s)


def test_each_lever_has_its_own_one_node_baseline():
    rec, other = _repeat(0.15, sent=12.5e6), _repeat(0.12, sent=1e6, hook="powersgd")
    by_name = {lever.name: lever for lever in levers(rec, GBIT, 4, {"powersgd": other})}
    timeline = Timeline.of(rec)
    accum = by_name["grad-accum 4"]
    # 4 micro-batches of 16 on one node: 64 samples per 0.15 + 3 x 0.1 s, estimated.
    assert accum.base_samples_per_s == pytest.approx(
        4 * 16 / predict_step(timeline.accumulated(4), GBIT, 1).step_s)
    assert accum.base_samples_per_s == pytest.approx(64 / 0.45)
    assert accum.base_samples_per_s != pytest.approx(16 / 0.15) and accum.estimated
    assert by_name["batch 2x larger"].base_samples_per_s == pytest.approx(32 / 0.25)
    # A comm hook against its own single-node record; a faster link against the same run.
    assert by_name["comm-hook powersgd"].base_samples_per_s == pytest.approx(16 / 0.12)
    assert not by_name["comm-hook powersgd"].estimated
    assert by_name["link 10x faster"].base_samples_per_s == pytest.approx(16 / 0.15)


def test_most_help_is_the_most_samples_per_s_not_the_largest_speedup():
    from bench.analysis.predict import LinkRange, report, single_node_repeats

    # PowerSGD's run is twice as fast on one node but still sends 12.5 MB: it gives the
    # most samples/s at 4 nodes, while accumulation has the larger speedup.
    plain, hook = _repeat(0.3, sent=12.5e6), _repeat(0.15, sent=12.5e6, hook="powersgd")
    ranked = levers(plain, GBIT, 4, {"powersgd": hook})
    by_rate = max(ranked, key=lambda lever: lever.samples_per_s)
    by_speedup = max(ranked, key=lambda lever: lever.speedup)
    assert by_rate.name != by_speedup.name
    text = report(single_node_repeats([plain, hook]), LinkRange.fixed(GBIT), [4])
    section = text.split("comm-hook none\n")[1].split("\n## ")[0]
    assert f"most help: {by_rate.name} (the most samples/s at 4 nodes" in section


def test_the_band_spans_the_repeats():
    from bench.analysis.predict import LinkRange, predictions, single_node_repeats

    # 2 nodes: 0.1 s of backward, then 1 s on the wire, then the tail (step - 0.1 s).
    repeats = single_node_repeats([_repeat(0.35), _repeat(0.15), _repeat(0.25)])
    (row,) = predictions(repeats, LinkRange.fixed(GBIT), [2], {})
    assert (row.step_s.point, row.step_s.low, row.step_s.high) == \
        pytest.approx((1.25, 1.15, 1.35))                 # the median repeat is the point
    assert (row.samples_per_s.low, row.samples_per_s.high) == pytest.approx((32 / 1.35,
                                                                             32 / 1.15))
    assert row.repeats == 3 and row.sweeps == 0 and row.measured_median is None
    assert row.within is None and row.ratio is None
    (measured,) = predictions(repeats, LinkRange.fixed(GBIT), [2],
                              {(next(iter(repeats)), 2): [24.0, 26.0, 30.0]})
    assert measured.measured_median == 26.0 and measured.within is True
    assert measured.ratio == pytest.approx(26.0 / (32 / 1.25))
    (slower,) = predictions(repeats, LinkRange.fixed(GBIT), [2],
                            {(next(iter(repeats)), 2): [20.0]})
    assert slower.within is False


def _two_sweeps() -> list[dict]:
    # A: 1 ms, 1 Gbit/s busbw; B (the latest): 3 ms, 0.8 Gbit/s. No CPU time recorded.
    return [_sweep([{"size_bytes": 1024, "time_s": latency, "busbw_GBps": 0.0005},
                    {"size_bytes": 64_000_000, "time_s": 64e6 / (busbw * 1e9),
                     "busbw_GBps": busbw}]) for latency, busbw in ((0.001, 0.125),
                                                                   (0.003, 0.1))]


def test_the_band_spans_the_link_sweeps():
    from bench.analysis.predict import LinkRange, predictions, single_node_repeats

    links = LinkRange.of_sweeps(_two_sweeps())
    assert links.point.busbw_Bps == pytest.approx(0.1e9) and links.sweeps == 2
    assert (links.slow.busbw_Bps, links.slow.latency_s) == \
        pytest.approx((0.1e9, 0.003 - 1024 / 0.1e9))
    assert (links.fast.busbw_Bps, links.fast.latency_s) == \
        pytest.approx((0.125e9, 0.001 - 1024 / 0.125e9))
    (row,) = predictions(single_node_repeats([_repeat(0.15)]), links, [2], {})
    # 125 MB: 0.1 s + 1.25 s + 0.05 s on B (the point, the slow end: its 3 ms latency is
    # inside the sweep's own time for 64 MB, not added to it); the fast end takes A's 1 ms
    # latency and 1 Gbit/s on B's shape: 0.1 + 1.0002 + 0.05.
    assert (row.step_s.point, row.step_s.low, row.step_s.high) == \
        pytest.approx((1.400, 1.1502, 1.400), abs=1e-5)   # to within 1 KiB's wire time
    # A planned upgrade moves both ends, each keeping its own efficiency (80%, 100%).
    upgrade = links.at_rate(5 * 10**9)
    assert (upgrade.slow.busbw_Bps, upgrade.fast.busbw_Bps) == pytest.approx((0.5e9, 0.625e9))


def _sweeps_at(busbws: list[float]) -> list[dict]:
    """One 2-rank sweep per busbw (GB/s), in this order, 1 ms latency each."""
    return [_sweep([{"size_bytes": 1024, "time_s": 0.001, "busbw_GBps": 0.0005},
                    {"size_bytes": 64_000_000, "time_s": 64e6 / (busbw * 1e9),
                     "busbw_GBps": busbw}]) for busbw in busbws]


def test_the_point_is_the_median_of_every_sweeps_prediction_not_the_latest():
    from bench.analysis.predict import LinkRange, predictions, single_node_repeats

    # Three sweeps of one link: 0.08, 0.1 and (the latest) 0.125 GB/s. 125 MB over two
    # nodes: 1.5625, 1.25 and 1.0 s on the wire after 0.1 s of backward, then 0.05 s.
    links = LinkRange.of_sweeps(_sweeps_at([0.08, 0.1, 0.125]))
    assert links.point.busbw_Bps == pytest.approx(0.125e9)     # the figures printed
    assert [m.busbw_Bps for m in links.each] == pytest.approx([0.08e9, 0.1e9, 0.125e9])
    (row,) = predictions(single_node_repeats([_repeat(0.15)]), links, [2], {})
    assert row.step_s.point == pytest.approx(0.1 + 1.25 + 0.05, abs=1e-4)
    assert (row.step_s.low, row.step_s.high) == pytest.approx((1.15, 1.7125), abs=1e-3)
    # Of an even count, the slower of the middle two.
    links = LinkRange.of_sweeps(_sweeps_at([0.125, 0.08, 0.1, 0.11]))
    (row,) = predictions(single_node_repeats([_repeat(0.15)]), links, [2], {})
    assert row.step_s.point == pytest.approx(0.1 + 1.25 + 0.05, abs=1e-4)
    # A planned upgrade moves every sweep, as it moves the ends.
    upgrade = links.at_rate(5 * 10**9)
    assert [m.rate_bps for m in upgrade.each] == [5 * 10**9] * 4
    assert len({m.busbw_Bps for m in upgrade.each}) == 4


@given(st.lists(st.floats(0.01, 1.0), min_size=1, max_size=6), st.randoms())
def test_the_point_does_not_depend_on_the_order_the_sweeps_ran(busbws, rng):
    from bench.analysis.predict import LinkRange, predictions, single_node_repeats

    repeats = single_node_repeats([_repeat(0.15)])
    each = [predictions(repeats, LinkRange.of_sweeps(_sweeps_at([b])), [2], {})[0]
            for b in busbws]
    shuffled = list(busbws)
    rng.shuffle(shuffled)
    (row,) = predictions(repeats, LinkRange.of_sweeps(_sweeps_at(shuffled)), [2], {})
    steps = sorted(p.step_s.point for p in each)
    assert row.step_s.point == pytest.approx(steps[len(steps) // 2])
    assert row.step_s.low <= row.step_s.point <= row.step_s.high


def test_cli_says_where_the_band_comes_from(tmp_path):
    results, comm = tmp_path / "runs.jsonl", tmp_path / "comm.jsonl"
    lines = [_repeat(0.15), _repeat(0.35), _repeat(0.25), _record(2, "none", 125e6, 21.0)]
    results.write_text("".join(json.dumps(r) + "\n" for r in lines))
    elsewhere = _sweep([{"size_bytes": 1024, "time_s": 0.001, "busbw_GBps": 0.0005}])
    elsewhere["env"]["link"] = {**elsewhere["env"]["link"], "rate": "5gbit",
                                "rate_bps": 5 * 10**9}
    sweeps = [*_two_sweeps(), elsewhere]
    sweeps[-1], sweeps[-2] = sweeps[-2], sweeps[-1]      # the latest is B, on 1 Gbit
    comm.write_text("".join(json.dumps(r) + "\n" for r in sweeps))
    run = [sys.executable, "-m", "bench", "predict", str(results), "--nodes", "2"]
    proc = subprocess.run([*run, "--link-from", str(comm)], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert "band: min-max over 3 ok 1-node repeats x the slowest and fastest of 2 " \
        "all-reduce sweeps" in proc.stdout
    assert "link band: 1 ok all-reduce sweep(s) in --link-from on another link rate" \
        in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # The median repeat (0.25 s) on B is the point (of two sweeps' predictions, the slower);
    # repeats of 0.15-0.35 s on links A and B span 1.1502 s (0.15 s on A) to 1.600 s (0.35
    # s on B). The report says how the point was taken.
    assert "the point: each setup predicted on each of the 2 sweeps, the median of those" \
        in proc.stdout
    assert cells[1] == "1500.0 [1150.2-1600.0]"
    assert cells[2] == f"{32 / 1.500:.1f} [{32 / 1.600:.1f}-{32 / 1.1502:.1f}]"
    assert cells[8] == "21.0 (n=1)" and cells[10] == "within band"
    proc = subprocess.run([*run, "--link", "1gbit"], cwd=REPO, capture_output=True, text=True)
    assert "band: from the 3 ok 1-node repeats only (the link adds no width: a nominal " \
        "link)" in proc.stdout


def test_the_latency_is_the_mean_of_every_latency_bound_message():
    """Small messages all measure the per-call latency, each as a noisy mean over a few
    calls: the latency is their mean, and each reads as it plus its own wire time."""
    mib, busbw = 2**20, 32 * 2**20 / 0.28
    small = [(1024, 0.004, 0.0010), (2048, 0.002, 0.0006), (4096, 0.006, 0.0014),
             (8192, 0.004, 0.0010)]
    sweep = _sweep([{"size_bytes": size, "time_s": seconds, "cpu_time_s": cpu,
                     "busbw_GBps": size / seconds / 1e9} for size, seconds, cpu in small]
                   + [{"size_bytes": 16 * mib, "time_s": 0.150, "cpu_time_s": 0.01,
                       "busbw_GBps": 16 * mib / 0.15e9},
                      {"size_bytes": 32 * mib, "time_s": 0.280, "cpu_time_s": 0.02,
                       "busbw_GBps": busbw / 1e9}])
    link = Link.from_allreduce(sweep)     # 2 ranks: bus factor 1
    latency = sum(seconds - size / busbw for size, seconds, _ in small) / 4
    assert link.latency_s == pytest.approx(latency) and latency == pytest.approx(0.004, rel=0.02)
    assert link.cpu_latency_s == pytest.approx(0.00100)
    # 4 KiB measured 6 ms, 2 KiB 2 ms: each is the latency plus its wire time now.
    for size in (2048, 4096):
        assert link.allreduce_s(size, 2) == pytest.approx(latency + size / busbw)
    # The first size whose wire time is a tenth of its time or more keeps its own.
    assert link.allreduce_s(16 * mib, 2) == pytest.approx(0.150)
    # A sweep whose smallest message is not latency-bound: the latency is that message's
    # time less its wire time.
    big = _sweep([{"size_bytes": 16 * mib, "time_s": 0.150, "busbw_GBps": 16 * mib / 0.15e9},
                  {"size_bytes": 32 * mib, "time_s": 0.280, "busbw_GBps": busbw / 1e9}])
    assert Link.from_allreduce(big).latency_s == pytest.approx(0.150 - 16 * mib / busbw)


def test_the_link_gives_back_every_time_its_sweep_measured():
    mib = 2**20
    sweep = _sweep([{"size_bytes": 1024, "time_s": 0.003, "busbw_GBps": 0.0003},
                    {"size_bytes": 16 * mib, "time_s": 0.150, "busbw_GBps": 16 * mib / 0.15e9},
                    {"size_bytes": 32 * mib, "time_s": 0.280, "busbw_GBps": 32 * mib / 0.28e9}])
    link = Link.from_allreduce(sweep)     # 2 ranks: bus factor 1
    for size, seconds in ((1024, 0.003), (16 * mib, 0.150), (32 * mib, 0.280),
                          (24 * mib, 0.215),                # between: linear in size
                          (64 * mib, 0.560),                # past the largest: its busbw
                          (512, 0.003)):                    # below the smallest: latency
        assert link.allreduce_s(size, 2) == pytest.approx(seconds), size
    # More nodes: the ring sends 1.5x the bytes at 4 ranks; the latency stays.
    latency = link.latency_s
    assert latency == pytest.approx(0.003 - 1024 / (32 * mib / 0.28))
    assert link.allreduce_s(16 * mib, 4) == pytest.approx(latency + 1.5 * (0.150 - latency))
    # A link twice as fast halves the time beyond the latency at every size.
    assert link.faster(2).allreduce_s(16 * mib, 2) == \
        pytest.approx(latency + (0.150 - latency) / 2)
    # A nominal link has no sweep: latency + bytes / rate.
    assert Link.nominal(10**9).allreduce_s(125e6, 2) == pytest.approx(1.0)


def test_cli_takes_the_gradients_own_type_from_a_file_of_several(tmp_path):
    """A file of sweeps in float32 and float16 (bench accuracy writes one): the command
    predicts on the float32 ones, the gradients' type, even when a float16 one is latest."""
    results, comm = tmp_path / "runs.jsonl", tmp_path / "comm.jsonl"
    results.write_text(json.dumps(_repeat(0.15)) + "\n")
    slow16 = _sweep([{"size_bytes": 1024, "time_s": 0.001, "busbw_GBps": 0.0005},
                     {"size_bytes": 64_000_000, "time_s": 5.12, "busbw_GBps": 0.0125}])
    slow16["dtype"] = "float16"
    comm.write_text("".join(json.dumps(r) + "\n" for r in [*_two_sweeps(), slow16]))
    run = [sys.executable, "-m", "bench", "predict", str(results), "--nodes", "2",
           "--link-from", str(comm)]
    proc = subprocess.run(run, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "of 2 all-reduce sweeps" in proc.stdout
    assert "1 ok all-reduce sweep(s) in --link-from on another link rate, backend, rank " \
        "count or element type left out" in proc.stdout


def test_cli_tells_the_runs_own_rate_from_the_step_it_predicts_from(tmp_path):
    """A one-node run's samples/s (its mean over the timed steps) and its bucket timeline's
    median step can differ; the report gives each for what it is."""
    results = tmp_path / "runs.jsonl"
    results.write_text(json.dumps(_record(1, "none", 125e6, 80.0)) + "\n")
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(results),
                           "--link", "1gbit", "--nodes", "2"], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("measured on 1 node"))
    assert line.startswith("measured on 1 node: 80.0 samples/s (one ok repeat); ")
    assert "median step 150.0 ms (106.7 samples/s), 125.00 MB sent per step" in line


def test_a_compiled_run_is_its_own_setup_and_never_predicted_from_eagers_timeline(tmp_path):
    """The setup key holds compiled/eager with the memory format and the strategy: a
    compiled run is never a repeat of the eager one, nor its measured counterpart. A
    one-process compiled run's timeline comes from the eager DDP probe (the gpu-h100
    record: a 69.0 ms step against the compiled 45.6 ms), so predict skips it and says
    why; one whose timeline is the compiled program's is predicted."""
    from bench.analysis.predict import setup_key, single_node_repeats

    eager = _record(1, "none", 125e6, 106.7)
    probed = _record(1, "none", 125e6, 150.0)
    probed["config"]["precision"].update(compile=True)
    probed["bucket_timeline"]["compiled"] = False
    own = json.loads(json.dumps(probed))
    own["bucket_timeline"]["compiled"] = True
    last = json.loads(json.dumps(eager))
    last["config"]["precision"]["channels_last"] = True
    fsdp = dict(eager, strategy="fsdp")
    assert len({setup_key(r) for r in (eager, probed, last, fsdp)}) == 4
    assert setup_key(probed) == setup_key(own)
    repeats = single_node_repeats([eager, probed, own])
    assert sorted(len(v) for v in repeats.values()) == [1, 1], "the probed one left out"
    old = json.loads(json.dumps(probed))
    del old["bucket_timeline"]["compiled"]   # records from before: the probe's, eager
    results = tmp_path / "runs.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in (eager, probed, old)))
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(results),
                           "--link", "1gbit", "--nodes", "2"], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert "2 compiled record(s) skipped" in proc.stderr
    assert proc.stdout.count("\n## ") == 1 and "eager, ddp, comm-hook none" in proc.stdout
    results.write_text(json.dumps(own) + "\n")
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(results),
                           "--link", "1gbit", "--nodes", "2"], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0 and "compiled, ddp, comm-hook none" in proc.stdout
    from bench import record

    for rec in (probed, own, old, last, fsdp):
        assert record.problem_of(rec) is None


def test_the_timeline_is_drawn_out_to_the_probe_mean_step():
    """A timed window measures the mean step; the timeline is the median step's. Every time
    in it is drawn out evenly to the mean, where the record has one."""
    rec = _record(1, "none", 1e6, 100.0)
    plain = Timeline.of(rec)
    rec["bucket_timeline"].update(mean_step_s=0.18, issued_s=[0.11], done_s=[0.12])
    drawn = Timeline.of(rec)
    assert drawn.step_s == pytest.approx(0.18) and plain.step_s == pytest.approx(0.15)
    assert drawn.ready_s == pytest.approx((0.12,)) and drawn.issued_s == pytest.approx((0.132,))
    assert drawn.done_last_s == pytest.approx(0.144)
    link = Link.nominal(10**9)
    assert predict_step(drawn, link, 1).step_s == pytest.approx(0.18)
    assert predict_step(drawn, link, 2).step_s > predict_step(Timeline.of(
        {**rec, "bucket_timeline": {**rec["bucket_timeline"], "mean_step_s": None}}),
        link, 2).step_s


def test_the_median_repeat_takes_the_median_stretch_where_every_repeat_has_a_mean():
    from bench.analysis.predict import median_repeat

    repeats = []
    for step, mean in ((0.10, 0.11), (0.20, 0.26), (0.30, 0.36)):
        rec = _record(1, "none", 1e6, 100.0)
        rec["bucket_timeline"].update(step_s=step, mean_step_s=mean)
        repeats.append(rec)
    timeline = median_repeat(repeats)["bucket_timeline"]
    assert timeline["step_s"] == pytest.approx(0.20)
    assert timeline["mean_step_s"] == pytest.approx(0.20 * 1.2)     # ratios 1.1, 1.3, 1.2
    del repeats[0]["bucket_timeline"]["mean_step_s"]                 # a record from before
    assert "mean_step_s" not in median_repeat(repeats)["bucket_timeline"]


def test_the_link_line_names_forward_and_backwards_pace_in_phase_and_the_optimizers():
    from bench.analysis.predict import _lockstep_line

    key = ("resnet18", 32, 8, None, None, "fp32")
    other = ("mlp", 28, 8, 2048, 2, "fp32")
    link = Link(1e9, lockstep=((0.1, 0.001),), lockstep_ranks=2,
                in_phase=((key, 0.984), (other, 1.05)), in_phase_tail=((key, 1.368),))
    line = _lockstep_line(link)
    assert ("resnet18 32 px batch 8's forward and backward took 0.984 and its optimizer "
            "1.368 times as long with the hosts in phase") in line
    # A sweep whose probe did not time the optimizer apart: the whole steps' figure.
    assert "mlp 28 px batch 8's steps took 1.050 times as long" in line
