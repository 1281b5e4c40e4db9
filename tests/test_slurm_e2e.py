"""`bench matrix --launcher slurm` and `make bench-slurm` on a real Slurm: Debian's
slurmctld, two slurmd (node1, node2) and munge on this machine (scripts/slurm-cluster.sh).
Each test submits real batch jobs; their rows must carry Slurm's own view."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, _require, assert_breakdown

CLUSTER = REPO / "scripts" / "slurm-cluster.sh"
# One worker: the cluster in /var/lib/bench-slurm is stopped by whoever started it, and
# its first start may install Slurm (tests/conftest.py, PHASES).
pytestmark = pytest.mark.serial


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """The two-node cluster, started for these tests (and stopped after, unless it was
    already up); yields the environment that points the Slurm commands at it."""
    _require(os.geteuid() == 0, "the Slurm test cluster needs root (it installs and starts "
             "slurmctld, slurmd and munge)")
    env = {**os.environ, "BENCH_SLURM_DIR": str(os.environ.get("BENCH_SLURM_DIR",
                                                              "/var/lib/bench-slurm"))}
    was_up = subprocess.run([str(CLUSTER), "status"], env=env, capture_output=True,
                            timeout=60).returncode == 0
    started = subprocess.run([str(CLUSTER), "start"], env=env, capture_output=True, text=True,
                             timeout=900)
    if started.returncode != 0:
        pytest.fail(f"the Slurm test cluster did not start: {started.stderr[-2000:]}")
    conf = subprocess.run([str(CLUSTER), "env"], env=env, capture_output=True, text=True)
    env["SLURM_CONF"] = conf.stdout.strip().split("=", 1)[1]
    yield env
    if not was_up:
        subprocess.run([str(CLUSTER), "stop"], env=env, capture_output=True, timeout=60)


def _matrix(env, results: Path, *args: str, timeout: float = 300):
    proc = subprocess.run([sys.executable, "-m", "bench", "matrix", "--launcher", "slurm",
                           "--results", str(results), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    rows = [json.loads(line) for line in results.read_text().splitlines()] \
        if results.exists() else []
    return proc, rows


def _squeue(env) -> str:
    return subprocess.run(["squeue", "-h", "-o", "%i %T"], env=env, capture_output=True,
                          text=True).stdout.strip()


def test_a_two_node_job_writes_one_record(slurm, tmp_path):
    proc, rows = _matrix(slurm, tmp_path / "runs.jsonl", "--topologies", "2x1", "--models",
                         "smallcnn", "--batch-sizes", "8", "--", "--steps", "3",
                         "--warmup-steps", "1", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = rows
    assert row["status"] == "ok" and row["nnodes"] == 2 and row["world_size"] == 2
    scheduler = row["matrix"]["scheduler"]
    assert scheduler["kind"] == "slurm" and scheduler["state"] == "COMPLETED"
    assert scheduler["nodes"] == "node[1-2]"
    log_dir = Path(row["matrix"]["logs"])
    assert (log_dir / "job.sbatch").read_text().startswith("#!/bin/bash")
    assert {p.name for p in log_dir.glob("node*.log")} == {"node0.log", "node1.log"}
    # Every rank joined: two hosts (one per slurmd) in the record's environment.
    assert [r["rank"] for r in row["env"]["ranks"]] == [0, 1]


def test_a_failing_rank_is_a_row_with_slurms_state(slurm, tmp_path):
    """The data directory exists on no node: each rank refuses, Slurm ends the job FAILED,
    and the row says so, with the node and its own line."""
    proc, rows = _matrix(slurm, tmp_path / "runs.jsonl", "--topologies", "2x1", "--models",
                         "smallcnn", "--batch-sizes", "8", "--", "--steps", "3",
                         "--device", "cpu", "--data", "fashion-mnist", "--data-dir",
                         "/nonexistent/fashion-mnist", "--manifest-check", "off")
    assert proc.returncode == 1, proc.stderr[-3000:]
    (row,) = rows
    assert row["status"] == "error" and row["nnodes"] == 2
    assert row["error"].startswith("slurm job ") and " FAILED " in row["error"]
    assert "--data-dir=/nonexistent/fashion-mnist" in row["error"]
    assert row["failed_node"]["rank"] in (0, 1)
    assert row["matrix"]["scheduler"]["state"] == "FAILED"


def test_a_job_past_its_deadline_is_cancelled_and_recorded_as_timeout(slurm, tmp_path):
    started = time.monotonic()
    proc, rows = _matrix(slurm, tmp_path / "runs.jsonl", "--topologies", "2x1", "--models",
                         "smallcnn", "--batch-sizes", "8", "--deadline", "20", "--",
                         "--steps", "1000000", "--device", "cpu")
    assert proc.returncode == 1, proc.stderr[-3000:]
    (row,) = rows
    assert row["status"] == "timeout" and "deadline of 20 s" in row["error"]
    assert row["matrix"]["scheduler"]["state"] == "CANCELLED"
    job_id = row["matrix"]["scheduler"]["job_id"]
    assert job_id not in _squeue(slurm).split(), "scancel left the job queued or running"
    assert time.monotonic() - started < 120


def test_make_bench_slurm_runs_the_matrix(slurm, tmp_path):
    results = tmp_path / "slurm.jsonl"
    proc = subprocess.run(["make", "--no-print-directory", "bench-slurm", "GPUS_PER_NODE=0",
                           "NODES_PER_JOB=2", "MODEL=smallcnn", "BATCH_SIZES=8", "STEPS=2",
                           f"RESULTS={results}"], cwd=REPO, env=slurm, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["nnodes"], r["status"]) for r in rows] == [(1, "ok"), (2, "ok")]
    assert "speedup" in proc.stdout + proc.stderr


def test_doctor_checks_the_cluster(slurm):
    ok = subprocess.run([sys.executable, "-m", "bench", "doctor", "--slurm"], cwd=REPO,
                        env=slurm, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    for check in ("controller", "partition", "nodes", "munge", "same"):
        assert f"| {check}" in ok.stdout
    assert "0 FAIL" in ok.stderr and "node1 idle" in ok.stdout and "node2 idle" in ok.stdout
    missing = subprocess.run([sys.executable, "-m", "bench", "doctor", "--slurm",
                              "--partition", "nope"], cwd=REPO, env=slurm,
                             capture_output=True, text=True, timeout=300)
    assert missing.returncode == 1 and "no partition nope" in missing.stdout
    hostile = subprocess.run([sys.executable, "-m", "bench", "doctor", "--slurm",
                              "--partition", "-x;id"], cwd=REPO, env=slurm,
                             capture_output=True, text=True, timeout=60)
    assert hostile.returncode == 2 and "--partition" in hostile.stderr


def test_uneven_nodes_on_slurm(slurm, tmp_path):
    proc, rows = _matrix(slurm, tmp_path / "runs.jsonl", "--topologies", "1+2", "--models",
                         "smallcnn", "--batch-sizes", "8", "--", "--steps", "2",
                         "--warmup-steps", "1", "--device", "cpu", "--comm-probe-steps", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = rows
    assert row["status"] == "ok" and row["world_size"] == 3 and row["procs_per_node"] == [1, 2]
    assert_breakdown(row)
