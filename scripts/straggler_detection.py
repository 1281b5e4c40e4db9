"""Measure straggler detection (issue 26): does every train record name the slow host, and
only when there is one?

  python scripts/straggler_detection.py --out results/straggler-TAG   (root: namespaces)
  python scripts/straggler_detection.py --out results/straggler-TAG --analyse-only

The same small 4-host job (``bench matrix --launcher netns --topologies 4x1``, 4 emulated
hosts on this machine's CPUs) runs in four conditions, interleaved so that the machine's
drift over the run reaches each alike:

  clean     every host held to the same CPU quota (0.3: four hosts on two CPUs)  x N_CLEAN
  cpu25     host 2 at a 25% slowdown: its quota 0.3 / 1.25 = 0.24                x N_SLOW
  cpu10     host 2 at a 10% slowdown: its quota 0.3 / 1.1                        x N_SLOW
  link10    host 2's link at a tenth of --link (both ends shaped)                x N_SLOW

The quota makes the clean hosts equal (each capped at its fair share, not at whatever its
neighbour leaves) and the slow one slower by exactly the factor. Each record's
``straggler`` field (null: nobody named) is then tallied per condition: named correctly
(host 2 and the part slowed: compute for a quota, communication for the link), named
wrongly, none named; in the clean condition every name is a false alarm. A record without
the field (written before the rank side names stragglers) counts as none named. The table
goes to straggler.md and straggler.json in --out; the records stay beside them, one
results file per condition, which --analyse-only reads again.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import statistics
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import record  # noqa: E402
from bench.config import OneLineErrorParser  # noqa: E402
from bench.options import ConfigError, require_range  # noqa: E402
from bench.paths import MARK_COMMENT, check_output, owned_json, path_arg, write_output  # noqa: E402
from bench.units import format_rate, parse_rate, tc_rate  # noqa: E402

HOSTS = 4
SLOW_NODE = 2          # the emulated host made slow (a middle one: neither the master nor last)
# Four hosts on two CPUs held to 1.2 of them, so that the quota binds: at 0.5 each the CPUs
# themselves were the limit, and a smaller quota slowed a host less than its factor.
FAIR_QUOTA = 0.3
MODELS = ("mlp", "resnet18")
# Per model: the batch and the trainer flags. The mlp's step is mostly compute (about
# 0.3 s at half a CPU, 6% of it on the 1 Gbit/s link), so that a CPU quota slows it: at
# batch 256 and width 512 the ranks waited on the link most of the step, and a host held to
# a quarter of a CPU slowed nothing. resnet18 (32 px) sends 45 MB a step: link-heavy.
MODEL_DEFAULTS = {"mlp": (1024, ["--mlp-width", "256", "--mlp-depth", "4"]),
                  "resnet18": (64, ["--image-size", "32"])}


@dataclasses.dataclass(frozen=True, slots=True)
class Condition:
    """One way the job runs: every host's quota, host 2's own link, and what a record
    should name (None: nobody)."""

    name: str
    slowed: str                  # in words, for the table
    quotas: tuple[float, ...]
    slow_link_divisor: int = 0   # host 2's link at --link / this; 0: every host at --link
    expected_part: str | None = None

    def flags(self, link_bps: int) -> list[str]:
        flags = ["--host-cpu-quota", ",".join(f"{q:.6g}" for q in self.quotas)]
        if self.slow_link_divisor:
            rates = [""] * HOSTS
            rates[SLOW_NODE] = tc_rate(link_bps // self.slow_link_divisor)
            flags += ["--host-links", ",".join(rates)]
        return flags


def _quotas(slow_factor: float = 1.0) -> tuple[float, ...]:
    return tuple(FAIR_QUOTA / slow_factor if node == SLOW_NODE else FAIR_QUOTA
                 for node in range(HOSTS))


CONDITIONS = (
    Condition("clean", "none", _quotas()),
    Condition("cpu25", f"host {SLOW_NODE} CPU 25% slower", _quotas(1.25),
              expected_part="compute"),
    Condition("cpu10", f"host {SLOW_NODE} CPU 10% slower", _quotas(1.1),
              expected_part="compute"),
    Condition("link10", f"host {SLOW_NODE} link at a tenth", _quotas(), slow_link_divisor=10,
              expected_part="communication"),
)


def schedule(counts: dict[str, int]) -> list[str]:
    """The runs in order, each condition's spread evenly over the whole: run j of a
    condition with n runs sits at (j + 0.5) / n of the way (ties in CONDITIONS' order)."""
    order = [c.name for c in CONDITIONS]
    placed = [((j + 0.5) / n, order.index(name), name)
              for name, n in counts.items() for j in range(n)]
    return [name for _at, _rank, name in sorted(placed)]


def results_of(out: Path, condition: str) -> Path:
    return out / f"{condition}.jsonl"


def matrix_argv(condition: Condition, a: argparse.Namespace, out: Path) -> list[str]:
    batch, model_flags = MODEL_DEFAULTS[a.model]
    return [sys.executable, "-m", "bench", "matrix", "--launcher", "netns",
            "--link", a.link, *condition.flags(parse_rate(a.link, "--link")),
            # Every host on every CPU, held to its quota: pinned two to a CPU, the two hosts
            # on the busier CPU (where this script, the matrix and dockerd also run) computed
            # up to 9% slower in clean runs, a difference no straggler made.
            "--cpus-per-node", str(os.cpu_count() or 1),
            "--topologies", f"{HOSTS}x1", "--models", a.model,
            "--batch-sizes", str(a.batch_size or batch),
            "--results", str(results_of(out, condition.name)), "--",
            "--steps", str(a.steps), "--warmup-steps", str(a.warmup_steps),
            "--log-every", "0", "--comm-probe-steps", "0", *model_flags]


def measure(a: argparse.Namespace) -> int:
    """Every run; the exit code of the first that refused its settings (2), else 0. A run
    that fails is a row in its results file (the matrix writes one) and the table counts
    it; the benchmark goes on."""
    by_name = {c.name: c for c in CONDITIONS}
    counts = {c.name: a.n_clean if c.name == "clean" else a.n_slow for c in CONDITIONS}
    runs = schedule(counts)
    for number, name in enumerate(runs, 1):
        argv = matrix_argv(by_name[name], a, a.out)
        print(f"[straggler] run {number}/{len(runs)}: {name}", file=sys.stderr, flush=True)
        print("+", shlex.join(argv), flush=True)
        code = subprocess.run(argv, cwd=REPO).returncode
        if code == 2:   # a setting refused: every other run would be refused too
            return 2
        if code not in (0, 1):   # interrupted (128 + signal): stop, the table still follows
            print(f"[straggler] run {number} ended with {code}: stopping", file=sys.stderr)
            return code
    return 0


# --- the table ---------------------------------------------------------------------------
@dataclasses.dataclass(slots=True)
class Tally:
    """What one condition's records named."""

    condition: str
    slowed: str
    expected: str | None        # "host 2, compute"; None: nobody should be named
    runs: int = 0               # records of ok runs
    failed: int = 0             # records of failed runs (not counted below)
    correct: int = 0            # the right host and the right part
    wrong_part: int = 0         # the right host, another part
    wrong_host: int = 0         # another host
    none_named: int = 0
    excess_shares: list[float] = dataclasses.field(default_factory=list)  # of the named

    @property
    def false_alarms(self) -> int | None:
        """Clean runs in which someone was named (None where a host was slowed)."""
        return self.wrong_part + self.wrong_host if self.expected is None else None

    def as_dict(self) -> dict:
        shares = self.excess_shares
        return {"condition": self.condition, "slowed": self.slowed,
                "expected": self.expected, "runs": self.runs, "failed": self.failed,
                "correctly_named": None if self.expected is None else self.correct,
                "wrongly_named": self.wrong_part + self.wrong_host,
                "wrongly_named_right_host": self.wrong_part,
                "none_named": self.none_named, "false_alarms": self.false_alarms,
                "median_excess_share": statistics.median(shares) if shares else None}


def straggler_of(rec: dict) -> dict | None:
    """The record's named straggler, or None (absent, null, or not an object: a record
    from before issue 26, or nobody named)."""
    found = rec.get("straggler")
    return found if isinstance(found, dict) else None


def tally(condition: Condition, records: Iterable[dict]) -> Tally:
    expected = (f"host {SLOW_NODE}, {condition.expected_part}" if condition.expected_part
                else None)
    out = Tally(condition.name, condition.slowed, expected)
    for rec in records:
        if not record.is_training(rec):
            continue
        if rec.get("status") != "ok":
            out.failed += 1
            continue
        out.runs += 1
        named = straggler_of(rec)
        if named is None:
            out.none_named += 1
            continue
        share = named.get("excess_share")
        if isinstance(share, (int, float)) and not isinstance(share, bool):
            out.excess_shares.append(float(share))
        if condition.expected_part is None or named.get("node") != SLOW_NODE:
            out.wrong_host += 1   # in the clean condition, every name: a false alarm
        elif named.get("part") == condition.expected_part:
            out.correct += 1
        else:
            out.wrong_part += 1
    return out


def _cell(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.1%}" if isinstance(value, float) else str(value)


def markdown(tallies: list[Tally], settings: dict) -> str:
    lines = [f"# Straggler detection: {settings['hosts']} emulated hosts, host {SLOW_NODE} "
             "made slow", "",
             f"{settings['model']} at batch {settings['batch_size']}, {settings['steps']} timed "
             f"steps, {settings['link']} links, every host held to {FAIR_QUOTA:g} CPU unless "
             "slowed.", "",
             "| condition | slowed | runs | failed | correctly named | wrongly named "
             "(of which right host) | none named | false alarms | median excess named |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for t in tallies:
        row = t.as_dict()
        lines.append(
            f"| {t.condition} | {t.slowed} | {t.runs} | {t.failed} | "
            f"{_cell(row['correctly_named'])} | {row['wrongly_named']} ({t.wrong_part}) | "
            f"{t.none_named} | {_cell(row['false_alarms'])} | "
            f"{_cell(row['median_excess_share'])} |")
    lines += ["", "Correctly named: host 2 and the part slowed (compute for a CPU quota, "
              "communication for the link). A record without a `straggler` field counts as "
              "none named."]
    return "\n".join(lines)


def analyse(out: Path) -> list[Tally]:
    tallies = []
    for condition in CONDITIONS:
        path = results_of(out, condition.name)
        if not path.exists():
            print(f"warning: {path}: no such file: condition {condition.name} has no runs",
                  file=sys.stderr)
            tallies.append(tally(condition, []))
            continue
        tallies.append(tally(condition, record.read(path)))   # bad lines: skipped, warned
    return tallies


def _checked(a: argparse.Namespace) -> None:
    """Every setting in range; ConfigError names the first that is not."""
    link_bps = parse_rate(a.link, "--link")
    if link_bps // 10 < 1000:
        raise ConfigError("--link", a.link, "the slow link is a tenth of it and must be at "
                          "least 1kbit: give 10kbit or more, e.g. 1gbit")
    for flag, value, low, high in (("n_clean", a.n_clean, 0, 1000), ("n_slow", a.n_slow, 0, 1000),
                                   ("steps", a.steps, 5, 100_000),
                                   ("warmup_steps", a.warmup_steps, 0, 10_000)):
        require_range(value, flag, low, high)
    if a.n_clean + a.n_slow == 0:
        raise ConfigError("--n-clean", a.n_clean, "with --n-slow 0 nothing would run: give "
                          "at least one run, e.g. --n-clean 20 --n-slow 10")
    if a.batch_size is not None:
        require_range(a.batch_size, "batch_size", 1, 65536)
    # The outputs too, before any run: a file where the directory goes, or a table there
    # that bench did not write, would otherwise be found after the whole measurement.
    if a.out.exists() and not a.out.is_dir():
        raise ConfigError("--out", a.out, "is not a directory: give a new or earlier run's "
                          "directory")
    for name in ("straggler.md", "straggler.json"):
        check_output(a.out / name, "--out", (), "give --out another directory")


def main(argv: list[str] | None = None) -> int:
    p = OneLineErrorParser(description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--link", default="1gbit", help="every host's link (default: 1gbit)")
    p.add_argument("--n-clean", type=int, default=20, help="clean runs (default: 20)")
    p.add_argument("--n-slow", type=int, default=10,
                   help="runs of each slowed condition (default: 10)")
    p.add_argument("--model", choices=MODELS, default="mlp")
    p.add_argument("--batch-size", type=int, default=None,
                   help="default: 1024 for mlp, 64 for resnet18")
    p.add_argument("--steps", type=int, default=30, help="timed steps per run (default: 30)")
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--out", type=path_arg, required=True, help="the directory of records and table")
    p.add_argument("--analyse-only", action="store_true",
                   help="only tabulate the records already in --out")
    a = p.parse_args(argv)
    try:
        _checked(a)
    except ConfigError as error:  # one line naming the setting, before anything runs
        print(f"{p.prog}: error: {error}", file=sys.stderr)
        return 2
    code = 0
    if not a.analyse_only:
        a.out.mkdir(parents=True, exist_ok=True)
        code = measure(a)
        if code == 2:
            return 2
    elif not a.out.is_dir():
        print(f"{p.prog}: error: --out={a.out}: no such directory: give the directory of an "
              "earlier run", file=sys.stderr)
        return 2
    tallies = analyse(a.out)
    settings = {"hosts": HOSTS, "slow_node": SLOW_NODE, "fair_quota": FAIR_QUOTA,
                "link": format_rate(parse_rate(a.link, "--link")), "model": a.model,
                "batch_size": a.batch_size or MODEL_DEFAULTS[a.model][0], "steps": a.steps,
                "n_clean": a.n_clean, "n_slow": a.n_slow}
    text = markdown(tallies, settings)
    try:  # never over a file bench did not make, nor through a link (paths.write_output)
        for name in ("straggler.md", "straggler.json"):    # both checked before either
            check_output(a.out / name, "--out", (), "give --out another directory")
        write_output(a.out / "straggler.md", f"{MARK_COMMENT}\n{text}\n", setting="--out",
                     fix="give --out another directory")
        write_output(a.out / "straggler.json",
                     owned_json({"settings": settings,
                                 "conditions": [t.as_dict() for t in tallies]}),
                     setting="--out", fix="give --out another directory")
    except ConfigError as error:
        print(f"{p.prog}: error: {error}", file=sys.stderr)
        return 2
    print(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
