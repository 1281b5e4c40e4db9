"""Measure ``bench accept`` on emulated hosts (issue 27): a clean cluster, run again and
again, must not FAIL; each fault must FAIL the row that names its host.

  python scripts/accept_faults.py --out results/accept-faults-TAG --clean 10   (root)
  python scripts/accept_faults.py --out results/accept-faults-TAG --analyse-only

Four emulated hosts (``--launcher netns``, 1 Gbit/s links, every host held to the same CPU
quota and free to run on every CPU), in these conditions, interleaved:

  clean   every host alike                                          x --clean
  cpu     host 2's CPU quota cut to half                            x --faulty
  link    host 2's link shaped to a tenth of the others'            x --faulty
  data    the NFS server's link shaped to 2 Mbit/s (with --nfs-export)  x --faulty

With ``--nfs-export DIR`` every run also serves DIR from an NFS server on its own emulated
host and adds the data stage: each node reads it over NFS, against what its device trains.
The script first writes a sharded dataset there (``shards/``: SHARDS files of SHARD_BYTES
random bytes, SAMPLES_PER_SHARD samples of 1 KiB each, as a WebDataset or TFRecord shard
holds them), since the data stage reads whole files over NFS.

Each run is one ``bench accept`` into its own directory (``OUT/<condition>-<n>``); the
table counts, per condition, the runs that exited 0, their FAIL and WARN rows, and whether
the failed rows name host 2 in the stage of the fault. It goes to accept-faults.md and
accept-faults.json in --out.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import record  # noqa: E402
from bench.config import OneLineErrorParser  # noqa: E402
from bench.options import ConfigError, require_range  # noqa: E402
from bench.paths import MARK_COMMENT, check_output, owned_json, path_arg, write_output  # noqa: E402

HOSTS = 4
FAULTY = 2
FAIR_QUOTA = 0.4
# Small figures: each run measures in about a minute on two CPUs. The memory copy keeps its
# default size: a smaller one fits in the caches, and peers sharing them differ (see
# bench.accept_config.AUTO_MEMORY_SIZE).
RANK_FLAGS = ["--repeats", "5", "--matmul-size", "192",
              "--link-size", "4MiB", "--train-steps", "10", "--train-batch", "32"]


@dataclasses.dataclass(frozen=True, slots=True)
class Condition:
    name: str
    flags: tuple[str, ...]
    stage: str | None          # where the fault should FAIL; None: nothing should
    culprit: str = f"node {FAULTY}"  # what every failed row names (subject or reason)


def _quotas(faulty: float) -> str:
    return ",".join(f"{faulty if node == FAULTY else FAIR_QUOTA:g}" for node in range(HOSTS))


CONDITIONS = {
    "clean": Condition("clean", ("--host-cpu-quota", _quotas(FAIR_QUOTA)), None),
    # Half: a host twice as slow is a plain fault, and at a quarter its torch import alone
    # took a minute (the cpu run: 124 s against the link run's 33).
    "cpu": Condition("cpu", ("--host-cpu-quota", _quotas(FAIR_QUOTA / 2)), "device"),
    "link": Condition("link", ("--host-cpu-quota", _quotas(FAIR_QUOTA), "--host-links",
                               ",".join("100mbit" if n == FAULTY else ""
                                        for n in range(HOSTS))), "link"),
    "data": Condition("data", ("--host-cpu-quota", _quotas(FAIR_QUOTA), "--nfs-link", "2mbit"),
                      "data", "the data server"),
}
# The data stage over NFS: whole shards until 256 KiB per repeat; the dataset's samples,
# so that training's need is its samples/s times 1 KiB.
SHARDS, SHARD_BYTES, SAMPLES_PER_SHARD = 32, 128 << 10, 128
DATA_FLAGS = ["--data-url", "nfs://169.254.100.254/datasets/shards?version=4",
              "--data-samples", str(SHARDS * SAMPLES_PER_SHARD), "--data-max-size", "256KiB"]


def write_shards(export: Path) -> Path:
    """The sharded dataset the data stage reads (kept if already there)."""
    folder = export / "shards"
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(SHARDS):
        shard = folder / f"shard-{index:04d}.bin"
        if not shard.exists() or shard.stat().st_size != SHARD_BYTES:
            shard.write_bytes(os.urandom(SHARD_BYTES))
    return export


def names_culprit(condition: Condition, row: dict) -> bool:
    return condition.culprit in row.get("subject", "") or \
        condition.culprit in row.get("reason", "")


def accept_argv(condition: Condition, out: Path, stages: str,
                nfs_export: Path | None = None) -> list[str]:
    """One run's command; with ``nfs_export`` the lab serves it and the data stage reads
    it (a condition that shapes the server needs it)."""
    data = nfs_export is not None
    if condition.name == "data" and not data:
        raise ConfigError("--nfs-export", None, "the data condition shapes the NFS server's "
                          "link: give the export it serves")
    stages = ",".join([*stages.split(","), "data"]) if data and "data" not in stages \
        else stages
    return [sys.executable, "-m", "bench", "accept", "--out", str(out), "--nodes", str(HOSTS),
            "--stages", stages, "--launcher", "netns", "--link", "1gbit",
            "--cpus-per-node", str(os.cpu_count() or 1), *condition.flags,
            *(["--nfs-export", str(nfs_export)] if data else []),
            "--", *RANK_FLAGS, *(DATA_FLAGS if data else [])]


def schedule(counts: dict[str, int]) -> list[tuple[str, int]]:
    """(condition, run number), each condition spread evenly over the whole."""
    placed = [((j + 0.5) / n, list(CONDITIONS).index(name), name, j + 1)
              for name, n in counts.items() for j in range(n)]
    return [(name, number) for _at, _order, name, number in sorted(placed)]


def device_shortfall(row: dict) -> float | None:
    """How far a device row fell short of what was expected of it (0.2: 20% below the row's
    expected figure: its peers' median, or the reference table's where it has no peers);
    None for any other row, or one without two finite figures and a positive expected one."""
    measured, expected = row.get("measured"), row.get("expected")
    if row.get("stage") != "device" or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in (measured, expected)) or expected <= 0:
        return None
    return 1 - measured / expected


def _verdicts(out: Path, name: str) -> list[dict]:
    """The verdicts of condition ``name``'s runs; one that cannot be read is skipped with a
    warning naming its file."""
    verdicts = []
    for path in sorted(out.glob(f"{name}-*/accept.json")):
        try:
            verdict = record.document(path.read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError) as error:
            print(f"{path}: skipped: {error}", file=sys.stderr)
            continue
        if isinstance(verdict, dict) and isinstance(verdict.get("rows", []), list):
            verdicts.append(verdict)
        else:
            print(f"{path}: skipped: not a verdict (no list of rows)", file=sys.stderr)
    return verdicts


def by_check(out: Path) -> list[dict]:
    """Per condition and device check: its rows, how many fell 10% (the WARN threshold) or
    more below what was expected of them, and the largest shortfall: which figure is the
    noisy one where a clean run warns."""
    rows = []
    for name in CONDITIONS:
        shortfalls: dict[str, list[float]] = {}
        for verdict in _verdicts(out, name):
            for row in verdict.get("rows", []):
                if isinstance(row, dict) and (f := device_shortfall(row)) is not None:
                    shortfalls.setdefault(str(row.get("check")), []).append(f)
        rows += [{"condition": name, "check": check, "rows": len(values),
                  "short_10": sum(value >= 0.10 for value in values),
                  "largest_shortfall": max(values)}
                 for check, values in sorted(shortfalls.items())]
    return rows


def tally(out: Path) -> list[dict]:
    rows = []
    for name, condition in CONDITIONS.items():
        verdicts = _verdicts(out, name)
        named = 0
        shortfalls = [f for v in verdicts for r in v.get("rows", [])
                      if (f := device_shortfall(r)) is not None]
        if name == "data" and not verdicts:
            continue  # not run: no --nfs-export
        for verdict in verdicts:
            failed = [r for r in verdict.get("rows", []) if r.get("status") == "FAIL"]
            if condition.stage and failed and \
                    all(names_culprit(condition, r) for r in failed) and \
                    any(r.get("stage") == condition.stage for r in failed):
                named += 1
        rows.append({"condition": name, "runs": len(verdicts),
                     "exit_0": sum(v.get("exit_code") == 0 for v in verdicts),
                     "fail_rows": sum(v.get("failed", 0) for v in verdicts),
                     "warn_rows": sum(v.get("warned", 0) for v in verdicts),
                     "runs_with_a_fail": sum(v.get("failed", 0) > 0 for v in verdicts),
                     # the margin to the device stage's thresholds (WARN 10%, FAIL 20%)
                     "largest_device_shortfall": max(shortfalls, default=None),
                     "fault_named": named if condition.stage else None})
    return rows


def markdown(rows: list[dict], stages: str, checks: Sequence[dict] = ()) -> str:
    lines = [f"# bench accept on {HOSTS} emulated hosts: clean runs and faults on host "
             f"{FAULTY}", "", f"Stages {stages}; every host held to {FAIR_QUOTA:g} CPU unless "
             "cut; 1 Gbit/s links.", "",
             "| condition | runs | exit 0 | runs with a FAIL | FAIL rows | WARN rows | "
             "largest device shortfall | fault named (culprit and stage) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        named = "-" if r["fault_named"] is None or not r["runs"] else str(r["fault_named"])
        worst = r["largest_device_shortfall"]
        worst_text = "-" if worst is None else f"{worst:.0%}"
        lines.append(f"| {r['condition']} | {r['runs']} | {r['exit_0']} | "
                     f"{r['runs_with_a_fail']} | {r['fail_rows']} | {r['warn_rows']} | "
                     f"{worst_text} | {named} |")
    if checks:
        lines += ["", "Device rows by check: how far each fell below what was expected of it.",
                  "", "| condition | check | rows | 10% or more below | largest shortfall |",
                  "|---|---|---:|---:|---:|"]
        lines += [f"| {r['condition']} | {r['check']} | {r['rows']} | {r['short_10']} | "
                  f"{r['largest_shortfall']:.1%} |" for r in checks]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = OneLineErrorParser(description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=path_arg, required=True)
    p.add_argument("--clean", type=int, default=10, help="clean runs (default: 10)")
    p.add_argument("--faulty", type=int, default=1, help="runs of each fault (default: 1)")
    p.add_argument("--stages", default="preflight,device,link",
                   help="bench accept's stages (default: preflight,device,link)")
    p.add_argument("--nfs-export", type=path_arg, help="serve this staged dataset export from "
                   "an NFS server host and add the data stage and the data condition")
    p.add_argument("--analyse-only", action="store_true")
    a = p.parse_args(argv)
    try:
        require_range(a.clean, "clean", 0, 1000)
        require_range(a.faulty, "faulty", 0, 1000)
        for name in ("accept-faults.md", "accept-faults.json"):
            check_output(a.out / name, "--out", (), "give --out another directory")
    except ConfigError as error:
        print(f"{p.prog}: error: {error}", file=sys.stderr)
        return 2
    if not a.analyse_only:
        a.out.mkdir(parents=True, exist_ok=True)
        if a.nfs_export:
            write_shards(a.nfs_export)
        counts = {"clean": a.clean, "cpu": a.faulty, "link": a.faulty,
                  "data": a.faulty if a.nfs_export else 0}
        plan = schedule(counts)
        for index, (name, number) in enumerate(plan, 1):
            print(f"[accept-faults] run {index}/{len(plan)}: {name} {number}", file=sys.stderr,
                  flush=True)
            run = a.out / f"{name}-{number}"
            code = subprocess.run(accept_argv(CONDITIONS[name], run, a.stages, a.nfs_export),
                                  cwd=REPO).returncode
            if code == 2:
                return 2
    rows, checks = tally(a.out), by_check(a.out)
    text = markdown(rows, a.stages, checks)
    write_output(a.out / "accept-faults.md", f"{MARK_COMMENT}\n{text}\n", setting="--out")
    write_output(a.out / "accept-faults.json", owned_json({"stages": a.stages, "rows": rows,
                                                           "by_check": checks}),
                 setting="--out")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
