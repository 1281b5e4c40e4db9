"""Ways to start a job. The workload does not know which one started it.

Every launcher follows ``bench.host.launchers.base.Launcher``: built from its own options
section, it renders a ``JobSpec`` as the native job it would start, or launches it.
``native`` (torchrun on this host), ``compose`` (a Compose project per node on this host),
``ssh`` (each node on its own host), ``netns`` (each node in its own network namespace
here, behind an emulated link), ``slurm`` (one Slurm job, one srun task per node), ``k8s``
(an Indexed Job or a Kubeflow PyTorchJob, one pod per node).

``registry`` is the one table from a launcher's name to its options class (which declares
its flags and checks itself) and its launcher class; ``LAUNCHERS`` and ``build`` are its.
"""
from __future__ import annotations

from bench.host.launchers.base import JobSpec, Launcher, render_commands
from bench.host.launchers.registry import LAUNCHERS, build

__all__ = ["LAUNCHERS", "JobSpec", "Launcher", "build", "render_commands"]
