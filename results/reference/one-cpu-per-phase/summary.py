"""The tables of README.md from the jsonl files here: per mode, the median over rounds and
ranks of each phase's mean ms (pair4.py's files), or each phase's wall and per-thread CPU
ms (pair5.py's files, their last lines).

  python summary.py s2a.jsonl s2b.jsonl      # pair4 (pair.py, idlegap2.py alike): phases
  python summary.py --cpu m2a.jsonl          # pair5: CPU per thread and phase
"""
import collections
import json
import statistics
import sys

args = sys.argv[1:]
cpu = args[:1] == ["--cpu"]
rows = collections.defaultdict(list)
for name in args[1:] if cpu else args:
    for number, line in enumerate(open(name), 1):
        try:
            row = json.loads(line)
        except ValueError:
            print(f"{name}:{number}: skipped, not JSON", file=sys.stderr)
            continue
        if cpu and "cpu_ms" in row:
            print(name, "rank", row["rank"], row["mode"])
            for phase in ("fw", "bw", "rdone", "sync", "opt"):
                parts = {k.split(" ", 1)[1]: v for k, v in row["cpu_ms"].items()
                         if k.startswith(phase + " ")}
                if parts:
                    print(f"    {phase:6}", parts)
        elif not cpu and "fw_ms" in row:
            # idlegap2.py's rows name the gap apart from the mode
            key = row["mode"] + (str(row["gap_ms"]) if row.get("gap_ms") else "")
            rows[key].append(row)
for mode, found in rows.items():
    medians = {f: statistics.median(r[f] for r in found)
               for f in ("mean_ms", "fw_ms", "bw_ms", "sync_ms", "opt_ms") if f in found[0]}
    print(f"{mode:8}", "  ".join(f"{k} {v:.2f}" for k, v in medians.items()),
          f"n={len(found)}", "compute per round:",
          " ".join(f"{r['mean_ms']:.1f}" for r in found))
