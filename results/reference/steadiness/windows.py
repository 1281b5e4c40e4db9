"""The 1-s windows of ``windows-1s.jsonl`` (``bench steadiness --window 1``) read as longer
windows: per CPU, the mean rate of each run of k whole 1-s windows against the median 1-s
rate, its range and spread, for k = 1, 5, 15, 30; and how the two CPUs' 1-s rates move
together (Pearson's r). Records in, table out: no torch.

  python results/reference/steadiness/windows.py results/reference/steadiness/windows-1s.jsonl
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import record  # noqa: E402


def main(path: str) -> None:
    rates = {rec["cpu"]: rec["rates"] for rec in record.load(Path(path))
             if rec["mode"] == "steadiness" and rec["status"] == "ok"}
    print("| CPU | window s | windows | min / median | max / median | sd |")
    print("|---|---|---|---|---|---|")
    for cpu, series in sorted(rates.items()):
        median = statistics.median(series)
        for k in (1, 5, 15, 30):
            means = [statistics.fmean(series[i:i + k]) / median
                     for i in range(0, len(series) - k + 1, k)]
            print(f"| {cpu} | {k} | {len(means)} | {min(means):.2f} | {max(means):.2f} | "
                  f"{statistics.pstdev(means):.1%} |")
    if len(rates) == 2:
        a, b = rates.values()
        n = min(len(a), len(b))
        print(f"\nthe two CPUs' 1-s rates, Pearson's r over {n} windows: "
              f"{statistics.correlation(a[:n], b[:n]):.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
