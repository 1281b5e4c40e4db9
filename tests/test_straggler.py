"""The straggler analysis on per-step figures: who is named, for what, and who is not."""
from __future__ import annotations

import functools
import math
import random
import statistics

from hypothesis import example, given, settings
from hypothesis import strategies as st

from bench import record
from bench.analysis import straggler
from bench.analysis.straggler import Link, RankSteps

STEPS = 30


def job(nodes: list[int], *, seed: int = 0, slow_rank: int | None = None,
        slow_part: str = "forward", slowdown: float = 1.25, noise: float = 0.02,
        wire: float = 0.02, data: float = 0.001) -> list[RankSteps]:
    """A synchronous job's per-step figures: every rank's local work with multiplicative
    noise, one rank's ``slow_part`` times ``slowdown``; the collective ends for everyone when
    the latest rank is done plus ``wire``; the others wait for it."""
    rng = random.Random(seed)
    base = {"data": data, "h2d": 0.002, "forward": 0.03, "backward": 0.06, "optimizer": 0.01}
    ranks = [RankSteps(rank=r, node=n, host=f"n{n}", device="cpu", step_s=[], parts={})
             for r, n in enumerate(nodes)]
    for _ in range(STEPS):
        local = []
        for rank in ranks:
            parts = {name: seconds * (1 + rng.gauss(0, noise)) for name, seconds in base.items()}
            if rank.rank == slow_rank:
                parts[slow_part] *= slowdown
            local.append(parts)
        latest = max(sum(p.values()) for p in local)
        for rank, parts in zip(ranks, local, strict=True):
            sync = latest - sum(parts.values()) + wire * (1 + rng.gauss(0, noise))
            for name, seconds in {**parts, "sync": sync}.items():
                rank.parts.setdefault(name, []).append(seconds)
            rank.step_s.append(sum(parts.values()) + sync + 0.0005)
    return ranks


def links(nodes: int, slow_node: int | None = None, times: float = 10.0,
          seed: int = 0) -> list[Link]:
    rng = random.Random(seed)
    found = []
    for a in range(nodes):
        for b in ((a + 1) % nodes, (a - 1) % nodes):
            seconds = 0.035 * (1 + abs(rng.gauss(0, 0.05)))
            if slow_node in (a, b):
                seconds *= times
            found.append(Link(a, b, seconds))
    return found


def test_a_rank_with_slow_compute_is_named_with_its_node_and_cost():
    ranks = job([0, 1, 2, 3], slow_rank=2, slow_part="backward", slowdown=1.25)
    verdict = straggler.judge(ranks, "ddp", samples_per_s=100.0)
    named = verdict.straggler
    assert named is not None, verdict.check
    assert (named["rank"], named["node"], named["host"], named["part"]) == (2, 2, "n2", "compute")
    # backward is two thirds of compute: 25% slower backward makes compute about 17% slower
    assert 0.12 < named["excess_share"] < 0.22
    # the others waited for its extra backward, 0.015 s of a step of about 0.14 s
    assert 0.07 < named["cost_share"] < 0.15
    assert "rank 2 (node 2, n2, cpu)" in named["summary"] and "compute" in named["summary"]
    assert verdict.check["named"] is True


def test_a_rank_a_little_slower_than_the_threshold_is_not_named():
    # forward is a third of compute: 20% slower forward, about 6% more local work
    verdict = straggler.judge(job([0, 1, 2, 3], slow_rank=2, slowdown=1.2, noise=0.005),
                              "ddp")
    assert verdict.straggler is None
    assert 0.04 < verdict.check["largest_excess_share"] < straggler.THRESHOLD_SHARE


def test_a_slow_data_loader_is_named_as_data():
    ranks = job([0, 1, 2], slow_rank=1, slow_part="data", slowdown=30.0, data=0.002)
    named = straggler.judge(ranks, "ddp").straggler
    assert named is not None and named["rank"] == 1 and named["part"] == "data"


def test_clean_jobs_name_nobody():
    false_alarms = [seed for seed in range(40)
                    if straggler.judge(job([0, 1, 2, 3], seed=seed), "ddp").straggler]
    assert false_alarms == []


def test_a_small_but_steady_slowdown_is_named_and_noise_of_that_size_is_not():
    slow = job([0, 1, 2, 3], slow_rank=3, slow_part="backward", slowdown=1.2, noise=0.01)
    assert straggler.judge(slow, "ddp").straggler["rank"] == 3
    # the same excess, but in noise that large a median of 30 steps cannot tell it apart
    noisy = job([0, 1, 2, 3], slow_rank=3, slow_part="backward", slowdown=1.09, noise=0.5)
    verdict = straggler.judge(noisy, "ddp")
    assert verdict.straggler is None and "agree within noise" in verdict.check["note"]


def test_the_node_with_a_slow_link_is_named_for_communication():
    ranks = job([0, 1, 2, 3], wire=0.2)
    verdict = straggler.judge(ranks, "ddp", links(4, slow_node=2), samples_per_s=50.0)
    named = verdict.straggler
    assert named is not None and (named["node"], named["part"]) == (2, "communication")
    assert named["cost_share"] > 0.4        # nine tenths of a wire-bound step
    assert verdict.without_slowest["basis"] == "breakdown+link probe"
    assert verdict.without_slowest["speedup"] > 1.5


def test_a_slow_link_that_costs_nothing_is_only_noted():
    verdict = straggler.judge(job([0, 1, 2, 3], wire=0.0), "ddp", links(4, slow_node=1))
    assert verdict.straggler is None
    assert "node 1's link is" in verdict.check["note"]


def test_two_nodes_cannot_say_which_end_of_their_link_is_slow():
    assert straggler.slow_link(links(2, slow_node=0), 2) is None
    assert straggler.slow_link(links(3, slow_node=0), 3)[0] == 0
    assert straggler.slow_link(links(4), 4) is None


def test_dropping_the_slow_node_of_an_uneven_job_is_predicted():
    # 1+1+2: node 1 (rank 1) computes 60% slower; without it three ranks remain
    ranks = job([0, 1, 2, 2], slow_rank=1, slow_part="backward", slowdown=1.6, wire=0.01)
    verdict = straggler.judge(ranks, "ddp", samples_per_s=400.0)
    without = verdict.without_slowest
    assert verdict.straggler["node"] == 1
    assert without["node"] == 1 and without["ranks"] == [1] and without["nodes_left"] == 2
    # 3/4 of the samples per step, at a step some 25% shorter: about as fast as now
    assert 0.85 < without["speedup"] < 1.15
    assert math.isclose(without["samples_per_s"], 400.0 * without["speedup"])
    assert "without node 1" in without["summary"]


def test_the_breakdown_adds_up_and_splits_the_sync():
    ranks = job([0, 1, 2, 3], slow_rank=0, slowdown=1.3)
    found = straggler.breakdown(ranks, "ddp", "host_clock")
    assert found["parts"] == ["data", "h2d", "forward", "backward", "optimizer",
                              "sync_wire", "sync_wait"]
    for row in found["ranks"]:
        total = sum(part["mean"] for part in row["parts"].values())
        assert math.isclose(total, row["parts_sum_s"])
        assert math.isclose(row["remainder_s"], 0.0005, abs_tol=1e-9)
        assert row["remainder_share"] < 0.01
    waits = [row["parts"]["sync_wait"]["mean"] for row in found["ranks"]]
    assert waits[0] < 0.001 < min(waits[1:]), "the late rank waits for nobody"


def test_fsdp_names_its_collectives():
    ranks = job([0, 1])
    for rank in ranks:
        sync = rank.parts.pop("sync")
        rank.parts["all_gather"] = [s / 2 for s in sync]
        rank.parts["reduce_scatter"] = [s / 2 for s in sync]
    found = straggler.breakdown(ranks, "fsdp", "host_clock")
    assert found["parts"][-3:] == ["all_gather", "reduce_scatter", "sync_wait"]
    for row in found["ranks"]:
        assert math.isclose(row["remainder_s"], 0.0005, abs_tol=1e-9)


def test_one_rank_has_a_breakdown_and_no_verdict():
    ranks = job([0])
    assert straggler.breakdown(ranks, "single", "host_clock")["ranks"][0]["steps"] == STEPS
    assert straggler.judge(ranks, "single") == straggler.Verdict(None, None, None)


def test_one_process_counts_the_time_after_backwards_callback_as_backward():
    """One process has nothing to sync: what the trainer marks as "sync" (autograd's finish
    after backward's end-of-graph callback) is backward's, not a remainder no part explains."""
    (rank,) = job([0])
    rank.parts["sync"] = [0.00006] * STEPS
    rank.step_s = [sum(values) for values in zip(*rank.parts.values(), strict=True)]
    (row,) = straggler.breakdown([rank], "single", "host_clock")["ranks"]
    assert "sync" not in row["parts"] and "sync_wire" not in row["parts"]
    assert row["remainder_s"] == 0.0
    assert math.isclose(row["parts"]["backward"]["mean"],
                        statistics.fmean(rank.parts["backward"]) + 0.00006)


@functools.cache
def _validator(field: str):
    import jsonschema

    full = record.schema("steps")
    schema = {"$defs": full["$defs"], **full["properties"][field]}
    return jsonschema.validators.validator_for(schema)(schema)


def _accepted(field: str, value: object) -> None:
    _validator(field).validate(value)


seconds = st.floats(min_value=0, max_value=1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.lists(seconds, min_size=0, max_size=8),
                          st.dictionaries(st.sampled_from(
                              [*straggler.LOCAL_PARTS, *straggler.RAW_COMM_PARTS]),
                              st.lists(seconds, max_size=8), max_size=8)),
                min_size=1, max_size=5),
       st.sampled_from(["ddp", "fsdp"]),
       st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), seconds), max_size=12),
       st.one_of(st.none(), st.floats(min_value=1e-3, max_value=1e6)))
# CI found it: a rank's local work of 5.6e-120 s made the other's excess a share of 1.8e119
@example(rows=[(0, [0.0, 0.0, 0.0], {"data": [1.0]}),
               (0, [0.0, 0.0, 0.0], {"data": [5.5882944024927064e-120]})],
         strategy="ddp", link_rows=[], rate=None)
@example(rows=[(0, [1.0, 1.0, 1.0], {"data": [1e-300]}), (1, [1.0, 1.0, 1.0], {"data": [1.0]}),
               (2, [1.0, 1.0, 1.0], {})],
         strategy="fsdp", link_rows=[(0, 1, 1e-300), (1, 0, 1e-300), (2, 0, 1.0)], rate=10.0)
def test_any_figures_give_finite_bounded_answers(rows, strategy, link_rows, rate):
    ranks = [RankSteps(rank=i, node=node, host="h", device="d", step_s=steps, parts=parts)
             for i, (node, steps, parts) in enumerate(rows)]
    found = straggler.breakdown(ranks, strategy, "host_clock")
    verdict = straggler.judge(ranks, strategy, [Link(*row) for row in link_rows], rate)
    # Whatever the analysis writes, the record's schema accepts (readers skip what it does not).
    for field, value in {"step_breakdown": found, "straggler": verdict.straggler,
                         "straggler_check": verdict.check,
                         "without_slowest": verdict.without_slowest}.items():
        _accepted(field, value)
    for row in (found or {}).get("ranks", []):
        assert all(math.isfinite(v) for part in row["parts"].values() for v in part.values())
        assert row["remainder_share"] is None or 0 <= row["remainder_share"] <= 1
    if verdict.straggler:
        assert 0 <= verdict.straggler["cost_share"] <= 1
        assert verdict.straggler["excess_s"] >= 0
    if verdict.without_slowest:
        assert math.isfinite(verdict.without_slowest["samples_per_s"])


def test_too_few_steps_are_said_not_judged():
    ranks = job([0, 1], slow_rank=1, slowdown=3.0)
    for rank in ranks:
        rank.step_s = rank.step_s[:2]
    verdict = straggler.judge(ranks, "ddp")
    assert verdict.straggler is None and verdict.check["named"] is False
    assert "2 timed step(s): too few" in verdict.check["note"]


def test_a_slow_link_to_a_node_without_ranks_names_nobody():
    # Found by the property test: a probe's node with no rank of the job must not be named
    # (there is no rank to name), nor crash the judgement.
    ranks = job([0, 1, 2], wire=0.2)
    verdict = straggler.judge(ranks, "ddp", links(4, slow_node=3), samples_per_s=50.0)
    assert verdict.straggler is None and verdict.slow_link_node is None
