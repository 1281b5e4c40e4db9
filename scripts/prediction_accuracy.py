"""Measure the prediction against emulated nodes: every comm hook, link and node count.

  python scripts/prediction_accuracy.py --links 1gbit,5gbit --nodes 2,3,4 --repeats 3 \
      --out results/accuracy-TAG        (root: network namespaces; see bench/host/netlab.py)
  python scripts/prediction_accuracy.py --out results/accuracy-TAG --analyse-only
  python scripts/prediction_accuracy.py --links 5gbit --nodes 2 --model resnet18 \
      --image-size 32 --batch-size 8 --hooks none,powersgd --out results/grid/resnet18-b8
  python scripts/prediction_accuracy.py --grid scripts/accuracy-grid.tsv --nodes 2 \
      --out results/grid-TAG            (every workload of the grid; then grid.md)

Per link: the all-reduce sweep over 2..N nodes (REPEATS times, so the link has a spread;
in each element type the hooks send; each size also beside compute, what the model takes
from backward, and the ranks in lockstep, how long each sync waits for the slowest),
then one matrix of 1x1 and 2x1..Nx1 for every comm hook, then bench.analysis.accuracy on
the records: measured / predicted per hook and node count, written to accuracy.md. All of
it runs interleaved, in rounds: round r is repeat r of every sweep, then repeat r of every
cell, so that the machine's drift over the run reaches the sweeps, the one-node and the
N-node cells alike (the runs before 2026-11-29 ran every sweep first), and each hook's
one-node cell runs again after its N-node cells (``bench matrix --bracket``; not before
2026-12-01), so that the one-node figure is measured on both sides of them. Each cell times
``--steps`` steps, or the fewest that last ``--min-timed-s`` (15; 5 before 2026-12-01)
seconds on one node at the step the sweeps' probe just timed for the workload, where that
is more
(bench/host/timed_window.py: 20 steps of a 24 ms step were too short to measure), and its
probe steps after training (the one-node bucket timeline; no_sync steps on N nodes) are as
many. The runs before 2026-11-27 timed ``--steps`` alone, as ``--min-timed-s 0`` does, and
probed 10 steps.

The default workload is communication-bound on purpose: the deep & wide MLP at a small batch
sends its 16 MB of gradients every step, so the link, not the CPUs, sets the step. The
machine has fewer CPUs than the largest job has nodes, so nodes share CPUs; every cell runs
on the same number of emulated hosts (the netns launcher puts a one-node neighbour job on
each host a smaller job leaves free), so every node of every cell, the one-node baseline
included, computes on the same share of a CPU, and the records carry that share
(env.link.cpu_share) for the predictor to run gloo's CPU work at. ``--model``,
``--image-size``, ``--batch-size`` and the MLP's ``--mlp-width``/``--mlp-depth`` choose
another workload, from compute-bound to link-bound: the grid of issue 29.

Before the first round and after the last, ``bench steadiness`` runs the same
matrix-multiply loop on every CPU at once for ``--steady-s`` (30) seconds into
``OUT/steadiness.jsonl``: how far the machine drifts by itself, which the tables end with
(a CPU beyond 0.90-1.10 of its median from one 5-s window to another cannot check a ratio
to that band; results/reference/steadiness/). A grid measures it around each workload, into
``OUT/NAME/steadiness.jsonl``, and names under its table each workload that met a machine
drifting further than that. ``--steady-s 0`` skips it.

``--grid FILE`` runs every workload of a grid file (bench/accuracy_grid.py: name, model,
batch, shape, links, hooks, and whether it is held out of development) into ``OUT/NAME``,
each as the flags above would, then sets every cell of every workload in one table,
``OUT/grid.md``, with a count for the development set and the held-out set apart. A
workload whose measurement fails is named there and the rest go on; ``--workloads A,B``
runs a part of the grid, and ``--analyse-only`` rebuilds the tables from what is there.
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import accuracy_grid, record  # noqa: E402
from bench.analysis import accuracy, steadiness  # noqa: E402
from bench.config import COMM_HOOKS, HOOK_WIRE_DTYPE, ModelConfig, OneLineErrorParser  # noqa: E402
from bench.host import steadiness as steadiness_run  # noqa: E402
from bench.host import timed_window  # noqa: E402
from bench.host.launchers import netns  # noqa: E402
from bench.options import ConfigError, finite_float, require_range  # noqa: E402
from bench.paths import MARK_COMMENT, child, path_arg, write_output  # noqa: E402
from bench.topology import parse_choices, parse_positive_ints  # noqa: E402
from bench.units import parse_rate, parse_size  # noqa: E402


def _run(argv: list[str]) -> None:
    print("+", shlex.join(argv), flush=True)
    subprocess.run(argv, check=True)


def measure(link: str, out: Path, nodes: list[int], a: argparse.Namespace) -> None:
    # Interleaved, the sweeps too: round r runs repeat r of every sweep, then repeat r of
    # every cell. The machine's pace drifts over minutes (a shared VM), and the prediction
    # reads the sweeps' times against the cells': run all sweeps first and a slow stretch
    # there is charged to cells that ran fast. On 2026-11-29 the sweeps timed the workload's
    # step at 4 nodes 16% slower than the 4-node cells' no-sync steps that followed them,
    # and that cell read 1.14 (results/reference/beside-vs-training/).
    bench = [sys.executable, "-m", "bench", "matrix", "--launcher", "netns", "--link", link,
             "--interleave", *(["--host-cpus", a.host_cpus] if a.host_cpus else [])]
    many = ",".join(f"{n}x1" for n in nodes)
    shape = ["--image-size", str(a.image_size)] if a.image_size else []
    if a.model == "mlp":
        shape += ["--mlp-width", str(a.mlp_width), "--mlp-depth", str(a.mlp_depth)]
    # The lockstep probe also times the workload's own steps: what its syncs wait for.
    workload = ["--lockstep-model", a.model, "--lockstep-batch-size", str(a.batch_size),
                *(f"--lockstep-{flag[2:]}" if flag.startswith("--") else flag
                  for flag in shape)]
    # The link in each element type the hooks send: gloo's CPU cost per byte differs.
    dtypes = dict.fromkeys(HOOK_WIRE_DTYPE[hook] for hook in a.hooks.split(","))
    failed: list[subprocess.CalledProcessError] = []

    def run_on(argv: list[str]) -> None:
        """A matrix exits 1 when a cell failed (its row records why): the next rounds still
        run, and the first such failure is raised after the last. A user error (2) or a
        signal (128 + N) stops here."""
        try:
            _run(argv)
        except subprocess.CalledProcessError as error:
            if error.returncode != 1:
                raise
            failed.append(error)

    steps = None
    for repeat in range(1, a.repeats + 1):
        print(f"round {repeat} of {a.repeats}: the sweeps, then every cell", flush=True)
        for dtype in dtypes:
            run_on([*bench, "--workload", "allreduce", "--topologies", many,
                    "--repeats", "1", "--results", str(out / f"{link}-comm.jsonl"),
                    "--", "--max-size", a.max_size, "--iters", "10", "--warmup-iters", "2",
                    "--dtype", dtype, "--beside-compute", "--lockstep", *workload])
        if steps is None:
            # Long enough to measure: the first round's sweeps just timed the workload's step.
            probed = timed_window.workload(ModelConfig(
                model=a.model, image_size=a.image_size, mlp_width=a.mlp_width,
                mlp_depth=a.mlp_depth), a.batch_size)
            steps, why = timed_window.timed_steps(
                record.load(out / f"{link}-comm.jsonl", "sweeps"), probed, a.steps,
                a.min_timed_s)
            print(f"timing {steps} steps a cell: {why}", flush=True)
        # Bracketed: each hook's one-node cell runs again after its N-node cells, so the
        # one-node figure brackets their moment (results/reference/noise-floor/).
        run_on([*bench, "--bracket", "--topologies", f"1x1,{many}", "--models", a.model,
                "--batch-sizes", str(a.batch_size), "--comm-hooks", a.hooks,
                "--repeats", "1", "--results", str(out / f"{link}.jsonl"), "--",
                "--steps", str(steps), "--warmup-steps", "10", "--powersgd-warmup", "5",
                # The one-node timeline the prediction starts from, over as many probe
                # steps: over 10 it spread by 1.1-1.6 times between repeats, over the
                # window by 1.1-1.3.
                "--comm-probe-steps", str(steps), *shape, "--log-every", "0"])
    if failed:
        raise failed[0]


def found_rows(links: list[str] | tuple[str, ...], out: Path) -> list[accuracy.Row]:
    found = []
    for link in links:
        records = record.load(out / f"{link}.jsonl", "results")
        # The one-node cells' neighbours ran the same job beside them: more baseline samples.
        records += accuracy.baseline_copies(records, out / f"{link}.jsonl")
        sweeps = accuracy.sweeps_of(record.load(out / f"{link}-comm.jsonl", "sweeps"))
        found += accuracy.rows(records, sweeps)
    return found


def analyse(links: list[str], out: Path) -> str:
    return accuracy.table(found_rows(links, out)) + drift_lines(out)


STEADINESS_FILE = "steadiness.jsonl"


def measure_drift(out: Path, seconds: float) -> None:
    """``bench steadiness`` into OUT/steadiness.jsonl; a failed copy is a row there (and a
    warning here), not the end of the run."""
    if not seconds:
        return
    try:
        _run([sys.executable, "-m", "bench", "steadiness", "--out", str(out / STEADINESS_FILE),
              "--seconds", repr(seconds)])
    except subprocess.CalledProcessError as error:
        print(f"warning: bench steadiness failed ({error}); its rows say why, and the run "
              "goes on", file=sys.stderr, flush=True)


def drift_lines(out: Path) -> str:
    """The machine's own drift under a table, where OUT holds a steadiness file."""
    path = out / STEADINESS_FILE
    if not path.is_file():
        return ""
    found = steadiness.drifts(record.read(path))
    if not found:
        return ""
    note = steadiness.caveat(found)
    return "\n\n" + steadiness.describe(found) + (f"\n{note}" if note else "")


def _write(path: Path, text: str) -> None:
    # Never over a file bench did not make, nor through a link (paths.write_output).
    write_output(path, f"{MARK_COMMENT}\n{text}\n", setting="--out",
                 fix="give --out another directory")


def analyse_grid(grid: list[accuracy_grid.Workload], out: Path,
                 failed: dict[str, str]) -> str:
    """Each workload's table in OUT/NAME/accuracy.md, and every cell of the grid in one
    table; a workload that failed or has no records is named there, not left out."""
    measured = []
    for w in grid:
        # A failed measurement may still have recorded cells (bench matrix records a failed
        # cell as a row and goes on): what it recorded is shown, with the failure beside.
        missing = None
        rows: list[accuracy.Row] = []
        try:
            mine = child(out, w.name, "name")   # a directory of its own, not a link out
            rows = found_rows(w.links, mine)
            _write(mine / "accuracy.md", accuracy.table(rows) + drift_lines(mine))
        except ConfigError as error:   # not measured yet, or its files unreadable
            missing = str(error)
        if missing is None and not rows:
            missing = "no setup measured on 1 node and on N nodes"
        measured.append(accuracy.Measured(w.name, w.label, w.held_out, tuple(rows),
                                          failed.get(w.name, missing) if not rows else None,
                                          failed.get(w.name)))
    return accuracy.grid_table(measured) + grid_drift_lines(grid, out)


def grid_drift_lines(grid: list[accuracy_grid.Workload], out: Path) -> str:
    """Under the grid's table: the machine's drift over the whole run (every workload's
    readings pooled, and the grid's own from runs before 2026-11-30, which measured it once
    before the first workload and once after the last), then each workload whose own
    readings, just before and after its rounds, drifted further than its ratios are checked
    to. Measured hours apart, the workloads may have met different machines: on one 2-CPU
    VM the same workload read 0.82-0.85 at 16:12-16:42 UTC and 0.99-1.02 at 18:38-19:08, the
    model and the commands the same (results/reference/accuracy-grid-26/)."""
    readings, named = _drift_readings(out), []
    for w in grid:
        try:
            own = _drift_readings(child(out, w.name, "name"))
        except ConfigError:                  # a name that is not a directory of ours
            continue
        readings.extend(own)
        note = steadiness.named_caveat(w.name, steadiness.drifts(own))
        if note:
            named.append(f"- {note}")
    found = steadiness.drifts(readings)
    if not found:
        return ""
    note = steadiness.caveat(found)
    text = "\n\n" + steadiness.describe(found) + (f"\n{note}" if note else "")
    if named:
        band = f"{1 - steadiness.CHECKED_TOLERANCE:.2f}-{1 + steadiness.CHECKED_TOLERANCE:.2f}"
        text += ("\n\nworkloads whose own readings, just before and after their rounds, "
                 f"drifted further than {band}:\n" + "\n".join(named))
    return text


def _drift_readings(out: Path) -> list[dict]:
    path = out / STEADINESS_FILE
    return list(record.read(path)) if path.is_file() else []


def _checked(a: argparse.Namespace) -> tuple[list[str], list[str], list[int]]:
    """The links, hooks and node counts, every value checked; ConfigError names the first
    bad one."""
    links = [link for link in a.links.split(",") if link]
    if not links:
        raise ConfigError("--links", a.links, "give at least one link rate, e.g. 1gbit,5gbit")
    for link in links:
        parse_rate(link, "--links")
    hooks = parse_choices(a.hooks, COMM_HOOKS, "--hooks")
    nodes = parse_positive_ints(a.nodes, "--nodes")
    if min(nodes) < 2 or 2 not in nodes:
        raise ConfigError("--nodes", a.nodes, "node counts from 2, and 2 among them (its "
                          "sweep is the one a two-node lab has), e.g. 2,3,4")
    for flag, value, high in (("repeats", a.repeats, 100), ("batch_size", a.batch_size, 4096),
                              ("mlp_width", a.mlp_width, 65536), ("mlp_depth", a.mlp_depth, 64)):
        require_range(value, flag, 1, high)
    timed_window.check(a.steps, a.min_timed_s)
    if a.steady_s:
        try:
            steadiness_run.check(a.steady_s, steadiness_run.DEFAULT_WINDOW_S)
        except ConfigError:
            raise ConfigError("--steady-s", a.steady_s, "give 0 (none) or "
                              f"{2 * steadiness_run.DEFAULT_WINDOW_S:g}-"
                              f"{steadiness_run.MAX_SECONDS:g} seconds (two "
                              f"{steadiness_run.DEFAULT_WINDOW_S:g}-s windows or more)") from None
    parse_size(a.max_size, "--max-size")
    if a.host_cpus is not None:
        # The lab has a host per node of the largest cell; one list holds every host.
        placed = netns.parse_host_cpus(a.host_cpus, "--host-cpus")
        if len(placed) not in (1, max(nodes)):
            raise ConfigError("--host-cpus", a.host_cpus, f"{len(placed)} CPU lists for "
                              f"{max(nodes)} emulated hosts (the most --nodes): give one for "
                              f"all or one per host, {netns.CPUS_EXAMPLE}")
    # The trainer's own checks (a known model, a resnet at 32 px or more...), before any
    # sweep runs.
    ModelConfig(model=a.model, image_size=a.image_size, mlp_width=a.mlp_width,
                mlp_depth=a.mlp_depth)
    return links, hooks, nodes


# The flags that say which workload, links and hooks to measure; a grid file names them
# per workload instead. Their defaults: the reference check's.
WORKLOAD_DEFAULTS = {"links": "1gbit,5gbit", "hooks": ",".join(COMM_HOOKS), "model": "mlp",
                     "image_size": None, "batch_size": 16, "mlp_width": 1024, "mlp_depth": 4}


def _grid_of(a: argparse.Namespace) -> list[accuracy_grid.Workload] | None:
    """The grid's workloads to run (all, or --workloads'), or None without --grid; every
    value of the file checked. Without --grid, the workload flags take their defaults."""
    given = [flag for flag in WORKLOAD_DEFAULTS if getattr(a, flag) is not None]
    if a.grid is None:
        if a.workloads is not None:
            raise ConfigError("--workloads", a.workloads, "picks workloads of a --grid file: "
                              "give --grid too")
        for flag, default in WORKLOAD_DEFAULTS.items():
            if getattr(a, flag) is None:
                setattr(a, flag, default)
        return None
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise ConfigError(flag, getattr(a, given[0]), "the grid file names each workload's "
                          f"model, batch, shape, links and hooks: drop {flag}, or drop --grid")
    return accuracy_grid.chosen(accuracy_grid.load(a.grid), a.workloads)


def _as_flags(a: argparse.Namespace, w: accuracy_grid.Workload) -> argparse.Namespace:
    """The namespace the one-workload path takes, for one workload of the grid."""
    return argparse.Namespace(**{**vars(a), "links": ",".join(w.links),
                                 "hooks": ",".join(w.hooks), "model": w.model,
                                 "image_size": w.image_size, "batch_size": w.batch_size,
                                 "mlp_width": w.mlp_width or WORKLOAD_DEFAULTS["mlp_width"],
                                 "mlp_depth": w.mlp_depth or WORKLOAD_DEFAULTS["mlp_depth"]})


def run_grid(grid: list[accuracy_grid.Workload], nodes: list[int],
             a: argparse.Namespace) -> dict[str, str]:
    """Measure each workload in turn; one that fails is noted (why) and the rest go on."""
    failed = {}
    for index, w in enumerate(grid, 1):
        print(f"grid: workload {index} of {len(grid)}: {w.name} ({w.label}; "
              f"{','.join(w.links)}; {','.join(w.hooks)})", flush=True)
        flags = _as_flags(a, w)
        try:
            out = child(a.out, w.name, "name")
            out.mkdir(exist_ok=True)
            # The machine's drift just before and after this workload's rounds, in its own
            # directory: the grid runs for hours, and a workload is checked against the
            # machine it met (grid_drift_lines).
            measure_drift(out, a.steady_s)
            for link in w.links:
                measure(link, out, nodes, flags)
            measure_drift(out, a.steady_s)
        except (subprocess.CalledProcessError, OSError, ConfigError) as error:
            failed[w.name] = f"failed: {error}"
            print(f"grid: {w.name} failed ({error}); going on with the rest", file=sys.stderr,
                  flush=True)
    return failed


def main() -> int:
    p = OneLineErrorParser(description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--links", default=None,
                   help=f"link rates (default: {WORKLOAD_DEFAULTS['links']})")
    p.add_argument("--nodes", default="2,3,4", help="node counts to measure (from 2)")
    p.add_argument("--hooks", default=None, help="comm hooks (default: every one)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--model", default=None,
                   help=f"the workload (default: {WORKLOAD_DEFAULTS['model']})")
    p.add_argument("--image-size", type=int, default=None,
                   help="input side in pixels (default: the model's own)")
    p.add_argument("--batch-size", type=int, default=None,
                   help=f"(default: {WORKLOAD_DEFAULTS['batch_size']})")
    p.add_argument("--mlp-width", type=int, default=None,
                   help=f"(default: {WORKLOAD_DEFAULTS['mlp_width']})")
    p.add_argument("--mlp-depth", type=int, default=None,
                   help=f"(default: {WORKLOAD_DEFAULTS['mlp_depth']})")
    p.add_argument("--steps", type=int, default=20,
                   help="the fewest steps a cell times (default: 20)")
    p.add_argument("--min-timed-s", type=finite_float,
                   default=timed_window.DEFAULT_MIN_TIMED_S,
                   help="time more steps than --steps where they would last less than this "
                   "many seconds on one node, at the step the sweeps' probe measured for the "
                   f"workload (default: {timed_window.DEFAULT_MIN_TIMED_S:g}; 0: --steps "
                   "alone, as the runs before 2026-11-27 did)")
    p.add_argument("--max-size", default="32MiB", help="the sweep's largest message")
    p.add_argument("--host-cpus", default=None, help="the netns launcher's --host-cpus: the "
                   "CPUs of each emulated host, e.g. 0/0/1/1 (default: dealt round evenly)")
    p.add_argument("--steady-s", type=finite_float, default=steadiness_run.DEFAULT_SECONDS,
                   help="seconds of bench steadiness before the first round and after the "
                   "last (of each workload, with --grid; default: "
                   f"{steadiness_run.DEFAULT_SECONDS:g}; 0 skips it)")
    p.add_argument("--grid", type=path_arg, default=None, help="a grid file: every workload in "
                   "it, each into OUT/NAME, then OUT/grid.md (e.g. scripts/accuracy-grid.tsv)")
    p.add_argument("--workloads", default=None, help="with --grid: only these (names)")
    p.add_argument("--out", type=path_arg, required=True)
    p.add_argument("--analyse-only", action="store_true")
    a = p.parse_args()
    try:
        grid = _grid_of(a)
        if grid is None:
            links, hooks, nodes = _checked(a)
            a.hooks = ",".join(hooks)
        else:
            nodes = parse_positive_ints(a.nodes, "--nodes")
            for w in grid:   # each workload's values as the one-workload path checks them
                _checked(_as_flags(a, w))
            if a.analyse_only and not a.out.is_dir():
                raise ConfigError("--out", a.out, "holds no grid run: measure it first "
                                  "(drop --analyse-only)")
        if a.out.exists() and not a.out.is_dir():
            raise ConfigError("--out", a.out, "is a file, not a directory: give a directory "
                              "(it is created where missing)")
    except ConfigError as error:  # one line naming the setting, before anything is written
        print(f"{p.prog}: error: {error}", file=sys.stderr)
        return 2
    if not a.analyse_only:
        a.out.mkdir(parents=True, exist_ok=True)
    try:
        if grid is not None:
            failed = {} if a.analyse_only else run_grid(grid, nodes, a)
            text = analyse_grid(grid, a.out, failed)
            _write(a.out / "grid.md", text)
            print(text)
            return 1 if failed else 0
        if not a.analyse_only:
            measure_drift(a.out, a.steady_s)
        for link in links:
            if not a.analyse_only:
                measure(link, a.out, nodes, a)
        if not a.analyse_only:
            measure_drift(a.out, a.steady_s)
        text = analyse(links, a.out)
        _write(a.out / "accuracy.md", text)
    except ConfigError as error:  # a results file missing or unreadable; --out not ours
        print(f"{p.prog}: error: {error}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
