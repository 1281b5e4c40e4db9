"""Shared helpers: launch the real trainer under torchrun and read back its records."""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from bench import record

REPO = Path(__file__).resolve().parent.parent

# Run first in a process that must not load torch (tests/test_architecture.py; every case of
# tests/test_bad_input.py, through its sitecustomize): any `import torch` (or torchvision) then
# raises ImportError, and is remembered, so that one swallowed by `try: ... except
# ImportError` still fails the test (NO_TORCH_END, run last): on the head torch would have
# loaded.
NO_TORCH = """import sys
class _NoTorch:
    tried = []
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'torchvision'):
            self.tried.append(name)
            raise ImportError(f'{name} imported where torch must not be')
sys.meta_path.insert(0, _NoTorch())
"""
NO_TORCH_END = """
assert not _NoTorch.tried, f'tried to import {_NoTorch.tried}'
assert not {'torch', 'torchvision'} & set(sys.modules), 'torch was imported'
"""
EXAMPLE_ENV = REPO / "compose" / ".env.example"
IN_CI = os.environ.get("CI") == "true"
# Property tests (Hypothesis): seeded (derandomize: the same examples on every run, so a
# failure on CI reproduces here), 200 examples each (twice Hypothesis' default; 500 cost
# the suite about 4 of its minutes, most in the tests that start a process or draw a plot
# per example, against a 30-minute CI goal), no per-example deadline (the
# 2-CPU machines are shared with Docker), and no example database written into the tree.
settings.register_profile("bench", max_examples=200, derandomize=True, deadline=None,
                          database=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("bench")
FASHION_MNIST_CANDIDATES = [os.environ.get("BENCH_FASHION_MNIST_DIR", ""),
                            "/usr/share/datasets/fashion-mnist"]

# `make test` runs the suite in two phases (pytest-xdist): `--phase parallel -n 2 --dist
# loadgroup`, every test but the serial ones, on two workers, then `--phase serial`, those
# alone. Each worker is a pytest session of its own (its own session fixtures: sshd, staged
# data, a Slurm cluster). What two tests at once would share is held apart by marks:
# - `serial`: the machine itself. Rates, CPU quotas, emulated links, a deadline with little
#   room (the netlab straggler and quota tests, bench accept's faults, Slurm's time limit).
# - the tests of the bench-* containers (test_stack_e2e whole, and the compose tests of
#   test_ssh_e2e, test_faults_e2e and test_matrix) are `serial`: every one checks
#   `bench_containers() == []`, they share the NFS server's TCP 2049 and what `make
#   bench-cpu` writes in the checkout, and Compose's nodes bind MASTER_PORT 29500 on the
#   host's network, which a CI run under two workers found taken (EADDRINUSE), the failed
#   node's container then failing nine tests after it.
# - the emulated labs' tests (test_netlab_e2e, test_accept_e2e) are `serial` whole:
#   lab_host checks that no lab namespace or cgroup of anyone's is left, and a first CI run
#   under two workers found another test's live two-node lab there.
# - the Slurm clusters' tests (test_slurm_e2e, test_slurm_cluster_e2e) are `serial` whole:
#   test_slurm_e2e's cluster lives in the fixed /var/lib/bench-slurm, and under two workers
#   its controller went unreachable and a two-node job hung to its 600 s limit.
# Ports are not marked: matrices lease theirs (bench.host.ports), everything else takes a
# free one (free_port). A --phase phase selects after -m and -k, so PYTEST_ADDOPTS keeps
# its meaning.
PHASES = ("parallel", "serial")


def pytest_addoption(parser):
    parser.addoption("--phase", choices=PHASES, default=None,
                     help="parallel: every test not marked serial; serial: only those "
                          "(make test runs both; default: every test)")


def pytest_collection_modifyitems(config, items):
    phase = config.getoption("--phase")
    if phase is None:
        return
    selected, deselected = [], []
    for item in items:
        serial = item.get_closest_marker("serial") is not None
        (selected if serial == (phase == "serial") else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def popen_taking_ctrl_c(argv: list[str], **popen) -> subprocess.Popen:
    """``subprocess.Popen`` of a command a test will send SIGINT (Ctrl-C), with SIGINT at
    Python's default there whatever this runner inherited. A runner started in the
    background of a non-interactive shell (``cmd &``, nohup, some CI agents) ignores SIGINT,
    an ignored signal stays ignored across exec, and Python then never makes it a
    KeyboardInterrupt: the child would not see the Ctrl-C at all. A signal with a handler
    here is reset to the default at exec, so the child's Python installs its own. Tests run
    in each worker's main thread, where handlers can be set."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(argv, **popen)
    finally:
        signal.signal(signal.SIGINT, previous)
    ignored = _ignored_signals(proc.pid)
    assert ignored is None or signal.SIGINT not in ignored, \
        f"SIGINT is still ignored in the child (pid {proc.pid}): it cannot be interrupted"
    return proc


def _ignored_signals(pid: int) -> set[int] | None:
    """The signals a process ignores (``SigIgn`` in /proc/PID/status); None if it is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                mask = int(line.split()[1], 16)
                return {bit + 1 for bit in range(64) if mask >> bit & 1}
    return None


def processes_naming(text: str) -> list[int]:
    """The pids of the processes (this one aside) whose command line holds ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


def kill_processes_naming(text: str) -> None:
    """SIGKILL every process whose command line holds ``text`` (a test's tmp_path): what a
    test that timed out left behind in sessions of their own (torchrun, its ranks), so that
    it cannot hold a port or the CPUs for the tests after it."""
    for pid in processes_naming(text):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def fashion_mnist_dir() -> Path:
    for candidate in filter(None, FASHION_MNIST_CANDIDATES):
        if (Path(candidate) / "train-images-idx3-ubyte.gz").exists():
            return Path(candidate)
    message = ("Fashion-MNIST idx files not found: install Debian's dataset-fashion-mnist "
               "(scripts/install-host.sh does) or set BENCH_FASHION_MNIST_DIR")
    if IN_CI:
        pytest.fail(message)
    pytest.skip(reason=message)  # under CI the same check fails instead (IN_CI above)


@dataclass
class Launch:
    returncode: int
    stdout: str
    stderr: str
    records: list[dict]      # records appended to the results file
    printed: list[dict]      # records printed after the marker on stdout


def launch(args: list[str], results: Path, *, nproc: int = 1, timeout: float = 300,
           env: dict | None = None, torchrun: bool = True,
           module: str = "bench.rank.train") -> Launch:
    """Run the trainer (or another ``module``) as a user would: torchrun -m bench.rank.train ..."""
    base = [sys.executable, "-m"]
    if torchrun:
        # --log-dir in the test's directory: torchrun's default, a torchelastic_* directory
        # in /tmp, is never removed.
        base += ["torch.distributed.run", "--nproc_per_node", str(nproc),
                 "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                 "--log-dir", str(results.parent / "torchelastic"), "-m"]
    cmd = base + [module, "--results", str(results), *args]
    # GLOO_SOCKET_IFNAME=lo: test traffic stays on loopback whatever the hostname resolves to.
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
                "GLOO_SOCKET_IFNAME": "lo", **(env or {})}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=full_env)
    records = list(record.read(results)) if results.exists() else []
    return Launch(proc.returncode, proc.stdout, proc.stderr, records,
                  record.parse_stdout(proc.stdout))


def run_matrix(*args: str, timeout: float = 600,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """python -m bench matrix ..., with test traffic on loopback."""
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "bench", "matrix", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def validate(rec: dict) -> None:
    import jsonschema

    jsonschema.validate(rec, record.schema(rec.get("mode", "steps")),
                        format_checker=jsonschema.FormatChecker())


def dump(result: Launch) -> str:
    """Context for a failed assertion."""
    return f"rc={result.returncode}\nstderr tail:\n{result.stderr[-3000:]}\nrecords:\n" + \
        json.dumps(result.records, indent=1)[:3000]


def _require(ok: bool, message: str) -> None:
    """Under CI a missing prerequisite fails the test; elsewhere it skips, saying why."""
    if not ok:
        if IN_CI:
            pytest.fail(message)
        pytest.skip(reason=message)  # outside CI only: under CI it failed above


@pytest.fixture(scope="session")
def docker_engine() -> list[str]:
    """The Compose command, once the Docker daemon is known to answer."""
    ok = subprocess.run(["docker", "info"], capture_output=True).returncode == 0
    _require(ok, "the Docker daemon does not answer: `make docker` starts it")
    _note_containers_left_before()   # where the daemon came up after the session began
    from bench.host.contract import compose_command

    return compose_command()


# Both Compose versions users run: Debian's end-of-life 1.29 and the v2 CLI plugin (make
# docker installs both). The stack's end-to-end tests run under each.
COMPOSE_VARIANTS = {"v1": ["docker-compose"], "v2": ["docker", "compose"]}


@pytest.fixture(params=list(COMPOSE_VARIANTS))
def compose_variant(request, docker_engine) -> dict[str, str]:
    """The environment that makes make, bench and the tests use one Compose version."""
    command = COMPOSE_VARIANTS[request.param]
    ok = subprocess.run([*command, "version"], capture_output=True).returncode == 0
    _require(ok, f"Compose {request.param} ({' '.join(command)}) is missing: `make docker` "
             "installs it")
    return {"COMPOSE": " ".join(command)}


def _local_image(variable: str, default: str, target: str) -> str:
    image = os.environ.get(variable, default)
    ok = subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0
    _require(ok, f"image {image} is missing: `make {target}` builds it (make test does)")
    return image


@pytest.fixture(scope="session")
def cpu_image(docker_engine) -> str:
    return _local_image("CPU_IMAGE", "bench-trainer:cpu", "build-cpu")


@pytest.fixture(scope="session")
def nfs_image(docker_engine) -> str:
    return _local_image("NFS_IMAGE", "bench-nfs:latest", "build-nfs")


def _bench_containers_by_id(timeout: float | None = None) -> dict[str, tuple[str, str]]:
    """{id: (name, state)} of every container (running or not) a bench-* Compose project
    made."""
    out = subprocess.run(["docker", "ps", "-a", "--no-trunc", "--format",
                          "{{.ID}} {{.State}} {{.Names}}"],
                         capture_output=True, text=True, check=True, timeout=timeout).stdout
    rows = (line.split(" ", 2) for line in out.splitlines())
    return {row[0]: (row[2], row[1]) for row in rows
            if len(row) == 3 and row[2].startswith("bench-")}


# Containers that had ended before this session began: a run cut short (a machine stopped
# mid-test, a Ctrl-C during `docker compose up`) leaves its nodes' containers behind, and a
# CI run on a copy of that machine found two and failed 19 tests that had left nothing
# themselves. The checks count what this session made and what still runs (a running one
# holds MASTER_PORT or TCP 2049 and is in the tests' way); the header names both kinds.
_LEFT_BEFORE: dict[str, tuple[str, str]] | None = None


def _note_containers_left_before() -> None:
    """Once per session, where Docker answers; a daemon that does not leaves the checks
    counting everything (and the Docker tests fail on their own fixture)."""
    global _LEFT_BEFORE
    if _LEFT_BEFORE is not None or not shutil.which("docker"):
        return
    try:
        if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0:
            _LEFT_BEFORE = _bench_containers_by_id(timeout=30)
    except (subprocess.SubprocessError, OSError):
        pass


def _ended_before() -> set[str]:
    return {cid for cid, (_, state) in (_LEFT_BEFORE or {}).items() if state != "running"}


def pytest_sessionstart(session):
    _note_containers_left_before()


def pytest_report_header(config):
    lines = []
    for running, what in ((False, "ended before this run, left out of its checks"),
                          (True, "running before this run, in its way and counted")):
        names = sorted(name for name, state in (_LEFT_BEFORE or {}).values()
                       if (state == "running") == running)
        if names:
            lines.append(f"bench-* containers {what} (remove them with docker rm -f): "
                         f"{' '.join(names)}")
    return lines


def bench_containers() -> list[str]:
    """Names of bench-* containers (running or not), those that had ended before this
    session left out: what a test that cleans up must leave none of."""
    ended = _ended_before()
    return [name for cid, (name, _) in _bench_containers_by_id().items() if cid not in ended]


def pytest_sessionfinish(session, exitstatus):
    """A container a test of this session left fails the session, even where no later test
    checks (the parallel phase's, which the serial phase would count as from before it).
    On the controller only: under xdist, a worker's session ends while the other runs."""
    if _LEFT_BEFORE is None or hasattr(session.config, "workerinput"):
        return
    try:
        left = [name for cid, (name, _) in _bench_containers_by_id(timeout=30).items()
                if cid not in _LEFT_BEFORE]
    except (subprocess.SubprocessError, OSError):
        return
    if left:
        print(f"\nthis session left bench-* containers behind: {' '.join(sorted(left))}",
              file=sys.stderr)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def staged_fashion_mnist(tmp_path_factory, fashion_mnist_dir) -> Path:
    """An export directory holding Fashion-MNIST and its manifest, as `make dataset` makes."""
    export = tmp_path_factory.mktemp("export")
    proc = subprocess.run([sys.executable, "-m", "bench", "dataset", "stage", "fashion-mnist",
                           "--src", str(fashion_mnist_dir), "--export", str(export)],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    export.chmod(0o755)
    return export


LOOPBACK_HOSTS = ["127.0.0.2", "127.0.0.3"]


def _start_loopback_sshd(home: Path, pinned: bool) -> list[subprocess.Popen]:
    """A real sshd on 127.0.0.2 and 127.0.0.3 standing for two hosts, with its keys,
    authorized_keys, known_hosts and ssh_config in ``home`` (the user's ~/.ssh is not
    touched); the started servers. The host keys are recorded with ssh-keyscan beforehand:
    the launcher never accepts an unknown key. ``pinned``: one sshd per host, each held to
    its own CPU (taskset), so everything a session on that host starts runs there: hosts
    that do not share their CPUs, as a cluster's nodes do not."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    _require(Path(sshd).exists(), "openssh-server is not installed: `make test` installs it "
             "(make test-deps, i.e. scripts/install-host.sh test)")
    for name in ("host_ed25519", "id_ed25519"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / name)],
                       check=True)
    (home / "authorized_keys").write_text((home / "id_ed25519.pub").read_text())
    port = free_port()
    cpus = sorted(os.sched_getaffinity(0))
    # (the hosts it listens on, the CPU it runs on; None: every CPU)
    servers = [([host], cpus[i % len(cpus)]) for i, host in enumerate(LOOPBACK_HOSTS)] \
        if pinned else [(LOOPBACK_HOSTS, None)]
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation directory
    started = []
    for n, (hosts, cpu) in enumerate(servers):
        listen = "".join(f"ListenAddress {host}:{port}\n" for host in hosts)
        (home / f"sshd_config{n}").write_text(
            f"{listen}HostKey {home}/host_ed25519\nAuthorizedKeysFile {home}/authorized_keys\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            f"PermitRootLogin prohibit-password\nStrictModes no\nPidFile {home}/sshd{n}.pid\n")
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        started.append(subprocess.Popen([*pin, sshd, "-D", "-e", "-f",
                                         str(home / f"sshd_config{n}")],
                                        stderr=open(home / f"sshd{n}.log", "w")))
    deadline = time.monotonic() + 20
    for host in LOOPBACK_HOSTS:
        while True:
            try:
                socket.create_connection((host, port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or any(s.poll() is not None for s in started):
                    for server in started:
                        server.kill()
                    logs = "".join((home / f"sshd{n}.log").read_text()[-1000:]
                                   for n in range(len(servers)))
                    pytest.fail(f"sshd did not start: {logs}")
                time.sleep(0.2)
    scan = subprocess.run(["ssh-keyscan", "-p", str(port), *LOOPBACK_HOSTS],
                          capture_output=True, text=True, timeout=30)
    (home / "known_hosts").write_text(scan.stdout)
    (home / "empty_known_hosts").write_text("")
    common = (f"Host {' '.join(LOOPBACK_HOSTS)}\n  Port {port}\n  User root\n"
              f"  IdentityFile {home}/id_ed25519\n  IdentitiesOnly yes\n")
    for name, known in (("ssh_config", "known_hosts"),
                        ("ssh_config_unknown_keys", "empty_known_hosts")):
        (home / name).write_text(f"{common}  UserKnownHostsFile {home}/{known}\n")
    return started


def _stop(servers: list[subprocess.Popen]) -> None:
    for server in servers:
        server.terminate()
    for server in servers:
        server.wait(timeout=10)


@pytest.fixture(scope="session")
def loopback_sshd(tmp_path_factory):
    """A real sshd on 127.0.0.2 and 127.0.0.3 standing for two hosts that share this
    machine's CPUs; yields the directory of its ssh_config (``_start_loopback_sshd``)."""
    home = tmp_path_factory.mktemp("sshd")
    servers = _start_loopback_sshd(home, pinned=False)
    yield home
    _stop(servers)


@pytest.fixture(scope="session")
def pinned_loopback_sshd(tmp_path_factory):
    """The two loopback hosts, each on its own CPU (where this machine has two): what runs
    on one does not take the other's CPU time, so they compare as two machines would."""
    home = tmp_path_factory.mktemp("sshd-pinned")
    servers = _start_loopback_sshd(home, pinned=True)
    yield home
    _stop(servers)


# --- the real make ----------------------------------------------------------------------------
MAKE_NOISE = ("make: ***", "make[1]: ***", "make[2]: ***")


def run_make(*args: str, cwd: Path = REPO, env: dict | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess:
    """The real ``make -C cwd ARGS...`` (no dry run), stdin closed."""
    return subprocess.run(["make", "--no-print-directory", "-C", str(cwd), *args],
                          cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def error_lines(stderr: str) -> list[str]:
    """stderr without make's own trailer (``make: *** [Makefile:12: doctor] Error 2``)."""
    return [line for line in stderr.splitlines()
            if line.strip() and not line.startswith(MAKE_NOISE)]


class FakeVenv:
    """A VENV whose ``bin/python`` runs nothing: it records its argv (one JSON list per
    call) and exits 0. ``make VENV=<path>`` then shows exactly which arguments each recipe
    passes, as separate argv items, without training anything."""

    def __init__(self, root: Path):
        self.path, self.log = root / "venv", root / "python-calls.jsonl"
        (self.path / "bin").mkdir(parents=True)
        python = self.path / "bin" / "python"
        # Each call's argv, and beside it (.env) the launcher settings it was given.
        record = ("import json, os, sys; "
                  "open(sys.argv[1], 'a').write(json.dumps(sys.argv[2:]) + chr(10)); "
                  "open(sys.argv[1] + '.env', 'a').write(json.dumps({k: v for k, v in "
                  "os.environ.items() if k.startswith('BENCH_LAUNCHER_')}) + chr(10))")
        python.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "
                          f"{shlex.quote(record)} {shlex.quote(str(self.log))} \"$@\"\n")
        python.chmod(0o755)
        (self.path / ".installed").touch()  # newer than the requirements: venv is done

    def exit_with(self, code: int, pattern: str) -> None:
        """From now on a call whose arguments, joined by blanks, match the shell ``case``
        PATTERN is recorded and then exits CODE (as a matrix with a failed cell, 1, or one
        stopped by a signal, 128 + N)."""
        python = self.path / "bin" / "python"
        record, *rest = python.read_text().splitlines()[1:]
        python.write_text("\n".join(["#!/bin/sh", record.replace("exec ", "", 1), *rest,
                                     f'case "$*" in {pattern}) exit {code};; esac', ""]))

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def bench_calls(self, verb: str) -> list[list[str]]:
        """The argv after ``-m bench VERB`` of each such call."""
        return [c[3:] for c in self.calls() if c[:3] == ["-m", "bench", verb]]

    def bench_settings(self, verb: str) -> list[dict[str, str]]:
        """The launcher settings (``BENCH_LAUNCHER_*``) of each ``-m bench VERB`` call."""
        settings = [json.loads(line) for line in
                    Path(f"{self.log}.env").read_text().splitlines()] if self.calls() else []
        return [env for call, env in zip(self.calls(), settings, strict=True)
                if call[:3] == ["-m", "bench", verb]]


@pytest.fixture
def fake_venv(tmp_path) -> FakeVenv:
    return FakeVenv(tmp_path)



def assert_breakdown(rec: dict) -> None:
    """Issue 26: every rank's step breakdown reached the record, whichever launcher ran the
    job: one row per rank on its node, parts that explain the step, a straggler verdict where
    there are several ranks, and every link between nodes timed where there are several."""
    found = rec["step_breakdown"]
    assert [(row["rank"], row["node"]) for row in found["ranks"]] == \
        [(rank["rank"], rank["node_rank"]) for rank in rec["env"]["ranks"]]
    for row in found["ranks"]:
        assert row["steps"] == rec["timed_steps"] and set(row["parts"]) == set(found["parts"])
        assert row["remainder_share"] <= 1e-6, row   # the step ends at its last part's end
    if rec["world_size"] > 1:
        assert rec["straggler_check"]["note"]
    if rec["nnodes"] > 1:
        links = rec["link_probe"]["links"]
        pairs = {(link["from_node"], link["to_node"]) for link in links}
        expected = 2 if rec["nnodes"] == 2 else 2 * rec["nnodes"]
        assert len(pairs) == expected and all(link["s"] > 0 for link in links)
