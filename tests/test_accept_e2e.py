"""``bench accept`` on four emulated hosts with real faults (issue 27), at test scale: the
conditions of ``scripts/accept_faults.py`` (which measures the rates), one run each.

The kernel's own mechanisms make the faults: a host's cgroup CPU quota cut to half, a
host's link shaped to a tenth of the others', the link of the NFS server (the stack's own
image, on its own emulated host) shaped so that the nodes cannot read the dataset as fast as
they train. A clean cluster passes every row, the data stage's over NFS included.

A clean two-node cluster also passes through the SSH launcher (the loopback sshd) and the
Slurm launcher (the Slurm test cluster's two slurmd), every stage but data. Each node there
runs on a CPU of its own (taskset), as two machines would: nodes sharing every CPU are not
a clean cluster, since the job stage's two-node runs then split the CPUs its one-node runs
had alone, and its row fails, rightly, 18-53% below the prediction.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import warnings

import pytest

from tests.conftest import LOOPBACK_HOSTS, REPO, _require
from tests.test_netlab_e2e import lab_host  # noqa: F401  (the fixture)
from tests.test_slurm_cluster_e2e import own_cluster

# Alone: each fault is told apart by a rate measured on the emulated hosts
# (tests/conftest.py, PHASES).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

_spec = importlib.util.spec_from_file_location("accept_faults",
                                               REPO / "scripts" / "accept_faults.py")
assert _spec is not None and _spec.loader is not None
faults = importlib.util.module_from_spec(_spec)
sys.modules["accept_faults"] = faults     # its dataclasses look their module up
_spec.loader.exec_module(faults)


# The data stage runs where it is under test: on the clean cluster and under its own fault.
WITH_DATA = ("clean", "data")


@pytest.mark.parametrize("condition", list(faults.CONDITIONS))
def test_a_fault_fails_the_row_that_names_its_host(lab_host, tmp_path, condition,  # noqa: F811
                                                   request):
    expect = faults.CONDITIONS[condition].stage
    export = None
    if condition in WITH_DATA:
        request.getfixturevalue("nfs_image")
        export = faults.write_shards(tmp_path / "export")
    stages = "preflight,device" + (",link" if condition != "data" else "")
    proc = subprocess.run(faults.accept_argv(faults.CONDITIONS[condition], tmp_path / "out",
                                             stages, export),
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    tmp_path = tmp_path / "out"
    verdict = json.loads((tmp_path / "accept.json").read_text())
    failed = [(row["stage"], row["subject"]) for row in verdict["rows"]
              if row["status"] == "FAIL"]
    # Every row that did not pass, whole (its figures and reason), for a CI log to show.
    context = "".join(f"\nnot PASS: {json.dumps(row)}" for row in verdict["rows"]
                      if row["status"] != "PASS")
    assert proc.returncode == (1 if expect else 0), proc.stderr[-3000:] + context
    assert verdict["exit_code"] == proc.returncode
    assert (tmp_path / "accept-figures.html").exists()      # the report, verdict first
    if not expect:
        assert failed == [], verdict["rows"]
        assert {row["stage"] for row in verdict["rows"]} == {"preflight", "device", "link",
                                                              "data"}
        data = [row for row in verdict["rows"] if row["stage"] == "data"]
        assert len(data) == faults.HOSTS and all(row["status"] == "PASS" for row in data), data
        return
    if expect == "data":
        # Every node's read is short, with its figures; the rows blame what they share.
        assert {stage for stage, _ in failed} == {"data"}, f"{failed}{context}"
        assert len(failed) == faults.HOSTS, f"{failed}{context}"
        for row in (r for r in verdict["rows"] if r["status"] == "FAIL"):
            assert row["measured"] < row["expected"], row
            assert "training needs" in row["reason"] and "the data server" in row["reason"]
        return
    # Every failed row names host 2, and the stage of the fault failed.
    assert failed and all(f"node {faults.FAULTY}" in subject for _, subject in failed), \
        f"{failed}{context}"
    assert expect in {stage for stage, _ in failed}, f"{failed}{context}"
    rows = [row for row in verdict["rows"] if row["status"] == "FAIL"]
    if expect == "device":
        # The quota takes CPU time, not device speed: host 2's CPU time row fails, below
        # what its peers got, with the time it got.
        cpu = [row for row in rows if row["check"] == "CPU time"]
        assert cpu and "below the share its 3 peer(s) got" in cpu[0]["reason"], rows
        assert "CPUs' worth of time" in cpu[0]["reason"], rows
    else:
        (node,) = [row for row in verdict["rows"] if row["subject"] == "node 2"]
        assert "NIC, cable or switch port" in node["reason"], node
        assert not [row for row in rows if row["stage"] == "device"]
    assert "FAIL" in proc.stdout and "verdict in" in proc.stderr


# --- a clean cluster through the other launchers: SSH and Slurm ----------------------------
CLEAN_STAGES = "preflight,device,link,job"


def accept_clean(out, *launcher: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``bench accept`` on two CPU nodes at test scale: the fault script's small figures,
    the job stage's default runs (100 steps: 30 timed a second, a hiccup's fifth)."""
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "bench", "accept", "--out", str(out),
                           "--nodes", "2", "--device", "cpu", "--stages", CLEAN_STAGES,
                           "--job-repeats", "3", *launcher, "--",
                           *faults.RANK_FLAGS], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)


# A clean cluster is judged twice at most, as the straggler test's clean run is
# (tests/test_netlab_e2e.py): on this 2-CPU VM one CPU runs up to twice as slow as minutes
# before (results/reference/neighbour-state/), and a device row judged against its one peer
# then fails a clean cluster now and then (twice in five runs on 2026-11-30, node 1's
# training 25-27% below node 0's). Two failures in a row fail the test.
CLEAN_TRIES = 2


def accept_clean_twice(out, *launcher: str, env: dict | None = None):
    """``accept_clean`` into OUT, and once more into OUT-2 where the first verdict failed:
    the last run's process and the directory of its verdict."""
    for attempt in range(1, CLEAN_TRIES + 1):
        where = out if attempt == 1 else out.with_name(f"{out.name}-{attempt}")
        proc = accept_clean(where, *launcher, env=env)
        if proc.returncode == 0 or attempt == CLEAN_TRIES:
            return proc, where
        warnings.warn(f"clean cluster, run {attempt} of {CLEAN_TRIES}: rc "
                      f"{proc.returncode}; {proc.stdout[-1500:]}", stacklevel=1)
    raise AssertionError("unreachable")


def assert_clean_pass(proc: subprocess.CompletedProcess, out) -> None:
    """Exit 0, and a verdict with no FAIL: the preflight row, one set of device rows per
    node, the pair's link row and the job row; the table on failure, as a CI log shows it."""
    # The load beside it too: other work on this machine takes CPU time the nodes are
    # judged on, and the verdict rightly says so.
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    context = (f"rc={proc.returncode}\n{proc.stdout}\nstderr tail:\n{proc.stderr[-4000:]}\n"
               f"load average (1, 5, 15 min) at the end: {load} on "
               f"{len(os.sched_getaffinity(0))} CPUs")
    rows = json.loads((out / "accept.json").read_text())["rows"] \
        if (out / "accept.json").exists() else []
    # Last, as a CI log's tail keeps it: every row that did not pass, whole.
    context += "".join(f"\nnot PASS: {json.dumps(row)}" for row in rows
                       if row["status"] != "PASS")
    assert proc.returncode == 0, context
    assert (out / "accept.json").exists(), context
    assert all(row["status"] in ("PASS", "WARN") for row in rows), context
    stages = {row["stage"] for row in rows}
    assert stages == {"preflight", "device", "link", "job"}, context
    checks: dict[str, set[str]] = {}     # node -> its device checks ("node 1 vm rank 1")
    for row in rows:
        if row["stage"] == "device":
            checks.setdefault(row["subject"].split()[1], set()).add(row["check"])
    assert set(checks) == {"0", "1"} and checks["0"] == checks["1"], context
    assert [row for row in rows if row["stage"] == "link"
            and row["subject"] == "node 0 - node 1"], context


def cpus_of(argv: list[str], env: dict | None = None) -> list[str]:
    """The CPUs each task of ``argv`` may run on, one line each (Cpus_allowed_list)."""
    proc = subprocess.run([*argv, "grep", "Cpus_allowed_list", "/proc/self/status"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return sorted(line.split()[-1] for line in proc.stdout.splitlines())


def two_cpus() -> None:
    """Two nodes each on a CPU of its own need two: on one, the job stage's two nodes would
    share what the one node had alone, and the verdict would say so."""
    _require(len(os.sched_getaffinity(0)) >= 2, "a clean two-node cluster on this machine "
             "needs two CPUs, one per node")


def test_a_clean_cluster_passes_over_ssh(pinned_loopback_sshd, tmp_path):
    two_cpus()
    config = str(pinned_loopback_sshd / "ssh_config")
    # Two hosts, each its own CPU (the fixture's taskset), as two machines.
    cpus = [cpus_of(["ssh", "-F", config, "--", host]) for host in LOOPBACK_HOSTS]
    assert len({c[0] for c in cpus}) == 2, cpus
    out = tmp_path / "accept"
    proc, out = accept_clean_twice(out, "--launcher", "ssh", "--hosts",
                                   ",".join(LOOPBACK_HOSTS), "--runtime", "native",
                                   "--ssh-config", config)
    assert_clean_pass(proc, out)


@pytest.fixture(scope="module")
def pinned_slurm():
    """The two-node Slurm test cluster of its own, each slurmd on its own CPU."""
    with own_cluster(BENCH_SLURM_PIN="1") as env:
        yield env


def test_a_clean_cluster_passes_on_slurm(pinned_slurm, tmp_path):
    two_cpus()
    # One task per node, each on its own CPU (BENCH_SLURM_PIN), as two machines.
    cpus = cpus_of(["srun", "--nodes=2", "--ntasks-per-node=1"], pinned_slurm)
    assert len(set(cpus)) == 2, cpus
    out = tmp_path / "accept"
    proc, out = accept_clean_twice(out, "--launcher", "slurm", env=pinned_slurm)
    assert_clean_pass(proc, out)
