"""Every ending leaves exactly one row with its real cause (issue 24).

- SIGTERM, SIGHUP and Ctrl-C stop every node and rank, write the running job's row and the
  report, and exit 143, 129 and 130;
- a full disk: the log pump keeps reading, a torn append is rolled back, the record is still
  printed, and a rank that measured but could not write its copy gives a valid ok row;
- a reader of stdout that went away (``bench train | true``) costs no record;
- a rank killed by a signal, and a stopped torchrun agent, are named as such;
- two matrices on one host never share a port; ``-- --results`` is refused.
"""
from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench import record
from bench.host import contract, matrix, ports
from bench.host.failures import NO_RECORD, describe_failure, failure_cause, killed_rank
from bench.host.launchers import nodes
from bench.host.launchers.nodes import NodeCommand, run_nodes
from bench.host.outcome import JobOutcome, NodeOutcome
from conftest import (
    REPO,
    _require,
    kill_processes_naming,
    popen_taking_ctrl_c,
    processes_naming,
    validate,
)

ENV = {**os.environ, "PYTHONPATH": str(REPO), "GLOO_SOCKET_IFNAME": "lo",
       "OMP_NUM_THREADS": "1"}
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

# What torchrun 2.x printed on node 0 when rank 1 of a 1x2 job was SIGKILLed (a real run):
# its own traceback, with the caret lines of Python 3.11, then the failure report.
TORCHRUN_RANK_KILLED = """\
E1125 13:10:55.527000 20656 torch/distributed/elastic/multiprocessing/api.py:1002] failed \
(exitcode: -9) local_rank: 1 (pid: 20766) of binary: /venv/bin/python
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1142, in <module>
    main()
  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/errors/\
__init__.py", line 380, in wrapper
    return f(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 197, in \
__call__
    return launch_agent(
           ^^^^^^^^^^^^^
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
bench.rank.train FAILED
-------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-25_13:10:55
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 20765)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 20765
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_13:10:55
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 20766)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 20766
=======================================================""".splitlines()

OK_RECORD = json.loads((REPO / "tests" / "fixtures" / "table-fixture.jsonl")
                       .read_text().splitlines()[0])


# --- causes -----------------------------------------------------------------------------

# The torchrun agents' modules: bench.rank.torchrun (every launcher's) and torchrun itself.
AGENTS = {b"bench.rank.torchrun", b"torch.distributed.run"}

def test_a_rank_killed_by_sigkill_is_named_not_a_caret_line():
    assert killed_rank(TORCHRUN_RANK_KILLED) == "rank 1 killed by SIGKILL"
    assert failure_cause(TORCHRUN_RANK_KILLED) == (None, "rank 1 killed by SIGKILL")
    node = NodeOutcome(0, "node0", 1, TORCHRUN_RANK_KILLED[-20:], TORCHRUN_RANK_KILLED)
    rec = describe_failure({"status": "error", "error": NO_RECORD},
                           JobOutcome([node], False, 9.0, culprit=node), 600)
    assert rec["error"] == "node0 (node 0) exited 1: rank 1 killed by SIGKILL"
    assert "^" not in rec["error"]


def test_a_killed_rank_outranks_the_rank_that_only_lost_it():
    lost = ("bench train: FAILED (error): RuntimeError: Connection closed by peer "
            "[127.0.0.1]:41234; record appended to /r/t.jsonl")
    assert failure_cause([lost, *TORCHRUN_RANK_KILLED]) == (None, "rank 1 killed by SIGKILL")


def test_a_killed_rank_is_named_when_torchrun_puts_its_lost_peer_first():
    """torchrun orders failures by their error files' time: rank 0, which lost its peer and
    wrote its file at once, can be the 'root cause' while the rank killed by SIGKILL (no
    file) and one the agent then stopped (SIGTERM) are among the other failures."""
    report = """\
bench train: FAILED (error): RuntimeError: Connection reset by peer; record appended to /r/t.jsonl
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
bench.rank.train FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-25_15:30:01
  host      : localhost
  rank      : 2 (local_rank: 2)
  exitcode  : -15 (pid: 3)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 3
[2]:
  time      : 2026-11-25_15:30:01
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 2)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 2
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_15:30:00
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 1)
  error_file: /tmp/error.json
  traceback : RuntimeError: Connection reset by peer
============================================================""".splitlines()
    assert failure_cause(report) == (None, "rank 1 killed by SIGKILL")


def test_a_node_killed_outright_says_by_which_signal():
    node = NodeOutcome(1, "node1", -9, [], [])
    rec = describe_failure({"status": "error", "error": NO_RECORD},
                           JobOutcome([node], False, 3.0, culprit=node), 600)
    assert rec["error"] == "node1 (node 1) killed by SIGKILL"


def test_a_record_is_never_a_cause():
    printed = [record.MARKER, record.dumps({**OK_RECORD, "status": "ok", "error": None})]
    assert failure_cause(["[bench] step 3/9", *printed])[1] == "[bench] step 3/9"
    assert "{" not in failure_cause(printed)[1]


def test_a_stopped_agent_is_named_at_the_deadline_with_no_slice_of_a_record():
    printed = [record.MARKER, record.dumps(OK_RECORD)]
    done = NodeOutcome(0, "node0", -15, [], ["[bench] step 9/9", *printed])
    stuck = NodeOutcome(1, "node1", -9, [], [], stopped=True)
    rec = describe_failure({"status": "error", "error": NO_RECORD},
                           JobOutcome([done, stuck], True, 60.0), 60)
    assert rec["status"] == "timeout"
    assert "node1 (node 1) was stopped (SIGSTOP)" in rec["error"]
    assert "{" not in rec["error"] and '"' not in rec["error"], rec["error"]


def test_run_nodes_sees_a_stopped_node_at_the_deadline():
    stops_itself = [sys.executable, "-c",
                    "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)"]
    started = time.monotonic()
    outcome = run_nodes([NodeCommand(0, "node0", stops_itself)], deadline_s=2)
    assert outcome.timed_out and outcome.nodes[0].stopped
    # Stopping it continues it, so it acts on SIGTERM at once instead of after the grace.
    assert time.monotonic() - started < 10
    rec = describe_failure({"status": "error", "error": NO_RECORD}, outcome, 2)
    assert "node0 (node 0) was stopped (SIGSTOP)" in rec["error"]


def _worker(marker: Path, rank: int) -> int | None:
    """The pid of the rank-``rank`` trainer process whose command line holds ``marker``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"bench.rank.train" in cmdline and not AGENTS & set(cmdline) \
                and str(marker).encode() in b" ".join(cmdline) \
                and f"RANK={rank}".encode() in environ:
            return int(entry.name)
    return None


def _agent(marker: Path, node_rank: int) -> int | None:
    """The pid of node ``node_rank``'s torchrun agent whose command line holds ``marker``."""
    for pid in processes_naming(str(marker)):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # The agent is bench.rank.torchrun (every launcher's), or torchrun itself.
        agent = b"-m" in cmdline and cmdline[cmdline.index(b"-m") + 1] in AGENTS
        if agent and cmdline[cmdline.index(b"--node_rank") + 1] == str(node_rank).encode():
            return pid
    return None


def _matrix(tmp_path: Path, topology: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench", "matrix", "--topologies", topology, "--models",
         "smallcnn", "--batch-sizes", "8", "--results", str(tmp_path / "runs.jsonl"), *extra],
        cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _when_training(tmp_path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not _rank_running(tmp_path) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.3)
    assert _rank_running(tmp_path), "the job never started training"


@pytest.mark.e2e
def test_a_real_rank_killed_by_sigkill_is_named(tmp_path):
    proc = _matrix(tmp_path, "1x2", "--deadline", "200", "--", "--steps", "1000000",
                   "--warmup-steps", "1", "--log-every", "0")
    try:
        _when_training(tmp_path, proc)
        os.kill(_worker(tmp_path, 1), signal.SIGKILL)
        _, err = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-3000:]
    (rec,) = record.load(tmp_path / "runs.jsonl")
    validate(rec)
    assert rec["error"].startswith("node0 (node 0) exited 1: rank 1 killed by SIGKILL"), \
        rec["error"]


@pytest.mark.e2e
def test_a_real_stopped_agent_is_named_and_the_measurement_kept(tmp_path):
    """Node 1's torchrun agent stopped (SIGSTOP) while its rank trains on: the job never
    ends, the deadline names node 1 as stopped, and rank 0's figures stay in an ok row."""
    proc = _matrix(tmp_path, "2x1", "--deadline", "60", "--", "--steps", "300",
                   "--warmup-steps", "1", "--log-every", "0")
    try:
        _when_training(tmp_path, proc)
        os.kill(_agent(tmp_path, 1), signal.SIGSTOP)
        _, err = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
    (rec,) = record.load(tmp_path / "runs.jsonl")
    validate(rec)
    assert rec["status"] == "ok" and rec["samples_per_s"] > 0, rec["error"]
    cause = rec["record_error"]
    assert "node1 (node 1) was stopped (SIGSTOP)" in cause, cause
    assert "{" not in cause, cause
    assert processes_naming(str(tmp_path)) == [], "nothing is left running"


# --- a rank that measured but could not write its copy -----------------------------------

def test_a_measured_record_with_an_unwritten_copy_is_a_valid_ok_row(tmp_path):
    unwritten = ("bench train: measured, but could not append the record to /r/t.jsonl "
                 "([Errno 28] No space left on device); it was printed after the marker above")
    node = NodeOutcome(0, "node0", 1, [], ["[bench] step 9/9", record.MARKER,
                                           record.dumps(OK_RECORD), unwritten])
    rec = describe_failure(dict(OK_RECORD), JobOutcome([node], False, 5.0, culprit=node), 600)
    assert rec["status"] == "ok" and rec["error"] is None
    assert "No space left on device" in rec["record_error"]
    assert rec["record_error"].startswith("node0 (node 0) exited 1: could not append")
    assert record.problem_of(rec) is None
    validate(rec)
    results = tmp_path / "runs.jsonl"
    record.append(results, rec)
    assert record.load(results) == [json.loads(record.dumps(rec))]
    assert matrix.finished_repeats(results), "--resume counts it"


def test_an_ok_record_stays_ok_whatever_a_node_did_after_it():
    """A scheduler's failed end state after rank 0 recorded ok: the row stays valid."""
    node = NodeOutcome(1, "node1", 1, [], ["RuntimeError: teardown went wrong"])
    outcome = JobOutcome([node], False, 5.0, culprit=node,
                         scheduler={"kind": "slurm", "job_id": 7, "state": "FAILED"})
    rec = describe_failure(dict(OK_RECORD), outcome, 600)
    assert rec["status"] == "ok" and rec["error"] is None
    assert rec["record_error"].startswith("slurm job 7 FAILED: node1 (node 1) exited 1")
    assert record.problem_of(rec) is None


# --- a full disk --------------------------------------------------------------------------

def test_a_failed_append_is_rolled_back(tmp_path, monkeypatch):
    results = tmp_path / "runs.jsonl"
    record.append(results, {"earlier": 1})
    before = results.read_bytes()
    real_write = os.write

    def half_then_full(fd, data):
        if len(data) > 8:
            return real_write(fd, data[:len(data) // 2])
        raise ENOSPC

    monkeypatch.setattr(record.os, "write", half_then_full)
    with pytest.raises(OSError, match="No space left"):
        record.append(results, dict(OK_RECORD))
    assert results.read_bytes() == before, "no torn line is left behind"


class _FullDiskLog:
    """A log file on a full disk: every write and the close fail with ENOSPC."""

    def write(self, _text: str) -> int:
        raise ENOSPC

    def flush(self) -> None:
        raise ENOSPC

    def close(self) -> None:
        raise ENOSPC


def test_the_pump_keeps_draining_when_its_log_hits_a_full_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(nodes, "open", lambda *a, **k: _FullDiskLog(), raising=False)
    # Far more output than a pipe holds: a pump that stopped reading would block the node.
    chatter = [sys.executable, "-c", "import sys\nfor i in range(100000): print('x' * 40)"]
    outcome = run_nodes([NodeCommand(0, "node0", chatter)], deadline_s=40, log_dir=tmp_path)
    assert outcome.ok and not outcome.timed_out, "the job ends when its node ends"
    assert len(outcome.nodes[0].output) == 100000
    assert "No space left on device" in outcome.nodes[0].log_error


@contextlib.contextmanager
def tiny_tmpfs(where: Path, size: str = "64k"):
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(where)], capture_output=True, text=True)
    # Under CI (root, as for the netns tests) it runs or fails; elsewhere it may skip.
    _require(mounted.returncode == 0,
             f"cannot mount a tmpfs (root needed): {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_real_full_disk_keeps_the_pump_reading_and_the_file_whole(tmp_path):
    with tiny_tmpfs(tmp_path / "disk") as disk:
        chatter = [sys.executable, "-c", "import sys\nfor i in range(50000): print('y' * 40)"]
        outcome = run_nodes([NodeCommand(0, "node0", chatter)], deadline_s=40,
                            log_dir=disk / "logs")
        assert outcome.ok and not outcome.timed_out
        assert len(outcome.nodes[0].output) == 50000
        assert "No space left on device" in outcome.nodes[0].log_error
        results = disk / "runs.jsonl"
        filler = disk / "filler"
        with contextlib.suppress(OSError):
            filler.write_bytes(b"\0" * 256 * 1024)   # fills it to the last block
        with pytest.raises(OSError):
            record.append(results, {**OK_RECORD, "padding": "z" * 64 * 1024})
        assert not results.exists() or results.read_bytes() == b""


def _tiny_train(results: Path) -> list[str]:
    return [sys.executable, "-m", "bench", "train", "--results", str(results),
            "--steps", "2", "--warmup-steps", "1", "--model", "smallcnn", "--batch-size", "4",
            "--log-every", "0", "--no-telemetry"]


@pytest.mark.e2e
def test_a_full_disk_costs_the_file_nothing_and_the_record_is_printed(tmp_path):
    with tiny_tmpfs(tmp_path / "disk") as disk:
        (disk / "filler").write_bytes(b"\0" * 16 * 1024)
        with contextlib.suppress(OSError):
            (disk / "more").write_bytes(b"\0" * 256 * 1024)
        results = disk / "runs.jsonl"
        proc = subprocess.run(_tiny_train(results), cwd=tmp_path, env=ENV,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1, proc.stderr[-2000:]
        (printed,) = record.parse_stdout(proc.stdout)
        assert printed["status"] == "ok"
        assert "measured, but could not append" in proc.stderr
        assert "No space left on device" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert not results.exists() or results.read_bytes() == b""
        line = next(li for li in proc.stderr.splitlines() if "measured, but" in li)
        assert "No space left on device" in failure_cause([line])[1]


@pytest.mark.e2e
def test_a_matrix_on_a_full_disk_ends_with_its_ranks_and_names_the_cause(tmp_path):
    """The logs, the trainer's own copy and the matrix's row all hit the full disk: the job
    still ends when its rank does (not at its deadline), and the row, printed instead,
    keeps the measurement and says why it is not in the file."""
    with tiny_tmpfs(tmp_path / "disk") as disk:
        with contextlib.suppress(OSError):
            (disk / "filler").write_bytes(b"\0" * 256 * 1024)
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "bench", "matrix", "--topologies", "1x1", "--models",
             "smallcnn", "--batch-sizes", "8", "--deadline", "240", "--results",
             str(disk / "runs.jsonl"), "--", "--steps", "3", "--warmup-steps", "1",
             "--log-every", "0"],
            cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
        elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert elapsed < 120, f"the job waited for its deadline: {elapsed:.0f} s"
    (rec,) = record.parse_stdout(proc.stdout)
    validate(rec)
    assert rec["status"] == "ok" and rec["error"] is None
    assert "No space left on device" in rec["record_error"], rec["record_error"]
    assert "No space left on device" in rec["matrix"]["log_errors"]["node0"]
    assert "could not append to" in proc.stderr and "Traceback" not in proc.stderr


# --- stdout going away ----------------------------------------------------------------------

@pytest.mark.e2e
def test_a_closed_stdout_costs_no_record(tmp_path):
    """``bench train ... | true``: the reader is gone before the record is printed."""
    results = tmp_path / "runs.jsonl"
    read_end, write_end = os.pipe()
    os.close(read_end)   # as `| true` does: nobody reads
    proc = subprocess.run(_tiny_train(results), cwd=tmp_path, env=ENV, stdout=write_end,
                          stderr=subprocess.PIPE, text=True, timeout=300)
    os.close(write_end)
    (rec,) = record.load(results)
    assert rec["status"] == "ok"
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr


# --- ports and the flags the matrix owns ------------------------------------------------------

def test_two_matrices_never_lease_the_same_port():
    with ports.lease(29600, low=29600, span=100, probe_host="127.0.0.1") as first, \
            ports.lease(29600, low=29600, span=100, probe_host="127.0.0.1") as second:
        assert first != second
    # Another matrix (another process) holding a port: this one passes it over.
    with ports.lease(29600, low=29600, span=100, probe_host=None) as held:
        other = subprocess.run(
            [sys.executable, "-c", "from bench.host import ports\n"
             "with ports.lease(29600, low=29600, span=100, probe_host=None) as p: print(p)"],
            cwd=REPO, env=ENV, capture_output=True, text=True, timeout=60)
        assert int(other.stdout) != held, other.stderr


def test_two_matrices_jobs_with_the_same_master_port_get_different_ports(tmp_path):
    """Two matrices started alike: job 1 of each would have taken the same port."""
    def config(name: str) -> matrix.MatrixConfig:
        return matrix.MatrixConfig.from_args(
            ["--models", "smallcnn", "--master-port", "29800", "--results",
             str(tmp_path / name), "--", "--steps", "2"], "bench matrix")

    first, second = config("a.jsonl"), config("b.jsonl")
    assert matrix.preferred_port(first, 1) == matrix.preferred_port(second, 1)
    with matrix.lease_port(first, 1) as one, matrix.lease_port(second, 1) as other:
        assert one != other
        assert 29800 <= min(one, other) and max(one, other) < 29800 + matrix.PORT_SPAN


def test_a_port_bound_by_another_program_is_passed_over():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        low = port - port % 2
        with ports.lease(low, low=low, span=10, probe_host="127.0.0.1") as leased:
            assert leased not in (low, port), "the bound port and its pair are skipped"


def test_a_span_with_no_free_port_is_refused():
    with ports.lease(29700, low=29700, span=2, probe_host=None), \
            pytest.raises(ports.NoFreePort, match="--master-port"), \
            ports.lease(29700, low=29700, span=2, probe_host=None):
        pass


@pytest.mark.parametrize("after", [["--results", "x.jsonl"], ["--results=x.jsonl"],
                                   ["--res", "x.jsonl"]])
def test_the_matrix_owns_the_results_path(after, tmp_path, capsys):
    code = matrix.main(["--models", "smallcnn", "--results", str(tmp_path / "r.jsonl"), "--",
                        "--steps", "2", *after])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--results" in err and "matrix owns" in err, err


# --- signals --------------------------------------------------------------------------------

class _InterruptedLauncher:
    name = "native"

    def __init__(self, stop: BaseException) -> None:
        self.stop = stop

    def launch(self, job):
        raise self.stop


@pytest.mark.parametrize("stop, name, code", [
    (SystemExit(128 + signal.SIGTERM), "SIGTERM", 143),
    (SystemExit(128 + signal.SIGHUP), "SIGHUP", 129),
    (KeyboardInterrupt(), "SIGINT", 130)])
def test_an_interrupted_job_gets_its_row(stop, name, code, tmp_path):
    results = tmp_path / "runs.jsonl"
    cfg = matrix.MatrixConfig.from_args(["--models", "smallcnn", "--results", str(results),
                                         "--", "--steps", "2"], "bench matrix")
    with pytest.raises(matrix.Interrupted) as raised:
        matrix.run(cfg, _InterruptedLauncher(stop))
    assert raised.value.exit_code == code
    (rec,) = record.load(results)
    assert rec["status"] == "error" and f"interrupted: bench matrix received {name}" in \
        rec["error"]
    assert rec["matrix"]["cell"] == 1


def test_another_system_exit_is_not_an_interruption(tmp_path):
    cfg = matrix.MatrixConfig.from_args(["--models", "smallcnn", "--results",
                                         str(tmp_path / "r.jsonl"), "--", "--steps", "2"],
                                        "bench matrix")
    with pytest.raises(SystemExit):
        matrix.run(cfg, _InterruptedLauncher(SystemExit(3)))
    assert not (tmp_path / "r.jsonl").exists()


def _rank_running(results_dir: Path) -> bool:
    logs = list(results_dir.glob("logs/*/node0.log"))
    return bool(logs) and "[bench] smallcnn on" in logs[0].read_text(errors="replace")


@pytest.mark.e2e
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129),
                                       (signal.SIGINT, 130)])
def test_a_signalled_matrix_stops_everything_and_writes_the_row(sig, code, tmp_path):
    results = tmp_path / "runs.jsonl"
    proc = popen_taking_ctrl_c(
        [sys.executable, "-m", "bench", "matrix", "--topologies", "1x2", "--models",
         "smallcnn", "--batch-sizes", "8", "--deadline", "300", "--results", str(results),
         "--", "--steps", "1000000", "--warmup-steps", "1", "--log-every", "0"],
        cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not _rank_running(tmp_path) and time.monotonic() < deadline \
                and proc.poll() is None:
            time.sleep(0.3)
        assert _rank_running(tmp_path), "the job never started training"
        assert len(processes_naming(str(tmp_path))) >= 3, "torchrun and its two ranks"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
        # Read before anything below kills them: what the matrix itself left running.
        leftover = processes_naming(str(tmp_path))
    finally:
        if proc.poll() is None:
            proc.kill()
        # Its nodes run in sessions of their own: whatever failed (a timeout, or the
        # matrix leaving them behind), they must not train on and hold port 29502 for the
        # tests after this one.
        kill_processes_naming(str(tmp_path))
    assert proc.returncode == code, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    (rec,) = record.load(results)
    validate(rec)
    assert rec["status"] == "error"
    assert f"interrupted: bench matrix received {signal.Signals(sig).name}" in rec["error"]
    assert results.with_suffix(".md").is_file(), "the report is written"
    assert leftover == [], f"processes left behind: {leftover}"


def test_stopping_is_not_cut_short_by_a_second_signal():
    """While the nodes are being stopped, another SIGTERM is ignored (then restored)."""
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda *_: seen.append("handled"))
    try:
        with nodes.shielded():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
        assert seen == []
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        assert seen == ["handled"]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_shield_is_a_no_op_off_the_main_thread():
    errors = []

    def inside():
        try:
            with nodes.shielded():
                pass
        except ValueError as error:   # signal.signal outside the main thread
            errors.append(error)

    worker = threading.Thread(target=inside)
    worker.start()
    worker.join()
    assert errors == []


# --- properties: what the cause parser reads ---------------------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_LINE = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
                max_size=200)


@given(before=st.lists(_LINE, max_size=8), after=st.lists(_LINE, max_size=8),
       secret=st.text(min_size=1, max_size=50))
def test_a_printed_record_never_becomes_a_cause(before, after, secret):
    """Whatever a node printed around it, no part of a record printed after its marker is
    ever the cause (its error field included)."""
    rec = {"status": "error", "error": f"Error: {secret}", "mode": "steps"}
    lines = [*before, record.MARKER, record.dumps(rec), *after]
    _, cause = failure_cause(lines)
    assert record.dumps(rec) not in cause
    # The cause is a piece of a line the node printed itself, or torchrun's report read.
    assert cause == "" or cause.startswith("rank ") or \
        any(cause in line for line in before + after), cause


_SIGNALS = st.sampled_from([s for s in signal.Signals if s.value < 32])


@given(rank=st.integers(0, 4095), sig=_SIGNALS, other=st.integers(0, 4095),
       noise=st.lists(_LINE, max_size=6))
def test_torchrun_reports_of_a_signalled_rank_name_it(rank, sig, other, noise):
    report = ["Failures:", "[1]:", f"  rank      : {other} (local_rank: 0)",
              "  exitcode  : -15 (pid: 1)  (SIGTERM)", "Root Cause (first observed failure):",
              "[0]:", "  time      : 2026-11-25_13:10:55", "  host      : h",
              f"  rank      : {rank} (local_rank: {rank})",
              f"  exitcode  : {-sig.value} (pid: 20766)  ({sig.name})", "==="]
    assert killed_rank([*noise, *report]) == f"rank {rank} killed by {sig.name}"
    exited = [*report[:-2], "  exitcode  : 1 (pid: 2)", "==="]
    assert killed_rank([*noise, *exited]) is None, "a rank that exited is not 'killed'"


# --- a record the console lost ----------------------------------------------------------------

def _outcome(lines: list[str]) -> JobOutcome:
    return JobOutcome([NodeOutcome(0, "node0", 0, lines[-5:], lines)], False, 1.0)


def test_a_row_the_console_lost_is_found_in_the_results_file_by_its_job(tmp_path):
    """docker-compose 1.29 has cut a container's last lines (the printed record) off as it
    exited: the job's row is then the one rank 0 appended, found by its job id, never a
    second, failed row beside it; another job's rows and a torn line are not taken."""
    results = tmp_path / "runs.jsonl"
    mine, other = dict(OK_RECORD, job_id="job-a"), dict(OK_RECORD, job_id="job-b")
    results.write_text(json.dumps(other) + "\n{torn\n" + json.dumps(mine) + "\n")
    outcome = _outcome(["bench-node: node 0 of 1", "[bench] ok"])
    assert outcome.records() == []
    (found,) = outcome.records(results, "job-a")
    assert found["job_id"] == "job-a" and found["status"] == "ok"
    assert outcome.records(results, "job-c") == []
    assert outcome.records(tmp_path / "elsewhere.jsonl", "job-a") == []   # another host's disk
    # What the console did carry wins: the file is not read then.
    console = io.StringIO()
    record.emit(other, console)
    printed = _outcome(console.getvalue().splitlines())
    assert [r["job_id"] for r in printed.records(results, "job-a")] == ["job-b"]


def _printed_torn(rec: dict) -> list[str]:
    """The console lines of ``rec`` printed whole, then cut in transit so that its parts
    still join into a JSON object: its middle, mode and status among it, gone (as
    docker-compose 1.29 cut one 3,000-character part at 1,131 and the parts still parsed)."""
    console = io.StringIO()
    record.emit({k: v for k, v in rec.items() if k not in ("mode", "status")}, console)
    return console.getvalue().splitlines()


def test_a_record_cut_in_transit_is_not_the_row(tmp_path):
    """An object the console carried that is not a valid record is not the job's row: its
    copy in the results file is, and with none on this host, nothing, ``torn`` saying why."""
    results = tmp_path / "runs.jsonl"
    mine = dict(OK_RECORD, job_id="job-a")
    outcome = _outcome(["bench-node: node 0 of 1", *_printed_torn(mine), "[bench] ok"])
    assert outcome.records() == []
    (problem,) = outcome.torn()
    assert "no mode field" in problem
    results.write_text(json.dumps(mine) + "\n")
    (found,) = outcome.records(results, "job-a")
    assert found == mine
    # A whole record printed beside a torn one is taken, and only it.
    console = io.StringIO()
    record.emit(mine, console)
    both = _outcome([*_printed_torn(mine), *console.getvalue().splitlines()])
    assert both.records() == [mine] and len(both.torn()) == 1


class _TornRecordLauncher:
    """Every job ends well, its node having printed a record cut in transit; with
    ``copy``, rank 0's own copy of the record is in the job's results file."""
    name = "native"

    def __init__(self, copy: bool) -> None:
        self.copy = copy

    def launch(self, job):
        now = time.time()   # the steps ran just now, after the launch
        rec = dict(OK_RECORD, job_id=job.job_id, first_step_done=now, last_step_done=now)
        if self.copy:
            job.results.parent.mkdir(parents=True, exist_ok=True)
            record.append(job.results, rec)
        return _outcome(["bench-node: node 0 of 1", *_printed_torn(rec)])


@pytest.mark.parametrize("copy", [True, False])
def test_the_matrix_writes_one_true_row_for_a_record_cut_in_transit(copy, tmp_path):
    results = tmp_path / "runs.jsonl"
    cfg = matrix.MatrixConfig.from_args(["--models", "smallcnn", "--results", str(results),
                                         "--", "--steps", "2"], "bench matrix")
    code = matrix.run(cfg, _TornRecordLauncher(copy))
    (rec,) = record.load(results)           # one row, valid, whichever way it went
    if copy:
        assert code == 0 and rec["status"] == "ok" and rec["samples_per_s"] == \
            OK_RECORD["samples_per_s"]
    else:
        assert code == 1 and rec["status"] == "error"
        assert "printed record reached this host cut short" in rec["error"]
        assert "no mode field" in rec["error"]


@pytest.mark.e2e
def test_a_real_rank_records_its_job_id_for_a_console_that_printed_nothing(tmp_path):
    """A rank under torchrun, its console thrown away: the row appended to the results file
    carries the launcher's job id (torchrun's --rdzv-id), and the outcome finds it there."""
    results = tmp_path / "runs.jsonl"
    node = contract.NodeSpec(rank=0, nnodes=1, nproc=1, master_port=0, rdzv_timeout=60,
                             job_id="lost-console-1", module="bench.rank.train",
                             workload_args=tuple(_tiny_train(results)[6:]), results=results,
                             workdir=REPO)
    with ports.lease(29900, low=29900, span=200, probe_host="127.0.0.1") as port:
        argv = contract.torchrun_argv(node, master_addr="127.0.0.1", master_port=port)
        quiet = ["sh", "-c", 'exec "$@" >/dev/null 2>&1', "quiet", *argv]
        outcome = run_nodes([NodeCommand(0, "node0", quiet, ENV)], deadline_s=240, cwd=REPO)
    assert outcome.ok, outcome.nodes[0].last_lines
    assert outcome.records() == []
    (rec,) = outcome.records(results, "lost-console-1")
    validate(rec)
    assert rec["status"] == "ok" and rec["job_id"] == "lost-console-1"
