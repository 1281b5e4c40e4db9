"""The row of a failed job names its real cause, not torchrun's banner."""
from __future__ import annotations

import pytest

from bench.host.failures import NO_RECORD, describe_failure, failure_cause
from bench.host.outcome import JobOutcome, NodeOutcome

TORCHRUN_BANNER = [
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main',
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "bench.rank.train FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "  <NO_OTHER_FAILURES>",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2026-11-22_08:00:00",
    "  host      : node",
    "  rank      : 1 (local_rank: 0)",
    "  exitcode  : 1 (pid: 42)",
    "  error_file: <N/A>",
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
    "============================================================",
]

CAUSES = {
    "the trainer's own verdict": (
        ["[bench] resnet18 on 2 x cpu", "bench train: FAILED (timeout): DistBackendError: "
         "Timed out waiting 15000ms for recv operation; rank 0 writes the record",
         *TORCHRUN_BANNER],
        "timeout", "DistBackendError: Timed out waiting 15000ms for recv operation"),
    "a config refused on the node": (
        ["bench train: error: --data-dir=/data/x: no such directory (see bench train --help)",
         *TORCHRUN_BANNER], "error", "bench train: error: --data-dir=/data/x: no such"),
    "a plain traceback": (
        ["Traceback (most recent call last):", '  File "x.py", line 3, in <module>',
         "RuntimeError: CUDA error: an illegal memory access", *TORCHRUN_BANNER],
        None, "RuntimeError: CUDA error: an illegal memory access"),
    "nothing but noise": (TORCHRUN_BANNER, None, ""),
}


@pytest.mark.parametrize("lines,status,cause", CAUSES.values(), ids=CAUSES.keys())
def test_failure_cause_skips_the_banner(lines, status, cause):
    found_status, found = failure_cause(lines)
    assert found_status == status
    assert found.startswith(cause) if cause else "=" not in found
    assert "=====" not in found and "ChildFailedError" not in found


def test_a_job_without_a_record_takes_the_culprits_status():
    node = NodeOutcome(1, "node1", 1, [], ["bench train: FAILED (timeout): DistBackendError: "
                                          "Timed out; rank 0 writes the record",
                                          *TORCHRUN_BANNER])
    outcome = JobOutcome([NodeOutcome(0, "node0", -15, [], []), node], timed_out=False,
                         seconds=3.0, culprit=node)
    rec = describe_failure({"status": "error", "error": NO_RECORD}, outcome, 600)
    assert rec["status"] == "timeout"
    assert rec["error"] == "node1 (node 1) exited 1: DistBackendError: Timed out"
    assert rec["failed_node"]["rank"] == 1


def test_rank_0s_own_failure_stays_the_rows_status():
    node = NodeOutcome(1, "node1", 1, [], ["RuntimeError: peer closed", *TORCHRUN_BANNER])
    outcome = JobOutcome([node], timed_out=False, seconds=3.0, culprit=node)
    rec = describe_failure({"status": "oom", "error": "OutOfMemoryError: CUDA out of memory"},
                           outcome, 600)
    assert rec["status"] == "oom"
    assert rec["error"].endswith("rank 0: OutOfMemoryError: CUDA out of memory")


def test_a_deadline_is_a_timeout_with_the_last_output():
    node = NodeOutcome(0, "node0", -15, [], ["[bench] step 7/100000"])
    rec = describe_failure({"status": "error", "error": NO_RECORD},
                           JobOutcome([node], timed_out=True, seconds=60.0), 60)
    assert rec["status"] == "timeout"
    # The row names the node still running at the deadline (it was stopped only then).
    assert rec["error"] == ("the job passed its deadline of 60 s; still running: node0 "
                            "(node 0); last output: [bench] step 7/100000")


def test_the_root_cause_is_not_the_node_that_only_lost_its_peer():
    from bench.host.launchers.nodes import root_cause

    lost = NodeOutcome(0, "node0", 1, [], ["step 2/9", "RuntimeError: Connection closed by "
                                           "peer [127.0.0.1]:5000", "ChildFailedError"])
    killed = NodeOutcome(1, "node1", 137, [], ["trainer-cpu-1 exited with code 137"])
    assert root_cause([lost, killed], lost) is killed
    assert root_cause([lost, killed], killed) is killed
    oom = NodeOutcome(0, "node0", 1, [], ["bench train: FAILED (oom): out of memory"])
    assert root_cause([oom, killed], oom) is oom, "a node failing on its own stays the cause"
    assert root_cause([lost], lost) is lost, "with nobody else to blame, the first to fail"


def test_on_one_node_the_rank_that_failed_on_its_own_is_the_cause():
    """Two ranks on a node: rank 1 ran out of memory, rank 0 then lost it. Whichever line
    came out last, the cause is rank 1's."""
    oom = "bench train: FAILED (oom): RuntimeError: std::bad_alloc; rank 0 writes the record"
    lost = ("bench train: FAILED (error): RuntimeError: [gloo/transport/tcp/pair.cc:561] "
            "Connection closed by peer [127.0.0.1]:41234; record appended to /r/t.jsonl")
    for lines in ([oom, lost, *TORCHRUN_BANNER], [lost, oom, *TORCHRUN_BANNER]):
        assert failure_cause(lines) == ("oom", "RuntimeError: std::bad_alloc")
    assert failure_cause([lost])[0] == "error", "with no other cause, the peer loss it is"


def test_rank_0_that_only_lost_its_peer_does_not_set_the_rows_status():
    node = NodeOutcome(0, "node0", 1, [], [
        "bench train: FAILED (oom): RuntimeError: std::bad_alloc; rank 0 writes the record",
        *TORCHRUN_BANNER])
    outcome = JobOutcome([node], timed_out=False, seconds=3.0, culprit=node)
    for said in ("RuntimeError: Connection closed by peer [127.0.0.1]:41234",
                 "DistBackendError: Timed out waiting 300000ms for recv operation to complete"):
        rec = describe_failure({"status": "timeout", "error": said}, outcome, 600)
        assert rec["status"] == "oom", said
        assert rec["error"] == f"node0 (node 0) exited 1: RuntimeError: std::bad_alloc; " \
                               f"rank 0: {said}"


@pytest.mark.parametrize("error, status", [
    (RuntimeError("std::bad_alloc"), "oom"),
    (MemoryError(), "oom"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate "
                  "memory: you tried to allocate 4194304 bytes"), "oom"),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom"),
    (RuntimeError("Timed out waiting 300000ms for recv operation to complete"), "timeout"),
    (RuntimeError("Connection closed by peer"), "error")])
def test_a_rank_names_a_failed_allocation_however_it_surfaced(error, status):
    from bench.rank import job

    assert job.classify(error) == status
