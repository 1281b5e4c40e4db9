"""The two-node Slurm test cluster itself (scripts/slurm-cluster.sh): Debian's slurmctld, two
slurmd (node1, node2, `slurmd -N` on loopback) and munge, started for these tests in a fresh
state directory on free ports, then stopped. What the Slurm launcher relies on is checked
with real jobs: two distinct nodes, a finished job's state, reason and exit code readable
after it ends, TIMEOUT and CANCELLED, and a TCP connection between the two nodes' tasks on
the address a job's MASTER_ADDR gets."""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO, _require, free_port

# The same worker as test_slurm_e2e: one cluster start at a time, since the first one may
# install Slurm (tests/conftest.py, PHASES).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

CLUSTER = REPO / "scripts" / "slurm-cluster.sh"
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
          "RESIZING", "SIGNALING", "STAGE_OUT"}


def _free_port_run(count: int = 3) -> int:
    """A port p with p .. p+count-1 free on every address (slurmctld and the two slurmd)."""
    for _ in range(50):
        base = free_port()
        if base + count > 65535:
            continue
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                s.bind(("", port))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    pytest.fail("no three consecutive free ports for the Slurm test cluster")


def _script(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLUSTER), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _new_cluster_env() -> dict:
    # A short path under /tmp: munged's socket path must stay under 108 characters.
    state = tempfile.mkdtemp(prefix="bench-slurm-")
    return {**os.environ, "BENCH_SLURM_DIR": state, "BENCH_SLURM_PORT": str(_free_port_run())}


def _marked_pids(state_dir: str) -> list[int]:
    """Processes this cluster started (the script puts its mark in their environment)."""
    mark = f"BENCH_SLURM_CLUSTER={state_dir}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def _daemons(state_dir: str) -> list[str]:
    """This cluster's processes as "program last-argument" (slurmctld's helper left out)."""
    found = []
    for pid in _marked_pids(state_dir):
        argv = _cmdline(Path(f"/proc/{pid}")).split()
        if argv and not argv[0].startswith(":"):  # ": slurmscriptd"
            found.append(f"{Path(argv[0]).name} {argv[-1]}")
    return sorted(found)


@contextlib.contextmanager
def own_cluster(**settings: str):
    """A started cluster of its own (state directory, ports; ``settings``: more of the
    script's, e.g. BENCH_SLURM_PIN="1"); yields the environment that points Slurm's commands
    at it; stopped, and its directory removed, at the end."""
    _require(os.geteuid() == 0, "the Slurm test cluster needs root (it installs and starts "
             "slurmctld, slurmd and munge)")
    env = {**_new_cluster_env(), **settings}
    began = time.monotonic()
    started = _script(env, "start", timeout=900)
    if started.returncode != 0:
        _script(env, "stop")
        shutil.rmtree(env["BENCH_SLURM_DIR"], ignore_errors=True)
        pytest.fail(f"scripts/slurm-cluster.sh start failed:\n{started.stderr[-3000:]}")
    env["BENCH_SLURM_START_S"] = f"{time.monotonic() - began:.1f}"
    line = _script(env, "env").stdout.strip()
    assert line.startswith("export SLURM_CONF=") and "\n" not in line, line
    env["SLURM_CONF"] = line.split("=", 1)[1]
    try:
        yield env
    finally:
        _script(env, "stop")
        shutil.rmtree(env["BENCH_SLURM_DIR"], ignore_errors=True)


@pytest.fixture(scope="session")
def cluster():
    """A started cluster of its own, its nodes sharing every CPU (``own_cluster``)."""
    with own_cluster() as env:
        yield env


def _run(env, *cmd: str, timeout: float = 60, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL)


def _sbatch(env, tmp_path: Path, body: str, *options: str) -> str:
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n" + textwrap.dedent(body))
    out = _run(env, "sbatch", "--parsable", f"--chdir={tmp_path}",
               f"--output={tmp_path}/slurm-%j.out", *options, str(script))
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def _job(env, job_id: str) -> dict[str, str]:
    out = _run(env, "scontrol", "show", "job", "-o", job_id)
    assert out.returncode == 0, out.stderr
    return dict(item.partition("=")[::2] for item in out.stdout.split() if "=" in item)


def _wait(env, job_id: str, states: set[str], timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        job = _job(env, job_id)
        if job["JobState"] in states:
            return job
        assert time.monotonic() < deadline, f"job {job_id} still {job['JobState']}: {job}"
        time.sleep(0.2)


def _ended(env, job_id: str, timeout: float = 60) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        job = _job(env, job_id)
        if job["JobState"] not in ACTIVE:
            return job
        assert time.monotonic() < deadline, f"job {job_id} still {job['JobState']}"
        time.sleep(0.2)


def _completion(env, job_id: str) -> tuple[str, str]:
    """State and ExitCode from the job-completion log, through `sacct -c`."""
    out = _run(env, "sacct", "-c", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode")
    assert out.returncode == 0, out.stderr
    state, exit_code = out.stdout.strip().splitlines()[0].split("|")
    return state, exit_code


def test_the_cluster_has_two_idle_nodes_and_starting_again_changes_nothing(cluster):
    states = _run(cluster, "sinfo", "-h", "-N", "-o", "%N %P %t").stdout.split("\n")
    assert sorted(filter(None, states)) == ["node1 bench* idle", "node2 bench* idle"]
    state = cluster["BENCH_SLURM_DIR"]
    assert _daemons(state) == [f"munged --seed-file={state}/munge-key/munged.seed",
                               f"slurmctld {cluster['SLURM_CONF']}", "slurmd node1",
                               "slurmd node2"]
    pids = sorted(_marked_pids(state))
    again = _script(cluster, "start")
    assert again.returncode == 0, again.stderr
    assert sorted(_marked_pids(state)) == pids
    status = _script(cluster, "status")
    assert status.returncode == 0 and "node1" in status.stdout and "node2" in status.stdout
    print(f"cluster start took {cluster['BENCH_SLURM_START_S']} s")


def test_srun_on_two_nodes_gives_two_node_ids(cluster, tmp_path):
    out = _run(cluster, "srun", "-N2", "-n2", "bash", "-c",
               "echo $SLURM_NODEID $SLURMD_NODENAME $SLURM_PROCID", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == ["0 node1 0", "1 node2 1"]


def test_a_failing_job_is_failed_with_its_exit_code_after_it_ends(cluster, tmp_path):
    job_id = _sbatch(cluster, tmp_path, "srun hostname\nexit 3\n", "--nodes=2")
    job = _ended(cluster, job_id)
    assert (job["JobState"], job["ExitCode"], job["Reason"]) == \
        ("FAILED", "3:0", "NonZeroExitCode")
    assert job["NodeList"] == "node[1-2]"
    time.sleep(0.5)  # read again later: the controller keeps it (MinJobAge)
    assert _job(cluster, job_id)["JobState"] == "FAILED"
    assert _completion(cluster, job_id) == ("FAILED", "3:0")
    jobcomp = (Path(cluster["BENCH_SLURM_DIR"]) / "log" / "jobcomp.txt").read_text()
    assert any(f"JobId={job_id} " in line and " JobState=FAILED " in line
               and " ExitCode=3:0" in line for line in jobcomp.splitlines())


def test_scancel_ends_a_running_job_cancelled_and_kills_its_tasks(cluster, tmp_path):
    token = f"{os.getpid()}{time.monotonic_ns() % 10**6}"
    job_id = _sbatch(cluster, tmp_path, f"srun sleep 3{token}\n", "--nodes=2")
    _wait(cluster, job_id, {"RUNNING"}, timeout=30)
    time.sleep(1)
    out = _run(cluster, "scancel", job_id)
    assert out.returncode == 0, out.stderr
    job = _ended(cluster, job_id, timeout=30)
    assert job["JobState"] == "CANCELLED"
    assert _completion(cluster, job_id)[0] == "CANCELLED"
    deadline = time.monotonic() + 10
    while any(f"sleep 3{token}" in _cmdline(p) for p in Path("/proc").iterdir()):
        assert time.monotonic() < deadline, "the cancelled job's tasks are still running"
        time.sleep(0.2)


def _cmdline(entry: Path) -> str:
    try:
        return (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.serial   # 50 s for slurmctld's 30 s check: alone (tests/conftest.py, PHASES)
def test_a_job_past_its_time_limit_ends_timeout(cluster, tmp_path):
    """Slurm's limits are whole minutes and slurmctld checks them every 30 s: --time=1 would
    take 60-90 s. Root sets the running job's limit to 0 instead: TIMEOUT within ~30 s."""
    began = time.monotonic()
    job_id = _sbatch(cluster, tmp_path, "sleep 300\n", "--nodes=1", "--time=1")
    _wait(cluster, job_id, {"RUNNING"}, timeout=30)
    out = _run(cluster, "scontrol", "update", f"JobId={job_id}", "TimeLimit=0")
    assert out.returncode == 0, out.stderr
    job = _ended(cluster, job_id, timeout=60)
    assert (job["JobState"], job["Reason"]) == ("TIMEOUT", "TimeLimit")
    assert _completion(cluster, job_id)[0] == "TIMEOUT"
    assert time.monotonic() - began < 50


TCP_TASK = '''
import os, socket, sys, time
rank, me = int(os.environ["SLURM_NODEID"]), os.environ["SLURMD_NODENAME"]
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    with socket.create_server((addr, port)) as server:
        server.settimeout(30)
        conn, _ = server.accept()
        with conn:
            peer = conn.recv(100).decode()
            conn.sendall(me.encode())
    print(f"{me} served {peer} on {addr}:{port}")
else:
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    with conn:
        conn.sendall(me.encode())
        peer = conn.recv(100).decode()
    print(f"{me} reached {peer} on {addr}:{port}")
'''


def test_the_second_nodes_task_reaches_the_first_on_master_addr(cluster, tmp_path):
    """MASTER_ADDR as bench/host/launchers/slurm.py derives it: the NodeAddr of the
    allocation's first node. A torch-free task on each node; node2's connects to node1's."""
    (tmp_path / "tcp.py").write_text(TCP_TASK)
    port = free_port()
    body = f"""\
        set -euo pipefail
        first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
        MASTER_ADDR=$(scontrol show node "$first" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
        MASTER_PORT={port}
        export MASTER_ADDR MASTER_PORT
        echo "first=$first MASTER_ADDR=$MASTER_ADDR"
        srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 \\
          --output={tmp_path}/node%n.log {sys.executable} {tmp_path}/tcp.py
        """
    job_id = _sbatch(cluster, tmp_path, body, "--nodes=2", "--ntasks-per-node=1", "--time=2")
    job = _ended(cluster, job_id, timeout=90)
    logs = {p.name: p.read_text() for p in tmp_path.glob("*.log")}
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED", (job, out, logs)
    assert "first=node1 MASTER_ADDR=127.0.0.1" in out
    assert logs["node0.log"].strip() == f"node1 served node2 on 127.0.0.1:{port}"
    assert logs["node1.log"].strip() == f"node2 reached node1 on 127.0.0.1:{port}"


def test_pinned_nodes_run_on_a_cpu_each(tmp_path):
    """BENCH_SLURM_PIN=1: a cluster of its own whose slurmd each hold to a CPU, which their
    tasks inherit: the two nodes do not share CPU time, as two machines would not."""
    cpus = sorted(os.sched_getaffinity(0))
    _require(len(cpus) >= 2, "two nodes on a CPU each need two CPUs")
    with own_cluster(BENCH_SLURM_PIN="1") as env:
        out = _run(env, "srun", "-N2", "-n2", "bash", "-c", "echo $SLURMD_NODENAME "
                   "$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert sorted(out.stdout.splitlines()) == [f"node1 {cpus[0]}", f"node2 {cpus[1]}"]
        conf = Path(env["SLURM_CONF"]).read_text()
        assert f"(BENCH_SLURM_PIN=1): node1 on CPU {cpus[0]}, node2 on CPU {cpus[1]}." in conf


def test_a_bad_pin_setting_is_refused_before_anything_starts():
    env = {**_new_cluster_env(), "BENCH_SLURM_PIN": "yes"}
    try:
        out = _script(env, "start")
        assert out.returncode == 2, out.stderr      # a user's wrong setting
        assert "BENCH_SLURM_PIN=yes: 0 or 1" in out.stderr
        assert _marked_pids(env["BENCH_SLURM_DIR"]) == []
    finally:
        shutil.rmtree(env["BENCH_SLURM_DIR"], ignore_errors=True)


def test_with_cgroups_a_job_over_its_memory_ends_out_of_memory(tmp_path):
    """BENCH_SLURM_CGROUP=1: a cluster of its own with proctrack/cgroup and task/cgroup
    (cgroup v1); a batch job that outgrows --mem=50 (MiB) ends OUT_OF_MEMORY."""
    _require(os.geteuid() == 0, "the Slurm test cluster needs root")
    _require(Path("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists(),
             "no cgroup v1 memory controller at /sys/fs/cgroup/memory")
    env = {**_new_cluster_env(), "BENCH_SLURM_CGROUP": "1"}
    state = env["BENCH_SLURM_DIR"]
    try:
        started = _script(env, "start")
        assert started.returncode == 0, started.stderr
        env["SLURM_CONF"] = f"{state}/slurm.conf"
        grow = f"{sys.executable} -c 'a = bytearray(300 * 2**20)'"
        job_id = _sbatch(env, tmp_path, grow + "\n", "--nodes=1", "--mem=50")
        job = _ended(env, job_id, timeout=60)
        assert (job["JobState"], job["Reason"]) == ("OUT_OF_MEMORY", "OutOfMemory"), job
        assert _completion(env, job_id)[0] == "OUT_OF_MEMORY"
        # The same allocation on both nodes, under the limit: it completes.
        fits = _sbatch(env, tmp_path, "srun " + grow.replace("300", "20") + "\n",
                       "--nodes=2", "--mem=200")
        assert _ended(env, fits, timeout=60)["JobState"] == "COMPLETED"
    finally:
        _script(env, "stop")
        assert _marked_pids(state) == []
        shutil.rmtree(state, ignore_errors=True)


def test_stop_leaves_nothing_running_and_a_restart_works(tmp_path):
    """A second cluster of its own: start, a job still running at stop, stop (twice)."""
    _require(os.geteuid() == 0, "the Slurm test cluster needs root")
    env = _new_cluster_env()
    state = env["BENCH_SLURM_DIR"]
    try:
        assert _script(env, "start").returncode == 0
        env["SLURM_CONF"] = f"{state}/slurm.conf"
        job_id = _sbatch(env, tmp_path, "srun sleep 300\n", "--nodes=2")
        _wait(env, job_id, {"RUNNING"}, timeout=30)
        time.sleep(0.5)
        assert len(_marked_pids(state)) > 4  # the daemons and the job's step daemons
        stopped = _script(env, "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert _marked_pids(state) == []
        assert _script(env, "stop").returncode == 0
        assert _script(env, "status").returncode != 0
        restarted = _script(env, "start")
        assert restarted.returncode == 0, restarted.stderr
        assert _run(env, "srun", "-N2", "true", cwd=tmp_path).returncode == 0
    finally:
        _script(env, "stop")
        assert _marked_pids(state) == []
        shutil.rmtree(state, ignore_errors=True)
