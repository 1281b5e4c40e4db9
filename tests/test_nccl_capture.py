"""The rank side of issue 27/28's transport record (bench.rank.nccl_capture, bench.rank.job):
NCCL's INFO lines go to a private file only where the user did not set NCCL_DEBUG, the
record's comm_env names only the user's settings, every record carries each rank's view
(null for gloo), and under BENCH_EXPECT_NET a fall-back to sockets is a failed row with one
line. Without a GPU: NCCL's log is canned (tests/fixtures/nccl) and gloo runs the job."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest

from bench import nccl_log, provenance, record
from bench.rank import nccl_capture
from conftest import REPO, launch, validate

FIXTURES = REPO / "tests" / "fixtures" / "nccl"
HELPER = REPO / "tests" / "helpers" / "canned_nccl.py"


def test_an_unset_nccl_debug_is_sent_to_a_private_file():
    environ: dict[str, str] = {}
    capture = nccl_capture.start("nccl", environ)
    try:
        assert capture is not None and capture.private is not None
        assert capture.private.is_dir() and oct(capture.private.stat().st_mode)[-3:] == "700"
        assert environ["NCCL_DEBUG"] == "INFO" and environ["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
        assert environ["NCCL_DEBUG_FILE"] == str(capture.private / "nccl.%h.%p.log")
        # What the trainer set is not the user's: the record's comm_env leaves it out.
        environ["NCCL_SOCKET_IFNAME"] = "eth0"
        assert provenance.comm_env(environ) == {"NCCL_SOCKET_IFNAME": "eth0"}
        # NCCL writes the file as it expands the name; the capture reads and parses it.
        log = capture.private / nccl_capture.expand("nccl.%h.%p.log")
        shutil.copy(FIXTURES / "socket-fallback-shm.log", log)
        view = nccl_capture.read(capture)
        assert view["captured"] is True and view["network"] == "Socket"
        assert view["transports"] == ["SHM", "NET"]
    finally:
        nccl_capture.finish(capture)
    assert not capture.private.exists()


def test_finish_repeats_nccls_warnings_on_stderr(capsys):
    capture = nccl_capture.start("nccl", {})
    assert capture is not None and capture.private is not None
    shutil.copy(FIXTURES / "socket-fallback-shm.log", capture.private / "nccl.other.1.log")
    nccl_capture.finish(capture)
    err = capsys.readouterr().err.splitlines()
    assert err == ["lab2:911:911 [0] NCCL WARN NET/Socket : peer 192.168.1.11<45123> "
                   "message truncated"]


def test_gloo_jobs_capture_nothing():
    environ: dict[str, str] = {}
    assert nccl_capture.start("gloo", environ) is None and environ == {}


@pytest.mark.parametrize("environ, why", [
    ({"NCCL_DEBUG": "WARN"}, "NCCL_DEBUG=WARN is set and NCCL prints no INFO lines"),
    ({"NCCL_DEBUG": "INFO"}, "NCCL_DEBUG=INFO is set and NCCL_DEBUG_FILE is not set"),
])
def test_a_users_nccl_debug_is_left_alone_and_the_view_says_why(environ, why):
    before = dict(environ)
    capture = nccl_capture.start("nccl", environ)
    assert environ == before
    view = nccl_capture.read(capture)
    assert view["captured"] is False and view["reason"].startswith(why)
    assert "unset NCCL_DEBUG" in view["reason"] and view["network"] is None


def test_a_users_own_info_file_is_read_where_nccl_wrote_it(tmp_path):
    log = tmp_path / f"mine.{socket.gethostname().split('.')[0]}.{os.getpid()}.txt"
    shutil.copy(FIXTURES / "ib-two-nodes-gdr.log", log)
    capture = nccl_capture.start("nccl", {"NCCL_DEBUG": "info",
                                          "NCCL_DEBUG_FILE": str(tmp_path / "mine.%h.%p.txt")})
    assert nccl_capture.read(capture)["network"] == "IB"
    nccl_capture.finish(capture)
    assert log.exists(), "the user's own log stays"


def test_nccl_expands_the_file_name_as_nccl_does():
    assert nccl_capture.expand("/t/n.%h.%p.%%.%x", hostname="gpu1.lab/a%b", pid=42) == \
        "/t/n.gpu1.42.%.%x"
    assert nccl_capture.expand("/t/%h", hostname="a%b/c", pid=1) == "/t/a-b-c"


def _canned(log: str, results, expect: str | None):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
           "GLOO_SOCKET_IFNAME": "lo"}
    env.pop("BENCH_EXPECT_NET", None)
    if expect is not None:
        env["BENCH_EXPECT_NET"] = expect
    return subprocess.run([sys.executable, str(HELPER), str(FIXTURES / log), "--device", "cpu",
                           "--max-size", "4KiB", "--iters", "1", "--warmup-iters", "0",
                           "--results", str(results)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_every_record_carries_each_ranks_view(tmp_path):
    results = tmp_path / "r.jsonl"
    proc = _canned("ib-two-nodes-gdr.log", results, expect="IB")
    assert proc.returncode == 0, proc.stderr
    (rec,) = record.read(results)
    validate(rec)
    (view,) = rec["nccl_transport"]
    assert view == {"rank": 0, "node_rank": 0, "hostname": socket.gethostname(),
                    "expected_net": "IB", "captured": True, "reason": None,
                    **nccl_log.parse((FIXTURES / "ib-two-nodes-gdr.log").read_text())}


def test_a_fall_back_to_sockets_under_expect_net_fails_the_job_in_one_line(tmp_path):
    results = tmp_path / "r.jsonl"
    proc = _canned("socket-fallback-shm.log", results, expect="IB")
    assert proc.returncode == 1
    (rec,) = record.read(results)
    validate(rec)
    assert rec["status"] == "error" and rec["sizes"] == []
    assert rec["error"].startswith("NetworkMismatch: NCCL chose Socket on node 0 (host ")
    assert "BENCH_EXPECT_NET=IB expects IB: no InfiniBand device" in rec["error"]
    assert rec["nccl_transport"][0]["network"] == "Socket"
    failed = [line for line in proc.stderr.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and "NCCL chose Socket" in failed[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_same_fall_back_without_an_expectation_is_recorded_not_refused(tmp_path):
    results = tmp_path / "r.jsonl"
    assert _canned("socket-fallback-shm.log", results, expect=None).returncode == 0
    (rec,) = record.read(results)
    assert rec["status"] == "ok" and rec["nccl_transport"][0]["network"] == "Socket"


def test_a_bad_expectation_is_one_line_and_exit_2_before_anything_runs(tmp_path):
    results = tmp_path / "r.jsonl"
    proc = _canned("ib-two-nodes-gdr.log", results, expect="infini band")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "bench allreduce: error: BENCH_EXPECT_NET=infini band: the network NCCL must choose "
        "between nodes: IB (InfiniBand or RoCE), Socket, or a network plugin's name"]
    assert not results.exists()


def test_gloo_records_say_null(tmp_path):
    results = tmp_path / "r.jsonl"
    run = launch(["--device", "cpu", "--max-size", "4KiB", "--iters", "1",
                  "--warmup-iters", "0"], results, torchrun=False,
                 module="bench.rank.allreduce")
    assert run.returncode == 0, run.stderr
    (rec,) = run.records
    assert rec["nccl_transport"] is None and "NCCL_DEBUG" not in rec["env"]["comm_env"]
