"""How many steps a benchmark cell times: at least ``--steps``, and enough that they last
``--min-timed-s`` on one node, at the workload's step as the sweep's lockstep probe timed it.

  python -m bench.host.timed_window SWEEPS.jsonl --model resnet18 --batch-size 16 \\
      --steps 20 --min-timed-s 15        (prints the count; why, on stderr)
  python -m bench.host.timed_window --check-only --model resnet18 --batch-size 16 \\
      --steps 20 --min-timed-s 15        (exit 2 with one line on a bad value; before a sweep)

A window of 20 steps of the MLP 512x8 at batch 64 lasted 0.9-1.2 s on two emulated hosts;
its three 2-node repeats read 1824-2989 samples/s without a hook and 2086-2264 with PowerSGD,
0.88 and 0.77 of the prediction. At 200 steps (9-11 s) they read 2339-2540 and 2711-2913,
0.94 and 0.97 (results/reference/accuracy-timed-window/). The sweep's lockstep probe
(``bench allreduce --lockstep-model``) times the workload's own steps on the same hosts
before any training cell runs, so the count is known in time: the accuracy benchmark and
``make bench-emulated`` both take it from there.

Fifteen seconds by default since 2026-12-01 (five before): on the 2-CPU VM the cells are
checked on, the CPUs' pace drifts by 10-20% over tens of seconds, and a perfect prediction
from one-node cells bracketing their two-node cell (``bench matrix --bracket``) lands within
0.90-1.10 for both of the demo's hooks in 46-59% of the runs at its 5-s windows, 85-87% at
15-s ones (results/reference/noise-floor/).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys

from bench import record
from bench.analysis.prediction import probe_key, workload_key
from bench.catalog import MODEL_NAMES
from bench.config import MAX_BATCH_SIZE, ModelConfig, OneLineErrorParser
from bench.options import ConfigError, finite_float, require_range
from bench.paths import path_arg

# The most steps a cell may time.
MAX_STEPS = 100_000
# The shortest window on one node, by default; the longest one may ask for (an hour a cell
# is a typo, not a plan).
DEFAULT_MIN_TIMED_S = 15.0
MAX_MIN_TIMED_S = 3600


def workload(cfg: ModelConfig, batch_size: int) -> tuple:
    """The key (``probe_key``) a sweep's lockstep probe of ``cfg`` at ``batch_size`` carries:
    the image size as the trainer resolves it, the MLP's shape for the MLP alone."""
    return workload_key(cfg.model, cfg.image_size, batch_size, cfg.mlp_width, cfg.mlp_depth,
                        "fp32")


def probed_step_s(sweeps: list[dict], key: tuple) -> float | None:
    """The median step the sweeps' lockstep probes timed for the workload ``key`` names
    (``workload()``), or None where none did."""
    steps = [probe["compute_s"] for sweep in sweeps
             if isinstance(probe := sweep.get("lockstep_workload"), dict)
             and probe_key(probe) == key
             and isinstance(probe.get("compute_s"), (int, float))
             and not isinstance(probe["compute_s"], bool)
             and math.isfinite(probe["compute_s"]) and probe["compute_s"] > 0]
    return statistics.median(steps) if steps else None


def timed_steps(sweeps: list[dict], key: tuple, steps: int,
                min_timed_s: float) -> tuple[int, str]:
    """(how many steps each cell times, why): ``steps``, or the fewest that last
    ``min_timed_s`` at the probed step (``probed_step_s``) where that is more; at most
    MAX_STEPS."""
    if min_timed_s == 0:
        return steps, "--steps (--min-timed-s 0)"
    step_s = probed_step_s(sweeps, key)
    if step_s is None:
        return steps, "--steps (no sweep timed this workload's step to size the window by)"
    wanted = min(MAX_STEPS, math.ceil(min_timed_s / step_s))
    if wanted <= steps:
        return steps, (f"--steps; at {step_s * 1e3:.1f} ms a step (the sweeps' probe of "
                       f"this workload) they last {steps * step_s:.1f} s or more")
    short = (f"{steps} steps (--steps) of {step_s * 1e3:.1f} ms (the sweeps' probe of this "
             f"workload) would last {steps * step_s:.2f} s")
    if wanted * step_s < min_timed_s:
        return wanted, (f"{short}; --min-timed-s {min_timed_s:g} s would take more than the "
                        f"{MAX_STEPS:,} steps a cell may time, which last "
                        f"{wanted * step_s:.1f} s")
    return wanted, f"{short}: {wanted} last --min-timed-s {min_timed_s:g} s on one node"


def check(steps: int, min_timed_s: float) -> None:
    """ConfigError naming the flag unless both are in range."""
    require_range(steps, "steps", 1, MAX_STEPS)
    require_range(min_timed_s, "min_timed_s", 0, MAX_MIN_TIMED_S)


def main(argv: list[str] | None = None) -> int:
    p = OneLineErrorParser(prog="python -m bench.host.timed_window", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweeps", type=path_arg, nargs="?", help="the all-reduce sweeps' results file")
    p.add_argument("--model", required=True, choices=MODEL_NAMES)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--mlp-width", type=int, default=None, help="(default: the trainer's)")
    p.add_argument("--mlp-depth", type=int, default=None, help="(default: the trainer's)")
    p.add_argument("--image-size", type=int, default=None,
                   help="input side in pixels (default: the model's own)")
    p.add_argument("--steps", type=int, default=20, help="the fewest steps (default: 20)")
    p.add_argument("--min-timed-s", type=finite_float, default=DEFAULT_MIN_TIMED_S,
                   help="the shortest window on one node, in seconds (default: "
                   f"{DEFAULT_MIN_TIMED_S:g}; 0: --steps alone)")
    p.add_argument("--check-only", action="store_true",
                   help="check the values and exit, before the sweep runs (no SWEEPS)")
    a = p.parse_args(argv)
    try:
        check(a.steps, a.min_timed_s)
        require_range(a.batch_size, "batch_size", 1, MAX_BATCH_SIZE)
        # The trainer's own checks and defaults (an image size a resnet takes...).
        cfg = ModelConfig(model=a.model, **{name: value for name in
                                            ("image_size", "mlp_width", "mlp_depth")
                                            if (value := getattr(a, name)) is not None})
        if a.check_only and a.sweeps is not None:
            raise ConfigError("SWEEPS", a.sweeps, "--check-only reads no sweeps: drop one")
        if a.check_only:
            return 0
        if a.sweeps is None:
            raise ConfigError("SWEEPS", "(none)", "give the sweeps' results file, or "
                              "--check-only")
        sweeps = record.load(a.sweeps, "sweeps")
    except ConfigError as error:
        print(f"{p.prog}: error: {error}", file=sys.stderr)
        return 2
    steps, why = timed_steps(sweeps, workload(cfg, a.batch_size), a.steps, a.min_timed_s)
    print(f"timing {steps} steps a cell: {why}", file=sys.stderr)
    print(steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
