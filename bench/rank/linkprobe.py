"""Each link between nodes, timed on its own: which node's link is slow.

A ring all-reduce runs at its slowest link's pace on every rank, so a slow link makes every
rank's communication slow alike and the step breakdown cannot say whose link it is. Here
each node's first rank (its leader) sends a buffer to the next node's leader and receives
one from the previous, in both directions around the ring of nodes; every exchange starts
from a barrier, so each receive is timed from a common start and measures the one link it
came over, not a delay passed along the ring. ``bench.analysis.straggler`` names the node
whose every outgoing or every incoming link stands out.
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from bench.rank.distributed import DistContext, all_gather_objects

PROBE_BYTES = 4 * 2**20    # a few times a TCP window: the rate, not the latency, sets it
REPEATS = 3                # timed exchanges per direction, after one untimed


def _now(ctx: DistContext) -> float:
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)  # note: the probe is timed as a whole, on purpose
    return time.perf_counter()


def _exchange(ctx: DistContext, send: torch.Tensor, receive: torch.Tensor, to_rank: int,
              from_rank: int, start: float) -> float:
    """Seconds from ``start`` until ``receive`` arrived. On gloo the receive alone is waited
    for first, so a slow outgoing link of this node does not count against the incoming one;
    NCCL needs both in one group (separate sends around a ring would wait on each other)."""
    if ctx.backend == "nccl":
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, to_rank),
                                        dist.P2POp(dist.irecv, receive, from_rank)])
        for work in works:
            work.wait()
        return _now(ctx) - start
    sending = dist.isend(send, to_rank)
    dist.irecv(receive, from_rank).wait()
    seconds = _now(ctx) - start
    sending.wait()
    return seconds


def probe(ctx: DistContext, size_bytes: int = PROBE_BYTES, repeats: int = REPEATS) -> dict | None:
    """Seconds per directed link between node leaders (median of ``repeats``), for the
    record's ``link_probe``; None on one node. A collective: every rank must call it."""
    members = all_gather_objects(ctx, (ctx.rank, ctx.node_rank, ctx.local_rank))
    leaders = {node: rank for rank, node, local in members if local == 0}
    nodes = sorted(leaders)
    if len(nodes) < 2 or size_bytes <= 0:
        return None
    position = nodes.index(ctx.node_rank) if ctx.local_rank == 0 else None
    # Two nodes share one pair of links: one direction covers both.
    directions = (1,) if len(nodes) == 2 else (1, -1)
    elements = max(1, size_bytes // 4)
    send = torch.ones(elements, dtype=torch.float32, device=ctx.device)
    receive = torch.empty_like(send)
    timed: dict[tuple[int, int], list[float]] = {}
    for step in directions:
        for attempt in range(repeats + 1):
            dist.barrier()
            if position is None:
                continue
            to_node = nodes[(position + step) % len(nodes)]
            from_node = nodes[(position - step) % len(nodes)]
            start = _now(ctx)
            seconds = _exchange(ctx, send, receive, leaders[to_node], leaders[from_node],
                                start)
            if attempt:   # the first exchange opens the connection
                timed.setdefault((from_node, ctx.node_rank), []).append(seconds)
    dist.barrier()
    measured = sorted([a, b, statistics.median(times)] for (a, b), times in timed.items())
    every = all_gather_objects(ctx, measured)
    links = [{"from_node": a, "to_node": b, "s": s, "GBps": elements * 4 / s / 1e9}
             for found in every for a, b, s in found if s > 0]
    return {"bytes": elements * 4, "repeats": repeats, "links": links, "slow_node": None}
