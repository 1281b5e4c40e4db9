"""``python -m bench doctor --slurm``: is this Slurm cluster ready for `make bench-slurm`?

Rows like the SSH doctor's (PASS, WARN or FAIL with the fix):

  controller  the Slurm controller answers (scontrol ping)
  partition   the partition exists and is up
  nodes       each node's state: idle, mixed or allocated pass; down, drained, failing fail
  munge       munge encodes and decodes a credential here (Slurm's authentication)
  same        every node runs the same checkout and venv (torch version and git commit),
              or with --runtime compose the same image id: one srun task per node
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from bench.host.checks import FAIL, PASS, WARN, Row

REPO = Path(__file__).resolve().parent.parent.parent
# What each node's srun task runs: fixed text, the values as its arguments ("$1", "$2").
IMAGE_PROBE = 'docker image inspect -f "{{.Id}}" "$1"'
VENV_PROBE = ('cd "$1" && "$1/.venv/bin/python" -c \'import importlib.metadata as m; '
              'print(m.version("torch"), end=" ")\' && git rev-parse --short HEAD')
# Node states (sinfo %t) a job can start on; states ending in "*" are not responding.
READY = ("idle", "mix", "mixed", "alloc", "allocated", "comp", "completing")


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: not installed")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"no answer in {timeout:g} s")


def _last(out: subprocess.CompletedProcess) -> str:
    return ((out.stderr or out.stdout).strip().splitlines() or [f"exit {out.returncode}"])[-1]


def munge_socket(config: str) -> str | None:
    """The munge socket Slurm authenticates through (``AuthInfo = socket=PATH`` in
    `scontrol show config`), or None for munge's default one."""
    for line in config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() != "AuthInfo":
            continue
        for option in value.split(","):
            name, _, path = option.strip().partition("=")
            if name == "socket" and path:
                return path
    return None


def _munge_round_trip(socket: str | None, timeout: float) -> subprocess.CompletedProcess:
    """munge -n | unmunge through the cluster's socket, as two argv processes."""
    where = ["-S", socket] if socket else []
    encoded = _run(["munge", "-n", *where], timeout)
    if encoded.returncode != 0:
        return encoded
    try:
        return subprocess.run(["unmunge", *where], input=encoded.stdout, capture_output=True,
                              text=True, timeout=timeout)
    except FileNotFoundError:
        return subprocess.CompletedProcess(["unmunge"], 127, "", "unmunge: not installed")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(["unmunge"], 124, "", f"no answer in {timeout:g} s")


def check(partition: str | None, runtime: str, image: str | None, remote_dir: str | None,
          timeout: float = 120) -> list[Row]:
    rows: list[Row] = []
    add = lambda check, result, detail: rows.append(Row("slurm", check, result, detail))  # noqa: E731
    ping = _run(["scontrol", "ping"], timeout)
    if ping.returncode != 0 or "UP" not in ping.stdout:
        add("controller", FAIL, f"{_last(ping)}: start slurmctld, or set SLURM_CONF to the "
            "cluster's slurm.conf (Debian: slurm-client)")
        return rows
    add("controller", PASS, ping.stdout.strip().splitlines()[0][:120])
    where = ["-p", partition] if partition else []
    parts = _run(["sinfo", "-h", "-o", "%P %a", *where], timeout)
    if parts.returncode != 0 or not parts.stdout.strip():
        add("partition", FAIL, f"{'no partition ' + partition if partition else 'no partition'}"
            f": `sinfo` lists them; pass --partition")
        return rows
    name, availability = parts.stdout.split()[:2]
    add("partition", PASS if availability == "up" else FAIL,
        f"{name.rstrip('*')} is {availability}" + ("" if availability == "up" else
                                                   ": scontrol update PartitionName=... State=UP"))
    nodes = _run(["sinfo", "-h", "-N", "-o", "%N %t", *where], timeout)
    names = []
    for line in nodes.stdout.split("\n"):
        if not line.strip():
            continue
        node, state = line.split()[:2]
        names.append(node)
        ok = state in READY
        add("nodes", PASS if ok else FAIL, f"{node} {state}" + (
            "" if ok else f": scontrol update NodeName={node} State=RESUME once it is fixed"))
    socket = munge_socket(_run(["scontrol", "show", "config"], timeout).stdout)
    munge = _munge_round_trip(socket, timeout)
    where_said = f" on {socket}" if socket else ""
    add("munge", PASS if munge.returncode == 0 else FAIL,
        f"credentials encode and decode{where_said}" if munge.returncode == 0 else
        f"{_last(munge)}: start munged{where_said} with the cluster's key")
    if names:
        rows += _same_everywhere(sorted(set(names)), where, runtime, image, remote_dir, timeout)
    return rows


def _same_everywhere(names: list[str], where: list[str], runtime: str, image: str | None,
                     remote_dir: str | None, timeout: float) -> list[Row]:
    """One srun task per node reports what a job would run; every node must agree."""
    directory = remote_dir or str(REPO)
    if runtime == "compose":
        probe = ["bash", "-c", IMAGE_PROBE, "bench-doctor", image or ""]
        what = f"image {image}"
    else:
        probe = ["bash", "-c", VENV_PROBE, "bench-doctor", directory]
        what = f"venv and checkout {directory}"
    out = _run(["srun", *where, f"--nodes={len(names)}", "--ntasks-per-node=1", "--label",
                f"--time={max(1, int(timeout // 60))}", *probe], timeout)
    if out.returncode != 0:
        return [Row("slurm", "same", FAIL, f"srun on {len(names)} node(s) failed: "
                    f"{_last(out)[:160]}: is {what} on every node?")]
    seen: dict[str, str] = {}
    for line in out.stdout.splitlines():
        task, _, value = line.partition(": ")
        seen[task.strip()] = value.strip()
    values = set(seen.values())
    if len(values) == 1 and len(seen) == len(names):
        return [Row("slurm", "same", PASS, f"{len(names)} node(s) run the same {what}: "
                    f"{values.pop()[:60]}")]
    if len(seen) != len(names):
        return [Row("slurm", "same", WARN, f"{len(seen)} of {len(names)} node(s) answered")]
    detail = "; ".join(f"task {task}: {value[:40]}" for task, value in sorted(seen.items()))
    return [Row("slurm", "same", FAIL, f"nodes differ ({detail}): install the same {what} "
                "everywhere (shared storage)")]
