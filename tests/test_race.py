"""The race at a serialized hand-over (bench.analysis.race) and where the model charges it:
backward goes on at the later of its reaching a bucket and the previous chain's end, and
the mean of a maximum is more than the maximum of the means wherever the two come close."""
from __future__ import annotations

import dataclasses
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.analysis import race
from bench.analysis.prediction import Link, Timeline, predict_step

draws = st.lists(st.floats(-0.05, 0.05), min_size=1, max_size=9).map(tuple)


def test_offsets_are_the_deciles_around_their_mean_and_scale():
    assert race.offsets([1.0, 2.0, 3.0]) == pytest.approx((-1.0, 0.0, 1.0))
    assert race.offsets([3.0, 1.0, 2.0], scale=2.0) == pytest.approx((-2.0, 0.0, 2.0))
    assert race.offsets(None) == () and race.offsets([]) == ()


def test_a_chain_of_calls_adds_one_draw_per_call():
    assert race.sum_of_draws((-1.0, 1.0), 1) == (-1.0, 1.0)
    assert race.sum_of_draws((-1.0, 1.0), 2) == (-2.0, 0.0, 0.0, 2.0)
    assert race.sum_of_draws((), 3) == () and race.sum_of_draws((1.0,), 0) == ()
    # Nine deciles over two calls: 81 sums, kept whole; a third call is thinned to as many.
    nine = race.offsets([float(k) for k in range(9)])
    assert len(race.sum_of_draws(nine, 2)) == 81
    three = race.sum_of_draws(nine, 3)
    assert len(three) == 81 and statistics.fmean(three) == pytest.approx(0.0, abs=0.05)


def test_a_chain_of_very_many_calls_is_widened_not_summed_call_by_call():
    nine = race.offsets([float(k) for k in range(9)])
    eight = race.sum_of_draws(nine, 8)
    many = race.sum_of_draws(nine, 2_000_000)     # what a hostile record might claim
    assert len(many) == len(eight)
    assert many == pytest.approx(tuple(s * 500 for s in eight))    # sqrt(2e6 / 8) = 500


def test_two_times_apart_do_not_race_and_two_together_pay_half_the_spread():
    # Backward reaches the bucket at 10 ms, give or take 2; the chain ended at 5: no race.
    assert race.expected_race_s(0.010, 0.005, (-0.002, 0.002), ()) == 0.0
    # Both at 10 ms, backward's give or take 2: half the time it waits 2 ms more.
    assert race.expected_race_s(0.010, 0.010, (-0.002, 0.002), ()) == pytest.approx(0.001)
    # Neither varies: nothing.
    assert race.expected_race_s(0.010, 0.010, (), ()) == 0.0


@given(st.floats(0, 0.2), st.floats(0, 0.2), draws, draws)
def test_the_race_costs_at_least_nothing_and_at_most_the_widest_draws(reached, chain_end,
                                                                       reach, chain):
    reach = race.offsets(reach)
    chain = race.offsets(chain)
    lost = race.expected_race_s(reached, chain_end, reach, chain)
    assert 0.0 <= lost <= max(map(abs, reach)) + max(map(abs, chain)) + 1e-12


# 1 GB/s: bucket 0's 3 calls of 2 MB each take 6 ms; the sweep's calls beside compute
# vary by the deciles below, around 2 ms.
CALLS = (0.0010, 0.0012, 0.0014, 0.0016, 0.0018, 0.0020, 0.0024, 0.0030, 0.0046)


def _link(deciles=CALLS) -> Link:
    beside = Link(busbw_Bps=1e9, call_deciles=((2e6, deciles),) if deciles else ())
    return Link(busbw_Bps=1e9, beside=beside)


def _timeline(stretch=(0.005, 0.0055, 0.006, 0.0065, 0.007, 0.0075, 0.008, 0.009, 0.011),
              serialized=True) -> Timeline:
    """Two buckets: backward reaches bucket 1 7 ms after handing bucket 0 over, about when
    bucket 0's 6 ms chain ends."""
    return Timeline((0.01, 0.017), (6e6, 6e6), 0.03, calls_per_bucket=3.0, compute_cpus=1,
                    issued_s=(0.01, 0.017), hook_s=(0.0, 0.0), done_last_s=0.017,
                    serialized=serialized, stretch_deciles=(None, stretch))


def test_a_serialized_step_pays_the_race_its_measured_spreads_give():
    link = _link()
    raced = predict_step(_timeline(), link, 2)
    events: list = []
    plain = predict_step(dataclasses.replace(_timeline(), stretch_deciles=()),
                         dataclasses.replace(link, beside=_link(()).beside), 2, events)
    assert plain.race_s == 0.0
    reached = next(t for what, bucket, t in events if what == "ready" and bucket == 1)
    done = next(t for what, bucket, t in events if what == "done" and bucket == 0)
    expected = race.expected_race_s(
        reached, done, race.offsets(_timeline().stretch_deciles[1]),
        race.sum_of_draws(race.offsets(CALLS), 3))
    assert raced.race_s == pytest.approx(expected) and expected > 1e-4
    assert raced.step_s == pytest.approx(plain.step_s + expected)
    assert raced.stolen_s == pytest.approx(plain.stolen_s + expected)
    # Traced, bucket 1 is reached when it was, and handed over and done that much later.
    traced: list = []
    predict_step(_timeline(), link, 2, traced)
    moved = {(what, bucket): t for what, bucket, t in traced}
    for (what, bucket), t in {(w, b): t for w, b, t in events}.items():
        later = expected if bucket == 1 and what != "ready" else 0.0
        assert moved[what, bucket] == pytest.approx(t + later)


def test_either_spread_alone_races_less_and_an_unserialized_hook_not_at_all():
    link, both = _link(), predict_step(_timeline(), _link(), 2).race_s
    chain_only = predict_step(dataclasses.replace(_timeline(), stretch_deciles=()), link, 2)
    stretch_only = predict_step(_timeline(), Link(busbw_Bps=1e9, beside=Link(busbw_Bps=1e9)), 2)
    assert 0 < chain_only.race_s < both and 0 < stretch_only.race_s < both
    assert predict_step(_timeline(), Link(busbw_Bps=1e9), 2).race_s == stretch_only.race_s
    assert predict_step(_timeline(serialized=False), link, 2).race_s == 0.0
    assert predict_step(_timeline(), link, 1).race_s == 0.0


def test_the_spreads_are_read_from_the_records():
    sweep = {"world_size": 2, "env": {"link": {"rate_bps": 10**9}}, "sizes": [
        {"size_bytes": 1024, "time_s": 0.002, "cpu_time_s": 0.001, "busbw_GBps": 0.0005,
         "beside_compute": {"time_s": 0.004, "compute_lost_s": 0.001,
                            "time_deciles_s": list(CALLS)}},
        {"size_bytes": 2**22, "time_s": 0.04, "cpu_time_s": 0.004, "busbw_GBps": 0.1,
         "beside_compute": {"time_s": 0.05, "compute_lost_s": 0.003,
                            "time_deciles_s": [0.05] * 9}}]}
    beside = Link.from_allreduce(sweep).beside
    assert beside is not None
    assert beside.call_draws(2000) == pytest.approx(race.offsets(CALLS))   # nearer 1 KiB
    assert beside.call_draws(2**21) == pytest.approx((0.0,) * 9)           # nearer 4 MiB
    del sweep["sizes"][1]["beside_compute"]["time_deciles_s"]              # an older row
    assert Link.from_allreduce(sweep).beside.call_deciles == ((1024, CALLS),)
    rec = {"config": {"distributed": {"device": "cpu"}}, "env": {"torch_threads": 1},
           "bucket_timeline": {"ready_s": [0.1, 0.2], "sent_bytes": [1.0, 1.0],
                               "step_s": 0.3, "stretch_deciles_s": [None, [0.1] * 9]}}
    assert Timeline.of(rec).stretch_deciles == (None, (0.1,) * 9)
    rec["bucket_timeline"]["stretch_deciles_s"] = [[0.1] * 9]   # not one per bucket
    assert Timeline.of(rec).stretch_deciles == ()
    del rec["bucket_timeline"]["stretch_deciles_s"]             # a record from before
    assert Timeline.of(rec).stretch_deciles == ()


def test_the_stretches_spread_with_the_pace_the_model_gives_them():
    timeline = _timeline()
    assert timeline.stretched(1.5).stretch_deciles[1] == pytest.approx(
        tuple(1.5 * c for c in timeline.stretch_deciles[1]))
    assert timeline.scaled_batch(2).stretch_deciles[1] == pytest.approx(
        tuple(2 * c for c in timeline.stretch_deciles[1]))
    assert timeline.stretched(1.5).stretch_deciles[0] is None
