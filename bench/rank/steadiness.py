"""How steadily this CPU computes: one fixed matrix-multiply loop, timed window by window.

  python -m bench.rank.steadiness --seconds 30 --window 5     (run pinned by its caller)

Prints one JSON line: ``{"window_s": W, "rates": [...]}``, each window's matrix multiplies
per second. ``bench steadiness`` runs one copy on each CPU at once, each pinned to its own,
as the emulated hosts of ``make bench-emulated`` compute; it checks the values first.

Why: on the 2-CPU KVM machine that ran accuracy grid 21, this loop on one pinned CPU of an
otherwise idle machine ran at 0.64-1.27 of its median over 1-s windows, and 0.72-1.08 over
30-s ones, the two CPUs apart (their 1-s rates correlated -0.20, and 0.20 in a second
reading: results/reference/steadiness/). A cell measured over a few
seconds carries that drift; a prediction checked to +-10% against it needs it known.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

# The work in each timed call: a 256x256 float32 product, about 34 MFLOP, a few
# milliseconds on one CPU core, so a window ends within a few ms of its length.
SIDE = 256
CALLS_PER_CHECK = 20


def rates(seconds: float, window_s: float) -> list[float]:
    """Matrix multiplies per second in each whole window of ``window_s`` over ``seconds``,
    after one window of warm-up (allocator, the BLAS threads' start)."""
    torch.set_num_threads(1)
    a, b = torch.randn(SIDE, SIDE), torch.randn(SIDE, SIDE)

    def window() -> float:
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < window_s:
            for _ in range(CALLS_PER_CHECK):
                torch.mm(a, b)
            done += CALLS_PER_CHECK
        return done / (time.perf_counter() - start)

    window()
    return [window() for _ in range(int(seconds // window_s))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rank.steadiness", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    # Checked by bench steadiness (bench.host.steadiness.check) before it starts any copy.
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--window", type=float, required=True)
    a = p.parse_args(argv)
    print(json.dumps({"window_s": a.window, "rates": rates(a.seconds, a.window)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
