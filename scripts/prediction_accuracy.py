"""Measure the prediction against emulated nodes: every comm hook, link and node count.

  python scripts/prediction_accuracy.py --links 1gbit,5gbit --nodes 2,3,4 --repeats 3 \
      --out results/accuracy-TAG        (root: network namespaces; see bench/host/netlab.py)
  python scripts/prediction_accuracy.py --out results/accuracy-TAG --analyse-only
  python scripts/prediction_accuracy.py --links 5gbit --nodes 2 --model resnet18 \
      --image-size 32 --batch-size 8 --hooks none,powersgd --out results/grid/resnet18-b8

Per link: the all-reduce sweep over 2..N nodes (REPEATS times, so the link has a spread;
in each element type the hooks send; each size also beside compute, what the model takes
from backward, and the ranks in lockstep, how long each sync waits for the slowest),
then one matrix of 1x1 and 2x1..Nx1 for every comm hook, then bench.analysis.accuracy on
the records: measured / predicted per hook and node count, written to accuracy.md. Both
matrices run interleaved (repeat 1 of every cell, then repeat 2...), so that the machine's
drift over the run reaches the one-node and the N-node cells alike.

The default workload is communication-bound on purpose: the deep & wide MLP at a small batch
sends its 16 MB of gradients every step, so the link, not the CPUs, sets the step. The
machine has fewer CPUs than the largest job has nodes, so nodes share CPUs; every cell runs
on the same number of emulated hosts (the netns launcher puts a one-node neighbour job on
each host a smaller job leaves free), so every node of every cell, the one-node baseline
included, computes on the same share of a CPU, and the records carry that share
(env.link.cpu_share) for the predictor to run gloo's CPU work at. ``--model``,
``--image-size``, ``--batch-size`` and the MLP's ``--mlp-width``/``--mlp-depth`` choose
another workload, from compute-bound to link-bound: the grid of issue 29.
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import record  # noqa: E402
from bench.analysis import accuracy  # noqa: E402
from bench.config import COMM_HOOKS, HOOK_WIRE_DTYPE, ModelConfig, OneLineErrorParser  # noqa: E402
from bench.options import ConfigError, require_range  # noqa: E402
from bench.paths import MARK_COMMENT, write_output  # noqa: E402
from bench.topology import parse_choices, parse_positive_ints  # noqa: E402
from bench.units import parse_rate, parse_size  # noqa: E402


def _run(argv: list[str]) -> None:
    print("+", shlex.join(argv), flush=True)
    subprocess.run(argv, check=True)


def measure(link: str, out: Path, nodes: list[int], a: argparse.Namespace) -> None:
    # Interleaved: the machine's speed drifts over minutes (a shared VM), and the one-node
    # cells the prediction starts from must see the same drift as the N-node cells they
    # are compared with, not only the first minutes of the run.
    bench = [sys.executable, "-m", "bench", "matrix", "--launcher", "netns", "--link", link,
             "--interleave"]
    many = ",".join(f"{n}x1" for n in nodes)
    shape = ["--image-size", str(a.image_size)] if a.image_size else []
    if a.model == "mlp":
        shape += ["--mlp-width", str(a.mlp_width), "--mlp-depth", str(a.mlp_depth)]
    # The lockstep probe also times the workload's own steps: what its syncs wait for.
    workload = ["--lockstep-model", a.model, "--lockstep-batch-size", str(a.batch_size),
                *(f"--lockstep-{flag[2:]}" if flag.startswith("--") else flag
                  for flag in shape)]
    # The link in each element type the hooks send: gloo's CPU cost per byte differs.
    for dtype in dict.fromkeys(HOOK_WIRE_DTYPE[hook] for hook in a.hooks.split(",")):
        _run([*bench, "--workload", "allreduce", "--topologies", many,
              "--repeats", str(a.repeats), "--results", str(out / f"{link}-comm.jsonl"),
              "--", "--max-size", a.max_size, "--iters", "10", "--warmup-iters", "2",
              "--dtype", dtype, "--beside-compute", "--lockstep", *workload])
    _run([*bench, "--topologies", f"1x1,{many}", "--models", a.model,
          "--batch-sizes", str(a.batch_size), "--comm-hooks", a.hooks,
          "--repeats", str(a.repeats), "--results", str(out / f"{link}.jsonl"), "--",
          "--steps", str(a.steps), "--warmup-steps", "10", "--powersgd-warmup", "5",
          *shape, "--log-every", "0"])


def analyse(links: list[str], out: Path) -> str:
    found = []
    for link in links:
        records = record.load(out / f"{link}.jsonl", "results")
        # The one-node cells' neighbours ran the same job beside them: more baseline samples.
        records += accuracy.baseline_copies(records, out / f"{link}.jsonl")
        sweeps = accuracy.sweeps_of(record.load(out / f"{link}-comm.jsonl", "sweeps"))
        found += accuracy.rows(records, sweeps)
    return accuracy.table(found)


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
                              ("mlp_width", a.mlp_width, 65536), ("mlp_depth", a.mlp_depth, 64),
                              ("steps", a.steps, 100_000)):
        require_range(value, flag, 1, high)
    parse_size(a.max_size, "--max-size")
    # The trainer's own checks (a known model, a resnet at 32 px or more...), before any
    # sweep runs.
    ModelConfig(model=a.model, image_size=a.image_size, mlp_width=a.mlp_width,
                mlp_depth=a.mlp_depth)
    return links, hooks, nodes


def main() -> int:
    p = OneLineErrorParser(description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--links", default="1gbit,5gbit")
    p.add_argument("--nodes", default="2,3,4", help="node counts to measure (from 2)")
    p.add_argument("--hooks", default=",".join(COMM_HOOKS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--model", default="mlp", help="the workload (default: the MLP)")
    p.add_argument("--image-size", type=int, default=None,
                   help="input side in pixels (default: the model's own)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--mlp-width", type=int, default=1024)
    p.add_argument("--mlp-depth", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--max-size", default="32MiB", help="the sweep's largest message")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--analyse-only", action="store_true")
    a = p.parse_args()
    try:
        links, hooks, nodes = _checked(a)
    except ConfigError as error:  # one line naming the setting, before anything is written
        print(f"{p.prog}: error: {error}", file=sys.stderr)
        return 2
    a.hooks = ",".join(hooks)
    if not a.analyse_only:
        a.out.mkdir(parents=True, exist_ok=True)
        for link in links:
            measure(link, a.out, nodes, a)
    try:
        text = analyse(links, a.out)
    except ConfigError as error:  # a results file missing or holding no valid record
        print(f"{p.prog}: error: {error}", file=sys.stderr)
        return 2
    try:  # never over a file bench did not make, nor through a link (paths.write_output)
        write_output(a.out / "accuracy.md", f"{MARK_COMMENT}\n{text}\n", setting="--out",
                     fix="give --out another directory")
    except ConfigError as error:
        print(f"{p.prog}: error: {error}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
