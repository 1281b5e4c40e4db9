"""Process-group setup and small collectives, apart from the train loop.

The loop receives a ``DistContext`` and a wrapped model; it does not know whether torchrun,
Compose, SSH or Slurm started it. Everything here reads the standard torchrun variables
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK); without them the run is a
single process and no process group is made.
"""
from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import json
import os

import torch
import torch.distributed as dist

from bench.config import DistributedConfig

# The variables that choose the interface gloo and NCCL listen and connect on.
LOOPBACK_INTERFACE = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


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


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def keep_local_jobs_on_loopback(world_size: int) -> None:
    """Gloo and NCCL listen on one interface: the one named by GLOO_SOCKET_IFNAME and
    NCCL_SOCKET_IFNAME, else whatever the host name resolves to, often a LAN address. A job
    with one process, or whose master is a loopback address (no other host could reach
    it, so every node is on this one), then uses loopback: nothing of it listens where
    another host could connect. An interface the user named is kept."""
    if world_size == 1 or _is_loopback(os.environ.get("MASTER_ADDR", "")):
        for variable in LOOPBACK_INTERFACE:
            os.environ.setdefault(variable, "lo")


def separate_simulated_nodes(node_rank: int) -> None:
    """A node simulated beside others on one GPU host (its launcher gave it a block of the
    host's GPUs in BENCH_GPUS) gets a host identity of its own, NCCL_HOSTID. NCCL groups
    ranks into nodes by host identity (host name and boot id), and would otherwise treat
    the simulated nodes as one node and join them over NVLink, PCIe P2P or shared memory:
    a 2x1 would measure what a 1x2 does and no network at all. With an identity each, NCCL
    connects them through its network transport, as separate hosts are. The id names the
    job and the node, so that every rank of one node shares it; the row records it in
    ``env.comm_env``. An NCCL_HOSTID the user set is kept."""
    if os.environ.get("BENCH_GPUS") and "NCCL_HOSTID" not in os.environ:
        job = os.environ.get("TORCHELASTIC_RUN_ID") or "job"
        os.environ["NCCL_HOSTID"] = f"bench-{job}-node{node_rank}"


def init(cfg: DistributedConfig) -> DistContext:
    """Join the job described by the torchrun environment, with an explicit timeout."""
    rank, world_size = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)
    keep_local_jobs_on_loopback(world_size)
    local_rank = _env_int("LOCAL_RANK", 0)
    local_world_size = _env_int("LOCAL_WORLD_SIZE", 1)
    node_rank = _env_int("GROUP_RANK", _env_int("NODE_RANK", 0))
    separate_simulated_nodes(node_rank)
    if cfg.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    # The explicit timeout makes a dead or missing peer an error naming what timed out,
    # instead of a hang for the library default.
    options = {"backend": cfg.backend, "timeout": datetime.timedelta(seconds=cfg.timeout),
               **({"device_id": device} if device.type == "cuda" else {})}
    if world_size > 1:
        dist.init_process_group(**options)
    else:
        # One process still gets a (one-rank, in-memory) group: DDP and its comm hooks need
        # one, and the record then counts the gradient bytes a larger job would send.
        dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1, **options)
    return DistContext(rank=rank, local_rank=local_rank, world_size=world_size,
                       local_world_size=local_world_size, node_rank=node_rank,
                       device=device, backend=cfg.backend)


def shutdown(*, synchronized: bool) -> None:
    """Leave the job. After a successful run every rank first meets at a barrier, so no
    rank tears its connections down while a peer still uses them (seen as an abort at exit
    on the slower rank); after a failure peers may be gone, so nobody waits (and a job with
    peers does not call this after a failure at all: ``bench.rank.job._finish`` says why)."""
    if dist.is_available() and dist.is_initialized():
        if synchronized:
            dist.barrier()
        dist.destroy_process_group()


def collective_threads(ctx: DistContext) -> int | None:
    """The worker threads gloo runs the job's collectives on: each takes the next one
    queued, so as many run at once (DDP's buckets overlap); None on other backends, or
    where this torch does not say (its options name them ``_threads`` in 2.14, as its
    stub's ``threads``)."""
    if ctx.backend != "gloo":
        return None
    gloo = dist.group.WORLD._get_backend(torch.device("cpu"))  # type: ignore[union-attr]
    threads = next((getattr(gloo.options, name) for name in ("_threads", "threads")
                    if isinstance(getattr(gloo.options, name, None), int)), None)
    return threads if threads and threads > 0 else None


def barrier(ctx: DistContext) -> None:
    """Every rank waits here for the others (nothing to wait for in one process)."""
    if ctx.is_distributed:
        dist.barrier()


def all_gather_objects(ctx: DistContext, obj: object) -> list:
    """Every rank's ``obj`` (JSON-serialisable), in rank order (``[obj]`` for one process).

    Sent as JSON bytes in a tensor, not through ``all_gather_object``: that one unpickles
    whatever a peer sends, and a pickle can run code. A peer on the job's network can still
    send bad JSON, which fails the run; it cannot run anything here."""
    if not ctx.is_distributed:
        return [obj]
    device = _collective_device(ctx)
    payload = torch.tensor(list(json.dumps(obj).encode()), dtype=torch.uint8, device=device)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(ctx.world_size)]
    dist.all_gather(sizes, torch.tensor([payload.numel()], dtype=torch.int64, device=device))
    longest = max(int(size.item()) for size in sizes)
    padded = torch.zeros(longest, dtype=torch.uint8, device=device)
    padded[:payload.numel()] = payload
    gathered = [torch.empty(longest, dtype=torch.uint8, device=device)
                for _ in range(ctx.world_size)]
    dist.all_gather(gathered, padded)
    return [json.loads(bytes(chunk[:int(size.item())].tolist()).decode())
            for chunk, size in zip(gathered, sizes, strict=True)]


def max_across_ranks(ctx: DistContext, value: float) -> float:
    """The largest ``value`` over all ranks: the slowest rank sets the job's pace."""
    return max_each_across_ranks(ctx, [value])[0]


def max_each_across_ranks(ctx: DistContext, values: list[float]) -> list[float]:
    """Each of ``values``, the largest over all ranks (the ranks pass as many)."""
    if not ctx.is_distributed:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=_collective_device(ctx))
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


def sum_across_ranks(ctx: DistContext, values: list[float]) -> list[float]:
    if not ctx.is_distributed:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=_collective_device(ctx))
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def _collective_device(ctx: DistContext) -> torch.device:
    # NCCL only reduces device tensors; gloo only host ones.
    return ctx.device if ctx.backend == "nccl" else torch.device("cpu")
