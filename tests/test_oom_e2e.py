"""The multi-GPU study's result on CPU, at small scale: under a per-rank memory cap the deep
& wide MLP is out of memory on one process and on two under DDP, and trains on two under
FSDP (make bench-oom, the real make target)."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest

from bench.config import TrainConfig
from bench.host.failures import NO_RECORD, describe_failure, failure_cause
from bench.host.outcome import JobOutcome, NodeOutcome
from bench.options import ConfigError, on_head
from bench.processes import descendants
from conftest import REPO, free_port

# Alone: its cap sits 40 MiB from what a rank needs, and a CI run under two workers lost a
# row (tests/conftest.py, PHASES).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]


def test_make_bench_oom_reproduces_the_study(tmp_path):
    results = tmp_path / "oom.jsonl"
    # Measured here (2 CPUs): 1x2 fsdp needs 120-126 MiB over what a rank holds, 1x1 and 1x2
    # ddp 210-220 MiB; the cap sits 40 MiB from both, room for another CPU's BLAS buffers.
    out = subprocess.run(["make", "--no-print-directory", "bench-oom", "MLP_WIDTH=1024",
                          "MLP_DEPTH=16", "MEMORY_CAP=168MiB", "STEPS=2", f"RESULTS={results}"],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {(r["nproc_per_node"], r["strategy"]): r
            for r in map(json.loads, results.read_text().splitlines())}
    assert set(rows) == {(1, "ddp"), (2, "ddp"), (2, "fsdp")}
    for key in ((1, "ddp"), (2, "ddp")):
        row = rows[key]
        assert row["status"] == "oom", row["error"]
        assert row["env"]["malloc"]["policy"] == "exact"   # the cap counts live memory
        assert "out of memory under --memory-cap 168MiB" in row["error"]
        assert "may allocate 168 MiB more" in row["error"]
    fsdp = rows[(2, "fsdp")]
    assert fsdp["status"] == "ok", fsdp.get("error")
    assert fsdp["gradient_sync"] == "fsdp"
    assert fsdp["env"]["malloc"]["policy"] == "exact"
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


def test_a_rank_that_fails_mid_collective_ends_the_job_with_its_own_cause(tmp_path):
    """Rank 1 fails while rank 0 waits for it inside an all-reduce. The job must end when
    rank 1 does, not when the collective's 300 s timeout runs out (rank 1 used to hang in the
    process group's teardown), and the row's cause is rank 1's out-of-memory, not a time-out
    or a lost connection on rank 0."""
    results = tmp_path / "runs.jsonl"
    script = REPO / "tests" / "helpers" / "failing_rank_train.py"
    env = {**os.environ, "PYTHONPATH": str(REPO), "GLOO_SOCKET_IFNAME": "lo",
           "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
            "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
            "--log-dir", str(tmp_path / "torchelastic"), str(script), "--device", "cpu",
            "--model", "mlp", "--mlp-width", "512", "--mlp-depth", "8",
            "--bucket-cap-mb", "1", "--steps", "3", "--warmup-steps", "1",
            "--comm-probe-steps", "0", "--timeout", "300", "--results", str(results)]
    job = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = job.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        # torchrun and its ranks (each in a session of its own), so none is left behind.
        for member in [*descendants(job.pid), job]:
            with contextlib.suppress(OSError):
                os.kill(member.pid, signal.SIGKILL)
        stdout, stderr = job.communicate(timeout=30)
        pytest.fail(f"the job outlived its failed rank (it waited for the collective "
                    f"timeout): {stderr[-2000:]}")
    proc = subprocess.CompletedProcess(argv, job.returncode, stdout, stderr)
    assert proc.returncode != 0
    lines = (proc.stdout + proc.stderr).splitlines()
    status, cause = failure_cause(lines)
    assert (status, cause) == ("oom", "RuntimeError: std::bad_alloc"), proc.stderr[-3000:]
    # Rank 0 was stopped, or recorded that it lost its peer; either way the row is the OOM.
    written = [json.loads(line) for line in results.read_text().splitlines()] \
        if results.exists() else []
    assert all(rec["status"] != "timeout" for rec in written), written
    rec = written[0] if written else {"status": "error", "error": NO_RECORD}
    node = NodeOutcome(0, "localhost", proc.returncode, lines[-40:], lines)
    row = describe_failure(rec, JobOutcome([node], timed_out=False, seconds=1.0, culprit=node),
                           600)
    assert row["status"] == "oom" and "std::bad_alloc" in row["error"], row
