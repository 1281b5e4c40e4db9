"""Faults that must still leave exactly one row with its real cause.

- rank 0 stopped (SIGSTOP) mid-training: its peer times out in a collective, and the row
  says ``timeout`` with that cause, not ``error`` with torchrun's ``=====`` banner;
- ``bench compose`` whose rank 0 dies before it can record: the launcher writes the row;
- a job's log directory that cannot be written does not hang the job.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import record
from conftest import REPO, bench_containers, validate

pytestmark = pytest.mark.e2e
ENV = {**os.environ, "PYTHONPATH": str(REPO), "GLOO_SOCKET_IFNAME": "lo",
       "OMP_NUM_THREADS": "1"}


def _rank0_worker(job_marker: str) -> int | None:
    """The pid of the trainer process with RANK=0 whose torchrun carries ``job_marker``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        is_worker = b"bench.rank.train" in cmdline and not {
            b"torch.distributed.run", b"bench.rank.torchrun"} & set(cmdline)   # not an agent
        if is_worker and b"RANK=0" in environ and job_marker.encode() in b" ".join(environ):
            return int(entry.name)
    return None


def _in_timed_steps(results_dir: Path) -> bool:
    """Rank 0 printed a progress line of its timed steps (--log-every) in node 0's log."""
    for log in results_dir.glob("logs/*/node0.log"):
        try:
            if "[bench] step " in log.read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False


def test_a_stopped_rank_0_is_a_timeout_row_naming_the_cause(tmp_path):
    results = tmp_path / "runs.jsonl"
    matrix = subprocess.Popen(
        [sys.executable, "-m", "bench", "matrix", "--topologies", "2x1", "--models", "smallcnn",
         "--batch-sizes", "8", "--deadline", "240", "--results", str(results), "--",
         "--steps", "100000", "--warmup-steps", "1", "--log-every", "5", "--timeout", "15"],
        cwd=tmp_path, env={**ENV, "BENCH_TEST_JOB": str(tmp_path)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        deadline, pid = time.monotonic() + 120, None
        while pid is None and time.monotonic() < deadline:
            pid = _rank0_worker(str(tmp_path))
            time.sleep(0.5)
        assert pid is not None, "rank 0 never started"
        # Stopped in its timed steps (its progress line in node 0's log), not while it
        # still builds the model: how long that takes depends on the host's load.
        while not _in_timed_steps(tmp_path) and time.monotonic() < deadline + 120:
            time.sleep(0.5)
        assert _in_timed_steps(tmp_path), "rank 0 never reached its timed steps"
        os.kill(pid, signal.SIGSTOP)
        out, _ = matrix.communicate(timeout=240)
    finally:
        if matrix.poll() is None:
            matrix.kill()
    assert matrix.returncode == 1, out[-3000:]
    (rec,) = list(record.read(results))
    validate(rec)
    assert rec["status"] == "timeout", rec["error"]
    assert "=====" not in rec["error"]
    # gloo words it "Timed out waiting ..." or, where a timed-out operation had closed the
    # pair before the next one failed, "Application timeout caused pair closure" (CI,
    # 2026-11-27): both name the timeout, as the rank's own classification reads them
    # (bench.rank.job.classify).
    error = rec["error"].lower()
    assert "node 1" in rec["error"] and ("timed out" in error or "timeout" in error), \
        rec["error"]
    # torchrun ran the stopped rank in a session of its own: stopping the job reaches it.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        state = "gone"
    assert state in ("gone", "Z"), f"the stopped rank 0 (pid {pid}) outlived the job: {state}"


@pytest.mark.serial   # bench-* containers (tests/conftest.py, PHASES)
def test_compose_writes_the_row_when_rank_0_dies_before_recording(cpu_image, compose_variant,
                                                                  tmp_path):
    env_file = tmp_path / "node.env"
    env_file.write_text((REPO / "compose" / ".env.example").read_text()
                        + f"\nDATA_MOUNT_TYPE=none\nDATA_MOUNT_OPTIONS=bind\n"
                        f"DATA_DEVICE={tmp_path}\nGLOO_SOCKET_IFNAME=lo\nOMP_NUM_THREADS=1\n")
    results = tmp_path / "out" / "runs.jsonl"
    # The data directory exists nowhere in the container: every rank refuses its config
    # and exits before rank 0 can write anything.
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "compose", "--profile", "cpu", "--env-file",
         str(env_file), "--image", cpu_image, "--nnodes", "2", "--results", str(results),
         "--deadline", "300", "--", "--epochs", "1", "--data", "fashion-mnist", "--data-dir",
         "/data/not-staged", "--model", "smallcnn"],
        cwd=REPO, env={**ENV, **compose_variant}, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 1, proc.stderr[-3000:]
    (rec,) = list(record.read(results))
    validate(rec)
    assert rec["status"] == "error" and rec["nnodes"] == 2
    assert "/data/not-staged" in rec["error"] and "no such directory" in rec["error"]
    assert rec["failed_node"]["rank"] in (0, 1)
    assert bench_containers() == [], "no container is left behind"


def test_an_unwritable_log_does_not_hang_the_job(tmp_path):
    from bench.host.launchers.nodes import NodeCommand, run_nodes

    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / "node0.log").mkdir()   # the log path is a directory: open() fails
    # Far more output than a pipe buffer holds: a pump that stopped reading would block it.
    chatter = [sys.executable, "-c", "import sys\nfor i in range(200000): print('x' * 40)"]
    started = time.monotonic()
    outcome = run_nodes([NodeCommand(0, "node0", chatter)], deadline_s=60, log_dir=log_dir)
    assert outcome.ok and not outcome.timed_out
    assert time.monotonic() - started < 50
    assert len(outcome.nodes[0].output) == 200000
