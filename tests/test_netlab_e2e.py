"""Emulated links end to end: real namespaces, veth pairs, a bridge and tc tbf (root).

Under CI these run (CI is root and has iproute2); elsewhere they skip when either is missing.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from bench import record
from bench.analysis import straggler
from bench.host import netlab
from tests.conftest import REPO, _require, assert_breakdown

LINK_GBPS = 0.125   # 1 Gbit/s in GB/s
# Alone, every test: lab_host checks that no lab of anyone's is left, and several time a
# link, a quota or a neighbour's start (tests/conftest.py, PHASES).
pytestmark = pytest.mark.serial


@pytest.fixture
def lab_host() -> None:
    _require(os.geteuid() == 0 and shutil.which("tc") is not None
             and shutil.which("ip") is not None,
             "emulated links need root and iproute2 (ip, tc)")
    yield
    assert _ours() == [], "a lab namespace was left behind"
    assert netlab.lab_cgroups() == [], "a lab cgroup was left behind"


def _ours() -> list[str]:
    return [name for name in netlab.namespaces() if name.startswith(netlab.PREFIX + "-")]


def _matrix(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench", "matrix", "--launcher", "netns", "--link", "1gbit",
            *args]


@pytest.mark.serial
def test_two_nodes_on_a_1gbit_link(lab_host, tmp_path):
    results = tmp_path / "runs.jsonl"
    sweep = subprocess.run(
        _matrix("--workload", "allreduce", "--topologies", "2x1", "--results", str(results),
                "--", "--max-size", "4MiB", "--iters", "3", "--warmup-iters", "1"),
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    train = subprocess.run(
        # Steps enough that the one-node job outlasts its neighbour's start (at 3, the job
        # once ended before the neighbour had printed its first line).
        _matrix("--topologies", "1x1,2x1", "--models", "smallcnn", "--batch-sizes", "8",
                "--results", str(results), "--", "--steps", "12", "--warmup-steps", "1",
                "--comm-probe-steps", "2"),
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert train.returncode == 0, train.stderr[-3000:]
    comm, one, two = list(record.read(results))
    assert comm["mode"] == "allreduce" and comm["status"] == "ok" and comm["nnodes"] == 2
    # Two one-CPU nodes: each has its whole CPU unless the machine has fewer than two.
    share = min(1.0, (os.cpu_count() or 1) / 2)
    assert comm["env"]["link"] == {"rate": "1gbit", "rate_bps": 10**9, "kind": "emulated",
                                   "cpu_share": share}
    assert {r["hostname"] for r in comm["env"]["ranks"]} and comm["env"]["comm_env"][
        "GLOO_SOCKET_IFNAME"] == "eth0"
    assert all(row["wrong"] == 0 for row in comm["sizes"])
    # gloo's copies and sums cost the ranks' CPUs: more for more bytes.
    assert 0 < comm["sizes"][0]["cpu_time_s"] < comm["sizes"][-1]["cpu_time_s"]
    # The shaper is in the path: nothing crosses faster than the link (tbf's burst allows
    # a little over at 4 MiB).
    assert 0 < comm["busbw_largest_GBps"] <= 1.15 * LINK_GBPS
    assert (one["nnodes"], two["nnodes"]) == (1, 2)
    assert one["status"] == two["status"] == "ok"
    assert two["env"]["link"]["rate_bps"] == 10**9
    assert two["grad_bytes_per_step"] == one["grad_bytes_per_step"] > 0
    assert two["comm_exposed_s"] is not None and two["bucket_timeline"]["step_s"] > 0
    # The one-node job ran beside a neighbour on the second emulated host: a one-node copy
    # of it, started again each time it ended and stopped with the job (so it may have
    # finished no run of its own, but none of another shape).
    # How far it got before the job ended is a race on a busy machine (in one CI run it was
    # stopped before its first line): it printed the job's own banner, or none, and ran.
    logs = Path(one["matrix"]["logs"])
    text = (logs / "neighbour1.log").read_text()
    banners = set(re.findall(r"\[bench\] (\S+) on (\d+) x (\w+)", text))
    assert banners <= {("smallcnn", "1", "cpu")}, banners
    assert banners or "torch.distributed" in text, text[-2000:]
    neighbours = logs / "neighbours.jsonl"
    assert all(n["nnodes"] == 1 for n in record.read(neighbours)) if neighbours.exists() \
        else True


def _start_long_job(results, *launcher_flags: str) -> subprocess.Popen:
    return subprocess.Popen(
        _matrix(*launcher_flags, "--topologies", "2x1", "--models", "smallcnn",
                "--batch-sizes", "8", "--results", str(results), "--", "--steps", "100000",
                "--warmup-steps", "1"),
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)


def _wait_for_training(namespace_suffix: str, timeout: float = 120) -> str:
    """The namespace of the node whose name ends in the suffix, once it runs a process."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for name in _ours():
            if name.endswith(namespace_suffix):
                pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                                      text=True).stdout.split()
                if len(pids) >= 2:   # torchrun and its worker
                    return name
        time.sleep(0.5)
    raise AssertionError("the job's nodes never started")


def test_a_node_dying_midway_fails_the_job_and_removes_the_lab(lab_host, tmp_path):
    results = tmp_path / "runs.jsonl"
    job = _start_long_job(results)
    try:
        node1 = _wait_for_training("-n1")
        time.sleep(3)
        for pid in subprocess.run(["ip", "netns", "pids", node1], capture_output=True,
                                  text=True).stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        output, _ = job.communicate(timeout=180)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 1, output[-3000:]
    (rec,) = list(record.read(results))
    assert rec["status"] != "ok" and rec["failed_node"]["rank"] == 1


@pytest.mark.parametrize("quota", [(), ("--host-cpu-quota", "0.5,0.75")],
                         ids=["no-quota", "quota"])
def test_terminating_the_harness_removes_the_lab(lab_host, tmp_path, quota):
    job = _start_long_job(tmp_path / "runs.jsonl", *quota)
    try:
        _wait_for_training("-n0")
        if quota:   # the node runs inside its cgroup (lab_host checks it is gone after)
            from bench.host import cgroups

            (name,) = [n for n in netlab.lab_cgroups() if n.endswith("-n0")]
            assert cgroups.pids(cgroups.find_mount().path(name))
        job.send_signal(signal.SIGTERM)
        output, _ = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode != 0, output[-3000:]


def test_labs_of_dead_owners_are_cleaned(lab_host):
    dead = f"{netlab.PREFIX}-999999-abcdef-n0"   # no process 999999: a harness killed -9
    subprocess.run(["ip", "netns", "add", dead], check=True)
    assert dead in netlab.clean()
    assert dead not in netlab.namespaces()


def test_uneven_nodes_behind_an_emulated_link(lab_host, tmp_path):
    results = tmp_path / "runs.jsonl"
    train = subprocess.run(
        _matrix("--topologies", "1x1,1+2", "--models", "smallcnn", "--batch-sizes", "8",
                "--results", str(results), "--", "--steps", "2", "--warmup-steps", "1",
                "--comm-probe-steps", "0"),
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert train.returncode == 0, train.stderr[-3000:]
    one, uneven = list(record.read(results))
    assert uneven["status"] == "ok" and uneven["world_size"] == 3
    assert uneven["procs_per_node"] == [1, 2]
    assert_breakdown(uneven)
    assert [r["node_rank"] for r in uneven["env"]["ranks"]] == [0, 1, 1]
    table = subprocess.run([sys.executable, "-m", "bench", "table", str(results)], cwd=REPO,
                           capture_output=True, text=True)
    rows = [line for line in table.stdout.splitlines() if line.startswith("| multi-node")]
    assert rows and "| 3 " in rows[0], table.stdout  # the device total: 3 processes


# A fixed amount of CPU work, timed inside the process (its start-up is not counted).
_SPIN = ("import time; t = time.perf_counter(); sum(i * i for i in range(1_500_000)); "
         "print(time.perf_counter() - t)")


@pytest.mark.serial
def test_a_cpu_quota_slows_its_host_and_its_cgroup_goes_with_the_lab(lab_host):
    def spin_on(node: netlab.Node) -> float:
        done = subprocess.run(node.wrap([sys.executable, "-c", _SPIN]), capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return float(done.stdout)

    with netlab.Lab(2, 10**9, cpu_quotas=[None, 0.25]) as lab:
        free, capped = lab.nodes
        assert free.cgroup is None and capped.cgroup is not None
        assert capped.cgroup.name == capped.namespace in netlab.lab_cgroups()
        # One after the other, each on its own CPU: only the quota differs. Best of three,
        # so that a busy moment on the shared machine does not decide.
        free_s = min(spin_on(free) for _ in range(3))
        capped_s = min(spin_on(capped) for _ in range(3))
        assert lab.env(capped)["BENCH_LINK_CPU_QUOTA"] == "0.25"
    # A quarter of a CPU: about four times as long; at least twice, whatever the noise.
    assert capped_s > 2 * free_s, (free_s, capped_s)
    assert capped.namespace not in netlab.lab_cgroups()


def test_cgroups_of_dead_owners_are_cleaned(lab_host):
    from bench.host import cgroups

    dead = f"{netlab.PREFIX}-999999-abcdef-n1"   # no process 999999: a harness killed -9
    cgroups.create(cgroups.find_mount(), dead, 0.5)
    assert dead in netlab.lab_cgroups()
    assert dead in netlab.clean()
    assert dead not in netlab.lab_cgroups()


def test_a_host_with_its_own_link_rate_is_shaped_at_both_ends(lab_host):
    with netlab.Lab(2, 10**9, node_rates=[None, 10**8]) as lab:
        def rate_of(namespace: str, device: str) -> str:
            shown = subprocess.run(["ip", "netns", "exec", namespace, "tc", "qdisc", "show",
                                    "dev", device], capture_output=True, text=True).stdout
            return shown.split(" rate ")[1].split()[0]

        assert rate_of(lab.nodes[0].namespace, "eth0") == "1Gbit"
        assert rate_of(lab.nodes[1].namespace, "eth0") == "100Mbit"
        assert rate_of(lab.switch, "p1") == "100Mbit"
        assert rate_of(lab.switch, "p0") == "1Gbit"


# Issue 26, the mechanism (`make bench-straggler` measures the rates): four emulated hosts
# held to the same CPU quota, one of them slowed by the kernel's own means. The benchmark's
# own job, 30 timed steps: at 20, a clean run on CI named a host at 7.9% once.
STRAGGLER_JOB = ("--cpus-per-node", str(os.cpu_count() or 1), "--topologies", "4x1",
                 "--models", "mlp", "--batch-sizes", "1024", "--",
                 "--steps", "30", "--warmup-steps", "5", "--log-every", "0",
                 "--comm-probe-steps", "0", "--mlp-width", "256", "--mlp-depth", "4")
# A clean run named near the threshold (under 1.5 times it) is judged once more.
CLEAN_TRIES, NEAR_THRESHOLD = 2, 1.5 * straggler.THRESHOLD_SHARE


@pytest.mark.serial
@pytest.mark.parametrize("condition, flags, named", [
    ("clean", ["--host-cpu-quota", "0.3"], None),
    # host 2 held to half its fair quota: twice as slow in compute
    ("cpu", ["--host-cpu-quota", "0.3,0.3,0.15,0.3"], (2, "compute")),
    ("link", ["--host-cpu-quota", "0.3", "--host-links", ",,100mbit,"], (2, "communication")),
])
def test_a_slow_host_is_named_and_a_clean_run_is_not(lab_host, tmp_path, condition, flags,
                                                      named):
    # A clean run is judged twice at most: on this 2-CPU VM the detector's false-alarm rate
    # is small, not zero. A clean run's largest excess came out at 0.7-7.0% in the
    # reference's 20 runs and 2.0-7.5% in 14 more (quota 0.3 or 0.2, hosts free or pinned:
    # results/reference/straggler/README.md), and once 8% on CI; two hosts each on a CPU of
    # its own without a quota reached 6.7%: the VM's noise, not the emulation's. Two false
    # alarms in a row fail, and so does one far past the threshold (a broken detector).
    for attempt in range(1, (CLEAN_TRIES if named is None else 1) + 1):
        results = tmp_path / f"{condition}-{attempt}.jsonl"
        proc = subprocess.run(_matrix(*flags, "--results", str(results), *STRAGGLER_JOB),
                              cwd=REPO, capture_output=True, text=True, timeout=400)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (rec,) = list(record.read(results))
        assert_breakdown(rec)
        found = rec["straggler"]
        if named is not None or found is None or \
                rec["straggler_check"]["largest_excess_share"] >= NEAR_THRESHOLD:
            break
        warnings.warn(f"clean run {attempt} of {CLEAN_TRIES}: a false alarm, "
                      f"{found['summary']}", stacklevel=1)
    if named is None:
        assert found is None, found
        assert rec["straggler_check"]["note"].startswith("ranks agree")
        return
    assert (found["node"], found["part"]) == named, found
    assert f"straggler rank {found['rank']} (node 2)" in proc.stderr, "on the job's line"
    assert rec["without_slowest"]["node"] == 2
    if found["part"] == "communication":
        assert rec["link_probe"]["slow_node"] == 2
