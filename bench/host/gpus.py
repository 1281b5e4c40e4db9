"""This host's GPUs, and how nodes simulated on it share them (no torch: the host side).

Several "nodes" of a job started on one host (the native and netns launchers, Compose
without ``--only-this-node``) would otherwise all see every GPU, and each node's local rank
0 would take cuda:0: NCCL then fails with "Duplicate GPU detected". Each simulated node
gets its own GPUs instead, through CUDA_VISIBLE_DEVICES, and a topology that needs more
GPUs than the host has is refused before anything starts.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping

from bench.options import ConfigError
from bench.topology import Topology


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs jobs on this host may use: CUDA_VISIBLE_DEVICES when set (an empty value
    hides them all), else every GPU nvidia-smi lists; none on a host without the driver."""
    environ = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [gpu.strip() for gpu in environ["CUDA_VISIBLE_DEVICES"].split(",")
                if gpu.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    count = sum(line.startswith("GPU ") for line in out.stdout.splitlines())
    return [str(i) for i in range(count)]


def assign(topology: Topology, gpus: list[str]) -> list[str]:
    """Each simulated node's CUDA_VISIBLE_DEVICES: node i gets the i-th block of ``procs``
    GPUs. Raises ConfigError when the topology needs more than there are."""
    needed = topology.devices
    if needed > len(gpus):
        raise ConfigError("--topologies", str(topology),
                          f"needs {needed} GPUs on this host ({topology.nodes} node(s) "
                          + (f"x {topology.procs}" if not topology.uneven
                             else f"with {topology}") + f"), which has {len(gpus)}: use "
                          "fewer, or run the nodes on their own hosts (--launcher ssh)")
    blocks, start = [], 0
    for count in topology.counts:
        blocks.append(",".join(gpus[start:start + count]))
        start += count
    return blocks


def wants_gpus(trainer_args: list[str], gpus: list[str]) -> bool:
    """Whether a job with these trainer flags would run on GPUs here: --device cuda, or the
    default (auto) on a host that has any."""
    device = "auto"
    for i, arg in enumerate(trainer_args):
        if arg == "--device" and i + 1 < len(trainer_args):
            device = trainer_args[i + 1]
        elif arg.startswith("--device="):
            device = arg.split("=", 1)[1]
    return device == "cuda" or (device == "auto" and bool(gpus))
