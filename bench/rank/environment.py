"""The record's environment block as a rank sees it: every rank's device and host, and the
torch, CUDA, cuDNN, NCCL and driver versions. The torch-free parts (git, CPU, link, the
block's shape) are ``bench.provenance``'s."""
from __future__ import annotations

import socket

import torch
import torchvision

from bench.provenance import _run, cpu_model, environment, no_rank
from bench.rank.distributed import DistContext, all_gather_objects


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


def collect(ctx: DistContext | None, *, gather: bool = True) -> dict:
    """The environment block of the record.

    With ``gather`` it is a collective (every rank must call it) and lists every rank; the
    failure path calls it without, so a dead peer cannot hang the record of what happened.
    Without a context the process group never formed: this host only."""
    if ctx is None:
        ranks = no_rank()
    else:
        ranks = all_gather_objects(ctx, rank_info(ctx)) if gather else [rank_info(ctx)]
    versions = {"torch": torch.__version__, "torchvision": torchvision.__version__,
                **_cuda_versions(), "torch_threads": torch.get_num_threads()}
    return environment(ranks, versions, ctx.local_world_size if ctx else None,
                       ctx.world_size if ctx else None)
