"""Each training record's last hand-over to the gradient sync (backward's end), raw and
with the one-rank hook draw taken out as the model takes it (Timeline.of), per hook,
node count and bracket side.

  python results/reference/accuracy-grid-28-again/handover.py FILE.jsonl ...
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.analysis.prediction import Timeline, _drawn_to_mean  # noqa: E402

print("| run | hook | nodes | bracket | last hand-over ms, raw | the model's start ms "
      "| each bucket's hook work ms |")
print("|---|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    for line in open(path):
        rec = json.loads(line)
        if not rec.get("bucket_timeline"):
            continue
        dist = (rec.get("config") or {}).get("distributed", {})
        marks = _drawn_to_mean(rec["bucket_timeline"])
        timeline = Timeline.of(rec)
        run = Path(path).parent.parent.name
        print(f"| {run} | {dist.get('comm_hook')} | {rec.get('world_size')} "
              f"| {(rec.get('matrix') or {}).get('bracket') or 'before'} "
              f"| {1e3 * max(marks.get('issued_s') or marks['ready_s']):.1f} "
              f"| {1e3 * timeline.backward_end_s:.1f} "
              f"| {', '.join(f'{1e3 * s:.1f}' for s in timeline.hook_s or ())} |")
