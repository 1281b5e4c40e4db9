"""The Slurm launcher without a cluster: the script it renders, the task each node runs,
its options, and how Slurm's end states become rows. (tests/test_slurm_e2e.py runs jobs
on a real two-node Slurm.)"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.host import contract
from bench.host.failures import describe_failure
from bench.host.launchers import slurm
from bench.host.launchers.base import JobSpec
from bench.host.outcome import JobOutcome, NodeOutcome
from bench.options import ConfigError
from bench.topology import Topology
from conftest import REPO

HOSTILE_ARGS = ("--steps", "2", "--data-dir", "/data/it's a \"dir\" $(touch pwned) `id`;x")


def _job(tmp_path: Path, nodes: int = 2, procs: int = 1, args=HOSTILE_ARGS) -> JobSpec:
    return JobSpec(job_id="m1-c1r1", module="bench.rank.train", workload_args=tuple(args),
                   topology=Topology(nodes, procs), master_port=29500, rdzv_timeout=60,
                   results=tmp_path / "logs" / "trainer.jsonl", log_dir=tmp_path / "logs",
                   deadline_s=600)


def test_the_script_asks_for_what_the_job_needs(tmp_path):
    options = slurm.SlurmOptions(partition="gpu", account="lab-1", gpus_per_node=4,
                                 remote_dir="/srv/bench")
    text = slurm.script(options, _job(tmp_path, nodes=3, procs=4))
    for line in ("#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=1", "#SBATCH --partition=gpu",
                 "#SBATCH --account=lab-1", "#SBATCH --gpus-per-node=4",
                 "#SBATCH --time=11", "cd /srv/bench"):
        assert line in text.splitlines(), line
    assert "srun --nodes=3 --ntasks-per-node=1 --kill-on-bad-exit=1" in text
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_without_partition_or_gpus_the_script_leaves_them_to_slurm(tmp_path):
    text = slurm.script(slurm.SlurmOptions(time_limit="1:00:00"), _job(tmp_path))
    assert "--partition" not in text and "--gpus-per-node" not in text
    assert "#SBATCH --time=1:00:00" in text.splitlines()


@pytest.mark.parametrize("node_id", ["0", "1", "2"])
def test_each_task_runs_its_own_nodes_torchrun_argv(tmp_path, node_id):
    """The task line, run by bash as srun would on a node, starts exactly the argv of its
    node's spec (SLURM_NODEID picks it; uneven nodes keep their process counts), with the
    rendezvous from the batch script's MASTER_ADDR and MASTER_PORT as torchrun's
    PET_MASTER_ADDR and PET_MASTER_PORT; hostile trainer flags stay single arguments and
    run nothing."""
    directory = tmp_path / "checkout"
    fake = directory / ".venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(f"#!{sys.executable}\nimport json, os, sys\nprint(json.dumps("
                    "[sys.argv[1:], os.environ['PET_MASTER_ADDR'], "
                    "os.environ['PET_MASTER_PORT']]))\n")
    fake.chmod(0o755)
    job = dataclasses.replace(_job(tmp_path), topology=Topology.parse("1+1+2"))
    task = slurm.task_argv(slurm.SlurmOptions(remote_dir=str(directory)), job,
                           str(directory))
    env = {"PATH": "/usr/bin:/bin", "SLURM_NODEID": node_id, "SLURMD_NODENAME": "n" + node_id,
           "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "23456"}
    out = subprocess.run(task, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    argv_line, exit_line = out.stdout.splitlines()
    expected = contract.torchrun_argv(job.nodes[int(node_id)], master_addr=None,
                                      master_port=None, results=str(job.results.resolve()),
                                      python=str(fake))
    assert json.loads(argv_line) == [expected[1:], "10.1.2.3", "23456"]
    assert expected[expected.index("--node_rank") + 1] == node_id
    assert expected[expected.index("--nproc_per_node") + 1] == ("2" if node_id == "2" else "1")
    assert exit_line == f"[bench-slurm] node {node_id} (n{node_id}) exited 0"
    assert not (tmp_path / "pwned").exists()


def test_a_task_on_a_node_the_script_has_no_command_for_says_so(tmp_path):
    task = slurm.task_argv(slurm.SlurmOptions(remote_dir="/srv/bench"), _job(tmp_path), "/srv")
    out = subprocess.run(task, env={"PATH": "/usr/bin:/bin", "SLURM_NODEID": "2"},
                         capture_output=True, text=True)
    assert out.returncode == 2 and "no command for node 2" in out.stderr


@pytest.mark.parametrize("field, value", [
    ("partition", "-p evil"), ("partition", "a;b"), ("account", "$(id)"),
    ("time_limit", "10; rm"), ("time_limit", "ten"), ("gpus_per_node", -1),
    ("gpus_per_node", 1000), ("runtime", "docker"), ("remote_dir", "relative/dir"),
    ("remote_dir", "/a,/:/host"), ("remote_dir", "/srv/a:b"), ("remote_dir", "/srv/a\nb")])
def test_bad_options_are_refused_naming_the_setting(field, value):
    with pytest.raises(ConfigError) as error:
        slurm.SlurmOptions(**{field: value})
    assert field.replace("_", "-") in str(error.value)


def test_compose_and_pyxis_need_an_image():
    for runtime in ("compose", "pyxis"):
        with pytest.raises(ConfigError, match="--image"):
            slurm.SlurmOptions(runtime=runtime)


def test_pyxis_runs_the_task_in_the_container(tmp_path):
    text = slurm.script(slurm.SlurmOptions(runtime="pyxis", image="nvcr.io#lab/bench:1",
                                           remote_dir="/srv/bench"), _job(tmp_path))
    assert "--container-image=nvcr.io#lab/bench:1" in text
    assert "python3 -m bench.rank.torchrun" in text


def test_scontrol_lines_are_read_as_fields():
    line = ("JobId=7 JobName=bench-x UserId=root(0) JobState=FAILED Reason=NonZeroExitCode "
            "Dependency=(null) ExitCode=3:0 NodeList=node[1-2]")
    fields = slurm.parse_job_state(line)
    assert fields["JobState"] == "FAILED" and fields["ExitCode"] == "3:0"
    assert fields["NodeList"] == "node[1-2]" and fields["Reason"] == "NonZeroExitCode"


def _outcome(state: str, codes: list[int | None], timed_out: bool = False) -> JobOutcome:
    nodes = [NodeOutcome(i, f"node{i + 1}", code, [f"line of node {i}"],
                         [f"line of node {i}"]) for i, code in enumerate(codes)]
    failed = [n for n in nodes if n.returncode not in (0, None)]
    return JobOutcome(nodes, timed_out, 5.0, failed[0] if failed else None,
                      scheduler={"kind": "slurm", "job_id": "42", "state": state,
                                 "reason": "NonZeroExitCode", "exit_code": "1:0",
                                 "nodes": "node[1-2]"})


@pytest.mark.parametrize("state, codes, status", [
    ("FAILED", [0, 1], "error"), ("TIMEOUT", [-15, -15], "timeout"),
    ("OUT_OF_MEMORY", [0, 137], "oom"), ("NODE_FAIL", [None, None], "error"),
    ("CANCELLED", [-15, -15], "error")])
def test_slurm_end_states_become_rows(state, codes, status):
    outcome = _outcome(state, codes)
    assert not outcome.ok
    rec = describe_failure({"status": "error", "error": "no node wrote a record"}, outcome, 600)
    assert rec["status"] == status
    assert rec["error"].startswith(f"slurm job 42 {state} (NonZeroExitCode), exit code 1:0 "
                                   "on node[1-2]")


def test_a_completed_job_is_ok():
    assert _outcome("COMPLETED", [0, 0]).ok


def test_bench_slurm_script_prints_one_job(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bench", "slurm", "script", "--topologies",
                          "2x1", "--models", "smallcnn", "--batch-sizes", "8", "--results",
                          str(tmp_path / "r.jsonl"), "--", "--steps", "3"], cwd=REPO,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("#!/bin/bash\n") and "#SBATCH --nodes=2" in out.stdout
    several = subprocess.run([sys.executable, "-m", "bench", "slurm", "script",
                              "--topologies", "1x1,2x1", "--", "--steps", "3"], cwd=REPO,
                             capture_output=True, text=True)
    assert several.returncode == 2 and "a script is one job" in several.stderr


def test_doctor_reads_the_munge_socket_slurm_authenticates_through():
    """A cluster with its own munged (AuthInfo=socket=...) is checked on that socket, not on
    the system's default one, which may not run at all."""
    from bench.host.checks.slurm import munge_socket

    config = ("AuthAltTypes            = (null)\n"
              "AuthInfo                = cred_expire=120,socket=/var/lib/x/run/munge.socket\n"
              "AuthType                = auth/munge\n")
    assert munge_socket(config) == "/var/lib/x/run/munge.socket"
    assert munge_socket("AuthInfo                = (null)\nAuthType = auth/munge\n") is None
    assert munge_socket("") is None


@pytest.mark.parametrize("limit, seconds", [
    ("1", 60), ("30", 1800), ("90:00", 5400), ("1:30", 90), ("1:00:00", 3600),
    ("2-12", 216000), ("1-0:30", 88200), ("1-00:00:30", 86430), ("365-0", 365 * 86400)])
def test_a_slurm_time_limit_is_read_in_seconds(limit, seconds):
    assert slurm.time_limit_s(limit) == seconds
    assert slurm.SlurmOptions(time_limit=limit).time_limit == limit


# 0 is no limit to Slurm (the deadline would never come); a field past its clock is none.
@pytest.mark.parametrize("limit", ["0", "0:00", "0:59", "00:00:00", "0-0", "5:99", "1:99:99",
                                   "1:00:60", "999-99", "1-24", "1-0:60", "999999", "366-0"])
def test_a_slurm_time_limit_out_of_range_is_refused(limit):
    assert slurm.time_limit_s(limit) is None
    with pytest.raises(ConfigError, match="--time-limit"):
        slurm.SlurmOptions(time_limit=limit)


@given(st.text(max_size=20))
def test_any_text_is_a_time_limit_in_range_or_refused(text):
    seconds = slurm.time_limit_s(text)
    assert seconds is None or 60 <= seconds <= slurm.MAX_TIME_LIMIT_DAYS * 86400
