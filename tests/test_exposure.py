"""What a job exposes and leaves behind: a local job listens on loopback only, records only
known communication settings (never a secret-shaped value), and leaves nothing in the temp
or home directory."""
from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import string
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import record
from bench.host.launchers import native
from bench.host.launchers.base import JobSpec
from bench.provenance import COMM_ENV_PREFIXES, COMM_SETTINGS, REDACTED, comm_env
from bench.topology import Topology
from conftest import REPO, free_port

SECRET = "hunter2-Zq8TokenValue"


# --- the record's communication settings --------------------------------------------------

def test_an_unknown_nccl_variable_never_reaches_the_record():
    recorded = comm_env({"NCCL_FOO_TOKEN": "secret", "NCCL_DEBUG": "INFO",
                         "GLOO_SOCKET_IFNAME": "eth0", "TORCH_NCCL_BLOCKING_WAIT": "1",
                         "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1", "HOME": "/root"})
    assert recorded == {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO",
                        "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1", "TORCH_NCCL_BLOCKING_WAIT": "1"}


def test_a_known_setting_holding_a_token_or_url_credentials_is_redacted():
    recorded = comm_env({"NCCL_NET_PLUGIN": "ghp_abcdEFGH1234ijklMNOP5678qrst",
                         "NCCL_CONF_FILE": "https://user:pass@example.invalid/nccl.conf",
                         "NCCL_TOPO_FILE": "/opt/topologies/dgx-h100-topo.xml"})
    assert recorded == {"NCCL_NET_PLUGIN": REDACTED, "NCCL_CONF_FILE": REDACTED,
                        "NCCL_TOPO_FILE": "/opt/topologies/dgx-h100-topo.xml"}


NAME_TAILS = st.text(string.ascii_uppercase + string.digits + "_", min_size=1, max_size=30)
TOKENS = st.text(string.ascii_letters + string.digits, min_size=24, max_size=80).filter(
    lambda t: any(c.isdigit() for c in t) and any(c.isalpha() for c in t))


@given(st.dictionaries(st.tuples(st.sampled_from(COMM_ENV_PREFIXES), NAME_TAILS).map("".join),
                       st.text(max_size=40), max_size=6),
       st.sampled_from(sorted(COMM_SETTINGS)), st.text(max_size=12), TOKENS,
       st.text(max_size=12))
def test_only_known_names_are_recorded_and_no_token_shaped_value(unknown, known, before,
                                                                   token, after):
    environ = {name: value for name, value in unknown.items() if name not in COMM_SETTINGS}
    environ[known] = before + token + after
    recorded = comm_env(environ)
    assert list(recorded) == [known]
    assert token not in recorded[known]


# --- the rendezvous and gloo listen on loopback; no temp litter ---------------------------

def test_native_nodes_start_through_the_loopback_bound_rendezvous(tmp_path):
    job = JobSpec(job_id="j", module="bench.rank.train", workload_args=("--steps", "1"),
                  topology=Topology(2, 1), master_port=29500, rdzv_timeout=60,
                  results=tmp_path / "r.jsonl", log_dir=tmp_path, deadline_s=60)
    commands = native.NativeLauncher(native.NativeOptions()).commands(job)
    for command in commands:
        argv = command.argv
        assert argv[1:5] == ["-m", "bench.rank.torchrun", "--store-bind", "127.0.0.1"]
        assert argv[argv.index("--master_addr") + 1] == "127.0.0.1"
    assert [c.env["TMPDIR"] for c in native.in_temp_dir(commands, tmp_path)] == [
        str(tmp_path)] * 2


def test_local_jobs_use_loopback_for_gloo_and_nccl(monkeypatch):
    from bench.rank.distributed import keep_local_jobs_on_loopback

    for variable in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "10.1.2.3")
    keep_local_jobs_on_loopback(2)
    assert "GLOO_SOCKET_IFNAME" not in os.environ   # a node elsewhere must reach this one
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth1")
    for master in ("127.0.0.1", "localhost", "::1"):
        monkeypatch.setenv("MASTER_ADDR", master)
        monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
        keep_local_jobs_on_loopback(2)
        assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"
        assert os.environ["NCCL_SOCKET_IFNAME"] == "eth1"   # the user's choice stays


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as /proc/net/tcp{,6} writes it: 32-bit words in host (little-endian)
    order."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(words)


def _listening() -> dict[str, tuple[str, int]]:
    """Socket inode -> (address, port) of every listening TCP socket of this namespace."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":   # TCP_LISTEN
                address, port = fields[1].split(":")
                found[fields[9]] = (str(_address(address)), int(port, 16))
    return found


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo.extend(children.get(pid, []))
    return out


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with_link = os.readlink(fd) if fd.is_symlink() else ""
            if with_link.startswith("socket:["):
                inodes.add(with_link[8:-1])
    except OSError:
        pass
    return inodes


def _watch_listeners(root: int, seen: dict, stop: threading.Event) -> None:
    while not stop.is_set():
        listening = _listening()
        for pid in _descendants(root):
            for inode in _socket_inodes(pid) & listening.keys():
                seen[inode] = listening[inode]
        time.sleep(0.05)


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def _free_port_base() -> int:
    """A port below which 100 more are left: the matrix takes ports above it in turn."""
    while (port := free_port()) > 65535 - 100:
        pass
    return port


def test_a_native_job_listens_on_loopback_only_and_leaves_no_temp_files(tmp_path):
    # A temporary directory of its own: under two workers another test's jobs come and go
    # in the shared one, and only this job's litter is this test's business.
    temp = tmp_path / "tmp"
    temp.mkdir()
    results = tmp_path / "runs.jsonl"
    env = {k: v for k, v in os.environ.items()
           if k not in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")}
    env.update(OMP_NUM_THREADS="1", NCCL_FOO_TOKEN=SECRET, TMPDIR=str(temp))
    matrix = subprocess.Popen(
        [sys.executable, "-m", "bench", "matrix", "--launcher", "native", "--topologies",
         "2x1", "--batch-sizes", "8", "--models", "smallcnn", "--results", str(results),
         "--master-port", str(_free_port_base()), "--", "--steps", "30", "--warmup-steps",
         "1", "--log-every", "0"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[str, tuple[str, int]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_listeners, args=(matrix.pid, seen, stop))
    watcher.start()
    try:
        output, _ = matrix.communicate(timeout=400)
    finally:
        stop.set()
        watcher.join()
        matrix.kill()
    assert matrix.returncode == 0, output[-3000:]
    # The rendezvous store and gloo's pairs were seen listening, each on loopback only.
    assert len(seen) >= 2, seen
    assert [a for a, _ in seen.values() if not _is_loopback(a)] == [], seen
    [rec] = list(record.read(results))
    assert rec["status"] == "ok" and rec["env"]["comm_env"]["GLOO_SOCKET_IFNAME"] == "lo"
    assert "NCCL_FOO_TOKEN" not in rec["env"]["comm_env"]
    logs = [p for p in (results.parent / "logs").rglob("*") if p.is_file()]
    assert logs and not [p for p in [results, *logs] if SECRET in p.read_text()]
    left = sorted(p.name for p in temp.iterdir())
    assert not [name for name in left if name.startswith(("torchelastic_", "bench-job-"))], left


@pytest.mark.parametrize(("program", "code"), [("true", 0), ("false", 1)])
def test_the_agent_leaves_nothing_in_the_temp_dir_however_its_job_ends(tmp_path, program,
                                                                       code):
    # Every launcher's nodes start through bench.rank.torchrun, on hosts that run job after
    # job: torchrun on its own leaves a torchelastic_* directory there on every run.
    temp = tmp_path / "tmp"
    temp.mkdir()
    ended = subprocess.run(
        [sys.executable, "-m", "bench.rank.torchrun", "--store-bind", "127.0.0.1",
         "--nnodes", "1", "--nproc_per_node", "1", "--master_addr", "127.0.0.1",
         "--master_port", str(free_port()), "--no-python", program],
        cwd=REPO, env={**os.environ, "TMPDIR": str(temp)}, capture_output=True, text=True,
        timeout=120)
    assert ended.returncode == code, ended.stderr[-3000:]
    assert sorted(p.name for p in temp.iterdir()) == []


def test_an_agent_stopped_mid_job_leaves_nothing_in_the_temp_dir(tmp_path):
    # How a launcher ends a job past its deadline, or a cell the matrix gives up on: SIGTERM.
    temp = tmp_path / "tmp"
    temp.mkdir()
    agent = subprocess.Popen(
        [sys.executable, "-m", "bench.rank.torchrun", "--nnodes", "1", "--nproc_per_node",
         "1", "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
         "--no-python", "sleep", "120"],
        cwd=REPO, env={**os.environ, "TMPDIR": str(temp)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list(temp.glob("torchelastic_*/*/attempt_0")):   # its worker started
            assert agent.poll() is None and time.monotonic() < deadline, agent.returncode
            time.sleep(0.1)
        agent.send_signal(signal.SIGTERM)
        output, _ = agent.communicate(timeout=60)
    finally:
        agent.kill()
    assert agent.returncode != 0, output[-3000:]
    assert sorted(p.name for p in temp.iterdir()) == [], output[-3000:]


# torchrun's agent stopped while it starts its ranks: torch's start_processes has launched
# the rank (in a session of its own) and the SIGTERM's exception leaves before the agent has
# taken note of it, so the agent's own shutdown does not end it.
_STOPPED_WHILE_STARTING = """
import signal, subprocess, sys
from torch.distributed.elastic.multiprocessing.api import SignalException
import bench.rank.torchrun as wrapper

def stopped_while_starting(argv):
    rank = subprocess.Popen(["sleep", "120"], start_new_session=True)
    print(rank.pid, flush=True)
    raise SignalException("Process got signal: 15", sigval=signal.SIGTERM)

wrapper.torchrun.main = stopped_while_starting
wrapper.main(sys.argv[1:])
"""


def test_an_agent_stopped_while_starting_its_ranks_leaves_none_running(tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    # The left-behind rank inherits the output: were it still running, the pipe would
    # stay open and run() would time out.
    ended = subprocess.run([sys.executable, "-c", _STOPPED_WHILE_STARTING, "--no-python", "x"],
                           cwd=REPO, env={**os.environ, "TMPDIR": str(temp)},
                           capture_output=True, text=True, timeout=60)
    assert ended.returncode != 0 and "SignalException" in ended.stderr, ended.stderr[-3000:]
    rank = int(ended.stdout.split()[0])
    assert not Path(f"/proc/{rank}").exists() or \
        Path(f"/proc/{rank}/stat").read_text().split()[2] == "Z"
    assert sorted(p.name for p in temp.iterdir()) == []


def test_a_log_dir_given_to_the_agent_is_kept(tmp_path):
    temp, kept = tmp_path / "tmp", tmp_path / "kept"
    temp.mkdir()
    ended = subprocess.run(
        [sys.executable, "-m", "bench.rank.torchrun", "--nnodes", "1", "--nproc_per_node",
         "1", "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "--log-dir",
         str(kept), "--no-python", "true"],
        cwd=REPO, env={**os.environ, "TMPDIR": str(temp)}, capture_output=True, text=True,
        timeout=120)
    assert ended.returncode == 0, ended.stderr[-3000:]
    assert sorted(p.name for p in temp.iterdir()) == []
    assert [p.name for p in kept.iterdir()] != []   # torchrun's run directory, the user's


def test_a_plot_writes_nothing_in_the_home_directory(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    results = tmp_path / "runs.jsonl"
    shutil.copy(REPO / "tests" / "fixtures" / "table-fixture.jsonl", results)
    env = {k: v for k, v in os.environ.items()
           if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    proc = subprocess.run([sys.executable, "-m", "bench", "plot", str(results)], cwd=REPO,
                          env={**env, "HOME": str(home)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert list(tmp_path.glob("runs-*.png"))
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == []
