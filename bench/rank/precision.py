"""Which precision a job's steps run in: ``--precision auto`` resolved, ``bf16`` checked.

Both depend on every GPU of the job, so the ranks decide once the job has formed, before
anything is built. ``auto`` is the lab's convention: bf16 autocast where every rank's GPU
computes bfloat16 natively (compute capability 8.0 or later: A100, H100, L40S, RTX 30xx and
40xx), else fp16 autocast with its GradScaler (a V100 or a T4); on CPU it is fp32, what CPU
runs have always measured. Every rank resolves the same way, so a job trains in one
precision, and the record's ``precision`` says which. ``bf16`` asked where a GPU lacks it
fails the job in one line naming that GPU and the fix, instead of training on torch's
emulation or failing deep inside a kernel.
"""
from __future__ import annotations

import socket
import sys

import torch

from bench.rank.distributed import DistContext, all_gather_objects
from bench.rank.job import ExpectedFailure


class PrecisionUnsupported(ExpectedFailure):
    """bf16 asked where a rank's GPU has no native bfloat16: a setting to change, recorded
    in one line without a stack trace."""


def gpu_report(device: torch.device) -> dict:
    """This rank's GPU as the choice needs it. Native bf16 only: torch's own
    ``is_bf16_supported()`` says yes on a V100 or T4 too, where it emulates bfloat16."""
    major, minor = torch.cuda.get_device_capability(device)
    return {"bf16": bool(torch.cuda.is_bf16_supported(including_emulation=False)),
            "gpu": torch.cuda.get_device_name(device), "capability": f"{major}.{minor}",
            "host": socket.gethostname()}


def resolve_precision(asked: str, ctx: DistContext) -> str:
    """The precision the job trains in, one of ``bench.config.TRAINED_PRECISIONS``. A
    collective where the job runs on GPUs and asked auto or bf16: every rank calls it (the
    device and ``asked`` are the same on every rank, so they all do). Raises
    PrecisionUnsupported for bf16 on a GPU without it."""
    if ctx.device.type != "cuda":
        return "fp32" if asked == "auto" else asked
    if asked not in ("auto", "bf16"):
        return asked
    ranks = all_gather_objects(ctx, gpu_report(ctx.device))
    lacking = [(rank, report) for rank, report in enumerate(ranks) if not report["bf16"]]
    if not lacking:
        return "bf16"
    if asked == "bf16":
        raise PrecisionUnsupported(refusal(lacking, len(ranks)))
    if ctx.is_leader:
        rank, first = lacking[0]
        print(f"[bench] --precision auto: fp16 with a GradScaler, as rank {rank}'s "
              f"{first['gpu']} (compute capability {first['capability']}) has no native "
              "bf16", file=sys.stderr, flush=True)
    return "fp16"


def refusal(lacking: list[tuple[int, dict]], world_size: int) -> str:
    """One line: the first rank whose GPU lacks bf16, how many more do, and the fix."""
    rank, first = lacking[0]
    more = f"; so do {len(lacking) - 1} more of the job's {world_size} ranks" \
        if len(lacking) > 1 else ""
    return (f"--precision=bf16: rank {rank}'s GPU ({first['gpu']} on {first['host']}, compute "
            f"capability {first['capability']}) has no native bfloat16, which needs 8.0 or "
            f"later{more}: use --precision fp16, or auto, which picks fp16 there (make: "
            "PRECISION=fp16 or PRECISION=auto)")
