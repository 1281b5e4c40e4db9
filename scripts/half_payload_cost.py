"""Whether gloo's all-reduce costs more on the values training's gradients hold than on the
sweep's small integers (issue 29: the half-precision cells).

The all-reduce sweep (``bench allreduce``) sends a check pattern of small integers, so its
float16 figures are for normal numbers. A trained-down gradient is not: once the trainer's
fixed synthetic batch is learnt, 98% of the gradient's elements lie below float16's
smallest normal (``scripts/hook_steps.py``), and a software float16 sum that handles
subnormals apart would cost more per element there. This times one all-reduce of the same
element count in each element type and each payload (the sweep's integers, normal values,
values half and wholly subnormal in float16, zeros), interleaved, every rank pinned to a CPU
of its own with one torch thread, after a barrier; the medians of wall time and of the
process's CPU time (gloo's threads included) per rank.

  GLOO_SOCKET_IFNAME=lo torchrun --nproc-per-node 2 --master-addr 127.0.0.1 \
      scripts/half_payload_cost.py --out results/reference/hook-steps/half-payload.json

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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from hook_cost import pinned_gloo_rank, positive_count  # noqa: E402

from bench.config import OneLineErrorParser  # noqa: E402
from bench.paths import path_arg  # noqa: E402

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def payloads(count: int, rank: int) -> dict[str, torch.Tensor]:
    """Each payload in float32, to be cast to each element type."""
    noise = torch.randn(count, generator=torch.Generator().manual_seed(rank))
    return {"the sweep's integers 0-7": (torch.arange(count) % 8).float(),
            "normal, ~1e-2": noise * 1e-2,
            "~1e-4 (float16: half subnormal)": noise * 1e-4,
            "~1e-6 (float16: all subnormal)": noise * 1e-6,
            "zeros": torch.zeros(count)}


def main() -> int:
    parser = OneLineErrorParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=positive_count, default=2 * 2**20)
    parser.add_argument("--tries", type=positive_count, default=40)
    parser.add_argument("--out", type=path_arg, required=True)
    args = parser.parse_args()
    rank, world = pinned_gloo_rank()
    tensors = {f"{dtype} | {name}": values.to(DTYPES[dtype])
               for dtype in DTYPES for name, values in payloads(args.elements, rank).items()}
    tried: dict[str, list[tuple[float, float]]] = {key: [] for key in tensors}
    for attempt in range(3 + args.tries):        # three untimed rounds first
        for key, tensor in tensors.items():
            work = tensor.clone()
            dist.barrier()
            cpu0, start = time.process_time(), time.perf_counter()
            dist.all_reduce(work)
            if attempt >= 3:
                tried[key].append((time.perf_counter() - start, time.process_time() - cpu0))
    mine = {key: [statistics.median(t for t, _ in values), statistics.median(c for _, c in values)]
            for key, values in tried.items()}
    subnormal = {key: ((t != 0) & (t.abs().float() < torch.finfo(t.dtype).tiny)).float()
                 .mean().item() for key, t in tensors.items()}
    gathered: list[dict | None] = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        report = {"elements": args.elements, "tries": args.tries, "torch": torch.__version__,
                  "utc_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "subnormal_share": subnormal, "ranks": gathered}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(table(report))
    dist.destroy_process_group()
    return 0


def table(report: dict) -> str:
    lines = [f"one all-reduce of {report['elements']} elements, {report['tries']} tries, "
             f"medians per rank, torch {report['torch']}", "",
             "| element type | payload | subnormal share | time ms (per rank) | "
             "CPU ms (per rank) |", "|---|---|---:|---|---|"]
    for key, share in report["subnormal_share"].items():
        dtype, payload = key.split(" | ")
        per = [r[key] for r in report["ranks"]]
        lines.append(f"| {dtype} | {payload} | {share:.2f} | "
                     f"{' / '.join(f'{t * 1e3:.2f}' for t, _ in per)} | "
                     f"{' / '.join(f'{c * 1e3:.2f}' for _, c in per)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
