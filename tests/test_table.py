"""Table labels and speedup baselines, from the fixture's real records."""
from __future__ import annotations

import json

from bench.analysis.table import render
from conftest import REPO

FIXTURE = REPO / "tests" / "fixtures" / "table-fixture.jsonl"


def fixture_records(batch: int) -> list[dict]:
    records = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    return [r for r in records if r["batch_size_per_device"] == batch]


def rows_of(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_cpu_runs_are_labelled_as_processes():
    records = fixture_records(64)
    for rec in records:
        rec["config"]["distributed"]["device"] = "cpu"
    text = render(records)
    assert "GPU" not in text
    assert "| processes" in text and "batch/process" in text
    assert [row[0] for row in rows_of(text)] == ["single process", "multi-process",
                                                 "multi-node"]


def test_without_a_one_device_row_the_smallest_topology_is_the_baseline():
    # 1x2 measured 390-400 samples/s, 2x1 60-70: without the 1x1 rows, speedups are
    # against 1x2 (2 GPUs), and efficiency per device added.
    records = [r for r in fixture_records(64) if r["world_size"] != 1]
    text = render(records)
    assert "speedup against 1x2 (2 GPUs): no 1-device row" in text
    base, node = rows_of(text)
    assert base[6:8] == ["1.00x", "100%"]
    assert node[6] == f"{65 / 395:.2f}x" and node[7] == f"{65 / 395:.0%}"


def test_a_gpu_table_keeps_its_labels_and_the_one_device_baseline():
    text = render(fixture_records(64))
    assert "no 1-device row" not in text
    assert [row[0] for row in rows_of(text)] == ["single GPU", "multi-GPU", "multi-node"]


def test_compare_names_what_each_side_ran_on():
    from bench.analysis.compare import side

    records = fixture_records(64)
    for rec in records[:2]:
        rec["env"]["ranks"][0]["device"] = "NVIDIA H100 80GB HBM3"
        rec["env"]["hostnames"] = ["gpu1"]
    line = side(records)
    assert line.startswith("AMD EPYC, NVIDIA H100 80GB HBM3 on 2 host(s) (gpu1, vm), nccl")
    assert "torch 2.14.1+cu130" in line


def test_a_compiled_run_has_its_own_table_and_baseline():
    """Compiled and eager, channels-last or not, FSDP or DDP are different programs: the
    compiled 1x2 is never divided by the eager 1x1 (issue 28: 5,582 compiled against 3,990
    eager on one H100 would have read as a 1.4x speedup of nothing)."""
    from bench.analysis import compare
    from bench.analysis.table import FIELDS, variant

    records = fixture_records(64)
    for rec in records:
        if rec["world_size"] == 2 and rec["nnodes"] == 1:
            rec["config"]["precision"].update(compile=True, channels_last=True)
    assert {variant(r) for r in records} == {"eager", "compiled+channels-last"}
    text = render(records)
    titles = [line for line in text.splitlines() if line.startswith("batch 64")]
    assert len(titles) == 2 and all(" | strategy ddp | variant " in t for t in titles)
    eager, compiled = text.split("variant compiled")
    assert "multi-GPU" not in eager.split("variant eager")[-1]
    assert "no 1-device row" in compiled, "its own baseline, not the eager 1x1"
    assert FIELDS["variant"]({"config": {}}) == "eager", "older records ran eager"
    assert "variant" in compare.DEFAULT_MATCH and "strategy" in compare.DEFAULT_MATCH
    fsdp = dict(records[0], strategy="fsdp")
    assert len([line for line in render([records[0], fsdp]).splitlines()
                if line.startswith("batch 64")]) == 2


def test_the_steady_state_is_shown_where_a_record_has_it():
    """An --epochs run of 2+ epochs records samples/s after its first epoch: the table
    shows it beside the metric (the H100's real-data run: 9,088 samples/s in all, about
    twice that after the first epoch's un-warmed steps); tables without it keep their
    columns."""
    from bench import record
    from bench.analysis.table import STEADY_HEADER

    rec = json.loads((REPO / "results" / "reference" / "gpu-h100" / "real-data.jsonl")
                     .read_text().splitlines()[0])
    assert STEADY_HEADER not in render([rec])
    rec["samples_per_s_steady"] = 18_204.6
    assert record.problem_of(rec) is None
    text = render([rec])
    header = next(line for line in text.splitlines() if line.startswith("| setup"))
    names = [c.strip() for c in header.strip("|").split("|")]
    assert names[5:7] == ["total time s", STEADY_HEADER]
    (row,) = rows_of(text)
    assert row[6] == "18204.6"
    csv = render([rec], "csv").splitlines()
    assert STEADY_HEADER in csv[0] and "18204.6" in csv[1]
    assert STEADY_HEADER not in render(fixture_records(64))
