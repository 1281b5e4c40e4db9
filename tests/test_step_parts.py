"""scripts/step_parts.py: each part of the N-node cells against the one-node cell, from the
records' step breakdowns (issue 29's measurement of where the missing cost goes)."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

from bench import record
from tests.conftest import REPO

REFERENCE = REPO / "results" / "reference" / "gpu-h200" / "call2" / "trainer.jsonl"


def _cell(base: dict, nodes: int, hook: str, backward_s: float) -> dict:
    rec = copy.deepcopy(base)
    rec.update(nnodes=nodes, comm_hook=hook)
    for rank in rec["step_breakdown"]["ranks"]:
        rank["parts"]["backward"]["p50"] = backward_s
    return rec


def test_each_part_is_set_against_one_node(tmp_path):
    base = next(r for r in record.load(REFERENCE) if r.get("step_breakdown"))
    rows = [_cell(base, 1, "none", 0.100), _cell(base, 1, "none", 0.104),
            _cell(base, 2, "none", 0.130), _cell(base, 2, "none", 0.126),
            _cell(base, 2, "powersgd", 0.150)]
    results = tmp_path / "runs.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{torn\n")
    proc = subprocess.run([sys.executable, "scripts/step_parts.py", str(results)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "runs.jsonl:6" in proc.stderr            # the torn line, skipped with its place
    none = proc.stdout.split("## comm hook none")[1].split("## comm hook")[0]
    header, _, one, two = [li for li in none.splitlines() if li.startswith("|")]
    column = header.split("|").index(" backward ms ")
    assert one.split("|")[2].strip() == "2"                       # repeats
    assert one.split("|")[column].strip() == "102.0"
    assert two.split("|")[column].strip() == "128.0 (+26.0)"
    # A hook with no one-node cell of its own is its own baseline, not another hook's.
    powersgd = proc.stdout.split("## comm hook powersgd")[1]
    assert "150.0" in powersgd and "(+" not in powersgd and "(-" not in powersgd


def test_a_missing_file_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "scripts/step_parts.py", str(tmp_path / "none")],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


DEMO = REPO / "results" / "reference" / "missing-cost"


def test_each_n_node_cell_is_set_beside_the_prediction_span_by_span():
    """On the demo's own records (make bench-emulated LINK=5gbit REPEATS=3): the measured
    spans are the medians over repeats of the ranks' mean parts, and the predicted step is
    what the model gives from the one-node repeats and the sweep."""
    from bench.analysis.predict import LinkRange, median_repeat, single_node_repeats
    from bench.analysis.prediction import Timeline, predict_step

    proc = subprocess.run([sys.executable, "scripts/step_parts.py",
                           str(DEMO / "demo-run2.jsonl"), "--link-from",
                           str(DEMO / "demo-run2-comm.jsonl")], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("## against the prediction")[1].split("## the last bucket")[0]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in table.splitlines() if line.startswith("| none") or
            line.startswith("| powersgd")}
    assert set(rows) == {"none", "powersgd"}
    records = record.load(DEMO / "demo-run2.jsonl")
    link = LinkRange.of_sweeps(record.link_sweeps(
        record.load(DEMO / "demo-run2-comm.jsonl"))).point
    for hook, cells in rows.items():
        assert cells[0] == "2"
        two = [r for r in records if r.get("comm_hook") == hook and r.get("nnodes") == 2]
        spans = ("data", "h2d", "forward", "backward")
        until = sorted(sum(sum(rank["parts"][p]["mean"] for p in spans)
                           for rank in r["step_breakdown"]["ranks"])
                       / len(r["step_breakdown"]["ranks"]) for r in two)[len(two) // 2]
        assert cells[1].split(" ")[0] == f"{until * 1e3:.1f}"
        (repeats,) = [recs for key, recs in single_node_repeats(records).items()
                      if key[-1] == hook]
        predicted = predict_step(Timeline.of(median_repeat(repeats)), link, 2)
        assert cells[4].split(" ")[1] == f"({predicted.step_s * 1e3:.1f})"


def test_without_a_sweep_over_as_many_nodes_it_says_so(tmp_path):
    sweep = next(r for r in record.load(DEMO / "demo-run2-comm.jsonl"))
    (tmp_path / "comm.jsonl").write_text(json.dumps({**sweep, "world_size": 3,
                                                     "nnodes": 3}) + "\n")
    proc = subprocess.run([sys.executable, "scripts/step_parts.py",
                           str(DEMO / "demo-run2.jsonl"), "--link-from",
                           str(tmp_path / "comm.jsonl")], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "no N-node cell with a one-node timeline and a sweep over as many nodes" \
        in proc.stdout


def test_a_sweep_on_another_link_rate_is_not_set_beside_the_cells(tmp_path):
    sweep = next(r for r in record.load(DEMO / "demo-run2-comm.jsonl"))
    other = copy.deepcopy(sweep)
    other["env"]["link"]["rate_bps"] = 10**9        # the cells ran at 5 Gbit/s
    (tmp_path / "comm.jsonl").write_text(json.dumps(other) + "\n")
    proc = subprocess.run([sys.executable, "scripts/step_parts.py",
                           str(DEMO / "demo-run2.jsonl"), "--link-from",
                           str(tmp_path / "comm.jsonl")], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "no N-node cell with a one-node timeline" in proc.stdout


def test_a_link_from_file_without_a_sweep_is_one_line_and_exit_2():
    proc = subprocess.run([sys.executable, "scripts/step_parts.py",
                           str(DEMO / "demo-run2.jsonl"), "--link-from",
                           str(DEMO / "demo-run2.jsonl")], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "--link-from=" in line and "no ok all-reduce record" in line


GRID = REPO / "results" / "reference" / "accuracy-grid-3" / "mlp2048x2-b8-1gbit"


def _step_parts_on(records: list[dict], comm: Path, tmp_path: Path) -> str:
    """step_parts.py's output on ``records`` (written to a file) against the sweeps in
    ``comm``."""
    results = tmp_path / "runs.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    proc = subprocess.run([sys.executable, "scripts/step_parts.py", str(results),
                           "--link-from", str(comm)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _powersgd_model(records: list[dict], comm: Path):
    """What bench predict starts a 2-node PowerSGD prediction from: the one-node timeline
    of the median repeat and the point link of the sweeps over 2 ranks, computed here
    apart from the script."""
    from bench.analysis.predict import (
        LinkRange,
        median_repeat,
        single_node_repeats,
        sweeps_for_hook,
    )
    from bench.analysis.prediction import Timeline

    (repeats,) = [recs for key, recs in single_node_repeats(records).items()
                  if key[-1] == "powersgd"]
    link = LinkRange.of_sweeps([s for s in sweeps_for_hook(record.link_sweeps(
        record.load(comm)), "powersgd") if s.get("nnodes") == 2]).point
    return Timeline.of(median_repeat(repeats)), link


def test_the_last_buckets_sync_is_set_beside_what_the_model_charges(tmp_path):
    """Each N-node repeat's last bucket, from its hand-over to done (rank 0's timeline),
    beside the hook's collectives at the sweep's time plus its one-node hook work; a record
    whose timeline is torn or missing is left out, not read."""
    records = record.load(GRID / "1gbit.jsonl")
    two = [r for r in records if r.get("nnodes") == 2 and r.get("comm_hook") == "powersgd"]
    torn = copy.deepcopy(two[0])
    torn["bucket_timeline"]["done_s"] = torn["bucket_timeline"]["done_s"][:-1]
    bare = {k: v for k, v in two[0].items() if k != "bucket_timeline"}
    output = _step_parts_on([*records, torn, bare], GRID / "1gbit-comm.jsonl", tmp_path)
    table = output.split("## the last bucket's sync")[1].split("\n## ")[0]
    (row,) = [line for line in table.splitlines() if line.startswith("| powersgd | 2 |")]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    chains = [(r["bucket_timeline"]["done_s"][-1] - r["bucket_timeline"]["issued_s"][-1])
              for r in two]
    assert cells[4] == ", ".join(f"{c * 1e3:.1f}" for c in chains)   # torn and bare: out
    timeline, link = _powersgd_model(records, GRID / "1gbit-comm.jsonl")
    sent = timeline.sent_bytes[-1]
    collectives = 3 * link.allreduce_s(sent / 3, 2)
    work = timeline.hook_work(len(timeline.sent_bytes) - 1)
    assert timeline.calls_per_bucket == 3 and cells[2] == f"{sent / 1e3:.1f}"
    assert cells[3] == (f"{collectives * 1e3:.1f} + {work * 1e3:.1f} = "
                        f"{(collectives + work) * 1e3:.1f}")


NODES = REPO / "results" / "reference" / "accuracy-grid-nodes-2" / "run-2" / "smallcnn-b64-1gbit"


def _step_parts_on_nodes(comm: Path = NODES / "1gbit-comm.jsonl") -> str:
    """step_parts.py's output on the 2-4 node records, against the sweeps in ``comm``."""
    proc = subprocess.run([sys.executable, "scripts/step_parts.py", str(NODES / "1gbit.jsonl"),
                           "--link-from", str(comm)], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _section(output: str, title: str) -> str:
    """The text of the section whose heading starts ``## title``, up to the next one."""
    return output.split(f"## {title}")[1].split("\n## ")[0]


def _each_n_node_cell(table: str):
    """Per hook and node count of the 2-4 node records: (hook, nodes, the one-node
    timeline, the point link of the sweeps over as many ranks, the table's row for it as
    cells), each computed here as bench predict does, apart from the script."""
    from bench.analysis.predict import (
        LinkRange,
        median_repeat,
        single_node_repeats,
        sweeps_for_hook,
    )
    from bench.analysis.prediction import Timeline

    records = record.load(NODES / "1gbit.jsonl")
    sweeps = record.link_sweeps(record.load(NODES / "1gbit-comm.jsonl"))
    for key, repeats in single_node_repeats(records).items():
        hook = key[-1]
        timeline = Timeline.of(median_repeat(repeats))
        for nodes in (2, 3, 4):
            (row,) = [line for line in table.splitlines()
                      if line.startswith(f"| {hook} | {nodes} |")]
            link = LinkRange.of_sweeps([s for s in sweeps_for_hook(sweeps, hook)
                                        if s.get("nnodes") == nodes]).point
            yield hook, nodes, timeline, link, [c.strip() for c in row.split("|")[1:-1]]


def test_what_the_model_adds_until_backward_ends_is_shown_part_by_part():
    """At 2-4 nodes, each against the sweep over as many ranks: the step until backward
    ends, measured and predicted, against the one-node timeline's end of backward (where
    the model starts), the prediction split into the hosts' pace in phase, the waits for
    the slowest rank, the CPU time the syncs take and the buffer broadcasts; its sum is
    the predicted span of the table before it."""
    from bench.analysis.prediction import predict_step

    output = _step_parts_on_nodes()
    against = _section(output, "against the prediction")
    rows = 0
    for hook, nodes, timeline, link, cells in _each_n_node_cell(
            _section(output, "until backward ends, against")):
        p = predict_step(timeline, link, nodes)
        stretch = (link.in_phase_factor(timeline.workload) - 1) * timeline.backward_end_s
        # The slowest rank's lateness at the last sync is waited out in the sync, by the
        # ranks' mean the parts are; what falls before backward ends stays here.
        parts = (stretch, p.skew_s - p.skew_after_backward_s, p.stolen_s, p.buffers_s)
        assert p.stolen_s > 0 and stretch != 0, parts   # each part is read, none left out
        assert p.skew_after_backward_s > 0
        assert (p.skew_s - p.skew_after_backward_s > 0) == (hook == "powersgd"), parts
        assert cells[2] == f"{timeline.backward_end_s * 1e3:.1f}"
        assert cells[4] == (" + ".join(f"{x * 1e3:.1f}" for x in parts)
                            + f" = {sum(parts) * 1e3:+.1f}")
        # The same spans as the table before: measured and predicted until backward ends.
        (before,) = [line for line in against.splitlines()
                     if line.startswith(f"| {hook} | {nodes} |")]
        measured, predicted = before.split("|")[3].split()
        start = timeline.backward_end_s * 1e3
        assert abs(float(measured) - start - float(cells[3])) < 0.11
        assert abs(float(predicted.strip("()")) - start - sum(parts) * 1e3) < 0.11
        # ... and the sync waited for after it holds that last lateness.
        synced = before.split("|")[4].split()[1].strip("()")
        assert abs(float(synced) - (p.exposed_s + p.skew_after_backward_s) * 1e3) < 0.051
        rows += 1
    assert rows == 6


def test_the_first_buckets_sync_is_set_beside_the_sweeps_figures_alone_and_beside_compute():
    """Each N-node repeat's first bucket, hand-over to done, beside its collectives' time
    and gloo's CPU time alone, and their time and the compute taken beside compute, each at
    the sweep over as many ranks as the cell."""
    records = record.load(NODES / "1gbit.jsonl")
    rows = 0
    for hook, nodes, timeline, link, cells in _each_n_node_cell(
            _section(_step_parts_on_nodes(), "the first bucket's sync")):
        calls, sent = timeline.calls_per_bucket, timeline.sent_bytes[0]
        assert link.beside is not None
        assert cells[2] == f"{sent / 1e3:.1f}"
        assert cells[3] == (f"{calls * link.allreduce_s(sent / calls, nodes) * 1e3:.1f}, "
                            f"{calls * link.allreduce_cpu_s(sent / calls, nodes) * 1e3:.1f}")
        assert cells[4] == (
            f"{calls * link.beside.allreduce_s(sent / calls, nodes) * 1e3:.1f}, "
            f"{calls * link.beside.allreduce_cpu_s(sent / calls, nodes) * 1e3:.1f}")
        chains = [r["bucket_timeline"]["done_s"][0] - r["bucket_timeline"]["issued_s"][0]
                  for r in records if r.get("comm_hook") == hook and r.get("nnodes") == nodes]
        assert len(chains) == 3 and cells[5] == ", ".join(f"{c * 1e3:.1f}" for c in chains)
        rows += 1
    assert rows == 6


def test_a_sweep_not_probed_beside_compute_leaves_that_column_empty(tmp_path):
    """Without the sweep's probe beside compute the first bucket has no figure there: a
    dash, not a number the sweep did not measure."""
    sweeps = []
    for rec in record.load(NODES / "1gbit-comm.jsonl"):
        rec = copy.deepcopy(rec)
        for size in rec["sizes"]:
            size.pop("beside_compute", None)
        sweeps.append(rec)
    (tmp_path / "comm.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sweeps))
    table = _section(_step_parts_on_nodes(tmp_path / "comm.jsonl"), "the first bucket's sync")
    rows = [line.split("|")[1:-1] for line in table.splitlines()
            if line.startswith(("| none |", "| powersgd |"))]
    assert len(rows) == 6 and all(row[4].strip() == "-" for row in rows), rows


# resnet18 b8 in rounds (part twelve): three buckets, a serialized PowerSGD hook.
ROUNDS = REPO / "results" / "reference" / "accuracy-grid-12" / "resnet18-b8-5gbit"


def test_each_buckets_marks_are_set_beside_the_models_traced_events(tmp_path):
    """Per bucket of the N-node cells: the model's ready, hand-over and done (its traced
    simulation, from the step's start) beside the medians over the repeats of each
    repeat's own marks drawn out to its mean step; a torn timeline is left out."""
    from bench.analysis.prediction import _drawn_to_mean, predict_step

    records = record.load(ROUNDS / "5gbit.jsonl")
    two = [r for r in records if r.get("nnodes") == 2 and r.get("comm_hook") == "powersgd"]
    torn = copy.deepcopy(two[0])
    torn["bucket_timeline"]["issued_s"] = torn["bucket_timeline"]["issued_s"][:-1]
    output = _step_parts_on([*records, torn], ROUNDS / "5gbit-comm.jsonl", tmp_path)
    table = _section(output, "each bucket's marks")
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in table.splitlines()
            if line.startswith("| powersgd | 2 |")]
    timeline, link = _powersgd_model(records, ROUNDS / "5gbit-comm.jsonl")
    trace: list = []
    predict_step(timeline, link, 2, trace)
    drawn = [_drawn_to_mean(r["bucket_timeline"]) for r in two]
    assert len(rows) == len(timeline.ready_s) > 1
    for bucket, row in enumerate(rows):
        assert row[2] == str(bucket)
        for column, kind in zip(row[3:], ("ready", "issued", "done"), strict=True):
            (guess,) = [t for what, b, t in trace if what == kind and b == bucket]
            seen = sorted(d[f"{kind}_s"][bucket] for d in drawn)[len(drawn) // 2]
            assert column == f"{guess * 1e3:.1f} / {seen * 1e3:.1f}"
