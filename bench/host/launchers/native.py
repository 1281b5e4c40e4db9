"""Launch a job natively: one torchrun per node, all on this host (nodes on loopback)."""
from __future__ import annotations

import contextlib
import dataclasses
import getpass
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.host import contract, gpus
from bench.host.checks import preflight
from bench.host.launchers.base import JobSpec, render_commands
from bench.host.launchers.flags import derived
from bench.host.launchers.nodes import JobOutcome, NodeCommand, run_nodes
from bench.options import ConfigError
from bench.paths import remove_tree_inside
from bench.topology import Topology

LOOPBACK = "127.0.0.1"


def torchrun_argv(topology: Topology, node_rank: int | str, *, master_addr: str,
                  master_port: int | str, rdzv_timeout: int, job_id: str, results: str,
                  trainer_args: list[str], python: str = sys.executable,
                  module: str = "bench.rank.train", nproc: int | str | None = None,
                  store_bind: str | None = None) -> list[str]:
    """One node's torchrun command (``bench.host.contract.torchrun_argv``) for a topology.
    ``nproc``: the node's process count where the caller knows it only on the node (a
    shell variable); by default the topology's count for ``node_rank``. ``store_bind``:
    the one address the rendezvous store listens on, where the caller knows it."""
    return contract.torchrun_argv(nnodes=topology.nodes, node_rank=node_rank,
                                  nproc_per_node=topology.procs_on(int(node_rank))
                                  if nproc is None else nproc,
                                  master_addr=master_addr,
                                  master_port=master_port, rdzv_timeout=rdzv_timeout,
                                  job_id=job_id, module=module, results=results,
                                  workload_args=trainer_args, python=python,
                                  store_bind=store_bind)


def commands(topology: Topology, trainer_args: list[str], *, master_port: int, job_id: str,
             results: Path, rdzv_timeout: int,
             module: str = "bench.rank.train") -> list[NodeCommand]:
    # Every node is on this host: the rendezvous listens on loopback only.
    return [NodeCommand(rank, f"node{rank}", torchrun_argv(
                topology, rank, master_addr=LOOPBACK, master_port=master_port,
                rdzv_timeout=rdzv_timeout, job_id=job_id, results=str(results),
                trainer_args=trainer_args, module=module, store_bind=LOOPBACK))
            for rank in range(topology.nodes)]


def own_gpus(commands: list[NodeCommand], topology, args: list[str],
             visible: list[str]) -> list[NodeCommand]:
    """Each node simulated on this host gets its own GPUs (bench.host.gpus), in PCI order as
    nvidia-smi numbers them; a CPU job is left as it is."""
    if not gpus.wants_gpus(args, visible):
        return commands
    blocks = gpus.assign(topology, visible)
    return [dataclasses.replace(command, env={**(command.env or {}),
                                              "CUDA_VISIBLE_DEVICES": blocks[command.rank],
                                              "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
            for command in commands]


@contextlib.contextmanager
def job_temp_dir() -> Iterator[Path]:
    """A temporary directory for one job's processes on this host, removed after the job:
    torchrun leaves a torchelastic_* directory in the temp dir on every run, and libraries
    their files; through TMPDIR (``in_temp_dir``) they all land here instead."""
    parent = Path(tempfile.gettempdir())
    path = Path(tempfile.mkdtemp(prefix="bench-job-", dir=parent))
    try:
        yield path
    finally:
        try:
            remove_tree_inside(path, parent, "TMPDIR")
        except (OSError, ConfigError) as error:  # the job's row matters more than its litter
            print(f"warning: could not remove the job's temporary directory {path} "
                  f"({error})", file=sys.stderr)


def in_temp_dir(commands: list[NodeCommand], path: Path) -> list[NodeCommand]:
    """The commands with TMPDIR set to ``path``. The compile cache stays where torch keeps
    it between jobs (its default is under the temp dir): recompiling every job would only
    slow the matrix down."""
    inductor_cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(
        Path(tempfile.gettempdir()) / f"torchinductor_{_user()}")
    return [dataclasses.replace(command, env={**(command.env or {}), "TMPDIR": str(path),
                                              "TORCHINDUCTOR_CACHE_DIR": inductor_cache})
            for command in commands]


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NativeOptions:
    """--launcher native: every node a torchrun on this host. No flags of its own."""

    visible_gpus: tuple[str, ...] = derived("visible_gpus", ())   # shared out among the nodes


class NativeLauncher:
    name = "native"

    def __init__(self, options: NativeOptions) -> None:
        self.options = options

    def preflight(self, topologies: list[Topology]) -> None:
        preflight.require(preflight.native())

    def commands(self, job: JobSpec) -> list[NodeCommand]:
        args = list(job.workload_args)
        return own_gpus(commands(job.topology, args, master_port=job.master_port,
                                 job_id=job.job_id, results=job.results,
                                 rdzv_timeout=job.rdzv_timeout, module=job.module),
                        job.topology, args, list(self.options.visible_gpus))

    def render(self, job: JobSpec) -> str:
        return render_commands(self.commands(job))

    def launch(self, job: JobSpec) -> JobOutcome:
        with job_temp_dir() as temp_dir:
            return run_nodes(in_temp_dir(self.commands(job), temp_dir),
                             deadline_s=job.deadline_s, log_dir=job.log_dir)
