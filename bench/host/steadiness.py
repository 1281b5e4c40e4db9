"""``bench steadiness``: how far this machine's CPUs drift by themselves, before a prediction
is checked on them.

  python -m bench steadiness --out results/x-steadiness.jsonl            (every CPU, 30 s)
  python -m bench steadiness --out F --seconds 60 --window 5 --cpus 0,1
  python -m bench steadiness --check-only --out F --seconds 30           (values only)

One copy of the same matrix-multiply loop (``bench.rank.steadiness``) runs on each CPU at
once, each pinned to its own (taskset), as the emulated hosts of ``make bench-emulated``
compute; each window's rate is kept. Appends one record per CPU to ``--out`` (mode
steadiness, results/README.md), a failed copy as a row with its error, and prints each CPU's
range. ``bench predict --steadiness`` reads them back next to its measured / predicted.
Exit 0, 1 when a copy failed, 2 for a wrong value (nothing run, nothing written).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

from bench import provenance, record
from bench.analysis import steadiness
from bench.config import OneLineErrorParser
from bench.options import ConfigError, finite_float, require_range
from bench.paths import RESULTS_SUFFIX, check_writable_file, path_arg

DEFAULT_SECONDS = 30.0
DEFAULT_WINDOW_S = 5.0
MAX_SECONDS = 3600.0
MIN_WINDOW_S = 0.1
# A copy that has not reported this long after its last window is stuck, not slow.
GRACE_S = 120.0
# Each copy is a torch process (about 0.6 GB resident on the 2-CPU VM): by default at most
# this many, spread over the CPUs, so that a 64-core host is sampled, not filled.
DEFAULT_MAX_CPUS = 8


def default_cpus(allowed: set[int], most: int = DEFAULT_MAX_CPUS) -> list[int]:
    """Every CPU this process may use, or ``most`` of them spread evenly (the first and
    the last among them) where there are more."""
    cpus = sorted(allowed)
    if len(cpus) <= most:
        return cpus
    return [cpus[round(i * (len(cpus) - 1) / (most - 1))] for i in range(most)]


def parse_cpus(text: str, allowed: set[int]) -> list[int]:
    """``0,1,3`` -> [0, 1, 3]: CPUs this process may run on, each once."""
    items = text.split(",")
    if not all(item.isascii() and item.isdigit() for item in items):
        raise ConfigError("cpus", text, "give CPU numbers separated by commas, e.g. 0,1")
    cpus = [int(item) for item in items]
    if len(set(cpus)) != len(cpus):
        raise ConfigError("cpus", text, "name each CPU once")
    outside = [cpu for cpu in cpus if cpu not in allowed]
    if outside:
        raise ConfigError("cpus", text, f"CPU {outside[0]} is not one this process may run "
                          f"on: choose from {','.join(map(str, sorted(allowed)))}")
    return cpus


def check(seconds: float, window_s: float) -> None:
    """ConfigError naming the flag unless the run holds two windows or more."""
    require_range(window_s, "window", MIN_WINDOW_S, MAX_SECONDS / 2)
    require_range(seconds, "seconds", 2 * window_s, MAX_SECONDS)


def command(cpu: int, seconds: float, window_s: float) -> list[str]:
    """One copy of the loop, pinned to ``cpu``, one torch thread (as a one-CPU host)."""
    return ["taskset", "-c", str(cpu), sys.executable, "-m", "bench.rank.steadiness",
            "--seconds", repr(seconds), "--window", repr(window_s)]


def _rates(proc: subprocess.Popen, out: str, err: str) -> tuple[list[float] | None, str | None]:
    """The copy's rates, or None and why not (its exit, its last stderr line)."""
    if proc.returncode != 0:
        tail = err.strip().splitlines()[-1:] or ["no output"]
        return None, f"the loop exited {proc.returncode}: {tail[0][:300]}"
    try:
        rates = json.loads(out.strip().splitlines()[-1])["rates"]
    except (IndexError, ValueError, KeyError, TypeError):
        return None, f"the loop printed no rates: {out.strip()[-300:]!r}"
    return rates, None


def run(cpus: list[int], seconds: float, window_s: float) -> list[dict]:
    """Every copy at once; one record per CPU, in the order given, a failed copy's with
    its error and no rates."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen(command(cpu, seconds, window_s), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for cpu in cpus]
    head = provenance.collect_head()
    run_id = record.new_run_id()
    rows = []
    for cpu, proc in zip(cpus, procs, strict=True):
        try:
            out, err = proc.communicate(timeout=seconds + window_s + GRACE_S)
            rates, error = _rates(proc, out, err)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            rates, error = None, (f"the loop gave no rates {seconds + window_s + GRACE_S:g} s "
                                  "after it started: stopped")
        rows.append({"schema_version": record.SCHEMA_VERSION, "run_id": run_id,
                     "utc_time": record.utc_now(), "mode": "steadiness",
                     "status": "ok" if error is None else "error", "error": error,
                     "cpu": cpu, "seconds": seconds, "window_s": window_s,
                     "rates": rates or [], "env": head})
    return rows


def main(argv: list[str] | None = None, prog: str = "bench steadiness") -> int:
    p = OneLineErrorParser(prog=prog, description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=path_arg, required=True,
                   help="the results file the records are appended to (.jsonl)")
    p.add_argument("--seconds", type=finite_float, default=DEFAULT_SECONDS,
                   help=f"how long each copy runs (default: {DEFAULT_SECONDS:g})")
    p.add_argument("--window", type=finite_float, default=DEFAULT_WINDOW_S,
                   help=f"seconds per timed window, at most half of --seconds (default: "
                   f"{DEFAULT_WINDOW_S:g}, about a benchmark cell's timed window)")
    p.add_argument("--cpus", default=None,
                   help="the CPUs to run on, e.g. 0,1 (default: every CPU this process "
                   f"may use, or {DEFAULT_MAX_CPUS} of them spread evenly where there are "
                   "more: each copy is a torch process)")
    p.add_argument("--check-only", action="store_true",
                   help="check the values and exit, running nothing")
    a = p.parse_args(argv)
    allowed = os.sched_getaffinity(0)
    try:
        check(a.seconds, a.window)
        cpus = parse_cpus(a.cpus, allowed) if a.cpus is not None else default_cpus(allowed)
        if a.out.suffix != RESULTS_SUFFIX:
            raise ConfigError("out", a.out, "give a results file ending in .jsonl")
        check_writable_file(a.out, "out")
        if not a.check_only and shutil.which("taskset") is None:
            raise ConfigError("taskset", "(missing)", "install util-linux, which pins each "
                              "copy to its CPU")
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    if a.check_only:
        return 0
    print(f"{prog}: the same matrix-multiply loop on CPU(s) {','.join(map(str, cpus))} at "
          f"once for {a.seconds:g} s, in {a.window:g}-s windows", file=sys.stderr)
    rows = run(cpus, a.seconds, a.window)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    for row in rows:
        record.append(a.out, row)
    for row in rows:
        if row["error"]:
            print(f"{prog}: CPU {row['cpu']}: {row['error']}", file=sys.stderr)
    found = steadiness.drifts(rows)
    if found:
        print(steadiness.describe(found))
        note = steadiness.caveat(found)
        if note:
            print(note)
    print(f"{prog}: {len(rows)} record(s) appended to {a.out}", file=sys.stderr)
    return 1 if any(row["error"] for row in rows) else 0
