"""Launch a job natively: one torchrun per node, all on this host (nodes on loopback)."""
from __future__ import annotations

import contextlib
import dataclasses
import getpass
import os
import tempfile
from pathlib import Path

from bench.host import contract, gpus
from bench.host.checks import preflight
from bench.host.contract import NodeSpec
from bench.host.launchers.base import JobSpec, on_shared_gpus, render_commands
from bench.host.launchers.flags import derived
from bench.host.launchers.nodes import JobOutcome, NodeCommand, run_nodes
from bench.paths import temporary_tree
from bench.topology import Topology

LOOPBACK = "127.0.0.1"


def node_command(node: NodeSpec) -> NodeCommand:
    """One node as a torchrun on this host. Every node is here: the rendezvous listens on
    loopback only."""
    argv = contract.torchrun_argv(node, master_addr=LOOPBACK, master_port=node.master_port,
                                  store_bind=LOOPBACK)
    return NodeCommand(node.rank, f"node{node.rank}", argv, device_env(node))


def device_env(node: NodeSpec) -> dict[str, str] | None:
    """A node sharing this host's GPUs sees only its own, numbered as nvidia-smi does, and
    says it is one of several on this host (BENCH_GPUS, as the image's entrypoint is told):
    its ranks then take a host identity of their own for NCCL
    (``bench.rank.distributed.separate_simulated_nodes``)."""
    if node.devices is None:
        return None
    return {"CUDA_VISIBLE_DEVICES": node.devices, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "BENCH_GPUS": node.devices}


def job_temp_dir() -> contextlib.AbstractContextManager[Path]:
    """A temporary directory for one job's processes on this host, removed after the job:
    libraries leave their files in the temp dir; through TMPDIR (``in_temp_dir``) they all
    land here instead."""
    return temporary_tree("bench-job-", "the job's temporary directory")


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

    def nodes(self, job: JobSpec) -> tuple[NodeSpec, ...]:
        """The job's nodes, each on its own GPUs of this host where the job runs on GPUs;
        a CPU job's as they are."""
        visible = list(self.options.visible_gpus)
        if gpus.wants_gpus(list(job.workload_args), visible):
            return on_shared_gpus(job, visible)
        return job.nodes

    def commands(self, job: JobSpec) -> list[NodeCommand]:
        """What render prints and launch starts (in the job's own temporary directory)."""
        return [node_command(node) for node in self.nodes(job)]

    def render(self, job: JobSpec) -> str:
        return render_commands(self.commands(job))

    def launch(self, job: JobSpec) -> JobOutcome:
        with job_temp_dir() as temp_dir:
            return run_nodes(in_temp_dir(self.commands(job), temp_dir),
                             deadline_s=job.deadline_s, log_dir=job.log_dir)
