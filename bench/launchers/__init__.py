"""Ways to start a training job. The trainer does not know which one started it.

Each launcher turns a job into one command per node (``bench.launchers.nodes`` runs them):
``native`` (torchrun on this host), ``compose`` (a Compose project per node on this host),
``ssh`` (each node on its own host).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench.launchers.nodes import JobOutcome, run_nodes

if TYPE_CHECKING:
    from bench.matrix import Cell, MatrixConfig

Launch = Callable[["Cell", list, str, int, Path, Path], JobOutcome]


def select(cfg: MatrixConfig) -> Launch:
    """The launch function for the matrix's --launcher."""
    if cfg.launcher == "native":
        from bench.launchers import native

        def launch_native(cell, args, job_id, port, trainer_results, log_dir):
            commands = native.commands(cell.topology, args, master_port=port, job_id=job_id,
                                       results=trainer_results, rdzv_timeout=cfg.rdzv_timeout)
            return run_nodes(commands, deadline_s=cfg.deadline_s, log_dir=log_dir)

        return launch_native
    if cfg.launcher == "compose":
        from bench.launchers import compose

        def launch_compose(cell, args, job_id, port, trainer_results, log_dir):
            job = compose.ComposeJob(
                profile=cfg.profile, env_file=cfg.env_file,
                nnodes=cell.topology.nodes, nproc_per_node=cell.topology.procs,
                trainer_args=args, results_dir=cfg.results.parent,
                results_name=str(trainer_results.relative_to(cfg.results.parent)),
                image=cfg.image, master_port=port, deadline_s=cfg.deadline_s)
            return compose.run(job, log_dir=log_dir)

        return launch_compose
    from bench.launchers import ssh

    return ssh.launcher(cfg)
