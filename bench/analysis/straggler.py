"""Which rank the others waited for, and why: the step breakdown across ranks.

Every rank times the parts of each of its steps (``bench.rank.breakdown``): waiting for
data, the host-to-device copy, forward, backward, the optimizer, and the communication its
step exposed (DDP's final wait for the all-reduce; FSDP's all-gathers and reduce-scatters).
This module, pure Python, turns those per-step figures from every rank into the record's
``step_breakdown``, ``straggler``, ``straggler_check`` and ``without_slowest``.

The exposed communication of a synchronous step is the wire time of what could not be
overlapped plus the time a rank waited for a later one to be ready. The collective ends at
about the same moment on every rank, so per step the rank that exposed the least
communication waited for nobody: its exposure is the wire time, and every other rank's
excess over it is waiting. Which rank was late is then the one whose mean local work (everything but
communication) most exceeds the median of the other ranks' means, named only when that is
both a material share of the work (``THRESHOLD_SHARE``) and well outside the step-to-step
noise (``NOISE_SIGMAS`` standard errors of the median of its per-step excess over the
others, which pairs each step with itself, so a hiccup every rank shared cancels).

A slow link does not make one rank late: a ring all-reduce runs at its slowest link's pace
on every rank. It is found by the link probe (``bench.rank.linkprobe``), which times each
directed link between node leaders on its own: the node whose every outgoing or every
incoming link is ``LINK_OUTLIER`` times slower than the usual link is named.
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

# A straggler's local work is at least 8% above the others'. Emulated hosts held to the same
# CPU quota differed by up to 7.8% in clean runs; a host slowed by 10% came out 7.5-16% over.
THRESHOLD_SHARE = 0.08
NOISE_SIGMAS = 3.0         # ... and that excess is 3 standard errors of its median
LINK_OUTLIER = 1.5         # a node's links at 2/3 of the usual rate or less
COMM_COST_SHARE = 0.05     # a slow link is named when it costs 5% of the step or more
TINY = 1e-9                # below this a time or share is rounding, not a measurement
MIN_STEPS = 3              # a median and a spread need a few steps
MAD_TO_SIGMA = 1.4826      # the MAD of a normal sample times this is its standard deviation
MEDIAN_SE = 1.2533         # the median's standard error is this times the mean's

LOCAL_PARTS = ("data", "h2d", "forward", "backward", "optimizer")
RAW_COMM_PARTS = ("all_gather", "reduce_scatter", "sync")
# The causes a straggler is named for: its local parts, forward and backward together.
CAUSES = {"data": ("data",), "h2d": ("h2d",), "compute": ("forward", "backward"),
          "optimizer": ("optimizer",)}


@dataclasses.dataclass
class RankSteps:
    """One rank's timed steps: each step's seconds, and each part's seconds per step."""

    rank: int
    node: int
    host: str
    device: str
    step_s: list[float]
    parts: dict[str, list[float]]     # raw names: LOCAL_PARTS and RAW_COMM_PARTS


@dataclasses.dataclass
class Link:
    from_node: int
    to_node: int
    seconds: float


def _tidy(value):
    """``value`` with every float below a nanosecond's size made 0: sums and differences of
    equal times leave rounding dust (5e-17) that is no measurement (the schema refuses it)."""
    if isinstance(value, float):
        return 0.0 if abs(value) < TINY else value
    if isinstance(value, dict):
        return {key: _tidy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_tidy(item) for item in value]
    return value


def _ratio(part: float, whole: float) -> float:
    """``part / whole``, 0 where ``whole`` is under ``TINY``: a time that small is rounding,
    not a measurement, and a share of it would be any size at all (1e119)."""
    return part / whole if whole >= TINY else 0.0


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def _mad(values: Sequence[float]) -> float:
    center = _median(values)
    return _median([abs(v - center) for v in values])


def _summary(values: Sequence[float]) -> dict:
    return {"p50": _median(values), "mad": _mad(values),
            "mean": statistics.fmean(values) if values else 0.0}


def _steps(ranks: Sequence[RankSteps]) -> int:
    """Steps every rank timed (the same count on a synchronous job; the fewest if not)."""
    return min(len(r.step_s) for r in ranks) if ranks else 0


def _part(rank: RankSteps, name: str, steps: int) -> list[float]:
    values = rank.parts.get(name) or []
    return [float(v) for v in values[:steps]] + [0.0] * max(0, steps - len(values))


def _exposed(rank: RankSteps, steps: int) -> list[float]:
    """Per step, the communication this rank's step exposed (all kinds together)."""
    kinds = [_part(rank, name, steps) for name in RAW_COMM_PARTS]
    return [max(0.0, sum(values)) for values in zip(*kinds, strict=True)]


def _local(rank: RankSteps, steps: int, names: Sequence[str] = LOCAL_PARTS) -> list[float]:
    columns = [_part(rank, name, steps) for name in names]
    return [sum(values) for values in zip(*columns, strict=True)]


def split_communication(ranks: Sequence[RankSteps], strategy: str) -> list[dict[str, list[float]]]:
    """Each rank's parts with the exposed communication split into wire and waiting.

    Per step, the least exposure of any rank is the wire time; what a rank exposed beyond it,
    it spent waiting for a later rank. DDP: ``sync_wire`` and ``sync_wait``. FSDP: the
    all-gather and reduce-scatter keep their wire share (the final wait counts with the
    reduce-scatter, which it waits for) and ``sync_wait`` takes the rest."""
    steps = _steps(ranks)
    exposed = [_exposed(r, steps) for r in ranks]
    wire = [min(column) for column in zip(*exposed, strict=True)] if exposed else []
    split = []
    for rank, exposure in zip(ranks, exposed, strict=True):
        parts = {name: _part(rank, name, steps) for name in LOCAL_PARTS}
        if strategy == "single":
            # One process syncs nothing: from backward's end-of-graph callback until
            # backward() returns is autograd's own finish (91 us a step on resnet18, 32 px),
            # backward's, so that the parts still add up to the step.
            parts["backward"] = [b + e for b, e in zip(parts["backward"], exposure,
                                                       strict=True)]
            split.append(parts)
            continue
        waits = [max(0.0, e - w) for e, w in zip(exposure, wire, strict=True)]
        if strategy == "fsdp":
            keep = [_ratio(e - wait, e) for e, wait in zip(exposure, waits, strict=True)]
            gather = _part(rank, "all_gather", steps)
            scatter = [a + b for a, b in zip(_part(rank, "reduce_scatter", steps),
                                             _part(rank, "sync", steps), strict=True)]
            parts["all_gather"] = [v * k for v, k in zip(gather, keep, strict=True)]
            parts["reduce_scatter"] = [v * k for v, k in zip(scatter, keep, strict=True)]
        else:
            parts["sync_wire"] = [e - wait for e, wait in zip(exposure, waits, strict=True)]
        parts["sync_wait"] = waits
        split.append(parts)
    return split


def part_names(strategy: str) -> list[str]:
    if strategy == "single":
        return list(LOCAL_PARTS)
    if strategy == "fsdp":
        return [*LOCAL_PARTS, "all_gather", "reduce_scatter", "sync_wait"]
    return [*LOCAL_PARTS, "sync_wire", "sync_wait"]


def breakdown(ranks: Sequence[RankSteps], strategy: str, stamped_by: str) -> dict | None:
    """The record's ``step_breakdown``: per rank, each part's median, spread and mean, and how
    far the parts' means fall short of the step's mean (what no part explains)."""
    steps = _steps(ranks)
    if not steps:
        return None
    names = part_names(strategy)
    rows = []
    for rank, parts in zip(ranks, split_communication(ranks, strategy), strict=True):
        step_s = [float(v) for v in rank.step_s[:steps]]
        summaries = {name: _summary(parts.get(name, [0.0] * steps)) for name in names}
        parts_sum = sum(s["mean"] for s in summaries.values())
        step_mean = statistics.fmean(step_s)
        remainder = step_mean - parts_sum
        rows.append({"rank": rank.rank, "node": rank.node, "host": rank.host,
                     "device": rank.device, "steps": steps, "step_s": _summary(step_s),
                     "parts": summaries, "parts_sum_s": parts_sum, "remainder_s": remainder,
                     "remainder_share": min(1.0, abs(remainder) / step_mean)
                     if step_mean >= TINY else None})
    return _tidy({"stamped_by": stamped_by, "strategy": strategy, "parts": names, "ranks": rows})


@dataclasses.dataclass
class Verdict:
    """The straggler analysis: who (if anyone), why, and what dropping its node would give."""

    straggler: dict | None
    check: dict | None
    without_slowest: dict | None
    slow_link_node: int | None = None   # the node the link probe found slow, named or not


def _others_median(columns: list[list[float]], index: int) -> list[float]:
    """Per step, the median over every rank but ``index``."""
    others = [c for i, c in enumerate(columns) if i != index]
    return [_median(values) for values in zip(*others, strict=True)]


def _late_rank(ranks: Sequence[RankSteps], steps: int) -> dict | None:
    """The rank whose mean local work most exceeds the median of the other ranks' means (as
    the record's per-rank means show it), and the noise of that excess: the standard error
    of the median of its per-step excess over the others' median."""
    local = [_local(r, steps) for r in ranks]
    means = [statistics.fmean(values) for values in local]
    best = None
    for index in range(len(ranks)):
        typical = _median([m for i, m in enumerate(means) if i != index])
        excess_s = means[index] - typical
        if best is None or excess_s > best["excess_s"]:
            others = _others_median(local, index)
            per_step = [mine - theirs
                        for mine, theirs in zip(local[index], others, strict=True)]
            se = MAD_TO_SIGMA * _mad(per_step) * MEDIAN_SE / max(1, len(per_step)) ** 0.5
            best = {"index": index, "excess_s": excess_s, "noise_s": se,
                    "share": _ratio(excess_s, typical)}
    return best


def _cause(ranks: Sequence[RankSteps], index: int, steps: int) -> tuple[str, float, float]:
    """The local part where the rank was slowest against the others: (cause, excess seconds,
    excess as a share of the others' median time in that part)."""
    found = ("compute", 0.0, 0.0)
    for cause, names in CAUSES.items():
        columns = [_local(r, steps, names) for r in ranks]
        others = _others_median(columns, index)
        excess = _median([mine - theirs
                          for mine, theirs in zip(columns[index], others, strict=True)])
        if excess > found[1]:
            typical = _median(others)
            found = (cause, excess, _ratio(excess, typical))
    return found


def _who(rank: RankSteps) -> str:
    return f"rank {rank.rank} (node {rank.node}, {rank.host}, {rank.device})"


def slow_link(links: Sequence[Link], nodes: int) -> tuple[int, float] | None:
    """(node, how many times slower than the usual link) for the node whose every outgoing or
    every incoming link is an outlier; None when no node stands out, or with two nodes (one
    pair of links: either end could be at fault)."""
    if nodes < 3 or not links:
        return None
    worst = None
    for node in sorted({link.from_node for link in links} | {link.to_node for link in links}):
        # Usual: the links between the other nodes (half of all links may touch this one).
        usual = _median([link.seconds for link in links if node not in (link.from_node,
                                                                         link.to_node)])
        if usual < TINY:
            continue
        out = [link.seconds for link in links if link.from_node == node]
        into = [link.seconds for link in links if link.to_node == node]
        slowest_side = max(min(out, default=0.0), min(into, default=0.0)) / usual
        if worst is None or slowest_side > worst[1]:
            worst = (node, slowest_side)
    return worst if worst and worst[1] >= LINK_OUTLIER else None


def _ring_factor(nodes: int) -> float:
    """A ring all-reduce sends 2(n-1)/n of the data per node: its time at ``nodes``."""
    return 2 * (nodes - 1) / nodes if nodes > 1 else 0.0


def judge(ranks: Sequence[RankSteps], strategy: str, links: Sequence[Link] = (),
          samples_per_s: float | None = None) -> Verdict:
    """Name the straggler (or say why not) and predict the job without its node."""
    steps = _steps(ranks)
    if len(ranks) < 2:
        return Verdict(None, None, None)
    if steps < MIN_STEPS:
        return Verdict(None, {"threshold_share": THRESHOLD_SHARE, "largest_excess_share": None,
                              "rank": None, "named": False,
                              "note": f"{steps} timed step(s): too few to judge "
                                      f"({MIN_STEPS} or more are needed)"}, None)
    split = split_communication(ranks, strategy)
    step_median = _median([_median(r.step_s[:steps]) for r in ranks])
    wire_names = ("all_gather", "reduce_scatter") if strategy == "fsdp" else ("sync_wire",)
    wire = [[sum(v) for v in zip(*(parts.get(n, [0.0] * steps) for n in wire_names), strict=True)]
            for parts in split]
    nodes = sorted({r.node for r in ranks})
    late = _late_rank(ranks, steps)
    assert late is not None
    candidates = []
    check = {"threshold_share": THRESHOLD_SHARE, "largest_excess_share": max(0.0, late["share"]),
             "rank": ranks[late["index"]].rank, "named": False}
    compute_named = late["share"] >= THRESHOLD_SHARE and \
        late["excess_s"] >= NOISE_SIGMAS * late["noise_s"]
    if compute_named:
        index = late["index"]
        cause, excess, share = _cause(ranks, index, steps)
        waits = [_median(parts["sync_wait"]) for i, parts in enumerate(split) if i != index]
        cost = _ratio(_median(waits), step_median)
        candidates.append({"index": index, "part": cause, "excess_s": excess,
                           "excess_share": share, "cost_share": min(1.0, max(0.0, cost))})
    # Only links between this job's nodes (a probe of other nodes would name no rank).
    slow = slow_link([link for link in links
                      if link.from_node in nodes and link.to_node in nodes], len(nodes))
    link_note = ""
    if slow is not None:
        node, times = slow
        wire_now = _median([_median(w) for w in wire])
        saved = wire_now * (1 - 1 / times)
        cost = _ratio(saved, step_median)
        index = min(i for i, r in enumerate(ranks) if r.node == node)
        link_note = (f"node {node}'s link is {times:.1f}x slower than the others', "
                     f"costing {cost:.0%} of the step")
        if cost >= COMM_COST_SHARE:
            candidates.append({"index": index, "part": "communication", "excess_s": saved,
                               "excess_share": times - 1, "cost_share": min(1.0, cost),
                               "link_times": times})
    if not candidates:
        reason = (f"ranks agree within noise: the largest excess, rank {check['rank']}'s, is "
                  f"{max(0.0, late['share']):.1%} of its local work (named from "
                  f"{THRESHOLD_SHARE:.0%} and {NOISE_SIGMAS:g} standard errors, "
                  f"{late['noise_s'] * 1e3:.2f} ms)")
        check["note"] = f"{reason}; {link_note}" if link_note else reason
        return Verdict(None, _tidy(check), None, slow[0] if slow else None)
    chosen = max(candidates, key=lambda c: c["cost_share"])
    rank = ranks[chosen["index"]]
    sign = "+" if chosen["part"] != "communication" else ""
    how = (f"{chosen['link_times']:.1f}x slower link" if chosen["part"] == "communication"
           else f"{chosen['part']} {sign}{chosen['excess_share']:.0%} over the median rank")
    summary = f"{_who(rank)}: {how}; the others wait {chosen['cost_share']:.0%} of the step"
    straggler = {"rank": rank.rank, "node": rank.node, "host": rank.host,
                 "device": rank.device, "part": chosen["part"],
                 "excess_s": max(0.0, chosen["excess_s"]),
                 "excess_share": max(0.0, chosen["excess_share"]),
                 "cost_share": chosen["cost_share"], "summary": summary}
    check.update(named=True, rank=rank.rank,
                 note=f"named: {summary}" + (f"; {link_note}" if link_note and
                                             chosen["part"] != "communication" else ""))
    without = _without_node(ranks, wire, rank.node, steps, samples_per_s,
                            chosen.get("link_times"))
    return Verdict(_tidy(straggler), _tidy(check), _tidy(without), slow[0] if slow else None)


def _without_node(ranks: Sequence[RankSteps], wire: list[list[float]], node: int, steps: int,
                  samples_per_s: float | None, link_times: float | None) -> dict | None:
    """The job without ``node``'s ranks: per step, the slowest remaining rank's local work
    plus the wire time, scaled to one node fewer on the ring (and to the usual link where
    the dropped node's link was the slow one). Throughput scales with the ranks left."""
    nodes = sorted({r.node for r in ranks})
    kept = [i for i, r in enumerate(ranks) if r.node != node]
    if len(nodes) < 2 or not kept or not samples_per_s:
        return None
    local = [_local(r, steps) for r in ranks]
    # The least wire of any rank is the wire time itself (the others' excess is waiting).
    wire_per_step = [min(column) for column in zip(*wire, strict=True)]
    ring = _ring_factor(len(nodes) - 1) / _ring_factor(len(nodes))
    scale = ring / link_times if link_times else ring
    predicted = [max(local[i][k] for i in kept) + wire_per_step[k] * scale
                 for k in range(steps)]
    now = [max(local[i][k] for i in range(len(ranks))) + wire_per_step[k]
           for k in range(steps)]
    step_now = _median([_median(r.step_s[:steps]) for r in ranks])
    step_then = _median(predicted)
    if step_then < TINY or step_now < TINY:
        return None
    # Measured throughput times the modelled speed-up: the model's own error on the current
    # job (now vs the measured step) cancels in the ratio.
    rate = samples_per_s * (len(kept) / len(ranks)) * (_median(now) / step_then)
    host = next(r.host for r in ranks if r.node == node)
    basis = "breakdown+link probe" if link_times else "breakdown"
    return {"node": node, "host": host, "ranks": [ranks[i].rank for i in range(len(ranks))
                                                   if i not in kept],
            "nodes_left": len(nodes) - 1, "samples_per_s": rate,
            "speedup": rate / samples_per_s, "basis": basis,
            "summary": f"without node {node} ({host}): {rate:.1f} samples/s predicted "
                       f"({rate / samples_per_s:.2f}x the measured {samples_per_s:.1f})"}
