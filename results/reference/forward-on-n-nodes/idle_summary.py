"""Read idle_group.py's JSON lines (a log from idle_run.sh): per run and process, the bare
step (median over blocks of each block's median, ms) and each thread's CPU time per
block (ms, mean over blocks), the main thread apart.

    python idle_summary.py idle.log"""
import json
import statistics
import sys

print("| run | group | process | bare step ms | main thread CPU ms / block | other threads "
      "CPU ms / block (by name) | wall ms / block |")
print("|---|---|---|---|---|---|---|")
number = 0
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    number += 1
    run = json.loads(line)
    processes = run.get("by_rank") or [run]
    for index, proc in enumerate(processes):
        blocks = proc["blocks"]
        names = sorted({n for b in blocks for n in b["cpu_s_by_thread"]})
        cpu = {n: statistics.fmean(b["cpu_s_by_thread"].get(n, 0.0) for b in blocks)
               for n in names}
        main = max(cpu, key=cpu.get)
        others = ", ".join(f"{n} {1000 * c:.0f}" for n, c in sorted(cpu.items())
                           if n != main and c > 0)
        print(f"| {number} | {run['group']} | {proc.get('rank', index)} | "
              f"{1000 * statistics.median(b['median_step_s'] for b in blocks):.2f} | "
              f"{1000 * cpu[main]:.0f} | {others or '-'} | "
              f"{1000 * statistics.fmean(b['wall_s'] for b in blocks):.0f} |")
