"""The one shape of the host side: a job spec, and launchers that start it.

The matrix schedules and records; a launcher launches; nothing else crosses between them.
A ``JobSpec`` says what runs (the workload module and its argv), on what topology, on which
port, where its record goes, and how long it may take; it turns itself, once, into one
``NodeSpec`` per node (``bench.host.contract``), which is all a launcher needs of a node. A
launcher is built from its own options section and does two things with a spec:

- ``render(job)``: the native job it would start (torchrun lines, Compose commands, ssh
  lines, an sbatch script), as text, without starting anything;
- ``launch(job)``: start it, wait, stop it whatever happens, and return a ``JobOutcome``.

Each launcher renders every node's spec in its own form, and launches exactly the commands
it renders (render and launch build them in one place).

No torch here: this is the host side.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from bench.host import gpus
from bench.host.contract import NodeSpec
from bench.host.launchers.nodes import JobOutcome, NodeCommand
from bench.shell import command_line, single_line
from bench.topology import Topology

# The stack's checkout on this host: where its Compose files and its venv are.
REPO = Path(__file__).resolve().parents[3]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class JobSpec:
    """One job, whoever launches it."""

    job_id: str                      # unique; also finds the job's processes again
    module: str                      # the workload: bench.rank.train or bench.rank.allreduce
    workload_args: tuple[str, ...]   # its flags (without --results)
    topology: Topology
    master_port: int
    rdzv_timeout: int                # seconds a node waits for the others to join
    results: Path                    # the file rank 0 appends the record to
    log_dir: Path                    # each node's output, and launcher files (scripts)
    deadline_s: float                # the whole job, start to end
    # One spec per node, in rank order: made once, from the fields above.
    nodes: tuple[NodeSpec, ...] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(
            NodeSpec(rank=rank, nnodes=self.topology.nodes, nproc=self.topology.procs_on(rank),
                     master_port=self.master_port, rdzv_timeout=self.rdzv_timeout,
                     job_id=self.job_id, module=self.module,
                     workload_args=self.workload_args, results=self.results, workdir=REPO)
            for rank in range(self.topology.nodes)))


def on_shared_gpus(job: JobSpec, visible: Sequence[str]) -> tuple[NodeSpec, ...]:
    """The job's nodes where all of them run on this host, each with its own block of this
    host's ``visible`` GPUs (``bench.host.gpus.assign``: node i the i-th block, its process
    count wide); ConfigError when there are too few."""
    blocks = gpus.assign(job.topology, list(visible))
    return tuple(dataclasses.replace(node, devices=block)
                 for node, block in zip(job.nodes, blocks, strict=True))


class Launcher(Protocol):
    """What the matrix needs from a launcher."""

    name: str

    def preflight(self, topologies: list[Topology]) -> None:
        """Checks that need this host or the cluster (an image present, hosts answering,
        enough GPUs for every topology), before the first job; raises ConfigError or
        RuntimeError. Rendering needs none of it."""
        ...

    def render(self, job: JobSpec) -> str:
        """The native job, readable and runnable by hand; starts nothing."""
        ...

    def launch(self, job: JobSpec) -> JobOutcome:
        """Run the job to its end (or its deadline) and stop everything it started."""
        ...


def render_commands(commands: list[NodeCommand], cwd: Path | None = None) -> str:
    """One shell line per node, under a comment naming it: ``cd DIR && env K=V ... argv``,
    every word quoted (``bench.shell.command_line``)."""
    return "\n".join(f"# {single_line('host', command.host)} (node {command.rank})\n"
                     + command_line(command.argv, env=command.env, cwd=cwd)
                     for command in commands)
