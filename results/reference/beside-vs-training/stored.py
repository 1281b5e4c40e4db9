"""The stored 2-4 node runs of smallcnn at batch 64 (1 Gbit/s, half a CPU per host, no
hook), read three ways. Only reads records.

1. Per size, the sweep's all-reduce alone and beside compute (ms), the median over the
   run's sweeps: beside compute, at 3-4 nodes every size up to 2 MiB takes about as long.
2. The first bucket (2 MiB) in training against the sweep's 2 MiB row: training's own
   (hand-over to done, each repeat), how much of it came after backward's compute ended,
   and what the sweep's beside figure would have to be for the model's reading of it
   (the share after compute at the alone pace, the rest beside) to give it.
3. The machine's pace in the sweeps against the cells': the workload's step as the sweeps'
   lockstep probe timed it over N ranks, against the N-node cells' no-sync steps (the
   same step, no gradient sync, on the same placement), and the cell's measured/predicted.

    python stored.py ../accuracy-grid-nodes-2/run-1/smallcnn-b64-1gbit \\
        ../accuracy-grid-nodes-2/run-2/smallcnn-b64-1gbit \\
        ../accuracy-grid-nodes-3/smallcnn-b64-1gbit ../nodes-check-20261129 \\
        ../nodes-check-20261129b
"""
import json
import statistics
import sys
from pathlib import Path

FIRST_BUCKET = 2 * 1024 * 1024


def records(path):
    return [json.loads(line) for line in open(path) if line.startswith("{")]


def ms(seconds):
    return round(seconds * 1e3, 1)


def row_at(sweep, size):
    return min(sweep["sizes"], key=lambda row: abs(row["size_bytes"] - size))


for directory in map(Path, sys.argv[1:]):
    sweeps = [s for s in records(next(directory.glob("*-comm.jsonl")))
              if s["status"] == "ok" and s.get("dtype", "float32") == "float32"]
    cells = [r for r in records(directory / "1gbit.jsonl")
             if r["status"] == "ok" and (r.get("comm_hook") or "none") == "none"]
    print(f"## {directory.resolve().relative_to(Path(__file__).resolve().parents[1])}\n")
    print("| nodes | size KiB | alone ms | beside compute ms |\n|---:|---:|---:|---:|")
    for n in (2, 3, 4):
        over = [s for s in sweeps if s["nnodes"] == n]
        for size in (1024, 64 * 1024, 512 * 1024, FIRST_BUCKET, 8 * FIRST_BUCKET):
            if over:
                alone = statistics.median(row_at(s, size)["time_s"] for s in over)
                beside = statistics.median(row_at(s, size)["beside_compute"]["time_s"]
                                           for s in over)
                print(f"| {n} | {size >> 10} | {ms(alone)} | {ms(beside)} |")
    print("\n| nodes | sweep 2 MiB alone / beside ms | training's first bucket ms | of it after "
          "compute ended ms | beside figure that would give it ms | sweep's workload step /"
          " cells' no-sync step ms |\n|---:|---|---|---|---|---|")
    for n in (2, 3, 4):
        over = [s for s in sweeps if s["nnodes"] == n]
        mine = [r for r in cells if r["nnodes"] == n]
        if not over or not mine:
            continue
        alone = statistics.median(row_at(s, FIRST_BUCKET)["time_s"] for s in over)
        beside = statistics.median(row_at(s, FIRST_BUCKET)["beside_compute"]["time_s"]
                                   for s in over)
        first, after, figure = [], [], []
        for r in mine:
            t = r["bucket_timeline"]
            handed, done, compute_end = t["issued_s"][0], t["done_s"][0], t["ready_s"][-1]
            late = max(0.0, done - compute_end)
            first.append(done - handed)
            after.append(late)
            figure.append((compute_end - handed) / (1 - late / alone) if late else done - handed)
        pace = [s["lockstep_workload"]["compute_s"] for s in over if s.get("lockstep_workload")]
        nosync = [r["step_time_nosync_s"] for r in mine if r.get("step_time_nosync_s")]
        paces = (f"{ms(statistics.median(pace))} / {ms(statistics.median(nosync))} = "
                 f"{statistics.median(pace) / statistics.median(nosync):.2f}"
                 if pace and nosync else "-")
        print(f"| {n} | {ms(alone)} / {ms(beside)} | {', '.join(str(ms(v)) for v in first)} | "
              f"{', '.join(str(ms(v)) for v in after)} | "
              f"{', '.join(str(ms(v)) for v in figure)} | {paces} |")
    print()
