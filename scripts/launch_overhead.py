"""Per-cell launch overhead of the matrix, natively, through Compose and through Slurm, against
the floor any torchrun job pays.

  python scripts/launch_overhead.py [--repeats 3] [--image bench-trainer:cpu] [--no-slurm]
                                    [--launchers native,compose,slurm]

Runs the same small cell (2 nodes x 1 process on loopback, smallcnn, synthetic data, 5
timed steps after 1 warm-up step) as a matrix through each launcher, and right before each
launcher the floor: a minimal torchrun job of the same shape (two torchrun agents on
loopback, each starting one process that imports torch, joins a gloo process group, meets
the other at a barrier and leaves). Every repeat is a fresh job: fresh processes, a fresh
process group.

A cell's startup runs from the job's launch to the end of its first (warm-up) step, its
teardown from the end of its last timed step to its row being written. The warm-up step
and the probes after the timed steps (the traffic probe, the communication probe) are
measurement and are reported apart; the overhead is the rest, and "vs floor" is that
overhead less the floor's whole run. Goal: native within 1 s of the floor, Compose and
Slurm within 2 s.

The breakdown comes from the marks a rank prints with BENCH_PHASES=1 (bench.rank.phases)
into its node's log; a rank whose code has no marks (a trainer image built before them)
shows its totals only, warm-up and probes inside the overhead. Slurm runs on the two-node
test cluster of scripts/slurm-cluster.sh (started here if it is not up).
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import record  # noqa: E402
from bench.rank import phases  # noqa: E402  (no torch: the marks' format and parser)

NODES = 2
GOALS = {"native": 1.0, "compose": 2.0, "slurm": 2.0}   # seconds over the floor
MEASUREMENT = ("warm-up step", "probes")
# The phases between marks, in order: (name, from mark, to mark, startup or teardown).
PHASES = (
    ("launcher to torchrun agent", "launched", "agent_start", "startup"),
    ("agent to rank process", "agent_start", "process_start", "startup"),
    ("rank imports", "process_start", "imported", "startup"),
    ("process group join", "imported", "group_joined", "startup"),
    ("env, data, model, DDP", "group_joined", "model_built", "startup"),
    ("warm-up step", "model_built", "first_step_done", "startup"),
    ("probes", "last_step_done", "comm_probe_done", "teardown"),
    ("figures, record", "comm_probe_done", "record_written", "teardown"),
    ("barrier, group teardown", "record_written", "group_left", "teardown"),
    ("rank+agent exit, stop", "group_left", "recorded", "teardown"),
)
# The floor's rank: the marks bench.rank.phases prints, so one parser reads both.
FLOOR_RANK = f"""
import os, sys, time
from pathlib import Path
def mark(name, at=None):
    if os.environ.get("RANK") == "0":
        print("{phases.PREFIX}" + name, "%.3f" % (time.time() if at is None else at),
              file=sys.stderr, flush=True)
def started_at(pid):
    stat = Path(f"/proc/{{pid}}/stat").read_text()
    ticks = int(stat[stat.rfind(")") + 2:].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
mark("agent_start", started_at(os.getppid()))
mark("process_start", started_at("self"))
import torch
import torch.distributed as dist
mark("imported")
dist.init_process_group("gloo")
mark("group_joined")
dist.barrier()
dist.destroy_process_group()
mark("group_left")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def floor_run(tmp: Path, env: dict[str, str], repeat: int) -> dict[str, float]:
    """One minimal torchrun job: its marks, with its launch and its end (every agent gone)."""
    script = tmp / "floor_rank.py"
    script.write_text(FLOOR_RANK)
    port, logs = free_port(), []
    launched = time.time()
    procs = []
    for rank in range(NODES):
        logs.append(tmp / f"floor-r{repeat}-node{rank}.log")
        with open(logs[-1], "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(NODES),
                 "--node_rank", str(rank), "--nproc_per_node", "1", "--master_addr",
                 "127.0.0.1", "--master_port", str(port), "--rdzv-id", f"floor{repeat}",
                 "--rdzv-conf", "timeout=120", str(script)],
                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp))
    if any(p.wait() != 0 for p in procs):
        sys.exit(f"launch_overhead: the floor job failed:\n{logs[0].read_text()[-2000:]}")
    ended = time.time()
    marks = phases.parse(logs[0].read_text().splitlines())
    return {**marks, "launched": launched, "recorded": ended}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def timed_cell(rec: dict) -> bool:
    """An ok row of a cell the matrix launched, with the times ``cell_marks`` reads (a row
    the trainer wrote by itself has no launch time)."""
    cell = rec.get("matrix")
    return (rec.get("status") == "ok" and isinstance(cell, dict)
            and isinstance(cell.get("logs"), str)
            and all(_number(cell.get(k)) for k in ("launched_at", "recorded_at"))
            and all(_number(rec.get(k)) for k in ("first_step_done", "last_step_done")))


def cell_marks(rec: dict) -> dict[str, float]:
    """A row's marks: the rank's from its node logs, the launch and the row from the row."""
    logs = Path(rec["matrix"]["logs"])
    marks: dict[str, float] = {}
    for log in sorted(logs.glob("*.log")) if logs.is_dir() else []:
        found = phases.parse(log.read_text(errors="replace").splitlines())
        marks |= {name: at for name, at in found.items() if name not in marks}
    return {**marks, "launched": rec["matrix"]["launched_at"],
            "first_step_done": rec["first_step_done"], "last_step_done": rec["last_step_done"],
            "recorded": rec["matrix"]["recorded_at"]}


def durations(marks: dict[str, float]) -> dict[str, float]:
    """Each phase's seconds, where both its marks are there."""
    return {name: marks[end] - marks[start] for name, start, end, _ in PHASES
            if start in marks and end in marks}


def summarise(runs: list[dict[str, float]], floor: bool) -> dict[str, float | None]:
    """Medians over repeats: the whole (startup + teardown, or the floor's run), the
    measurement inside it, the overhead (the rest), and each phase."""
    def median(values: list[float]) -> float | None:
        return statistics.median(values) if values else None
    out: dict[str, float | None] = {}
    if floor:
        whole = statistics.median([m["recorded"] - m["launched"] for m in runs])
        out["measurement"] = 0.0
    else:
        whole = statistics.median([(m["first_step_done"] - m["launched"])
                                   + (m["recorded"] - m["last_step_done"]) for m in runs])
        phase_runs = [durations(m) for m in runs]
        measured = [sum(d[p] for p in MEASUREMENT) for d in phase_runs
                    if all(p in d for p in MEASUREMENT)]
        out["measurement"] = median(measured) if len(measured) == len(runs) else None
    out["whole"], out["overhead"] = whole, whole - (out["measurement"] or 0.0)
    for name, *_ in PHASES:
        out[name] = median([d[name] for d in map(durations, runs) if name in d])
    if floor:  # the floor has no model, no steps, no record: its teardown is what it pays
        out["barrier, group teardown"] = median([m["group_left"] - m["group_joined"]
                                                 for m in runs if "group_left" in m])
        out["rank+agent exit, stop"] = median([m["recorded"] - m["group_left"]
                                               for m in runs if "group_left" in m])
    return out


def run_matrix(launcher: str, a: argparse.Namespace, tmp: Path, env: dict[str, str],
               env_file: Path) -> list[dict[str, float]]:
    extra = {"native": [], "slurm": [],
             "compose": ["--image", a.image, "--env-file", str(env_file), "--profile", "cpu"]}
    device = ["--device", "cpu"] if launcher == "slurm" else []
    results = tmp / f"{launcher}.jsonl"
    cmd = [sys.executable, "-m", "bench", "matrix", "--launcher", launcher,
           "--topologies", f"{NODES}x1", "--batch-sizes", "16", "--models", "smallcnn",
           "--repeats", str(a.repeats), "--results", str(results), *extra[launcher],
           "--", "--steps", "5", "--warmup-steps", "1", "--log-every", "0", *device]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if out.returncode != 0:   # the other launchers' figures, and this one's good rows, stand
        print(f"launch_overhead: the {launcher} matrix failed:\n{out.stderr[-2000:]}",
              file=sys.stderr)
    # The shared reader: a line that is no training record is skipped with a warning
    # naming the file and the line.
    rows = record.training(record.read(results)) if results.exists() else []
    return [cell_marks(row) for row in rows if timed_cell(row)]


def cell(value: float | None) -> str:
    return f"{value:7.2f}" if value is not None else "      -"


def report(columns: list[tuple[str, dict]], repeats: int) -> None:
    print(f"\n{NODES} nodes x 1 process on loopback, smallcnn, 5 steps; medians of {repeats} "
          "repeats, each a fresh job; the floor timed right before each launcher")
    names = [name for name, _ in columns]
    print(f"{'phase (s)':<28}" + "".join(f"{n:>16}" for n in names))
    rows = [(name, name) for name, *_ in PHASES] + [
        ("startup + teardown", "whole"), ("measurement (warm-up, probes)", "measurement"),
        ("overhead", "overhead")]
    for label, key in rows:
        suffix = " *" if key in MEASUREMENT else ""
        print(f"{label + suffix:<28}" + "".join(f"{cell(c.get(key)):>16}" for _, c in columns))
    print("* measurement, not overhead; '-': no marks in that run (for a trainer image "
          "built before bench.rank.phases, the overhead then includes them)")
    for name, summary in columns:
        if name.startswith("floor"):
            continue
        launcher = name.split()[0]
        floor = dict(columns)[f"floor ({launcher})"]
        over = summary["overhead"] - floor["whole"]
        met = "met" if over <= GOALS[launcher] else "NOT met"
        print(f"{launcher} overhead per cell: {summary['overhead']:.2f} s, floor "
              f"{floor['whole']:.2f} s: {over:+.2f} s over the floor (goal within "
              f"{GOALS[launcher]:.0f} s: {met})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--image", default="bench-trainer:cpu")
    p.add_argument("--no-slurm", action="store_true", help="skip the Slurm launcher")
    p.add_argument("--launchers", default="native,compose,slurm",
                   help="which launchers, comma-separated (default: %(default)s)")
    a = p.parse_args()
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
           phases.ENV: "1"}
    launchers = [n for n in ("native", "compose") if n in a.launchers.split(",")]
    if not a.no_slurm and "slurm" in a.launchers.split(","):
        cluster = REPO / "scripts" / "slurm-cluster.sh"
        subprocess.run([str(cluster), "start"], check=True)
        conf = subprocess.run([str(cluster), "env"], capture_output=True, text=True, check=True)
        env["SLURM_CONF"] = conf.stdout.strip().split("=", 1)[1]
        launchers.append("slurm")
    columns: list[tuple[str, dict]] = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        env_file = tmp / "node.env"
        bind = f"\nDATA_MOUNT_TYPE=none\nDATA_MOUNT_OPTIONS=bind\nDATA_DEVICE={tmp}\n"
        env_file.write_text((REPO / "compose" / ".env.example").read_text() + bind
                            + f"GLOO_SOCKET_IFNAME=lo\nOMP_NUM_THREADS=1\n{phases.ENV}=1\n")
        for launcher in launchers:
            floor = [floor_run(tmp, env, r) for r in range(a.repeats)]
            columns.append((f"floor ({launcher})", summarise(floor, floor=True)))
            cells = run_matrix(launcher, a, tmp, env, env_file)
            if cells:
                columns.append((launcher, summarise(cells, floor=False)))
            print(f"launch_overhead: {launcher} done", file=sys.stderr, flush=True)
    report(columns, a.repeats)


if __name__ == "__main__":
    main()
