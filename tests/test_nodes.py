"""run_nodes with background nodes (an emulated host's busy neighbour), and the netns
launcher's neighbours: real processes, no namespaces."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from pathlib import Path

from bench import record
from bench.host import netlab
from bench.host.launchers import netns
from bench.host.launchers.base import JobSpec
from bench.host.launchers.nodes import NodeCommand, run_nodes
from bench.topology import Topology


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill 0: read its state.
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def test_background_nodes_run_until_the_job_ends_and_are_then_stopped(tmp_path):
    pid_file = tmp_path / "neighbour.pid"
    job = NodeCommand(0, "node0", ["sh", "-c", "sleep 1; echo done"])
    neighbour = NodeCommand(1, "neighbour1", ["sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"],
                            background=True)
    started = time.monotonic()
    outcome = run_nodes([job, neighbour], deadline_s=120, log_dir=tmp_path / "logs")
    assert time.monotonic() - started < 30, "the job waited for its neighbour"
    assert outcome.ok and outcome.culprit is None and not outcome.timed_out
    assert [n.returncode for n in outcome.nodes] == [0, 0]
    assert outcome.nodes[0].output == ["done"]
    assert not _alive(int(pid_file.read_text())), "the neighbour outlived the job"


def test_background_nodes_run_on_after_the_job_until_the_launcher_says_done(tmp_path):
    # The neighbour writes its first record 2 s after the job's node has ended; it is
    # stopped only then, and its record is there.
    marker = tmp_path / "first-copy"
    job = NodeCommand(0, "node0", ["true"])
    neighbour = NodeCommand(1, "neighbour1", ["sh", "-c", f"sleep 2; echo one > {marker}; "
                                              "exec sleep 60"], background=True)
    started = time.monotonic()
    outcome = run_nodes([job, neighbour], deadline_s=120, background_done=marker.exists)
    waited = time.monotonic() - started
    assert marker.exists() and 1.5 < waited < 30, waited
    assert outcome.ok and [n.returncode for n in outcome.nodes] == [0, 0]


def test_the_wait_for_background_nodes_ends_when_they_end_or_at_the_deadline(tmp_path):
    never = tmp_path / "never"
    job = NodeCommand(0, "node0", ["true"])
    # A neighbour that ends (its loop failed) without the record: no waiting on it.
    gone = NodeCommand(1, "neighbour1", ["sh", "-c", "sleep 1; exit 4"], background=True)
    started = time.monotonic()
    outcome = run_nodes([job, gone], deadline_s=120, background_done=never.exists)
    assert time.monotonic() - started < 30 and outcome.ok and not outcome.timed_out
    # A neighbour that never writes it: stopped at the job's deadline, not a timeout.
    stuck = NodeCommand(1, "neighbour1", ["sleep", "60"], background=True)
    started = time.monotonic()
    outcome = run_nodes([job, stuck], deadline_s=3, background_done=never.exists)
    assert 2.5 < time.monotonic() - started < 30
    assert outcome.ok and not outcome.timed_out and outcome.nodes[1].returncode == 0


def test_the_job_waits_for_every_spare_hosts_first_copy(tmp_path):
    lab = netlab.Lab(4, 10**9, cpus_per_node=1)
    job = JobSpec(job_id="job", module="bench.rank.train", workload_args=("--steps", "3"),
                  topology=Topology(2, 1), master_port=29500, rdzv_timeout=60,
                  results=tmp_path / "runs.jsonl", log_dir=tmp_path, deadline_s=60)
    done = netns.first_copies_done(lab, job)
    assert done is not None and not done()          # nothing written yet
    copies = tmp_path / "neighbours.jsonl"
    copies.write_text(json.dumps({"job_id": "job-n2"}) + "\n" + json.dumps({"job_id": "job-n2"})
                      + "\n" + "[" * 100_000 + '\n{"job_id": "job-n3", "job_id": "x"}\n{torn')
    assert not done()                               # host 3's copy has not ended
    copies.write_text(copies.read_text() + "\n" + json.dumps({"job_id": "job-n3"}) + "\n")
    assert done()
    # A job on every host has no neighbour to wait for.
    assert netns.first_copies_done(lab, dataclasses.replace(job, topology=Topology(4, 1))) \
        is None


def test_a_background_node_that_fails_fails_the_job(tmp_path):
    job = NodeCommand(0, "node0", ["sleep", "30"])
    neighbour = NodeCommand(1, "neighbour1", ["sh", "-c", "echo broken; exit 3"],
                            background=True)
    started = time.monotonic()
    outcome = run_nodes([job, neighbour], deadline_s=120)
    assert time.monotonic() - started < 28, "the failure did not stop the job"
    assert not outcome.ok and outcome.culprit is not None
    assert outcome.culprit.host == "neighbour1" and outcome.culprit.returncode == 3


def test_a_job_without_background_nodes_waits_for_all_of_them(tmp_path):
    quick = NodeCommand(0, "node0", ["true"])
    slow = NodeCommand(1, "node1", ["sh", "-c", "sleep 2; echo late"])
    outcome = run_nodes([quick, slow], deadline_s=60)
    assert outcome.ok and outcome.nodes[1].output == ["late"]


def test_the_restart_loop_runs_again_after_each_success_and_ends_on_a_failure(tmp_path):
    counter = tmp_path / "count"
    # Succeeds twice, then fails with 5: three runs, and the loop's exit code is 5.
    once = ("n=$(cat \"$1\" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > \"$1\"; "
            "[ $n -lt 3 ] || exit 5")
    done = subprocess.run([*netns.RESTART, "sh", "-c", once, "once", str(counter)],
                          timeout=30)
    assert done.returncode == 5 and counter.read_text().strip() == "3"


def test_neighbours_are_background_and_restarting_and_the_job_nodes_are_not(tmp_path):
    lab = netlab.Lab(4, 10**9, cpus_per_node=1)
    job = JobSpec(job_id="job", module="bench.rank.train", workload_args=("--steps", "3"),
                  topology=Topology(2, 1), master_port=29500, rdzv_timeout=60,
                  results=tmp_path / "runs.jsonl", log_dir=tmp_path, deadline_s=60)
    commands = netns.commands(lab, job, tmp_path / "neighbours.jsonl")
    assert [(c.host, c.background) for c in commands] == [
        ("node0", False), ("node1", False), ("neighbour2", True), ("neighbour3", True)]
    for command in commands:
        restarts = command.argv[:len(netns.RESTART)] == netns.RESTART
        assert restarts == command.background
        assert command.env["OMP_NUM_THREADS"] == "1"
    # Each neighbour is a one-node job of its own, writing apart from the job's records.
    neighbour = commands[2].argv
    assert neighbour[neighbour.index("--nnodes") + 1] == "1"
    assert neighbour[neighbour.index("--rdzv-id") + 1] == "job-n2"
    assert str((tmp_path / "neighbours.jsonl").resolve()) in " ".join(neighbour)


def test_stopping_a_node_reaches_a_rank_in_its_own_session_that_ignores_sigterm(tmp_path):
    """As torchrun starts each rank: in a session of its own, out of the node's process
    group. A rank that is stopped and ignores SIGTERM must not outlive the job."""
    pid_file = tmp_path / "rank.pid"
    rank = f'trap "" TERM; echo $$ > {pid_file}; kill -STOP $$; exec sleep 300'
    node = NodeCommand(0, "node0", ["sh", "-c", f"setsid sh -c '{rank}' & exec sleep 300"])
    outcome = run_nodes([node], deadline_s=3)
    assert outcome.timed_out
    assert pid_file.exists(), "the rank never started"
    rank_pid, until = int(pid_file.read_text()), time.monotonic() + 2   # SIGKILL lands async
    while _alive(rank_pid) and time.monotonic() < until:
        time.sleep(0.1)
    assert not _alive(rank_pid), "the stopped rank outlived its node"


def test_a_host_held_to_a_quota_runs_as_many_threads_as_the_quota_holds_cpus(tmp_path):
    """Threads beyond a quota's CPUs would only take turns inside it."""
    lab = netlab.Lab(2, 10**9, cpus_per_node=2, cpu_quotas=[0.3, 1.5])
    free = netlab.Lab(2, 10**9, cpus_per_node=2)
    job = JobSpec(job_id="job", module="bench.rank.train", workload_args=("--steps", "3"),
                  topology=Topology(2, 1), master_port=29500, rdzv_timeout=60,
                  results=tmp_path / "runs.jsonl", log_dir=tmp_path, deadline_s=60)
    held = netns.commands(lab, job, tmp_path / "neighbours.jsonl")
    assert [c.env["OMP_NUM_THREADS"] for c in held] == ["1", "1"]
    unheld = netns.commands(free, job, tmp_path / "neighbours.jsonl")
    assert [c.env["OMP_NUM_THREADS"] for c in unheld] == ["2", "2"]


# A node that prints part of a record's line, then a line on stderr, then the rest: what
# `docker run` did when it copied a container's two streams apart and they were read
# through one pipe (CI: "[bench] ok" inside the last line of a record).
SPLICED = r"""
import sys, json
from bench import record
lines = []
class Catch:
    def write(self, text): lines.append(text)
    def flush(self): pass
# A valid record (the matrix takes no other from a console), in two parts.
rec = json.loads(open(sys.argv[1]).readline())
record.emit(rec, Catch())
text = "".join(lines)
cut = len(text) - 40
sys.stdout.write(text[:cut]); sys.stdout.flush()
sys.stderr.write("[bench] ok: 1.0 samples/s\n"); sys.stderr.flush()
sys.stdout.write(text[cut:]); sys.stdout.flush()
"""


def test_a_record_survives_a_stderr_line_written_in_the_middle_of_its_line(tmp_path):
    import sys

    fixture = Path(__file__).resolve().parent / "fixtures" / "table-fixture.jsonl"
    node = NodeCommand(0, "node0", [sys.executable, "-c", SPLICED, str(fixture)],
                       env={"PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    outcome = run_nodes([node], deadline_s=60, log_dir=tmp_path / "logs")
    assert outcome.ok, outcome.nodes[0].output
    (found,) = outcome.records()
    assert found == json.loads(fixture.read_text().splitlines()[0])
    # stderr still reaches the node's output and its log, a whole line.
    assert "[bench] ok: 1.0 samples/s" in outcome.nodes[0].output
    log = (tmp_path / "logs" / "node0.log").read_text().splitlines()
    assert "[bench] ok: 1.0 samples/s" in log
    assert sum(line.startswith(record.MARKER) for line in log) == 2   # two parts, each whole
