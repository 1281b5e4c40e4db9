"""The Slurm cluster (``python -m bench doctor --slurm``): is it ready for `make
bench-slurm`? The Slurm launcher's preflight is the first two rows (controller, partition).

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

REPO = Path(__file__).resolve().parents[3]
# What each node's srun task runs: fixed text, the values as its arguments ("$1", "$2").
IMAGE_PROBE = 'docker image inspect -f "{{.Id}}" "$1"'
VENV_PROBE = ('cd "$1" && "$1/.venv/bin/python" -c \'import importlib.metadata as m; '
              'print(m.version("torch"), end=" ")\' && git rev-parse --short HEAD')
HOST = "slurm"   # the host column: the cluster, not one node
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
    """What the command said last: its error, else its output, else its exit status."""
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


def controller_row(timeout: float) -> Row:
    """The Slurm controller answers (``scontrol ping``)."""
    ping = _run(["scontrol", "ping"], timeout)
    if ping.returncode == 127:
        return Row(HOST, "controller", FAIL, "scontrol not found: install the Slurm client "
                   "commands (Debian: slurm-client)")
    if ping.returncode != 0 or "UP" not in ping.stdout:
        return Row(HOST, "controller", FAIL, f"{_last(ping)}: start slurmctld, or set "
                   "SLURM_CONF to the cluster's slurm.conf (Debian: slurm-client)")
    return Row(HOST, "controller", PASS, ping.stdout.strip().splitlines()[0][:120])


def partition_row(partition: str | None, timeout: float) -> tuple[Row, bool]:
    """The partition (default: the cluster's) is up; and whether sinfo lists it at all."""
    parts = _run(["sinfo", "-h", "-o", "%P %a", *_where(partition)], timeout)
    if parts.returncode != 0 or not parts.stdout.strip():
        missing = f"no partition {partition}" if partition else "no partition"
        return Row(HOST, "partition", FAIL, f"{missing}: `sinfo` lists them; pass --partition"), \
            False
    name, availability = parts.stdout.split()[:2]
    up = availability == "up"
    return Row(HOST, "partition", PASS if up else FAIL, f"{name.rstrip('*')} is {availability}"
               + ("" if up else ": scontrol update PartitionName=... State=UP")), True


def node_rows(partition: str | None, timeout: float) -> tuple[list[Row], list[str]]:
    """One row per node of the partition (a state a job can start on passes), and the
    nodes' names."""
    nodes = _run(["sinfo", "-h", "-N", "-o", "%N %t", *_where(partition)], timeout)
    rows, names = [], []
    for line in nodes.stdout.split("\n"):
        if not line.strip():
            continue
        node, state = line.split()[:2]
        ok = state in READY
        names.append(node)
        rows.append(Row(HOST, "nodes", PASS if ok else FAIL, f"{node} {state}" + (
            "" if ok else f": scontrol update NodeName={node} State=RESUME once it is fixed")))
    return rows, sorted(set(names))


def munge_row(timeout: float) -> Row:
    """munge encodes and decodes a credential here, through the cluster's socket."""
    socket = munge_socket(_run(["scontrol", "show", "config"], timeout).stdout)
    munge = _munge_round_trip(socket, timeout)
    where_said = f" on {socket}" if socket else ""
    return Row(HOST, "munge", PASS if munge.returncode == 0 else FAIL,
               f"credentials encode and decode{where_said}" if munge.returncode == 0 else
               f"{_last(munge)}: start munged{where_said} with the cluster's key")


def check(partition: str | None, runtime: str, image: str | None, remote_dir: str | None,
          timeout: float = 120) -> list[Row]:
    """`bench doctor --slurm`'s rows, in order; a controller that does not answer or a
    partition sinfo does not list ends the list (nothing after it could pass)."""
    rows = [controller_row(timeout)]
    if rows[-1].result == FAIL:
        return rows
    row, listed = partition_row(partition, timeout)
    rows.append(row)
    if not listed:
        return rows
    nodes, names = node_rows(partition, timeout)
    rows += nodes
    rows.append(munge_row(timeout))
    if names:
        rows += _same_everywhere(names, _where(partition), runtime, image, remote_dir, timeout)
    return rows


def _where(partition: str | None) -> list[str]:
    return ["-p", partition] if partition else []


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
        return [Row(HOST, "same", FAIL, f"srun on {len(names)} node(s) failed: "
                    f"{_last(out)[:160]}: is {what} on every node?")]
    seen: dict[str, str] = {}
    for line in out.stdout.splitlines():
        task, _, value = line.partition(": ")
        seen[task.strip()] = value.strip()
    values = set(seen.values())
    if len(values) == 1 and len(seen) == len(names):
        return [Row(HOST, "same", PASS, f"{len(names)} node(s) run the same {what}: "
                    f"{values.pop()[:60]}")]
    if len(seen) != len(names):
        return [Row(HOST, "same", WARN, f"{len(seen)} of {len(names)} node(s) answered")]
    detail = "; ".join(f"task {task}: {value[:40]}" for task, value in sorted(seen.items()))
    return [Row(HOST, "same", FAIL, f"nodes differ ({detail}): install the same {what} "
                "everywhere (shared storage)")]
