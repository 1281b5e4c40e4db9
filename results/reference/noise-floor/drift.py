"""The pace series floor.py reads, described: each CPU's mean step over windows of k
seconds against its median (k = 1, 5, 15, 30), and how the two CPUs' 1-s steps move
together (Pearson's r) and apart (deciles of CPU 0 / CPU 1). Records in, table out.

    python drift.py pace0.json pace1.json
"""
import statistics as st
import sys
from pathlib import Path

from floor import series_from_stamps

series = series_from_stamps([Path(p) for p in sys.argv[1:3]])
print("| CPU | window s | windows | min / median | max / median | sd |")
print("|---|---|---|---|---|---|")
for cpu, steps in enumerate(series):
    median = st.median(steps)
    for k in (1, 5, 15, 30):
        means = [st.fmean(steps[i:i + k]) / median for i in range(0, len(steps) - k + 1, k)]
        print(f"| {cpu} | {k} | {len(means)} | {min(means):.2f} | {max(means):.2f} | "
              f"{st.pstdev(means):.1%} |")
n = min(map(len, series))
ratios = [a / b for a, b in zip(series[0][:n], series[1][:n], strict=True)]
print(f"\nmedian step {st.median(series[0]) * 1e3:.1f} and {st.median(series[1]) * 1e3:.1f} ms; "
      f"Pearson's r {st.correlation(series[0][:n], series[1][:n]):.2f}; CPU 0 / CPU 1 deciles "
      f"{[round(x, 2) for x in st.quantiles(ratios, n=10)]}")
