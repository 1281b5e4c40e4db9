"""Where a number came from: software versions, hardware, nodes, image and git state.

Torch is imported only by what a rank calls (``collect`` with a job's context): the head
builds a failure row's environment (``collect(None)``) without it.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from bench.distributed import DistContext

# Environment prefixes whose values change communication behaviour.
COMM_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_")
_PACKAGE_DIR = Path(__file__).resolve().parent


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty). Inside the image the build passes the commit in BENCH_GIT_COMMIT."""
    baked = os.environ.get("BENCH_GIT_COMMIT")
    if baked:
        dirty = os.environ.get("BENCH_GIT_DIRTY")
        return baked, None if dirty is None else dirty == "1"
    commit = _run(["git", "rev-parse", "HEAD"], cwd=_PACKAGE_DIR)
    if commit is None:
        return None, None
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_PACKAGE_DIR)
    return commit, bool(status)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model()


def rank_info(ctx: DistContext) -> dict:
    """What each rank reports about itself; gathered from all ranks into the record."""
    return {"rank": ctx.rank, "local_rank": ctx.local_rank, "node_rank": ctx.node_rank,
            "hostname": socket.gethostname(), "device": device_name(ctx.device)}


def _cuda_versions() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"cuda": torch.version.cuda, "cudnn": None, "nccl": None, "driver": None}
    nccl = torch.cuda.nccl.version()
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return {
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
        "driver": driver.splitlines()[0] if driver else None,
    }


def link() -> dict | None:
    """The link between the nodes, when the launcher knows it (the emulated-link harness
    shapes it, so it sets BENCH_LINK_RATE in tc's spelling, e.g. 1gbit)."""
    rate = os.environ.get("BENCH_LINK_RATE")
    if not rate:
        return None
    from bench.units import parse_rate

    return {"rate": rate, "rate_bps": parse_rate(rate, "BENCH_LINK_RATE"),
            "kind": os.environ.get("BENCH_LINK_KIND", "stated")}


def _installed(package: str) -> str | None:
    """A package's installed version, read without importing it."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect(ctx: DistContext | None, *, gather: bool = True, on_rank: bool = False) -> dict:
    """The environment block of the record.

    With ``gather`` it is a collective (every rank must call it) and lists every rank; the
    failure path calls it without, so a dead peer cannot hang the record of what happened.
    Without a context (the process group never formed, or the head writes the row of a job
    that wrote none) nothing imports torch: versions come from the installed packages, and
    what only a running torch knows (CUDA, cuDNN, NCCL, threads) is null, unless
    ``on_rank`` says torch is loaded anyway (a rank whose process group did not form).
    """
    if ctx is None and not on_rank:  # the head: no torch
        ranks = [{"rank": None, "local_rank": None, "node_rank": None,
                  "hostname": socket.gethostname(), "device": None}]
        versions = {"torch": _installed("torch"), "torchvision": _installed("torchvision"),
                    "cuda": None, "cudnn": None, "nccl": None, "driver": None,
                    "torch_threads": None}
    else:
        import torch
        import torchvision

        from bench.distributed import all_gather_objects

        if ctx is None:  # the process group never formed
            ranks = [{"rank": None, "local_rank": None, "node_rank": None,
                      "hostname": socket.gethostname(), "device": None}]
        else:
            ranks = all_gather_objects(ctx, rank_info(ctx)) if gather else [rank_info(ctx)]
        versions = {"torch": torch.__version__, "torchvision": torchvision.__version__,
                    **_cuda_versions(), "torch_threads": torch.get_num_threads()}
    commit, dirty = git_state()
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "image_id": os.environ.get("BENCH_IMAGE_ID") or None,
        "image_digest": os.environ.get("BENCH_IMAGE_DIGEST") or None,
        "ranks": ranks,
        "hostnames": sorted({r["hostname"] for r in ranks}),
        "nnodes": len({r["node_rank"] for r in ranks}),
        "nproc_per_node": ctx.local_world_size if ctx else None,
        "world_size": ctx.world_size if ctx else None,
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        **versions,
        "link": link(),
        "comm_env": {k: v for k, v in sorted(os.environ.items())
                     if k.startswith(COMM_ENV_PREFIXES)},
    }
