"""Issue 26's fields as the contract (the rank side's) lays them out, added to real records:
the readers' tests build on these until runs with real breakdowns are committed."""
from __future__ import annotations

import json

DDP_PARTS = ["data", "h2d", "forward", "backward", "optimizer", "sync_wire", "sync_wait"]


def _stat(seconds: float) -> dict:
    return {"p50": seconds, "mad": seconds / 50, "mean": seconds}


def rank_entry(rank: int, node: int, host: str, parts: dict[str, float],
               step_s: float) -> dict:
    total = sum(parts.values())
    return {"rank": rank, "node": node, "host": host, "device": "cpu", "steps": 20,
            "step_s": _stat(step_s), "parts": {name: _stat(s) for name, s in parts.items()},
            "parts_sum_s": total, "remainder_s": step_s - total,
            "remainder_share": abs(step_s - total) / step_s}


def with_breakdown(base: dict, slow_rank: int | None = 3, host: str = "n2") -> dict:
    """``base`` (copied) as a 4-rank DDP run on 3 nodes (ranks 0-1 on node 0, 2 on node 1,
    3 on node 2 named ``host``), whose rank ``slow_rank`` computes 25% longer; None: the
    ranks agree and nobody is named."""
    rec = json.loads(json.dumps(base))
    ranks = []
    for rank, node in enumerate([0, 0, 1, 2]):
        forward = 0.04 * (1.25 if rank == slow_rank else 1.0)
        parts = {"data": 0.01, "h2d": 0.002, "forward": forward, "backward": 0.03,
                 "optimizer": 0.005, "sync_wire": 0.006, "sync_wait": 0.004}
        ranks.append(rank_entry(rank, node, host if node == 2 else f"n{node}", parts,
                                step_s=sum(parts.values()) + 0.003))
    rec["step_breakdown"] = {"stamped_by": "host_clock", "strategy": "ddp",
                             "parts": DDP_PARTS, "ranks": ranks}
    if slow_rank is None:
        rec["straggler"] = rec["without_slowest"] = None
        rec["straggler_check"] = {"threshold_share": 0.05, "largest_excess_share": 0.012,
                                  "rank": 1, "named": False,
                                  "note": "ranks agree within 1.2%, under the 5% threshold"}
        return rec
    rec["straggler"] = {
        "rank": slow_rank, "node": 2, "host": host, "device": "cpu", "part": "compute",
        "excess_s": 0.025, "excess_share": 0.25, "cost_share": 0.20,
        "summary": f"rank {slow_rank} (node 2, {host}, cpu): compute +25% over the median "
                   "rank; the others wait 20% of the step"}
    rec["straggler_check"] = {"threshold_share": 0.05, "largest_excess_share": 0.25,
                              "rank": slow_rank, "named": True, "note": "rank 3 is 25% slower"}
    rec["without_slowest"] = {
        "node": 2, "host": host, "ranks": [slow_rank], "nodes_left": 2,
        "samples_per_s": 123.0, "speedup": 1.15, "basis": "breakdown",
        "summary": "without node 2: 123 samples/s predicted (1.15x)"}
    rec["link_probe"] = {"bytes": 4194304, "repeats": 5, "slow_node": None,
                         "links": [{"from_node": 0, "to_node": 1, "s": 0.03, "GBps": 0.14}]}
    return rec
