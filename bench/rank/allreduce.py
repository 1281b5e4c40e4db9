"""``torchrun -m bench.rank.allreduce`` / ``python -m bench allreduce``: all-reduce bandwidth.

Sweeps the message size, doubling from ``--min-size`` to ``--max-size``, and reports for
each size the time of one all-reduce, algbw and busbw, with nccl-tests' definitions:

    algbw = size / time
    busbw = algbw * 2(n-1)/n        (n ranks; the ring all-reduce's traffic per rank)

busbw is what one link carries, so it is comparable across world sizes and against the
link's rate. Each timed size is followed by a check run, as nccl-tests' ``-c``: every rank
fills a known pattern, and every element of the reduced result must equal the sum computed
locally. A wrong value fails the command (exit 1) and the record says where.

NCCL on GPUs, gloo on CPU; the launchers and topologies are the trainer's (``bench matrix
--workload allreduce``). On several nodes NCCL may pick a tree algorithm whose busbw is not
the ring's traffic: set ``NCCL_ALGO=Ring`` to measure the network (see results/README.md).
"""
from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from bench.allreduce_config import (  # noqa: F401  (the sweep's config, re-exported)
    DEFAULT_MAX_SIZE,
    DTYPE_BYTES,
    MAX_MESSAGE_BYTES,
    PROG,
    AllreduceConfig,
    bandwidths,
    bus_factor,
    headline,
    message_sizes,
    skeleton,
)
from bench.config import DistributedConfig
from bench.rank import distributed, front, job
from bench.rank.clock import make_clock
from bench.rank.compute_probe import (
    PHASE_BLOCK_S,
    WORKLOAD_STEPS,
    beside_compute,
    lockstep,
    lockstep_workload,
)
from bench.units import format_size

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64}
assert {k: v.itemsize for k, v in DTYPES.items()} == DTYPE_BYTES  # one list, two worlds
# The check pattern cycles through 0..PATTERN_PERIOD-1: small integers, whose sums over
# up to 32 ranks stay exact even in bfloat16 (8 significant bits).
PATTERN_PERIOD = 8
MAX_CHECKED_RANKS = 32
class WrongResult(job.ExpectedFailure):
    """An all-reduce returned a value other than the sum of the ranks' inputs."""

    status = "wrong_result"


def pattern(count: int, rank: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Rank ``rank``'s check input: small integers, different on every rank and element."""
    values = (torch.arange(count, device=device) + 3 * rank) % PATTERN_PERIOD
    return values.to(dtype)


def expected_sum(count: int, world_size: int, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
    """The sum over all ranks of ``pattern``, computed locally in int64 (exact)."""
    index = torch.arange(count, device=device)
    total = torch.zeros(count, dtype=torch.int64, device=device)
    for rank in range(world_size):
        total += (index + 3 * rank) % PATTERN_PERIOD
    return total.to(dtype)


def find_wrong(result: torch.Tensor, expected: torch.Tensor) -> tuple[int, str | None]:
    """(how many elements differ, the first one described) for one rank's result."""
    wrong = (result != expected).nonzero()
    if not wrong.numel():
        return 0, None
    index = int(wrong[0])
    return wrong.numel(), (f"first at index {index}: got {result[index].item()}, expected "
                           f"{expected[index].item()}")


def check_all_ranks(ctx: distributed.DistContext, result: torch.Tensor,
                    expected: torch.Tensor, size: int) -> int:
    """Every rank checks its own result, then all learn the verdict, so a wrong value on
    any rank fails every rank together instead of leaving the others waiting. Raises
    WrongResult naming the ranks and the first wrong element; returns 0 when all agree."""
    count, detail = find_wrong(result, expected)
    verdicts = distributed.all_gather_objects(ctx, (ctx.rank, count, detail))
    bad = [(rank, n, where) for rank, n, where in verdicts if n]
    if bad:
        rank, n, where = bad[0]
        raise WrongResult(
            f"all-reduce of {format_size(size)}: {sum(b[1] for b in bad)} wrong element(s) "
            f"on rank(s) {', '.join(str(b[0]) for b in bad)}; rank {rank}: {n} of "
            f"{result.numel()} wrong, {where}")
    return 0


Collective = Callable[[torch.Tensor], object]


def _default_collective(tensor: torch.Tensor) -> object:
    return dist.all_reduce(tensor)


def sweep(cfg: AllreduceConfig, ctx: distributed.DistContext,
          collective: Collective = _default_collective) -> list[dict]:
    """Time and check every size; one row per size. A collective: every rank calls it.

    ``collective`` is the all-reduce under test (the tests pass one that corrupts).
    """
    dtype = DTYPES[cfg.dtype]
    clock = make_clock(ctx.device)
    rows = []
    for size in cfg.sizes:
        count = size // dtype.itemsize
        buffer = pattern(count, ctx.rank, dtype, ctx.device)
        for _ in range(cfg.warmup_iters):
            collective(buffer)
        distributed.barrier(ctx)
        start, cpu_start = clock(), time.process_time()
        for _ in range(cfg.iters):
            collective(buffer)
        elapsed = (clock() - start) / cfg.iters
        cpu = (time.process_time() - cpu_start) / cfg.iters
        # The slowest rank sets the time, as a job waits for it.
        seconds = distributed.max_across_ranks(ctx, elapsed)
        # What one all-reduce costs a rank's CPUs (all its threads, user and system): on a
        # CPU job, gloo's copies and sums take this from the training compute beside it.
        cpu_s = distributed.sum_across_ranks(ctx, [cpu])[0] / ctx.world_size
        algbw, busbw = bandwidths(count * dtype.itemsize, seconds, ctx.world_size)
        row = {"size_bytes": count * dtype.itemsize, "count": count, "time_s": seconds,
               "cpu_time_s": cpu_s, "algbw_GBps": algbw, "busbw_GBps": busbw, "wrong": None}
        if cfg.beside_compute:
            distributed.barrier(ctx)
            row["beside_compute"] = beside_compute(ctx, cfg.iters,
                                                   functools.partial(collective, buffer))
        if cfg.check:
            # A fresh pattern: the timed buffer has been summed into itself many times.
            checked = pattern(count, ctx.rank, dtype, ctx.device)
            collective(checked)
            row["wrong"] = check_all_ranks(
                ctx, checked, expected_sum(count, ctx.world_size, dtype, ctx.device), size)
        rows.append(row)
        if ctx.is_leader:
            print(_row_text(row), file=sys.stderr, flush=True)
    return rows


HEADER = f"{'size':>10} {'count':>12} {'time (us)':>12} {'algbw GB/s':>11} " \
         f"{'busbw GB/s':>11} {'busbw Gbit/s':>13} {'#wrong':>7}"


def _figure(value: float | None, width: int, scale: float = 1.0) -> str:
    """A bandwidth cell: n/a where there is none (one rank)."""
    return f"{'n/a':>{width}}" if value is None else f"{value * scale:>{width}.3f}"


def _row_text(row: dict) -> str:
    wrong = "n/a" if row["wrong"] is None else str(row["wrong"])
    return (f"{format_size(row['size_bytes']):>10} {row['count']:>12} "
            f"{row['time_s'] * 1e6:>12.1f} {_figure(row['algbw_GBps'], 11)} "
            f"{_figure(row['busbw_GBps'], 11)} {_figure(row['busbw_GBps'], 13, 8)} "
            f"{wrong:>7}")


def summarize(rows: list[dict]) -> dict:
    """The figures a table needs without the whole curve; the bandwidths null where the
    rows have none (one rank)."""
    largest = rows[-1] if rows else None
    return {"busbw_peak_GBps": max((r["busbw_GBps"] for r in rows
                                    if r["busbw_GBps"] is not None), default=None),
            "busbw_largest_GBps": largest["busbw_GBps"] if largest else None,
            "largest_size_bytes": largest["size_bytes"] if largest else None}


def run(cfg: AllreduceConfig, collective: Collective = _default_collective) -> int:
    """Sweep, record, and return the exit code (0 ok, 1 failed or wrong)."""

    def measure(ctx: distributed.DistContext, rec: dict) -> None:
        if ctx.is_leader:
            print(f"[bench] all-reduce over {ctx.world_size} rank(s), {cfg.backend}, "
                  f"{cfg.dtype}, {format_size(cfg.sizes[0])} to {format_size(cfg.sizes[-1])}"
                  + ("" if ctx.world_size > 1 else "; one rank: nothing crosses a link, "
                     "so there is no bandwidth (n/a): this checks the results only"),
                  file=sys.stderr)
            print(HEADER, file=sys.stderr, flush=True)
        rec["sizes"] = sweep(cfg, ctx, collective)
        rec.update(summarize(rec["sizes"]))
        if cfg.lockstep:
            rec["lockstep"] = lockstep(ctx)
        workload = cfg.lockstep_workload()
        if workload is not None:
            if ctx.is_leader:
                print(f"[bench] lockstep: {workload.model} at batch {cfg.lockstep_batch_size}, "
                      f"{WORKLOAD_STEPS} steps, then {cfg.lockstep_phase_pairs} pairs of "
                      f"blocks in and out of phase (each {PHASE_BLOCK_S:g} s or more)",
                      file=sys.stderr, flush=True)
            rec["lockstep_workload"] = lockstep_workload(ctx, workload,
                                                         cfg.lockstep_batch_size,
                                                         cfg.lockstep_phase_pairs)

    return job.run(PROG, skeleton(cfg), cfg.results,
                   DistributedConfig(device=cfg.device, backend=cfg.backend,
                                     timeout=cfg.timeout),
                   measure, headline)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return front.main("bench.rank.allreduce", argv, prog, run)


if __name__ == "__main__":
    job.exit_process(main())
