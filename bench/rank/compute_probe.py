"""What the CPUs a rank computes on do to its collectives, and its collectives to them:
two probes the all-reduce sweep runs on request (``--beside-compute``, ``--lockstep``) for
``bench predict``'s model of training on CPU.

- beside compute: a size's all-reduces timed while a compute thread works beside them,
  and the compute they took from it;
- lockstep: the ranks doing the same stretch of compute, then a sync, over and over, and
  how long each sync waits for the slowest rank; with a workload (``--lockstep-model``),
  also the job's own training step as the stretch.
"""
from __future__ import annotations

import bisect
import math
import statistics
import threading
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F

from bench.config import ModelConfig
from bench.rank import distributed
from bench.rank.models import build_model, input_shape
from bench.spread import deciles

# The compute beside the all-reduces: matmuls on the rank's torch threads, as backward's
# kernels are. 512 x 512 in float32: three 1 MiB matrices, past a core's L2 cache as
# backward's working set is, so the copies gloo makes evict what the compute needs as
# they would in training (a 128 x 128 matmul lives in L2 and would not see it).
BUSY_MATRIX = 512
# How long the compute runs alone, before and after the all-reduces beside it: its rate
# there is what it loses against.
ALONE_S = 0.15


class BusyCompute:
    """A thread doing fixed CPU work in a loop, stamping each piece done, so the work done
    in any span of time can be counted afterwards."""

    def __init__(self) -> None:
        self._a = torch.randn(BUSY_MATRIX, BUSY_MATRIX)
        self._out = torch.empty_like(self._a)
        self.stamps: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="busy-compute", daemon=True)

    def _work(self) -> None:
        while not self._stop.is_set():
            torch.mm(self._a, self._a, out=self._out)
            self.stamps.append(time.perf_counter())

    def __enter__(self) -> BusyCompute:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def done_by(self, when: float) -> float:
        """Pieces done by ``when``, the one under way counted by how far it is (each piece
        taken to progress evenly from the previous stamp to its own)."""
        return pieces_done_by(self.stamps, when)

    def done_between(self, start: float, end: float) -> float:
        return self.done_by(end) - self.done_by(start)


def pieces_done_by(stamps: list[float], when: float) -> float:
    """How many pieces, stamped in order as each was done, were done by ``when``: the
    whole ones, and the share of the one under way since the stamp before it."""
    done = bisect.bisect_right(stamps, when)
    if done == 0 or done == len(stamps):
        return float(done)
    previous, this = stamps[done - 1], stamps[done]
    return done + (when - previous) / (this - previous)


def compute_lost_s(alone_done: float, alone_s: float, beside_done: float, beside_s: float,
                   threads: int) -> float:
    """The compute, in CPU seconds of its ``threads``, that did not happen over
    ``beside_s`` against its rate alone: none where it ran as fast or faster (noise), and
    at most all of it."""
    if alone_done <= 0 or alone_s <= 0 or beside_s <= 0:
        return 0.0
    lost_share = 1 - (beside_done / beside_s) / (alone_done / alone_s)
    return max(0.0, min(1.0, lost_share)) * threads * beside_s


def beside_compute(ctx: distributed.DistContext, iters: int,
                   collective: Callable[[], object]) -> dict:
    """``iters`` calls of ``collective`` (one size's all-reduces) again, each rank's compute
    thread working beside them: their
    time (the slowest rank's), and the compute they took from it, in CPU seconds of the
    rank's compute threads (the mean over ranks).

    That is what a CPU job's backward loses while gloo's threads copy, sum and wait on the
    same CPUs, and the kernel moves the bytes: everything the process-time figure
    (``cpu_time_s``) leaves out, such as network work in interrupt context, and the
    scheduler's choice of who runs, counted as the work the compute did not do. The
    compute's rate alone is taken before and after, around the all-reduces beside it.

    Each call is timed too: its deciles (``time_deciles_s``, each call's slowest rank) are
    how the calls spread. Beside compute they are heavy-tailed (a rank now and then waits
    for its CPU), and a chain of them racing backward's compute costs by that spread."""
    with BusyCompute() as busy:
        time.sleep(ALONE_S)            # the thread starts and warms up
        before = time.perf_counter()
        time.sleep(ALONE_S)
        calls = []
        start = time.perf_counter()
        for _ in range(iters):
            collective()
            calls.append(time.perf_counter())
        end = calls[-1] if calls else start
        time.sleep(ALONE_S)
        after = time.perf_counter()
    lost = compute_lost_s(busy.done_between(before, start) + busy.done_between(end, after),
                          start - before + after - end, busy.done_between(start, end),
                          end - start, torch.get_num_threads()) / iters
    seconds = distributed.max_across_ranks(ctx, (end - start) / iters)
    lost = distributed.sum_across_ranks(ctx, [lost])[0] / ctx.world_size
    each = distributed.max_each_across_ranks(
        ctx, [done - began for began, done in zip([start, *calls], calls, strict=False)])
    # The schema reads a positive figure under a nanosecond as garbage: that is none.
    return {"time_s": seconds, "compute_lost_s": lost if lost >= 1e-9 else 0.0,
            "time_deciles_s": deciles(each)}


# The stretches of compute between syncs the lockstep probe times (seconds), and how many
# of each: DDP's sync intervals run from a PowerSGD bucket's few ms to a whole step.
LOCKSTEP_STRETCHES = ((0.01, 40), (0.04, 30), (0.16, 20), (0.32, 12), (0.64, 8))


def lockstep(ctx: distributed.DistContext) -> list[dict]:
    """The ranks computing in lockstep: the same work on every rank, then a sync (a
    one-element all-reduce), over and over, as DDP's steps are. Per stretch of compute:
    its mean time, and the mean over syncs of how much longer the slowest rank's stretch
    took than the ranks' mean, what each sync costs beyond the compute a one-node run
    shows (a rank's own stretches vary: the scheduler, the machine's other work).

    The work per stretch is a count of pieces (512 x 512 matmuls) for its length at the
    slowest rank's rate alone (its median piece); every rank does that count. With one
    rank there is no wait."""
    piece = torch.randn(BUSY_MATRIX, BUSY_MATRIX)
    out = torch.empty_like(piece)
    sync = torch.zeros(1)

    def compute(pieces: int) -> float:
        start = time.perf_counter()
        for _ in range(pieces):
            torch.mm(piece, piece, out=out)
        return time.perf_counter() - start

    compute(5)                                     # warm up
    piece_s = distributed.max_across_ranks(ctx, typical_piece_s(compute))
    rows = []
    for stretch_s, count in LOCKSTEP_STRETCHES:
        pieces = max(1, round(stretch_s / piece_s))
        distributed.barrier(ctx)
        own, calls = [], []
        for _ in range(count):
            own.append(compute(pieces))
            calls.append(_synced(ctx, sync))
        rows.append({**in_lockstep(ctx, own, calls), "syncs": count})
    return rows


# Pieces timed one by one to size the stretches.
CALIBRATION_PIECES = 21


def typical_piece_s(compute: Callable[[int], float]) -> float:
    """One piece's time at the rank's rate alone: the median of single pieces, so a
    preemption or a neighbour's burst during the calibration (a mean would take it in)
    does not shrink every stretch after it."""
    return statistics.median(compute(1) for _ in range(CALIBRATION_PIECES))


def _synced(ctx: distributed.DistContext, sync: torch.Tensor) -> float:
    """The sync after a stretch: a one-element all-reduce, and how long it took here."""
    start = time.perf_counter()
    if ctx.is_distributed:
        dist.all_reduce(sync)
    return time.perf_counter() - start


def in_lockstep(ctx: distributed.DistContext, own: list[float],
                calls: list[float]) -> dict:
    """Every rank's stretch times between the same syncs, and its sync's: the stretches'
    mean (``compute_s``); the mean over syncs of how much longer the slowest rank's stretch
    took than the ranks' mean (``wait_s``); and the mean over syncs of the slowest rank's
    sync (``sync_call_s``). That rank came last, its peers were waiting: its all-reduce
    is the call's own cost after a stretch of compute, with no wait in it, where the
    sweep's calls run back to back."""
    every = distributed.all_gather_objects(ctx, list(zip(own, calls, strict=True)))
    syncs = list(zip(*every, strict=True))
    wait = statistics.fmean(max(t for t, _ in ranks) - statistics.fmean(t for t, _ in ranks)
                            for ranks in syncs)
    last = statistics.fmean(max(ranks)[1] for ranks in syncs)
    # The schema reads a positive figure under a nanosecond as garbage: that is none.
    return {"compute_s": statistics.fmean(t for ranks in syncs for t, _ in ranks),
            "wait_s": wait if wait >= 1e-9 else 0.0,
            "sync_call_s": last if last >= 1e-9 else 0.0}


# The workload's steps in lockstep: a few untimed (allocations, the first backward), then
# as many as the trainer's communication probe takes (--comm-probe-steps' default).
WORKLOAD_WARMUP_STEPS = 3
WORKLOAD_STEPS = 25
# A block of the phase pairs: this long, and at least this many steps.
PHASE_BLOCK_S = 1.0
PHASE_BLOCK_STEPS = 4
# Synthetic data's classes, as the trainer's (bench.rank.data): the same last layer.
SYNTHETIC_CLASSES = 1000


def lockstep_workload(ctx: distributed.DistContext, model_cfg: ModelConfig,
                      batch_size: int, phase_pairs: int = 0) -> dict:
    """The job's own training step (forward, backward, SGD with momentum, on synthetic
    data, no gradient sync) as the stretch between syncs: its mean time, and the mean over
    syncs of how much longer the slowest rank's step took than the ranks' mean.

    A network's steps (their memory traffic, their many small kernels) need not keep the
    pace a matmul does: on the README's demo an experiment saw resnet18's own steps wait 25
    ms a step in lockstep where the matmul probe charged 9-10; this probe, on two later
    runs of the demo, read 7.0 and 8.3 ms, near the matmuls'
    (results/reference/missing-cost/lockstep-workload). Measured each time, not assumed."""
    torch.manual_seed(0)
    model = build_model(model_cfg, SYNTHETIC_CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs = torch.randn(batch_size, *input_shape(model_cfg))
    labels = torch.randint(0, SYNTHETIC_CLASSES, (batch_size,))
    sync = torch.zeros(1)

    def compute() -> float:
        """Forward and backward: what DDP's last gradient sync comes after."""
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(inputs), labels).backward()
        return time.perf_counter() - start

    def update() -> float:
        start = time.perf_counter()
        optimizer.step()
        return time.perf_counter() - start

    def step() -> float:
        return compute() + update()

    def steps(count: int) -> tuple[list[float], list[float]]:
        own, calls = [], []
        for _ in range(count):
            own.append(step())
            calls.append(_synced(ctx, sync))
        return own, calls

    steps(WORKLOAD_WARMUP_STEPS)
    distributed.barrier(ctx)
    row = {"model": model_cfg.model, "image_size": model_cfg.image_size,
           "batch_size": batch_size,
           "mlp_width": model_cfg.mlp_width if model_cfg.model == "mlp" else None,
           "mlp_depth": model_cfg.mlp_depth if model_cfg.model == "mlp" else None,
           **in_lockstep(ctx, *steps(WORKLOAD_STEPS)), "syncs": WORKLOAD_STEPS}
    if ctx.is_distributed and phase_pairs:
        row["phase_pairs"], row["optimizer_phase_pairs"] = _phase_pairs(
            ctx, compute, update, sync, phase_pairs,
            distributed.max_across_ranks(ctx, row["compute_s"]))
    return row


def _phase_pairs(ctx: distributed.DistContext, compute: Callable[[], float],
                 update: Callable[[], float], sync: torch.Tensor, pairs: int,
                 step_s: float) -> tuple[list[list[float]], list[list[float]]]:
    """The job's steps in phase against out of phase: ``pairs`` pairs of blocks, each
    pair [median step in phase, median step out of phase], the ranks' mean; and the same
    pairs of the optimizer's part of the step alone.

    In phase, a sync between backward and the optimizer, where DDP's last gradient sync
    is, keeps the ranks running forward, backward and the optimizer at the same moments,
    as DDP's ranks do. Out of phase, the odd ranks start the block half a step late and
    nothing syncs inside it, as a one-node cell and the neighbour job beside it run. Steps
    are timed without their sync. Hosts on machines of their own read about 1; emulated
    hosts sharing one machine's caches, memory and cores took 1.01-1.07 as long in phase
    on this 2-CPU VM, per workload (issue 29), so the prediction stretches a one-node
    timeline by it. The optimizer apart, because it moves every parameter, gradient and
    momentum through memory just after the sync that lines the hosts up: on two emulated
    hosts of one CPU resnet18's (batch 8, 32 px) took 11.7-11.9 ms with the two ranks'
    optimizers at the same moments and 7.8-7.9 with one of them 8 ms late
    (results/reference/powersgd-wake/), where its whole step read about 1.03. Each pair
    runs its blocks one after the other, in turn first, so the machine's drift falls on
    both alike."""
    block = max(PHASE_BLOCK_STEPS, math.ceil(PHASE_BLOCK_S / step_s))
    steps, optimizer = [], []
    for pair in range(pairs):
        medians: dict[bool, tuple[float, float]] = {}
        for in_phase in ((True, False) if pair % 2 == 0 else (False, True)):
            distributed.barrier(ctx)
            if not in_phase and ctx.rank % 2 == 1:
                time.sleep(step_s / 2)
            own, updates = [], []
            for _ in range(block):
                computed = compute()
                if in_phase:
                    dist.all_reduce(sync)
                updates.append(update())
                own.append(computed + updates[-1])
            medians[in_phase] = (statistics.median(own), statistics.median(updates))
        steps.append([medians[True][0], medians[False][0]])
        optimizer.append([medians[True][1], medians[False][1]])
    every = distributed.all_gather_objects(ctx, [steps, optimizer])

    def mean_over_ranks(part: int) -> list[list[float]]:
        return [[statistics.fmean(rank[part][i][0] for rank in every),
                 statistics.fmean(rank[part][i][1] for rank in every)] for i in range(pairs)]
    return mean_over_ranks(0), mean_over_ranks(1)
