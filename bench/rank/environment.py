"""The record's environment block as a rank sees it: every rank's device and host, and the
torch, CUDA, cuDNN, NCCL and driver versions. The torch-free parts (git, CPU, link, the
block's shape) are ``bench.provenance``'s."""
from __future__ import annotations

import ast
import importlib.util
import socket
from pathlib import Path

import torch

from bench.provenance import _run, cpu_model, environment, no_rank
from bench.rank import telemetry
from bench.rank.distributed import DistContext, all_gather_objects


def device_name(device: torch.device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model()


def rank_identity(ctx: DistContext) -> dict:
    """Which rank this is, on which host and device."""
    return {"rank": ctx.rank, "local_rank": ctx.local_rank, "node_rank": ctx.node_rank,
            "hostname": socket.gethostname(), "device": device_name(ctx.device)}


def rank_versions(device: torch.device) -> dict:
    """The torch, CUDA and NCCL this rank loaded, and its GPU's driver where NVML answers:
    the env block's own versions are rank 0's, and a job whose ranks disagree is flagged
    by the report (``bench.analysis.report.rank_disagreement``)."""
    nccl = None
    if torch.cuda.is_available():
        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl,
            "driver": telemetry.driver_version(device)}


def topology_matrix() -> str | None:
    """``nvidia-smi topo -m``: how this host's GPUs, NICs and CPUs connect (NVLink, PCIe
    switch, host bridge, socket); None where nvidia-smi is absent or fails."""
    return _run(["nvidia-smi", "topo", "-m"])


def rank_info(ctx: DistContext) -> dict:
    """What each rank reports about itself, gathered from all ranks into the record: who
    and where it is, its versions, and its GPU's settings (null on CPU; the host's
    ``nvidia-smi topo -m`` on each node's local rank 0 only)."""
    topology = topology_matrix() if ctx.device.type == "cuda" and ctx.local_rank == 0 \
        else None
    return {**rank_identity(ctx), **rank_versions(ctx.device),
            "gpu_settings": telemetry.gpu_settings(ctx.device, topology)}


def torchvision_version() -> str:
    """torchvision's ``__version__``, read from its version.py without importing it: the
    import costs a rank about a second before its first step, most of it torch._dynamo
    (torchvision.ops imports it). DDP's constructor imports torch._dynamo too, so a
    multi-process job keeps that part (now where its model is wrapped); a one-process job
    trains bare and first meets it in the traffic probe, after its timed steps. A model
    that needs torchvision imports it when it is built. The installed distribution's
    metadata would not do: it drops the local label (+cu130)."""
    spec = importlib.util.find_spec("torchvision")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        try:
            tree = ast.parse((Path(location) / "version.py").read_text())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                    any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
                return str(node.value.value)
    # Laid out otherwise (or absent, which the import reports as before): ask the module.
    import torchvision  # here only: the slow import is the last resort

    return torchvision.__version__


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
    versions = {"torch": torch.__version__, "torchvision": torchvision_version(),
                **_cuda_versions(), "torch_threads": torch.get_num_threads()}
    return environment(ranks, versions, ctx.local_world_size if ctx else None,
                       ctx.world_size if ctx else None)
