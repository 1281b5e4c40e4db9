"""What an all-reduce beside backward takes from it, against what it takes from the matmuls
the sweep's beside-compute probe times it with (issue 29: the half-precision hooks' cells).

The prediction charges each bucket's all-reduce on CPU with what the sweep measured it to
take from a matmul thread beside it (``bench allreduce --beside-compute``), in the element
type the hook sends (float16 for fp16). The half-precision cells still come out optimistic,
backward ending later on N nodes than predicted. Is an all-reduce beside backward costlier
than beside matmuls, and more so in float16, whose sum gloo does element by element?

Two ranks on loopback, each pinned to a CPU of its own and one torch thread, in lockstep
(a barrier before each try). Each try: the compute alone, or with one all-reduce of the
gradient's element count issued just before it (float32, float16, bfloat16), the compute
being either the workload's backward (its forward untimed before it) or matmuls lasting as
long as that backward alone. What the compute lost: its time beside the all-reduce less
its time alone (medians over tries, interleaved). The all-reduce's own time and CPU too.
Last, backward under DDP with its own hooks (none, fp16, bf16), on one rank and on both:
how much the step up to backward's end grows, the hook's whole path included.

  torchrun --nproc-per-node 2 scripts/hook_cost.py --model smallcnn --batch-size 16 \
      --tries 60 --out results/reference/hook-cost/smallcnn-b16.json

Rank side (torch): a measurement, not part of the stack.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.config import ConfigError, ModelConfig, OneLineErrorParser  # noqa: E402
from bench.paths import path_arg  # noqa: E402
from bench.rank.models import build_model, input_shape  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
MATRIX = 512    # the sweep's beside-compute matmul (bench.rank.compute_probe.BUSY_MATRIX)


def positive_count(text: str) -> int:
    """A count flag's value (tries, rounds, steps, elements, a batch): a whole number of at
    least 1, or argparse's one-line error naming the flag."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def add_workload_flags(parser: argparse.ArgumentParser) -> None:
    """The workload's flags, as this script and ``hook_steps.py`` take them."""
    parser.add_argument("--model", default="smallcnn")
    parser.add_argument("--batch-size", type=positive_count, default=16)
    parser.add_argument("--image-size", type=positive_count, default=None)
    parser.add_argument("--mlp-width", type=positive_count, default=1024)
    parser.add_argument("--mlp-depth", type=positive_count, default=2)


def workload_config(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ModelConfig:
    """The workload's model config, validated before any rank starts: a bad value is the
    parser's one-line error (exit 2)."""
    try:
        return ModelConfig(model=args.model, image_size=args.image_size,
                           mlp_width=args.mlp_width, mlp_depth=args.mlp_depth)
    except ConfigError as error:
        parser.error(str(error))


def pinned_gloo_rank() -> tuple[int, int]:
    """(rank, world size) of this torchrun process, pinned to one CPU of its own (its local
    rank's) with one torch thread, in a gloo process group."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[int(os.environ["LOCAL_RANK"]) % len(cpus)]})
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    return rank, world


def main() -> int:
    parser = OneLineErrorParser(description=__doc__.split("\n\n")[0])
    add_workload_flags(parser)
    parser.add_argument("--tries", type=positive_count, default=60)
    parser.add_argument("--out", type=path_arg, required=True)
    args = parser.parse_args()
    cfg = workload_config(args, parser)
    rank, world = pinned_gloo_rank()
    model = build_model(cfg, 10)
    batch = torch.randn(args.batch_size, *input_shape(cfg))
    labels = torch.randint(0, 10, (args.batch_size,))
    elements = sum(p.numel() for p in model.parameters())
    a = torch.randn(MATRIX, MATRIX)
    out = torch.empty_like(a)

    def forward() -> torch.Tensor:
        return torch.nn.functional.cross_entropy(model(batch), labels)

    def backward(loss: torch.Tensor | None = None) -> float:
        loss = forward() if loss is None else loss
        start = time.perf_counter()
        loss.backward()
        return time.perf_counter() - start

    def matmuls(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            torch.mm(a, a, out=out)
        return time.perf_counter() - start

    for _ in range(5):
        backward()
    alone = statistics.median(backward() for _ in range(20))
    one_mm = statistics.median(matmuls(1) for _ in range(20))
    # The same count on every rank: the lockstep needs equal work.
    count = max(1, round(alone / one_mm))
    most = torch.tensor([count])
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    count = int(most)
    tensors = {name: torch.ones(elements, dtype=dtype) for name, dtype in DTYPES.items()}

    def attempt(compute: str, dtype: str | None) -> tuple[float, float, float]:
        """(compute s, all-reduce s, all-reduce's process CPU s beyond the compute's)."""
        # The forward first, untimed: the all-reduce goes beside backward alone, as DDP's
        # buckets do.
        loss = forward() if compute == "backward" else None
        dist.barrier()
        cpu0, start = time.process_time(), time.perf_counter()
        work = dist.all_reduce(tensors[dtype], async_op=True) if dtype else None
        seconds = backward(loss) if compute == "backward" else matmuls(count)
        if work is not None:
            work.wait()
        total = time.perf_counter() - start
        return seconds, total, time.process_time() - cpu0

    conditions = [(compute, dtype) for compute in ("backward", "matmul")
                  for dtype in (None, *DTYPES)]
    for compute, dtype in conditions:      # warm every path
        attempt(compute, dtype)
    tried: dict[str, list[tuple[float, float, float]]] = {}
    for _ in range(args.tries):
        for compute, dtype in conditions:
            tried.setdefault(f"{compute} {dtype or 'alone'}", []).append(attempt(compute, dtype))
    # Each collective alone too: its time and CPU with nothing beside it.
    for name in DTYPES:
        for _ in range(args.tries):
            dist.barrier()
            cpu0, start = time.process_time(), time.perf_counter()
            dist.all_reduce(tensors[name])
            tried.setdefault(f"all-reduce {name} alone", []).append(
                (0.0, time.perf_counter() - start, time.process_time() - cpu0))
    for key, seconds in ddp_backwards(model, cfg, batch, labels, args.tries).items():
        tried[key] = [(s, 0.0, 0.0) for s in seconds]
    mine = {key: [statistics.median(v[i] for v in values) for i in range(3)]
            for key, values in tried.items()}
    gathered: list[dict | None] = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        report = {"model": args.model, "batch_size": args.batch_size,
                  "elements": elements, "matmuls_per_try": count, "tries": args.tries,
                  "torch": torch.__version__, "utc_time": time.strftime(
                      "%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "ranks": gathered}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(table(report))
    dist.destroy_process_group()
    return 0


def ddp_backwards(model: torch.nn.Module, cfg: ModelConfig, batch: torch.Tensor,
                  labels: torch.Tensor, tries: int) -> dict[str, list[float]]:
    """Backward under DDP with its own comm hooks (none, fp16, bf16; DDP's default
    buckets, as the grid's cells): on a group of this rank alone (what the one-node probe
    runs) and on every rank. DDP's backward returns once every bucket's all-reduce and its
    hook's callback are done, so its growth from one rank to all is what the hook costs
    the step up to backward's end, the all-reduce's wire time included."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    hooks = {"none": None, "fp16": default_hooks.fp16_compress_hook,
             "bf16": default_hooks.bf16_compress_hook}
    world, rank = dist.get_world_size(), dist.get_rank()
    alone = [dist.new_group([r]) for r in range(world)][rank]  # every rank makes every group
    wrapped = {}
    for ranks, group in ((1, alone), (world, dist.group.WORLD)):
        for name, hook in hooks.items():
            copy = build_model(cfg, 10)
            copy.load_state_dict(model.state_dict())
            ddp = DistributedDataParallel(copy, process_group=group)
            if hook is not None:
                ddp.register_comm_hook(group, hook)
            wrapped[f"ddp {ranks} rank(s) {name}"] = ddp

    def timed(ddp: DistributedDataParallel) -> float:
        ddp.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(ddp(batch), labels)
        dist.barrier()
        start = time.perf_counter()
        loss.backward()
        return time.perf_counter() - start

    for ddp in wrapped.values():        # the first iterations rebuild the buckets
        for _ in range(5):
            timed(ddp)
    out: dict[str, list[float]] = {key: [] for key in wrapped}
    for _ in range(tries):
        for key, ddp in wrapped.items():
            out[key].append(timed(ddp))
    return out


def table(report: dict) -> str:
    """Per compute and element type, the mean over ranks of the medians (ms): the compute's
    time, what it lost against alone, the all-reduce's time alone and its CPU alone."""
    ranks = report["ranks"]

    def mean(key: str, index: int) -> float:
        return statistics.fmean(r[key][index] for r in ranks) * 1e3

    lines = [f"{report['model']} b{report['batch_size']}: {report['elements']} gradient "
             f"elements, {report['tries']} tries, torch {report['torch']}", "",
             "| compute | beside | compute ms | lost ms | all-reduce alone ms | its CPU ms |",
             "|---|---|---:|---:|---:|---:|"]
    for compute in ("backward", "matmul"):
        alone = mean(f"{compute} alone", 0)
        lines.append(f"| {compute} | nothing | {alone:.2f} | - | - | - |")
        for name in DTYPES:
            key = f"{compute} {name}"
            lines.append(f"| {compute} | {name} | {mean(key, 0):.2f} | "
                         f"{mean(key, 0) - alone:.2f} | "
                         f"{mean(f'all-reduce {name} alone', 1):.2f} | "
                         f"{mean(f'all-reduce {name} alone', 2):.2f} |")
    world = len(ranks)
    if f"ddp {world} rank(s) none" in ranks[0]:
        lines += ["", "| DDP backward, hook | 1 rank ms | "
                  f"{world} ranks ms | grew ms |", "|---|---:|---:|---:|"]
        for hook in ("none", "fp16", "bf16"):
            one, all_ = mean(f"ddp 1 rank(s) {hook}", 0), mean(f"ddp {world} rank(s) {hook}", 0)
            lines.append(f"| {hook} | {one:.2f} | {all_:.2f} | {all_ - one:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
