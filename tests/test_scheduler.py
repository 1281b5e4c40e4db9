"""A scheduler's end of a job becomes the same row whichever scheduler reported it: the one
vocabulary of end states (``bench.host.failures.END_STATES``), ``SchedulerEnd`` and
``scheduler_outcome`` (``bench.host.launchers.scheduler``), and the two readers into them
(Slurm's scontrol/sacct and task logs; Kubernetes' job and pod status)."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.host.failures import NO_RECORD, describe_failure
from bench.host.launchers import k8s, slurm
from bench.host.launchers.base import JobSpec
from bench.host.launchers.scheduler import SchedulerEnd, scheduler_outcome
from bench.host.outcome import JobOutcome, NodeOutcome
from bench.record import STATUSES
from bench.topology import Topology

# What each end state makes of the row, written out here so that a change to the table
# in bench.host.failures shows.
ROW_STATUS = {"COMPLETED": "ok", "FAILED": "error", "TIMEOUT": "timeout",
              "CANCELLED": "error", "NODE_FAIL": "error", "OUT_OF_MEMORY": "oom",
              "PREEMPTED": "error", "BOOT_FAIL": "error", "DEADLINE": "timeout",
              "UNKNOWN": "error"}
KINDS = ("slurm", "k8s")
# What a node may have printed: nothing, a cause of its own, only the loss of a peer.
OUTPUTS = ([], ["RuntimeError: boom"], ["RuntimeError: Connection reset by peer"])


def _nodes(exits: list[int | None], outputs: list[list[str]] | None = None) -> list[NodeOutcome]:
    outputs = outputs or [[] for _ in exits]
    return [NodeOutcome(rank, f"host{rank}", code, lines[-20:], list(lines))
            for rank, (code, lines) in enumerate(zip(exits, outputs, strict=True))]


def _row(outcome: JobOutcome) -> dict:
    """The row's status and error as the matrix makes them, for a job no rank recorded."""
    if outcome.ok:
        return {"status": "ok", "error": None}
    return describe_failure({"status": "error", "error": NO_RECORD}, outcome, 600)


@pytest.mark.parametrize("state", sorted(ROW_STATUS))
@pytest.mark.parametrize("exits, outputs", [
    ([None, None], [[], []]),                                   # the scheduler stopped all
    ([0, 1], [[], ["RuntimeError: boom"]]),                     # a node failed, saying why
    ([-15, -15], [["step 3"], ["step 3"]]),                     # stopped mid-run
])
def test_every_end_state_is_the_same_row_whichever_scheduler_reported_it(state, exits, outputs):
    rows = {}
    for kind in KINDS:
        end = SchedulerEnd(kind=kind, job_id="7", state=state, reason="why")
        outcome = scheduler_outcome(end, _nodes(exits, outputs), timed_out=False, seconds=1.0,
                                    fallback_lines=["the scheduler's own words"])
        rows[kind] = _row(outcome)
        assert rows[kind]["error"] is None or rows[kind]["error"].startswith(
            f"{kind} job 7 {state} (why)")
    completed_cleanly = state == "COMPLETED" and all(c in (0, None) for c in exits)
    expected = "ok" if completed_cleanly else \
        ("error" if ROW_STATUS[state] == "ok" else ROW_STATUS[state])
    assert {kind: row["status"] for kind, row in rows.items()} == dict.fromkeys(KINDS, expected)


def test_the_scheduler_section_keeps_what_each_scheduler_said_in_order():
    slurm_end = SchedulerEnd(kind="slurm", job_id="42", state="FAILED", reason="",
                             exit_code="1:0", nodes="node[1-2]")
    assert list(slurm_end.section().items()) == [
        ("kind", "slurm"), ("job_id", "42"), ("state", "FAILED"), ("reason", ""),
        ("exit_code", "1:0"), ("nodes", "node[1-2]")]
    assert SchedulerEnd(kind="slurm", job_id="42").section() == {
        "kind": "slurm", "job_id": "42", "state": "UNKNOWN"}


STATES = st.sampled_from(sorted(ROW_STATUS) + ["RUNNING", "PENDING"])
NODE = st.tuples(st.sampled_from([None, 0, 0, 1, 137, -9, -15]), st.sampled_from(OUTPUTS))


@given(kind=st.sampled_from(KINDS), state=STATES, nodes=st.lists(NODE, min_size=1, max_size=4),
       timed_out=st.booleans(), fallback=st.lists(st.sampled_from(["", "srun: error: x"]),
                                                 max_size=3))
def test_an_outcome_names_its_culprit_exactly_when_the_job_did_not_complete(
        kind, state, nodes, timed_out, fallback):
    exits = [code for code, _ in nodes]
    end = SchedulerEnd(kind=kind, job_id="7", state=state, reason="why")
    outcome = scheduler_outcome(end, _nodes(exits, [lines for _, lines in nodes]),
                                timed_out=timed_out, seconds=1.0, fallback_lines=fallback)
    assert all(isinstance(node.returncode, int) for node in outcome.nodes)
    failed = [n for n, code in zip(outcome.nodes, exits, strict=True) if code not in (0, None)]
    completed = state == "COMPLETED"
    if completed and not failed:
        assert outcome.culprit is None and outcome.ok
    elif failed:      # the first to fail, unless all it said is that it lost a peer
        own = [n for n in failed if "peer" not in " ".join(n.output)]
        expected = failed[0] if failed[0] in own or not own else own[0]
        assert outcome.culprit is expected
    elif timed_out:   # the deadline stopped it, no node failed: the row says what still ran
        assert outcome.culprit is None and outcome.timed_out
    else:             # the scheduler ended it and no node said why: its words for node 0
        assert outcome.culprit is not None and outcome.culprit.rank == 0
        assert outcome.culprit.output == fallback
    assert outcome.timed_out == (timed_out and not completed)
    assert outcome.ok == (completed and not failed)
    assert outcome.scheduler == end.section()
    silent = [n.returncode for n, code in zip(outcome.nodes, exits, strict=True) if code is None]
    assert silent == [0 if completed else -15] * len(silent)
    assert _row(outcome)["status"] in STATUSES


# --- the readers: Slurm's task logs and states, Kubernetes' pods -----------------------------

def _job(tmp_path: Path, nodes: int = 2) -> JobSpec:
    return JobSpec(job_id="m1-c1r1", module="bench.rank.train", workload_args=("--steps", "2"),
                   topology=Topology(nodes, 1), master_port=29500, rdzv_timeout=60,
                   results=tmp_path / "trainer.jsonl", log_dir=tmp_path / "logs",
                   deadline_s=600)


def _slurm_outcome(tmp_path: Path, state: str, logs: list[list[str]], batch: list[str],
                   timed_out: bool = False) -> JobOutcome:
    job = _job(tmp_path, len(logs))
    job.log_dir.mkdir(parents=True, exist_ok=True)
    for rank, lines in enumerate(logs):
        (job.log_dir / f"node{rank}.log").write_text("".join(f"{x}\n" for x in lines))
    (job.log_dir / "slurm-42.out").write_text("".join(f"{x}\n" for x in batch))
    end = slurm.scontrol_end("42", f"JobId=42 JobState={state} Reason=NonZeroExitCode "
                                   "ExitCode=1:0 NodeList=node[1-2]")
    launcher = slurm.SlurmLauncher(slurm.SlurmOptions())
    return launcher._outcome(job, "42", end, timed_out, 5.0)


def test_slurm_names_the_node_that_failed_on_its_own_not_the_one_that_lost_it(tmp_path):
    outcome = _slurm_outcome(tmp_path, "FAILED", [
        ["RuntimeError: Connection reset by peer", "[bench-slurm] node 0 (n1) exited 1"],
        ["RuntimeError: CUDA out of memory", "[bench-slurm] node 1 (n2) exited 1"]], [])
    assert outcome.culprit is not None and outcome.culprit.rank == 1
    assert outcome.culprit.host == "n2"


def test_a_slurm_job_no_task_spoke_for_is_told_by_its_batch_output(tmp_path):
    outcome = _slurm_outcome(tmp_path, "FAILED", [[], []],
                             ["srun: error: Unable to create step for job 42"])
    assert [n.returncode for n in outcome.nodes] == [-15, -15]
    rec = _row(outcome)
    assert rec["error"] == ("slurm job 42 FAILED (NonZeroExitCode), exit code 1:0 on "
                            "node[1-2]: node0 (node 0) exited 1: srun: error: Unable to "
                            "create step for job 42")
    completed = _slurm_outcome(tmp_path, "COMPLETED", [[], []], [])
    assert completed.ok and [n.returncode for n in completed.nodes] == [0, 0]
    late = _slurm_outcome(tmp_path, "CANCELLED", [["step 1"], ["step 1"]], [], timed_out=True)
    assert late.timed_out and late.culprit is None and _row(late)["status"] == "timeout"


def test_out_of_memory_is_an_oom_row_from_slurm_and_from_kubernetes(tmp_path):
    from_slurm = _slurm_outcome(tmp_path, "OUT_OF_MEMORY", [
        ["step 1", "[bench-slurm] node 0 (n1) exited 0"], ["Killed"]], [])
    pods = [{"metadata": {"name": f"bench-x-{i}", "annotations": {k8s.INDEX_ANNOTATION: str(i)}},
             "spec": {"nodeName": "gpu-1"},
             "status": {"containerStatuses": [{"name": "trainer", "state": {"terminated": {
                 "exitCode": code, "reason": reason}}}]}}
            for i, (code, reason) in enumerate([(0, "Completed"), (137, "OOMKilled")])]
    state = k8s.verdict({}, pods)
    assert state is not None
    nodes = _nodes([k8s.pod_exit(p) for p in pods], [["step 1"], ["Killed"]])
    from_k8s = k8s.outcome(_job(tmp_path), "bench-x", state, pods, nodes, False, 5.0)
    assert _row(from_slurm)["status"] == _row(from_k8s)["status"] == "oom"
    assert from_k8s.scheduler == {"kind": "k8s", "job_id": "bench-x", "state": "OUT_OF_MEMORY",
                                  "reason": state["reason"], "nodes": "gpu-1"}


@given(st.text())
def test_any_sacct_output_reads_as_one_state_or_none(text):
    end = slurm.sacct_end("42", text)
    assert (end is None) == (not text.strip())
    if end is not None:
        assert end.state and len(end.state.split()) == 1 and end.job_id == "42"


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Z", "C"),
                                              blacklist_characters="="),
                        min_size=1, max_size=12), min_size=4, max_size=4))
def test_scontrol_fields_read_back_into_the_end(values):
    state, reason, exit_code, nodes = values
    end = slurm.scontrol_end("42", f"JobId=42 JobState={state} Reason={reason} "
                                   f"ExitCode={exit_code} NodeList={nodes} Partition=debug")
    assert (end.state, end.reason, end.exit_code, end.nodes) == tuple(values)
