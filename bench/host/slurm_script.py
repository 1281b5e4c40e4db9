"""``python -m bench slurm script ...``: one job's sbatch script, to review and submit by hand.

The same job the matrix would submit (``bench matrix --launcher slurm``), rendered by the
Slurm launcher from the matrix's flags. A module of its own: it needs both the matrix and
the launchers, which must not need each other.
"""
from __future__ import annotations

import sys

from bench import record
from bench.host import matrix
from bench.host.launchers.registry import build
from bench.options import ConfigError


def main(argv: list[str] | None = None, prog: str = "bench slurm") -> int:
    """``bench slurm script [matrix flags] -- [trainer flags]``: one job's sbatch script."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: {prog} script [--topologies NxG] [--batch-sizes B] [--models M] "
              "[--partition P] [--account A] [--time-limit T] [--gpus-per-node G] "
              "[--runtime native|compose|pyxis] [--image I] [--remote-dir DIR] "
              "[--results FILE] -- [trainer flags]\n\nPrints the sbatch script of one job: "
              "review it, then `sbatch` it by hand. Its record lands beside --results, in "
              "logs/<job id>/trainer.jsonl, and after the marker in node0.log.")
        return 0 if argv else 2
    if argv[0] != "script":
        print(f"{prog}: error: unknown command {argv[0]!r}; use `{prog} script`",
              file=sys.stderr)
        return 2
    try:
        cfg = matrix.MatrixConfig.from_args(["--launcher", "slurm", *argv[1:]], prog)
        if len(cfg.cells) * cfg.repeats != 1:
            raise ConfigError("--topologies", f"{len(cfg.cells)} cell(s) x {cfg.repeats} "
                              "repeat(s)", "a script is one job: give one topology, batch "
                              "size and model, or run them all with bench matrix --launcher "
                              "slurm")
        launcher = build("slurm", cfg.launcher_options)
        (cell,) = cfg.cells
        # Rendering checks what goes into the script (#SBATCH lines, each node's rendered command).
        text = launcher.render(matrix.job_spec(cfg, cell, record.new_run_id(), 1))
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0
