"""Process-group setup and DDP wrapping, apart from the train loop.

The loop receives a ``DistContext`` and a wrapped model; it does not know whether torchrun,
Compose, SSH or Slurm started it. Everything here reads the standard torchrun variables
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK); without them the run is a
single process and no process group is made.
"""
from __future__ import annotations

import dataclasses
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from bench.config import DistributedConfig


@dataclasses.dataclass(frozen=True, slots=True)
class DistContext:
    """Where this process sits in the job."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    device: torch.device
    backend: str

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_leader(self) -> bool:
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value in (None, "") else int(value)


def init(cfg: DistributedConfig) -> DistContext:
    """Join the job described by the torchrun environment, with an explicit timeout."""
    rank, world_size = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)
    local_rank = _env_int("LOCAL_RANK", 0)
    local_world_size = _env_int("LOCAL_WORLD_SIZE", 1)
    node_rank = _env_int("GROUP_RANK", _env_int("NODE_RANK", 0))
    if cfg.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if world_size > 1:
        # The explicit timeout makes a dead or missing peer an error naming what timed out,
        # instead of a hang for the library default.
        dist.init_process_group(
            backend=cfg.backend, timeout=datetime.timedelta(seconds=cfg.timeout),
            **({"device_id": device} if device.type == "cuda" else {}))
    return DistContext(rank=rank, local_rank=local_rank, world_size=world_size,
                       local_world_size=local_world_size, node_rank=node_rank,
                       device=device, backend=cfg.backend)


def shutdown(*, synchronized: bool) -> None:
    """Leave the job. After a successful run every rank first meets at a barrier, so no
    rank tears its connections down while a peer still uses them (seen as an abort at exit
    on the slower rank); after a failure peers may be gone, so nobody waits."""
    if dist.is_available() and dist.is_initialized():
        if synchronized:
            dist.barrier()
        dist.destroy_process_group()


class GradientTraffic:
    """Counts the gradient bytes DDP hands to all-reduce, bucket by bucket.

    Counted from the buckets DDP actually sends (after any compression a comm hook would
    apply), not from the parameter count.
    """

    def __init__(self) -> None:
        self.bytes = 0
        self.calls = 0

    def reset(self) -> None:
        self.bytes = self.calls = 0


# DDP checks the bucket annotation by identity, which a stringified annotation (from the
# __future__ import) fails; so the parameter carries none.
def _counting_allreduce(traffic: GradientTraffic, bucket):  # bucket: dist.GradBucket
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    buffer = bucket.buffer()
    traffic.bytes += buffer.numel() * buffer.element_size()
    traffic.calls += 1
    return default_hooks.allreduce_hook(None, bucket)


def wrap_model(model: nn.Module, ctx: DistContext, cfg: DistributedConfig,
               traffic: GradientTraffic) -> nn.Module:
    """DDP around the model when there are peers; the bare model for a single process."""
    if not ctx.is_distributed:
        return model
    ddp = DistributedDataParallel(
        model, device_ids=[ctx.local_rank] if ctx.device.type == "cuda" else None,
        bucket_cap_mb=cfg.bucket_cap_mb, static_graph=cfg.static_graph)
    ddp.register_comm_hook(traffic, _counting_allreduce)
    return ddp


def all_gather_objects(ctx: DistContext, obj: object) -> list:
    """Every rank's ``obj``, in rank order (just ``[obj]`` for a single process)."""
    if not ctx.is_distributed:
        return [obj]
    gathered: list = [None] * ctx.world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def max_across_ranks(ctx: DistContext, value: float) -> float:
    """The largest ``value`` over all ranks: the slowest rank sets the job's pace."""
    if not ctx.is_distributed:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=_collective_device(ctx))
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor.item())


def sum_across_ranks(ctx: DistContext, values: list[float]) -> list[float]:
    if not ctx.is_distributed:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=_collective_device(ctx))
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def _collective_device(ctx: DistContext) -> torch.device:
    # NCCL only reduces device tensors; gloo only host ones.
    return ctx.device if ctx.backend == "nccl" else torch.device("cpu")
