"""bench.analysis.accuracy: measured against predicted, per setup and node count, from the
sweep over N nodes and from the 2-node sweep carried to N."""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys

import pytest

from bench.analysis import accuracy
from bench.analysis.prediction import Link, Timeline, predict_step
from tests.conftest import REPO
from tests.test_predict import _record, _sweep


def _sweep_over(nodes: int, busbw_GBps: float) -> dict:
    rec = _sweep([{"size_bytes": 1024, "time_s": 1e-4, "busbw_GBps": 0.001},
                  {"size_bytes": 64_000_000, "time_s": 1.0, "busbw_GBps": busbw_GBps}])
    rec.update(world_size=nodes, nnodes=nodes)
    return rec


def _predicted(nodes: int, busbw_GBps: float, swept_over: int | None = None) -> float:
    """samples/s the model gives for _record's timeline (16 samples per node per step), on
    the link of the sweep over ``swept_over`` nodes (default: ``nodes``)."""
    timeline = Timeline((0.1,), (12.5e6,), 0.15)
    link = Link.from_allreduce(_sweep_over(swept_over or nodes, busbw_GBps))
    return nodes * 16 / predict_step(timeline, link, nodes).step_s


def test_each_measured_node_count_is_set_beside_its_prediction():
    sweeps = [_sweep_over(2, 0.12), _sweep_over(3, 0.10)]
    at_two, at_three = _predicted(2, 0.12), _predicted(3, 0.10)
    records = [_record(1, "none", 12.5e6, 100.0),
               _record(2, "none", 12.5e6, at_two * 0.95),
               _record(3, "none", 12.5e6, at_three * 0.80)]
    for rec in records[1:]:
        rec["env"]["link"]["rate_bps"] = 10**9
    found = {row.nodes: row for row in accuracy.rows(records, accuracy.sweeps_of(sweeps))}
    assert sorted(found) == [2, 3]
    assert found[2].at_n.ratio == pytest.approx(0.95)
    assert found[3].at_n.ratio == pytest.approx(0.80)
    # From the 2-node sweep carried to 3 nodes the prediction is faster (0.12 GB/s): its
    # ratio is lower still.
    assert found[3].from_two.ratio == \
        pytest.approx(at_three * 0.80 / _predicted(3, 0.12, swept_over=2))
    assert found[3].from_two.ratio < found[3].at_n.ratio
    text = accuracy.table(list(found.values()))
    assert "| 0.95 |" in text and "0.80 **off**" in text
    assert "1 of 2 rows within 0.90-1.10 (N-node sweep)" in text


def _slow_rank(rank: int, excess: float) -> dict:
    """A record's named straggler, as bench.analysis.straggler writes it."""
    return {"rank": rank, "node": rank, "part": "compute", "excess_share": excess,
            "cost_share": excess * 0.8, "excess_s": 0.01, "host": "vm", "device": "cpu",
            "summary": f"rank {rank}: compute +{excess:.0%}"}


def test_a_row_whose_runs_named_a_straggler_says_so_under_the_table():
    """The model predicts hosts alike: a row whose measured runs named a slowest rank says
    which, with the worst and how many runs named one; a row whose runs named none, or
    were not checked, says nothing."""
    at_two = _predicted(2, 0.12)
    records = [_record(1, hook, 12.5e6, 100.0) for hook in ("none", "fp16", "bf16")]
    named = {"none": [None, None], "fp16": [_slow_rank(0, 0.25), None, _slow_rank(1, 0.1)],
             "bf16": []}
    for hook, stragglers in named.items():
        for slow in stragglers:
            rec = _record(2, hook, 12.5e6, at_two * 0.8)
            rec.update(straggler=slow, straggler_check={"named": slow is not None})
            records.append(rec)
    records.append(_record(2, "bf16", 12.5e6, at_two))    # no breakdown: not checked
    found = {row.hook: row for row in accuracy.rows(records, accuracy.sweeps_of(
        [_sweep_over(2, 0.12)]))}
    assert found["fp16"].straggler == "r0/n0 compute +25% (2/3)"
    assert found["none"].straggler == found["bf16"].straggler == ""
    lines = accuracy.table(list(found.values())).splitlines()
    assert lines[-2].startswith("measured on hosts not alike (the model predicts them alike)")
    assert lines[-1] == f"- 1 Gbit/s, fp16, 2 nodes ({found['fp16'].at_n.ratio:.2f}): " \
        "r0/n0 compute +25% (2/3)"
    grid = accuracy.grid_table([accuracy.Measured("w", "a workload", True,
                                                  tuple(found.values()))]).splitlines()
    assert grid[-1] == f"- w: 1 Gbit/s, fp16, 2 nodes ({found['fp16'].at_n.ratio:.2f}): " \
        "r0/n0 compute +25% (2/3)"
    # Without a named rank, nothing is said.
    calm = [row for hook, row in found.items() if hook != "fp16"]
    assert "not alike" not in accuracy.table(calm)


def test_a_node_count_without_its_sweep_is_left_out():
    records = [_record(1, "none", 12.5e6, 100.0), _record(3, "none", 12.5e6, 50.0)]
    assert accuracy.rows(records, accuracy.sweeps_of([_sweep_over(2, 0.12)])) == []


def test_the_command_says_what_is_missing(tmp_path, capsys):
    import json

    results = tmp_path / "runs.jsonl"
    results.write_text(json.dumps(_record(1, "none", 12.5e6, 100.0)) + "\n")
    assert accuracy.main([str(results), "--link-from", str(results)]) == 2
    assert "--link-from" in capsys.readouterr().err


def _cpu_sweep(nodes: int, dtype: str, cpu_s: float) -> dict:
    """A sweep over ``nodes`` in ``dtype``: the same wire times, gloo's CPU time per call
    ``cpu_s`` at the largest size."""
    rec = _sweep_over(nodes, 0.12)
    rec["dtype"] = dtype
    for row in rec["sizes"]:
        row["cpu_time_s"] = cpu_s if row["size_bytes"] > 1024 else 1e-5
    return rec


def _on_cpu(rec: dict) -> dict:
    rec["config"]["distributed"]["device"] = "cpu"
    return rec


def test_each_hook_is_predicted_on_the_sweeps_of_the_type_it_sends():
    # gloo sums float16 in software: the float16 sweep costs more CPU per byte, here more
    # than the wire time, so on a CPU job the all-reduce waits on the CPU.
    sweeps = [_cpu_sweep(2, "float32", 0.05), _cpu_sweep(2, "float16", 2.0)]
    records = [_on_cpu(_record(1, "fp16", 12.5e6, 100.0)),
               _on_cpu(_record(2, "fp16", 12.5e6, 50.0)),
               _on_cpu(_record(1, "none", 25e6, 100.0)),
               _on_cpu(_record(2, "none", 25e6, 50.0))]
    found = {row.hook: row for row in accuracy.rows(records, accuracy.sweeps_of(sweeps))}
    assert found["fp16"].sweep_dtype == "float16"
    assert found["none"].sweep_dtype == "float32"   # not the file's latest (float16)
    on_float32 = {row.hook: row for row in accuracy.rows(
        records, accuracy.sweeps_of(sweeps[:1]))}
    assert on_float32["fp16"].sweep_dtype == "float32"   # no float16 sweep: the gradients'
    assert found["fp16"].at_n.samples_per_s.point < on_float32["fp16"].at_n.samples_per_s.point
    assert found["none"].at_n.samples_per_s.point == \
        on_float32["none"].at_n.samples_per_s.point
    assert "| fp16 (float16) | 2 |" in accuracy.table(list(found.values()))


def _one_node_cell(tmp_path, samples_per_s: float, neighbours: list[dict], nnodes: int = 1,
                   job: str = "M-c1r1") -> dict:
    """A cell's record as the matrix writes it, with its neighbours' records in its logs."""
    rec = _record(nnodes, "none", 12.5e6, samples_per_s)
    rec["matrix"] = {"id": "M", "cell": 1, "repeat": 1, "launcher": "netns",
                     "topology": f"{nnodes}x1", "logs": f"some/other/cwd/logs/{job}"}
    logs = tmp_path / "logs" / job
    logs.mkdir(parents=True)
    (logs / "neighbours.jsonl").write_text(
        "".join(json.dumps(n) + "\n" for n in neighbours) + "not json\n")
    return rec


def test_the_one_node_cells_neighbours_are_more_samples_of_the_baseline(tmp_path, capsys):
    same = [_record(1, "none", 12.5e6, rate) for rate in (80.0, 120.0)]
    other_hook = _record(1, "fp16", 12.5e6, 90.0)
    failed = dict(_record(1, "none", 12.5e6, 70.0), status="error")
    cell = _one_node_cell(tmp_path, 100.0, [*same, other_hook, failed])
    # An N-node cell's neighbours run beside nodes that wait on the link: not the baseline.
    wide = _one_node_cell(tmp_path, 50.0, [_record(1, "none", 12.5e6, 300.0)], nnodes=2,
                          job="M-c2r1")
    copies = accuracy.baseline_copies([cell, wide], tmp_path / "runs.jsonl")
    assert sorted(c["samples_per_s"] for c in copies) == [80.0, 120.0]
    assert "neighbours.jsonl:5" in capsys.readouterr().err   # the bad line, named
    # A cell whose logs are gone adds nothing.
    assert accuracy.baseline_copies([cell], tmp_path / "elsewhere" / "runs.jsonl") == []
    # A record whose logs name leaves logs/ is not followed: a warning, nothing read.
    (tmp_path / "neighbours.jsonl").write_text(json.dumps(same[0]) + "\n")
    cell["matrix"]["logs"] = "logs/.."
    assert accuracy.baseline_copies([cell], tmp_path / "runs.jsonl") == []
    assert "matrix.logs" in capsys.readouterr().err


def _copy(job: str, step_s: float) -> dict:
    """A neighbour host's copy of the one-node cell (its torchrun job ``job``), at this step."""
    rec = _record(1, "none", 12.5e6, 16 / step_s)
    rec["job_id"] = job
    rec["bucket_timeline"]["step_s"] = step_s
    return rec


def test_the_command_starts_from_the_rounds_slowest_host_unless_told_not_to(tmp_path,
                                                                          capsys):
    # The cell (0.15 s a step) and two neighbour hosts at the same moment (0.20 s, 0.12 s);
    # host n1 ran a second copy after its first (0.30 s), beside the cell's end: not kept.
    cell = _one_node_cell(tmp_path, 100.0, [_copy("M-c1r1-n1", 0.20), _copy("M-c1r1-n2", 0.12),
                                            _copy("M-c1r1-n1", 0.30)])
    measured = _record(2, "none", 12.5e6, 150.0)
    results, sweeps = tmp_path / "runs.jsonl", tmp_path / "comm.jsonl"
    results.write_text(json.dumps(cell) + "\n" + json.dumps(measured) + "\n")
    sweeps.write_text(json.dumps(_sweep_over(2, 0.12)) + "\n")
    one_node = re.compile(r"\| none \(float32\) \| 2 \| ([\d.]+) \((\d+)\) \|")
    assert accuracy.main([str(results), "--link-from", str(sweeps)]) == 0
    # Two of the three hosts: expected slowest (0.15 + 2 x 0.20) / 3 s, nearest the 0.20.
    assert one_node.search(capsys.readouterr().out).groups() == ("80.0", "1")
    assert accuracy.main([str(results), "--link-from", str(sweeps), "--no-neighbours"]) == 0
    assert one_node.search(capsys.readouterr().out).groups() == ("106.7", "1")


@pytest.mark.parametrize("args,setting", [
    (["--links", "9zbit"], "--links"), (["--links", ","], "--links"),
    (["--hooks", "none,zip"], "--hooks"), (["--nodes", "3,4"], "--nodes"),
    (["--repeats", "0"], "--repeats"), (["--max-size", "1x"], "--max-size"),
    (["--analyse-only"], "results"),       # nothing measured there yet
    (["--host-cpus", "0/x"], "--host-cpus"), (["--host-cpus", "0/0/1"], "--host-cpus"),
    (["--model", "resnet9000"], "--model"), (["--image-size", "4"], "--image-size"),
    (["--model", "resnet18", "--image-size", "16"], "--image-size"),   # resnets need 32+
    (["--model", "vit_b_16", "--image-size", "40"], "--image-size"),   # patches of 16
])
def test_the_script_refuses_a_bad_value_in_one_line_and_writes_nothing(tmp_path, args,
                                                                         setting):
    out = tmp_path / "acc"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "prediction_accuracy.py"),
                           "--out", str(out), *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and setting in lines[0], proc.stderr
    assert not out.exists()


# Sweeps of another workload (smallcnn at batch 64): no probe of the one measured here.
MEASURED_SWEEPS = REPO / "results" / "reference" / "accuracy-grid-3" / "smallcnn-b64-1gbit" \
    / "1gbit-comm.jsonl"


def _script():
    spec = importlib.util.spec_from_file_location(
        "prediction_accuracy", REPO / "scripts" / "prediction_accuracy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("model, image_size, shape", [
    ("resnet18", 32, ["--image-size", "32"]),
    ("mlp", None, ["--mlp-width", "512", "--mlp-depth", "8"]),
])
def test_the_script_measures_the_workload_it_is_given(tmp_path, monkeypatch, model,
                                                      image_size, shape):
    """The grid's cells (issue 29) run the chosen model, size and batch; the MLP's width
    and depth go only to the MLP."""
    script, calls = _script(), []

    def run(argv):
        calls.append(argv)
        if "allreduce" in argv:   # the sweep leaves its records, as bench matrix would
            shutil.copy(MEASURED_SWEEPS, argv[argv.index("--results") + 1])

    monkeypatch.setattr(script, "_run", run)
    args = argparse.Namespace(hooks="none,powersgd", repeats=3, max_size="64MiB", model=model,
                              image_size=image_size, batch_size=8, steps=20, mlp_width=512,
                              mlp_depth=8, min_timed_s=5.0, host_cpus=None)
    script.measure("5gbit", tmp_path, [2], args)
    sweeps = [argv for argv in calls if "allreduce" in argv]
    trains = [argv for argv in calls if "allreduce" not in argv]
    # Both hooks send fp32: one sweep a round, then the round's cells; three rounds.
    assert [s[s.index("--dtype") + 1] for s in sweeps] == ["float32"] * 3
    assert len(trains) == 3 and all(train == trains[0] for train in trains)
    train = trains[0]
    after = train[train.index("--") + 1:]
    assert train[train.index("--models") + 1] == model
    assert train[train.index("--batch-sizes") + 1] == "8"
    assert train[train.index("--topologies") + 1] == "1x1,2x1"
    # Each hook's one-node cell again after its two-node cell; the sweeps have none.
    assert "--bracket" in train[:train.index("--")] and "--interleave" in train
    assert not any("--bracket" in sweep for sweep in sweeps)
    assert all(word in after for word in shape)
    assert ("--mlp-width" in after) is (model == "mlp")
    assert ("--image-size" in after) is (image_size is not None)
    assert after[after.index("--steps") + 1] == "20"     # no probe of this workload to size by
    # Each sweep's lockstep probe times the same workload's own steps.
    for sweep in sweeps:
        probe = sweep[sweep.index("--lockstep") + 1:]
        assert probe[:4] == ["--lockstep-model", model, "--lockstep-batch-size", "8"]
        assert probe[4:] == [word.replace("--", "--lockstep-", 1) for word in shape]
    assert not any("--host-cpus" in argv for argv in calls)    # the even deal unless asked


def test_the_script_hands_host_cpus_to_every_matrix_it_runs(tmp_path, monkeypatch):
    script, calls = _script(), []

    def run(argv):
        calls.append(argv)
        if "allreduce" in argv:
            shutil.copy(MEASURED_SWEEPS, argv[argv.index("--results") + 1])

    monkeypatch.setattr(script, "_run", run)
    args = argparse.Namespace(hooks="none", repeats=3, max_size="64MiB", model="mlp",
                              image_size=None, batch_size=8, steps=20, mlp_width=512,
                              mlp_depth=8, min_timed_s=5.0, host_cpus="0/0/1/1")
    script.measure("1gbit", tmp_path, [2, 4], args)
    assert calls and all(argv[argv.index("--host-cpus") + 1] == "0/0/1/1"
                         and argv.index("--host-cpus") < argv.index("--") for argv in calls)
