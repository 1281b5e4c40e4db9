"""Ways to start a job. The workload does not know which one started it.

Every launcher follows ``bench.host.launchers.base.Launcher``: built from its own options
section, it renders a ``JobSpec`` as the native job it would start, or launches it.
``native`` (torchrun on this host), ``compose`` (a Compose project per node on this host),
``ssh`` (each node on its own host), ``netns`` (each node in its own network namespace
here, behind an emulated link), ``slurm`` (one Slurm job, one srun task per node), ``k8s``
(an Indexed Job or a Kubeflow PyTorchJob, one pod per node).
"""
from __future__ import annotations

from bench.host.launchers.base import JobSpec, Launcher, render_commands

LAUNCHERS = ("native", "compose", "ssh", "netns", "slurm", "k8s")

__all__ = ["LAUNCHERS", "JobSpec", "Launcher", "build", "render_commands"]


def build(name: str, options) -> Launcher:
    """The launcher called ``name``, from its options section (checked where it was parsed).
    Checks that need the host (an image present, root for namespaces) run here, before
    any job starts."""
    if name == "native":
        from bench.host.launchers.native import NativeLauncher

        return NativeLauncher(options)
    if name == "compose":
        from bench.host.launchers.compose import ComposeLauncher

        return ComposeLauncher(options)
    if name == "netns":
        from bench.host.launchers.netns import NetnsLauncher

        return NetnsLauncher(options)
    if name == "ssh":
        from bench.host.launchers.ssh import SshLauncher

        return SshLauncher(options)
    if name == "slurm":
        from bench.host.launchers.slurm import SlurmLauncher

        return SlurmLauncher(options)
    if name == "k8s":
        from bench.host.launchers.k8s import K8sLauncher

        return K8sLauncher(options)
    raise ValueError(f"unknown launcher {name!r}")
