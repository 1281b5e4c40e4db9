"""Where a number came from: git state, CPU, the link, and the shape of the record's
environment block. Torch-free: a rank adds what only a running torch knows
(``bench.rank.environment``); the head writes a row's block without it (``collect_head``).
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
from pathlib import Path

# Environment prefixes whose values change communication behaviour.
COMM_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_")
_PACKAGE_DIR = Path(__file__).resolve().parent


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty). Inside the image the build passes the commit in BENCH_GIT_COMMIT."""
    baked = os.environ.get("BENCH_GIT_COMMIT")
    if baked:
        dirty = os.environ.get("BENCH_GIT_DIRTY")
        return baked, None if dirty is None else dirty == "1"
    commit = _run(["git", "rev-parse", "HEAD"], cwd=_PACKAGE_DIR)
    if commit is None:
        return None, None
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_PACKAGE_DIR)
    return commit, bool(status)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def link() -> dict | None:
    """The link between the nodes, when the launcher knows it (the emulated-link harness
    shapes it, so it sets BENCH_LINK_RATE in tc's spelling, e.g. 1gbit)."""
    rate = os.environ.get("BENCH_LINK_RATE")
    if not rate:
        return None
    from bench.units import parse_rate

    found = {"rate": rate, "rate_bps": parse_rate(rate, "BENCH_LINK_RATE"),
             "kind": os.environ.get("BENCH_LINK_KIND", "stated")}
    share = _cpu_share(os.environ.get("BENCH_LINK_CPU_SHARE"))
    if share is not None:
        found["cpu_share"] = share
    return found


def _cpu_share(value: str | None) -> float | None:
    """The emulated host's share of its CPUs (0 < share <= 1), or None where unset or not
    such a number (a record is still written; the predictor then takes a whole CPU)."""
    try:
        share = float(value) if value else None
    except ValueError:
        return None
    return share if share is not None and 0 < share <= 1 else None


def _installed(package: str) -> str | None:
    """A package's installed version, read without importing it."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


HEAD_RANKS = [{"rank": None, "local_rank": None, "node_rank": None, "device": None}]


def environment(ranks: list[dict], versions: dict, nproc_per_node: int | None,
                world_size: int | None) -> dict:
    """The record's environment block from what the caller knows about the ranks and the
    software (``bench.rank.environment`` on a rank, ``collect_head`` on the head)."""
    commit, dirty = git_state()
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "image_id": os.environ.get("BENCH_IMAGE_ID") or None,
        "image_digest": os.environ.get("BENCH_IMAGE_DIGEST") or None,
        "ranks": ranks,
        "hostnames": sorted({r["hostname"] for r in ranks}),
        "nnodes": len({r["node_rank"] for r in ranks}),
        "nproc_per_node": nproc_per_node,
        "world_size": world_size,
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        **versions,
        "link": link(),
        "comm_env": {k: v for k, v in sorted(os.environ.items())
                     if k.startswith(COMM_ENV_PREFIXES)},
    }


def no_rank() -> list[dict]:
    """The ranks of a job whose process group never formed: this host, nothing more."""
    return [{**HEAD_RANKS[0], "hostname": socket.gethostname()}]


def collect_head() -> dict:
    """The environment of a row the head writes (no node wrote one), without torch:
    versions from the installed packages; what only a running torch knows is null."""
    return environment(no_rank(), {
        "torch": _installed("torch"), "torchvision": _installed("torchvision"), "cuda": None,
        "cudnn": None, "nccl": None, "driver": None, "torch_threads": None}, None, None)
