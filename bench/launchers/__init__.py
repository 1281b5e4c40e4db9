"""Ways to start a training job. The trainer does not know which one started it.

Each launcher turns a job into one command per node (``bench.launchers.nodes`` runs them):
``native`` (torchrun on this host), ``compose`` (a Compose project per node on this host),
``ssh`` (each node on its own host), ``netns`` (each node in its own network namespace
here, behind an emulated link).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench import gpus
from bench.launchers.nodes import JobOutcome, NodeCommand, NodeOutcome, run_nodes

if TYPE_CHECKING:
    from bench.matrix import Cell, MatrixConfig

Launch = Callable[["Cell", list, str, int, Path, Path], JobOutcome]


def select(cfg: MatrixConfig) -> Launch:
    """The launch function for the matrix's --launcher."""
    visible = gpus.visible_gpus()
    if cfg.launcher == "native":
        from bench.launchers import native

        def launch_native(cell, args, job_id, port, trainer_results, log_dir):
            commands = native.commands(cell.topology, args, master_port=port, job_id=job_id,
                                       results=trainer_results, rdzv_timeout=cfg.rdzv_timeout,
                                       module=cfg.module)
            return run_nodes(own_gpus(commands, cell.topology, args, visible),
                             deadline_s=cfg.deadline_s, log_dir=log_dir)

        return launch_native
    if cfg.launcher == "compose":
        from bench.launchers import compose

        compose.image_identity(cfg.image)  # a missing image: one line now, not a failed job
        def launch_compose(cell, args, job_id, port, trainer_results, log_dir):
            job = compose.ComposeJob(
                profile=cfg.profile, env_file=cfg.env_file,
                nnodes=cell.topology.nodes, nproc_per_node=cell.topology.procs,
                trainer_args=args, results_dir=cfg.results.parent,
                results_name=str(trainer_results.relative_to(cfg.results.parent)),
                image=cfg.image, master_port=port, deadline_s=cfg.deadline_s,
                module=cfg.module, rdzv_timeout=cfg.rdzv_timeout,
                gpus_per_node=gpus.assign(cell.topology, visible)
                if cfg.profile == "gpu" and visible else None)
            return compose.run(job, log_dir=log_dir)

        return launch_compose
    if cfg.launcher == "netns":
        from bench import netlab
        from bench.launchers import netns

        netlab.check_prerequisites()  # no root or no iproute2: a user error, before any job
        most = max(cell.topology.nodes for cell in cfg.cells)
        cpus = cfg.cpus_per_node or max(1, (os.cpu_count() or 1) // most)

        def launch_netns(cell, args, job_id, port, trainer_results, log_dir):
            try:
                if gpus.wants_gpus(args, visible):  # nodes in namespaces share this host
                    raise netlab.LabError("the netns launcher emulates CPU hosts: pass "
                                          "--device cpu after --")
                return netns.run(cell.topology, args, rate_bps=cfg.link_bps,
                                 cpus_per_node=cpus, master_port=port, job_id=job_id,
                                 results=trainer_results, rdzv_timeout=cfg.rdzv_timeout,
                                 module=cfg.module, deadline_s=cfg.deadline_s,
                                 log_dir=log_dir, lab_nodes=most)
            except netlab.LabError as error:  # this job's lab failed: a row, not a crash
                return failed_to_start("netlab", str(error))

        return launch_netns
    from bench.launchers import ssh

    return ssh.launcher(cfg)


def own_gpus(commands: list[NodeCommand], topology, args: list[str],
             visible: list[str]) -> list[NodeCommand]:
    """Each node simulated on this host gets its own GPUs (bench.gpus), in PCI order as
    nvidia-smi numbers them; a CPU job is left as it is."""
    if not gpus.wants_gpus(args, visible):
        return commands
    blocks = gpus.assign(topology, visible)
    return [dataclasses.replace(command, env={**(command.env or {}),
                                              "CUDA_VISIBLE_DEVICES": blocks[command.rank],
                                              "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
            for command in commands]


def failed_to_start(host: str, reason: str) -> JobOutcome:
    """The outcome of a job that never started, for the matrix to record as a failure."""
    node = NodeOutcome(0, host, 1, [reason], [reason])
    return JobOutcome([node], timed_out=False, seconds=0.0, culprit=node)
