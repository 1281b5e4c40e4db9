"""Whole training steps under DDP with each comm hook, as the trainer runs them, timed part by
part on every rank (issue 29: the half-precision cells).

``scripts/hook_cost.py`` timed backward alone, after a barrier, on a model that never
trained. The grid's cells train: a fixed synthetic batch, SGD with momentum, no barrier
inside a step, so the loss falls towards zero and with it the gradients, and a slow rank's
forward is waited for at the next sync. This script runs that: one copy of the workload per
hook (none, fp16, bf16), alike at the start, trained in turn in rounds of ``--steps`` steps,
each step's forward, backward (until DDP returns from it) and optimizer step timed on every
rank. Per round and hook it keeps each rank's medians, the loss, and how the gradient's
elements sit against float16's range (the share below its smallest normal, 6.1e-5, and the
share it rounds to zero, under 3e-8), since gloo sums float16 element by element.

  torchrun --nproc-per-node 2 scripts/hook_steps.py --model vit_tiny --batch-size 16 \
      --rounds 8 --steps 20 --out results/reference/hook-steps/vittiny-b16.json

Rank side (torch): a measurement, not part of the stack.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.config import OneLineErrorParser  # noqa: E402
from bench.paths import path_arg  # noqa: E402
from bench.rank.models import build_model, input_shape  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hook_cost import (  # noqa: E402
    add_workload_flags,
    pinned_gloo_rank,
    positive_count,
    workload_config,
)

CLASSES = 1000      # synthetic data's classes, as the trainer's
HOOKS = ("none", "fp16", "bf16")
HALF_TINY = torch.finfo(torch.float16).tiny          # float16's smallest normal
HALF_ZERO = 2.0 ** -25                               # under this, float16 rounds to 0


def main() -> int:
    parser = OneLineErrorParser(description=__doc__.split("\n\n")[0])
    add_workload_flags(parser)
    parser.add_argument("--rounds", type=positive_count, default=8)
    parser.add_argument("--steps", type=positive_count, default=20, help="steps a round, per hook")
    parser.add_argument("--hooks", default="none,fp16,bf16")
    parser.add_argument("--bucket-view", action="store_true",
                        help="gradient_as_bucket_view=True, as the trainer's DDP")
    parser.add_argument("--observed", action="store_true",
                        help="every hook (none: the plain all-reduce hook) inside an observer "
                             "that stamps each bucket and chains a callback, as the trainer's")
    parser.add_argument("--out", type=path_arg, required=True)
    args = parser.parse_args()
    names = args.hooks.split(",")
    if not names or not set(names) <= set(HOOKS) or len(set(names)) != len(names):
        parser.error(f"--hooks {args.hooks!r}: give each of {', '.join(HOOKS)} at most once, "
                     "comma-separated")
    cfg = workload_config(args, parser)
    rank, world = pinned_gloo_rank()
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    hooks = {"none": None, "fp16": default_hooks.fp16_compress_hook,
             "bf16": default_hooks.bf16_compress_hook}
    torch.manual_seed(0)
    model = build_model(cfg, CLASSES)
    torch.manual_seed(1 + rank)          # each rank its own fixed batch, as the trainer's
    inputs = torch.randn(args.batch_size, *input_shape(cfg))
    labels = torch.randint(0, CLASSES, (args.batch_size,))
    runs = {}
    for name in names:
        copy = build_model(cfg, CLASSES)
        copy.load_state_dict(model.state_dict())
        ddp = DistributedDataParallel(copy, gradient_as_bucket_view=args.bucket_view)
        hook = hooks[name] or (default_hooks.allreduce_hook if args.observed else None)
        if hook is not None and args.observed:
            ddp.register_comm_hook(Observer(hook), observed)
        elif hook is not None:
            ddp.register_comm_hook(None, hook)
        runs[name] = (ddp, torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9))

    def step(name: str) -> tuple[float, float, float, float]:
        ddp, optimizer = runs[name]
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(inputs), labels)
        forward = time.perf_counter()
        loss.backward()
        backward = time.perf_counter()
        optimizer.step()
        end = time.perf_counter()
        return forward - start, backward - forward, end - backward, loss.item()

    def grad_shares(name: str) -> tuple[float, float]:
        grads = torch.cat([p.grad.flatten() for p in runs[name][0].parameters()
                           if p.grad is not None]).abs()
        return ((grads < HALF_TINY) & (grads >= HALF_ZERO)).float().mean().item(), \
            (grads < HALF_ZERO).float().mean().item()

    for name in names:                    # the first iterations rebuild the buckets
        for _ in range(3):
            step(name)
    rounds = []
    for index in range(args.rounds):
        row = {}
        for name in names:
            parts = [step(name) for _ in range(args.steps)]
            half_subnormal, half_zero = grad_shares(name)
            row[name] = {"forward_s": statistics.median(p[0] for p in parts),
                         "backward_s": statistics.median(p[1] for p in parts),
                         "optimizer_s": statistics.median(p[2] for p in parts),
                         "loss": parts[-1][3], "grad_half_subnormal": half_subnormal,
                         "grad_half_zero": half_zero}
        rounds.append(row)
        if rank == 0:
            print(f"round {index}: " + "; ".join(
                f"{n} f {r['forward_s'] * 1e3:.1f} b {r['backward_s'] * 1e3:.1f} "
                f"loss {r['loss']:.2g}" for n, r in row.items()), file=sys.stderr, flush=True)
    gathered: list[list | None] = [None] * world
    flags = {"bucket_view": args.bucket_view, "observed": args.observed}
    dist.all_gather_object(gathered, rounds)
    if rank == 0:
        report = {"model": args.model, "batch_size": args.batch_size, "steps": args.steps,
                  **flags,
                  "torch": torch.__version__,
                  "utc_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "ranks": gathered}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(table(report))
    dist.destroy_process_group()
    return 0


class Observer:
    """A hook with each bucket's ready, issued and done times stamped (as
    ``bench.rank.traffic._ObservedHook`` does; the stamps are kept and dropped)."""

    def __init__(self, hook) -> None:
        self.hook, self.stamps = hook, []

    def done(self, future: torch.futures.Future) -> torch.Tensor:
        self.stamps.append(time.perf_counter())
        return future.value()


def observed(observer: Observer, bucket):  # bucket: dist.GradBucket (no annotation: DDP checks it)
    observer.stamps.append(time.perf_counter())
    future = observer.hook(None, bucket).then(observer.done)
    observer.stamps.append(time.perf_counter())
    del observer.stamps[:-64]
    return future


def table(report: dict) -> str:
    """Per round and hook: each rank's forward and backward medians (ms), the loss and the
    gradient's shares against float16's range."""
    ranks = report["ranks"]
    lines = [f"{report['model']} b{report['batch_size']}, {report['steps']} steps a round "
             f"per hook, torch {report['torch']}", "",
             "| round | hook | forward ms (per rank) | backward ms (per rank) | loss | "
             "grad: fp16 subnormal / rounds to 0 |", "|---|---|---|---|---|---|"]
    for index, row in enumerate(ranks[0]):
        for name in row:
            per = [r[index][name] for r in ranks]
            forward = " / ".join(f"{p['forward_s'] * 1e3:.1f}" for p in per)
            backward = " / ".join(f"{p['backward_s'] * 1e3:.1f}" for p in per)
            lines.append(
                f"| {index} | {name} | {forward} | {backward} | "
                f"{row[name]['loss']:.2g} | {row[name]['grad_half_subnormal']:.2f} / "
                f"{row[name]['grad_half_zero']:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
