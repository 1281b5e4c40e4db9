"""This host's GPUs, and how nodes simulated on it share them (no torch: the host side).

Several "nodes" of a job started on one host (the native and netns launchers, Compose
without ``--only-this-node``) would otherwise all see every GPU, and each node's local rank
0 would take cuda:0: NCCL then fails with "Duplicate GPU detected". Each simulated node
gets its own GPUs instead, through CUDA_VISIBLE_DEVICES, and a topology that needs more
GPUs than the host has is refused before anything starts.

A GPU in MIG mode gives a process one MIG device (a slice) at most: ranks placed on it by
index would run on a slice, or fail. Such a placement is refused in one line with the fix;
a one-rank job on one slice named by CUDA_VISIBLE_DEVICES=MIG-<UUID> runs.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from bench import nvidia_smi
from bench.nvidia_smi import MIG_WHY, MigGpu, mig_fix
from bench.options import ConfigError
from bench.topology import Topology, shown


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


def assign(topology: Topology, gpus: list[str],
           mig: Sequence[MigGpu] | None = None) -> list[str]:
    """Each simulated node's CUDA_VISIBLE_DEVICES: node i gets the i-th block of ``procs``
    GPUs. Raises ConfigError when the topology needs more than there are, or GPUs in MIG
    mode (``mig``: every GPU's mode, default this host's as nvidia-smi reports it)."""
    needed = topology.devices
    if needed > len(gpus):
        raise ConfigError("--topologies", str(topology),
                          f"needs {needed} GPUs on this host ({topology.nodes} node(s) "
                          + (f"x {topology.procs}" if not topology.uneven
                             else f"with {topology}") + f"), which has {len(gpus)}: use "
                          "fewer, or run the nodes on their own hosts (--launcher ssh)")
    refuse_mig(topology, gpus[:needed], mig)
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


def refuse_mig(topology: Topology, used: list[str], mig: Sequence[MigGpu] | None) -> None:
    """ConfigError where ``topology``'s ranks would share MIG slices: several ranks on
    slices named in CUDA_VISIBLE_DEVICES, or any rank on a GPU in MIG mode by index or
    UUID. One rank on one slice passes (nothing is asked of nvidia-smi then)."""
    slices = [gpu for gpu in used if gpu.startswith("MIG-")]
    for named in slices:
        if not nvidia_smi.MIG_UUID.fullmatch(named):
            raise ConfigError("CUDA_VISIBLE_DEVICES", shown(named), "a MIG device as "
                              "nvidia-smi -L lists it: MIG-<UUID>")
    if slices:
        if topology.devices > 1:
            raise ConfigError("--topologies", str(topology), f"CUDA_VISIBLE_DEVICES names "
                              f"MIG devices ({slices[0]}...) and {MIG_WHY}, so a job on "
                              "slices runs one rank: --topologies 1x1, or turn MIG off "
                              "(sudo nvidia-smi -i N -mig 0) and name whole GPUs")
        return
    found = {key: gpu for gpu in (local_mig() if mig is None else mig)
             for key in (gpu.index, gpu.uuid)}
    for entry in used:
        gpu = found.get(entry)
        if gpu is not None and gpu.enabled:
            raise ConfigError("--topologies", str(topology), f"GPU {gpu.index} is in MIG "
                              f"mode and {MIG_WHY}, so this job's ranks would run on a slice "
                              f"or fail: {mig_fix(gpu)}")


def local_mig() -> tuple[MigGpu, ...]:
    """This host's GPUs' MIG modes, asked of nvidia-smi once per process (a mode changes
    only with a GPU reset); none on a host without the driver."""
    tool = shutil.which("nvidia-smi")
    return () if tool is None else _mig_of(tool)


@functools.lru_cache(maxsize=8)
def _mig_of(tool: str) -> tuple[MigGpu, ...]:
    """``tool``'s answer (the cache key: a test's fake nvidia-smi is another tool)."""
    return tuple(nvidia_smi.read_mig(lambda argv: nvidia_smi.run_here([tool, *argv[1:]]))
                 or ())
