"""The multi-GPU study's result on CPU, at small scale: under a per-rank memory cap the deep
& wide MLP is out of memory on one process and on two under DDP, and trains on two under
FSDP (make bench-oom, the real make target)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.config import TrainConfig
from bench.options import ConfigError, on_head
from conftest import REPO

pytestmark = pytest.mark.e2e


def test_make_bench_oom_reproduces_the_study(tmp_path):
    results = tmp_path / "oom.jsonl"
    out = subprocess.run(["make", "--no-print-directory", "bench-oom", "MLP_WIDTH=1024",
                          "MLP_DEPTH=8", "MEMORY_CAP=96MiB", "STEPS=2", f"RESULTS={results}"],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {(r["nproc_per_node"], r["strategy"]): r
            for r in map(json.loads, results.read_text().splitlines())}
    assert set(rows) == {(1, "ddp"), (2, "ddp"), (2, "fsdp")}
    for key in ((1, "ddp"), (2, "ddp")):
        row = rows[key]
        assert row["status"] == "oom", row["error"]
        assert "out of memory under --memory-cap 96MiB" in row["error"]
        assert "may allocate 96 MiB more" in row["error"]
    fsdp = rows[(2, "fsdp")]
    assert fsdp["status"] == "ok" and fsdp["gradient_sync"] == "fsdp"
    assert len(fsdp["peak_memory_per_rank"]) == 2
    # Gradient traffic under FSDP: every gradient reduce-scattered once a step, and the
    # parameters all-gathered (forward, and again for backward).
    traffic = fsdp["traffic_by_kind"]
    assert traffic["reduce_scatter"] == fsdp["param_count"] * 4
    assert traffic["all_gather"] >= fsdp["param_count"] * 4
    assert fsdp["grad_bytes_per_step"] == traffic["reduce_scatter"] + traffic["all_gather"]
    assert "strategy fsdp" in out.stdout and "peak mem GB" in out.stdout


@pytest.mark.parametrize("args, setting", [
    (["--strategy", "fsdp", "--comm-hook", "powersgd"], "--comm-hook"),
    (["--strategy", "fsdp", "--static-graph"], "--static-graph"),
    (["--memory-cap", "12 bytes"], "--memory-cap"),
    (["--memory-cap", "1KiB"], "--memory-cap"),
    (["--strategy", "zero3"], "--strategy"),
    (["--strategy", "fsdp", "--channels-last"], "--channels-last")])
def test_bad_strategy_settings_are_refused(args, setting):
    with on_head(), pytest.raises((ConfigError, SystemExit)) as error:
        TrainConfig.from_args(["--steps", "1", *args])
    if error.type is ConfigError:
        assert setting in str(error.value)


def test_the_matrix_takes_strategies_as_a_dimension(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bench", "matrix", "--topologies", "1x2",
                          "--strategies", "ddp,fsdp", "--dry-run", "--results",
                          str(tmp_path / "r.jsonl"), "--", "--steps", "2"], cwd=REPO,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("--strategy ddp") == 1 and out.stdout.count("--strategy fsdp") == 1
