"""The containerised stack with the real Docker engine, Compose and NFS server."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from bench import manifest, record
from conftest import EXAMPLE_ENV, REPO, assert_breakdown, bench_containers, validate

# Docker: every test here makes bench-* containers, serves NFS on the host's TCP 2049, or
# runs beside those that do (tests/conftest.py, PHASES).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]
COMPOSE_FILE = REPO / "compose" / "docker-compose.yml"


def compose(cmd: list[str], args: list[str], env: dict | None = None, **kwargs):
    return subprocess.run(cmd + ["-f", str(COMPOSE_FILE), "--env-file", str(EXAMPLE_ENV), *args],
                          cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, **kwargs)


@pytest.mark.parametrize("profile", ["nfs", "gpu", "gpu-ib", "cpu"])
def test_compose_config_is_valid_for_every_profile(compose_variant, profile):
    result = compose(compose_variant["COMPOSE"].split(), ["--profile", profile, "config", "-q"],
                     env={"BENCH_ENV_FILE": str(EXAMPLE_ENV)})
    assert result.returncode == 0, result.stderr


TRAINERS = {"trainer": ["DAC_OVERRIDE"], "trainer-ib": ["DAC_OVERRIDE", "IPC_LOCK"],
            "trainer-cpu": ["DAC_OVERRIDE"]}


@pytest.mark.parametrize("profile", ["gpu", "gpu-ib", "cpu"])
def test_every_trainer_drops_all_capabilities_and_gains_no_privilege(compose_variant, profile):
    result = compose(compose_variant["COMPOSE"].split(), ["--profile", profile, "config"],
                     env={"BENCH_ENV_FILE": str(EXAMPLE_ENV)})
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    trainers = {name: service for name, service in services.items()
                if name.startswith("trainer")}
    assert trainers and set(trainers) <= set(TRAINERS), trainers.keys()
    for name, service in trainers.items():
        caps = [[cap.removeprefix("CAP_") for cap in service.get(key, [])]
                for key in ("cap_drop", "cap_add")]
        assert caps == [["ALL"], TRAINERS[name]], (name, caps)
        assert "no-new-privileges:true" in service["security_opt"], name


def _capabilities_of_containers_on(mount: Path, seen: dict, stop: threading.Event) -> None:
    """CapEff and NoNewPrivs of the process each container mounting ``mount`` runs."""
    while not stop.is_set():
        for name in bench_containers():
            inspect = subprocess.run(["docker", "inspect", name], capture_output=True,
                                     text=True)
            if inspect.returncode != 0:
                continue
            (info,) = json.loads(inspect.stdout)
            pid = info["State"]["Pid"]
            if pid and any(m["Source"] == str(mount) for m in info["Mounts"]):
                with contextlib.suppress(OSError):
                    status = Path(f"/proc/{pid}/status").read_text()
                    seen[name] = tuple(re.search(rf"^{key}:\s+(\S+)$", status, re.M)[1]
                                       for key in ("CapEff", "NoNewPrivs"))
        time.sleep(0.2)


def test_a_cpu_trainer_trains_with_one_capability_and_no_new_privileges(
        cpu_image, compose_variant, tmp_path):
    # The results directory belongs to another user, as a user's own does to root in the
    # container: the record reaches it through DAC_OVERRIDE, the one capability kept.
    results_dir = tmp_path / "results"
    results_dir.mkdir(mode=0o755)
    if os.geteuid() == 0:
        os.chown(results_dir, 1000, 1000)
    data = tmp_path / "data"
    data.mkdir()
    env_file = tmp_path / "node.env"
    env_file.write_text(EXAMPLE_ENV.read_text() + "\nDATA_MOUNT_TYPE=none\nDATA_MOUNT_OPTIONS="
                        f"bind\nDATA_DEVICE={data}\nOMP_NUM_THREADS=1\n")
    seen: dict[str, tuple[str, str]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_capabilities_of_containers_on,
                               args=(results_dir, seen, stop))
    watcher.start()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bench", "compose", "--profile", "cpu", "--env-file",
             str(env_file), "--nnodes", "1", "--image", cpu_image, "--results",
             str(results_dir / "runs.jsonl"), "--", "--steps", "3", "--warmup-steps", "1",
             "--model", "smallcnn", "--comm-probe-steps", "0"],
            cwd=REPO, capture_output=True, text=True, timeout=300,
            env={**os.environ, **compose_variant})
    finally:
        stop.set()
        watcher.join()
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = list(record.read(results_dir / "runs.jsonl"))
    assert rec["status"] == "ok"
    # CAP_DAC_OVERRIDE is bit 1: 0x2 and nothing else.
    assert seen and set(seen.values()) == {("0000000000000002", "1")}, seen
    assert bench_containers() == []


def test_a_container_left_from_before_the_session_is_named_and_not_counted(cpu_image):
    """The leftover-container check counts what a session made: one made now is counted. A
    session that begins after it names it in pytest's header, and leaves it out of the
    count once it has ended; one still running (holding a port the tests need) stays
    counted. So a run cut short earlier does not fail every later test's check."""
    tag = uuid.uuid4().hex[:12]
    ended, running = f"bench-leftover-{tag}", f"bench-leftover-running-{tag}"
    try:
        made = subprocess.run(["docker", "create", "--name", ended, cpu_image],
                              capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
        made = subprocess.run(["docker", "run", "-d", "--name", running, "--network", "none",
                               "--entrypoint", "sleep", cpu_image, "300"],
                              capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
        assert {ended, running} <= set(bench_containers()), "made in this session: counted"
        # A real pytest session: its conftest hooks, as pytest registers them.
        header = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider",
             "tests/test_envelope.py", "-k", "test_the_reference_runs_are_inside"],
            cwd=REPO, capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTEST_ADDOPTS": ""})
        assert header.returncode == 0, header.stdout[-2000:] + header.stderr[-2000:]
        named = [li for li in header.stdout.splitlines() if li.startswith("bench-* containers")]
        assert any("ended before" in li and ended in li for li in named), header.stdout[:2000]
        assert any("running before" in li and running in li for li in named)
        # What that later session's checks count (conftest's own functions, as it runs them).
        later = subprocess.run(
            [sys.executable, "-c", "import conftest; conftest.pytest_sessionstart(None); "
             "print(conftest.bench_containers())"],
            cwd=REPO / "tests", capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        assert later.returncode == 0, later.stderr
        counted = later.stdout.splitlines()[-1]
        assert ended not in counted and running in counted
    finally:
        subprocess.run(["docker", "rm", "-f", ended, running], capture_output=True)
    assert not {ended, running} & set(bench_containers())


def test_compose_names_a_missing_setting(docker_engine, tmp_path):
    empty = tmp_path / "empty.env"
    empty.write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("NNODES", "CPU_IMAGE")}
    result = subprocess.run(docker_engine + ["-f", str(COMPOSE_FILE), "--env-file", str(empty),
                                             "--profile", "cpu", "config", "-q"],
                            capture_output=True, text=True, env=env)
    assert result.returncode != 0
    # Compose names one missing setting, and which one it reports first is not fixed (v2
    # has named NFS_CLIENTS before NNODES): any of them, each message pointing at the example.
    named = re.search(r"(\w+) is not set, see compose/\.env\.example", result.stderr)
    assert named, result.stderr
    assert f"${{{named.group(1)}:?" in COMPOSE_FILE.read_text(), named.group(1)


def test_every_required_compose_setting_points_at_the_example():
    """Whichever missing setting Compose reports first, its message names the fix."""
    text = COMPOSE_FILE.read_text()
    messages = re.findall(r"\$\{(\w+):\?([^}]*)\}", text)
    assert len(messages) > 10
    for name, message in messages:
        assert message.startswith(f"{name} is not set, see compose/.env.example"), message


def make(*args: str, timeout: float = 1200, env: dict | None = None):
    return subprocess.run(["make", "--no-print-directory", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def test_make_bench_cpu_runs_two_nodes_in_containers(cpu_image, compose_variant, tmp_path):
    results = tmp_path / "cpu.jsonl"
    result = make("bench-cpu", f"RESULTS={results}", "BATCH_SIZES=32", "STEPS=3",
                  "CPU_TRAIN_SAMPLES=1024", "CPU_EVAL_SAMPLES=512", env=compose_variant)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = list(record.read(results))
    # Synthetic, then Fashion-MNIST; each on one node, then on two: the matrix's jobs.
    assert [(r["mode"], r["nnodes"]) for r in records] == [
        ("steps", 1), ("steps", 2), ("epochs", 1), ("epochs", 2)]
    image_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", cpu_image],
                              capture_output=True, text=True).stdout.strip()
    for rec in records:
        validate(rec)
        assert rec["status"] == "ok" and rec["matrix"]["launcher"] == "compose"
        assert_breakdown(rec)
        assert rec["env"]["image_id"] == image_id and rec["env"]["image_digest"]
        assert rec["world_size"] == rec["nnodes"]
        assert sorted((r["node_rank"], r["rank"]) for r in rec["env"]["ranks"]) == \
            [(n, n) for n in range(rec["nnodes"])]
        assert all(r["hostname"] for r in rec["env"]["ranks"])
        assert rec["env"]["git_commit"], "the image carries its commit"
    fmnist = records[3]
    assert fmnist["dataset_manifest_sha256"] == manifest.sha256_file(
        REPO / "nfs" / "export" / "fashion-mnist" / manifest.MANIFEST_NAME)
    assert fmnist["eval_accuracy"] > 0.1
    # The lab's table: one process, then two nodes with speedup and efficiency, and one
    # console line per job, no record JSON.
    assert "| single process" in result.stdout and "| multi-node" in result.stdout
    assert "1.00x" in result.stdout and f"results: {results}" in result.stdout
    assert result.stderr.count("[matrix] job ") == 4 and record.MARKER not in result.stderr
    assert bench_containers() == [], "no container is left behind"


def _wait_healthy(cmd, project, env, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ps = compose(cmd, ["-p", project, "--profile", "nfs", "ps", "-q", "nfs"], env)
        cid = ps.stdout.strip()
        status = subprocess.run(["docker", "inspect", "-f", "{{.State.Health.Status}}", cid],
                                capture_output=True, text=True).stdout.strip() if cid else ""
        if status == "healthy":
            return
        time.sleep(1)
    logs = compose(cmd, ["-p", project, "--profile", "nfs", "logs", "nfs"], env)
    raise AssertionError(f"NFS server not healthy in {timeout}s:\n{logs.stdout[-2000:]}")


def _nfs_url(path: str) -> str:
    return f"nfs://127.0.0.1/datasets/fashion-mnist/{path}?version=4"


# Absolute: docker-compose 1.29 reads a relative seccomp path from the current directory,
# Compose v2 from the compose file's (nfs/README.md); `make` passes it the same way.
SECCOMP_PROFILE = str(REPO / "nfs" / "seccomp.json")


def _serve(docker_engine, export, clients, env: dict | None = None):
    project = f"bench-nfstest-{uuid.uuid4().hex[:12]}"
    env = {"NFS_EXPORT_DIR": str(export), "NFS_CLIENTS": clients,
           "BENCH_ENV_FILE": str(EXAMPLE_ENV), "NFS_SECCOMP_PROFILE": SECCOMP_PROFILE,
           **(env or {})}
    up = compose(docker_engine, ["-p", project, "--profile", "nfs", "up", "-d", "nfs"], env)
    assert up.returncode == 0, up.stderr
    return project, env


def _container_pids(cid: str) -> set[int]:
    top = subprocess.run(["docker", "top", cid, "-o", "pid"], capture_output=True, text=True,
                         check=True).stdout.split()[1:]
    return {int(pid) for pid in top}


def _listeners(pids: set[int]) -> list[str]:
    """`ss` lines of the TCP and UDP sockets these processes listen on (host networking: the
    host's own network namespace)."""
    ss = subprocess.run(["ss", "-Hltunp"], capture_output=True, text=True, check=True).stdout
    return [line for line in ss.splitlines()
            if any(f"pid={pid}," in line for pid in pids)]


def test_nfs_server_serves_the_staged_dataset(docker_engine, nfs_image, staged_fashion_mnist):
    assert shutil.which("nfs-ls") and shutil.which("nfs-cat"), "libnfs-utils is installed by CI"
    project, env = _serve(docker_engine, staged_fashion_mnist, "127.0.0.1/32")
    try:
        _wait_healthy(docker_engine, project, env)
        listing = subprocess.run(["nfs-ls", _nfs_url("")], capture_output=True, text=True,
                                 timeout=60)
        assert listing.returncode == 0, listing.stderr
        entries = manifest.parse(staged_fashion_mnist / "fashion-mnist" / manifest.MANIFEST_NAME)
        for name, expected in entries.items():
            assert name in listing.stdout
            data = subprocess.run(["nfs-cat", _nfs_url(name)], capture_output=True, timeout=120)
            assert data.returncode == 0, data.stderr
            assert hashlib.sha256(data.stdout).hexdigest() == expected, name
        # Read-only export: a write through the protocol is refused.
        upload = subprocess.run(["nfs-cp", str(REPO / "README.md"), _nfs_url("intruder.md")],
                                capture_output=True, text=True, timeout=60)
        assert upload.returncode != 0
        assert not (staged_fashion_mnist / "fashion-mnist" / "intruder.md").exists()
    finally:
        compose(docker_engine, ["-p", project, "--profile", "nfs", "down", "-t", "2"], env)
    assert bench_containers() == []


def test_nfs_server_listens_on_tcp_2049_only_with_one_capability(nfs_image,
                                                                 staged_fashion_mnist):
    """No rpcbind (111), no UDP: while the server is healthy and serving, its only listening
    socket is TCP 2049; it runs with DAC_READ_SEARCH alone, under a seccomp filter. With
    every Compose here: docker-compose 1.29 with the default profile path (from the
    repository root), Compose v2 with the absolute one it needs."""
    commands = _compose_commands()
    assert commands
    for command in commands:
        v1 = command == ["docker-compose"]
        project, env = _serve(command, staged_fashion_mnist, "127.0.0.1/32",
                              {"NFS_SECCOMP_PROFILE": ""} if v1 else None)
        try:
            _check_hardened_server(command, project, env)
        finally:
            compose(command, ["-p", project, "--profile", "nfs", "down", "-t", "2"], env)
        assert bench_containers() == []


def _check_hardened_server(command, project, env):
    _wait_healthy(command, project, env)
    listing = subprocess.run(["nfs-ls", _nfs_url("")], capture_output=True, text=True,
                             timeout=60)
    assert listing.returncode == 0, listing.stderr
    cid = compose(command, ["-p", project, "--profile", "nfs", "ps", "-q", "nfs"],
                  env).stdout.strip()
    pids = _container_pids(cid)
    names = {Path(f"/proc/{pid}/comm").read_text().strip() for pid in pids}
    assert names == {"ganesha.nfsd"}, names  # no rpcbind, no dbus-daemon
    listeners = _listeners(pids)
    assert len(listeners) == 1, listeners
    proto, state, _, _, local = listeners[0].split()[:5]
    assert (proto, state, local.rsplit(":", 1)[1]) == ("tcp", "LISTEN", "2049"), listeners
    ss = subprocess.run(["ss", "-Hltunp", "sport", "=", ":111"], capture_output=True,
                        text=True, check=True).stdout
    assert not any(f"pid={pid}," in ss for pid in pids), ss
    # The grants, as the kernel sees them: CAP_DAC_READ_SEARCH (bit 2) and a filter.
    (pid,) = pids
    status = Path(f"/proc/{pid}/status").read_text()
    assert re.search(r"^CapEff:\s+0*4$", status, re.M), status
    assert re.search(r"^Seccomp:\s+2$", status, re.M), "seccomp filter mode"
    assert re.search(r"^NoNewPrivs:\s+1$", status, re.M)
    host = json.loads(subprocess.run(["docker", "inspect", cid], capture_output=True,
                                     text=True, check=True).stdout)[0]["HostConfig"]
    caps = [[cap.removeprefix("CAP_") for cap in host[key]] for key in ("CapDrop", "CapAdd")]
    assert caps == [["ALL"], ["DAC_READ_SEARCH"]], caps  # Compose v2 writes CAP_...
    assert not any("unconfined" in opt for opt in host["SecurityOpt"])
    assert any('"name_to_handle_at"' in opt for opt in host["SecurityOpt"]), "our profile"


@pytest.mark.parametrize("setting,value", [
    ("NFS_CLIENTS", '127.0.0.1; } EXPORT { Export_Id = 2; Path = "/"; Pseudo = "/all"; '
                    "Access_Type = RW; Squash = no_root_squash; FSAL { Name = VFS; } "
                    "CLIENT { Clients = *"),
    ("NFS_CLIENTS", "127.0.0.1\n} EXPORT {"),
    ("NFS_CLIENTS", "0.0.0.0/0"),
    ("NFS_PSEUDO_PATH", '/datasets"; Path = "/'),
    ("NFS_SQUASH", "no_root_squash; Access_Type = RW"),
], ids=["injection", "newline", "anyone", "pseudo-quote", "squash"])
def test_nfs_server_entrypoint_refuses_a_hostile_value(nfs_image, setting, value):
    """The container checks its settings itself: plain `docker run`, no `bench settings`."""
    env = {"NFS_CLIENTS": "127.0.0.1/32", setting: value}
    run = subprocess.run(["docker", "run", "--rm", "--network", "none",
                          *[arg for k, v in env.items() for arg in ("-e", f"{k}={v}")],
                          nfs_image], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nfs: error: {setting}="), run.stderr


def _compose_commands() -> list[list[str]]:
    """Every Compose on this machine: docker-compose 1.29 and Compose v2 read env files with
    different parsers, and a node may run either."""
    found = [["docker-compose"]] if shutil.which("docker-compose") else []
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        found.append(["docker", "compose"])
    return found


def test_nfs_settings_are_the_values_compose_uses(docker_engine, tmp_path):
    """`bench settings` reads the env file as Compose does: export lines, quotes, inline
    comments, ${VAR:-default}, quoted values spanning lines (tests/test_settings.py)."""
    from test_settings import TRICKY_ENV, TRICKY_EXPECTED

    from bench.host.settings import INTERPOLATED, load

    env_file = tmp_path / "node.env"
    env_file.write_text(EXAMPLE_ENV.read_text() + TRICKY_ENV)
    shell = {k: v for k, v in os.environ.items() if k not in INTERPOLATED}
    shell.update(FROM_SHELL=str(tmp_path), BENCH_ENV_FILE=str(env_file))
    ours = load(env_file, environ=shell)
    assert ours["NFS_CLIENTS"] == TRICKY_EXPECTED["NFS_CLIENTS"]
    commands = _compose_commands()
    assert commands
    for command in commands:
        config = subprocess.run(command + ["-f", str(COMPOSE_FILE), "--env-file", str(env_file),
                                           "--profile", "nfs", "config"],
                                cwd=REPO, capture_output=True, text=True, env=shell)
        assert config.returncode == 0, (command, config.stderr)
        nfs = config.stdout[config.stdout.index("\n  nfs:\n") + 1:]
        nfs = nfs[:re.search(r"\n {0,2}[A-Za-z]", nfs).start()]
        used = dict(re.findall(r"^ {6}(NFS_[A-Z_]+): ['\"]?([^'\"\n]*)['\"]?$", nfs, re.M))
        assert set(used) == {"NFS_CLIENTS", "NFS_ALLOW_ANY_CLIENT", "NFS_ACCESS",
                             "NFS_SQUASH", "NFS_PSEUDO_PATH"}, (command, nfs)
        assert used == {k: ours.get(k, "no") for k in used}, (command, used, nfs)
        assert str(tmp_path) in nfs, (command, nfs)  # NFS_EXPORT_DIR=${FROM_SHELL}


def test_tampered_dataset_stops_the_run_naming_the_file(cpu_image, staged_fashion_mnist,
                                                        tmp_path):
    export = tmp_path / "export"
    shutil.copytree(staged_fashion_mnist, export)
    target = export / "fashion-mnist" / "train-labels-idx1-ubyte.gz"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    env_file = tmp_path / "node.env"
    env_file.write_text(EXAMPLE_ENV.read_text() + "\nDATA_MOUNT_TYPE=none\nDATA_MOUNT_OPTIONS=bind"
                        f"\nDATA_DEVICE={export}\n")
    results = tmp_path / "runs.jsonl"
    proc = subprocess.run([sys.executable, "-m", "bench", "compose", "--profile", "cpu",
                           "--env-file", str(env_file), "--nnodes", "1", "--image", cpu_image,
                           "--results", str(results), "--", "--epochs", "1", "--data",
                           "fashion-mnist", "--data-dir", "/data/fashion-mnist",
                           "--model", "smallcnn"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    (rec,) = list(record.read(results))
    assert rec["status"] == "error"
    assert "train-labels-idx1-ubyte.gz does not match" in rec["error"]
    assert "samples_per_s" not in rec, "it stopped before training"
    assert bench_containers() == []


@pytest.mark.parametrize("overrides,message", [
    ({"NNODES": "2", "NODE_RANK": "2"}, "NODE_RANK=2: must be below NNODES=2"),
    ({"NNODES": "2", "MASTER_ADDR": ""}, "MASTER_ADDR=''"),
    ({"DATA_MOUNT_OPTIONS": "addr=127.0.0.9,port=9,nfsvers=4.1,ro"}, "NFS server 127.0.0.9:9"),
    ({"PROFILE": "tpu"}, "invalid choice: 'tpu'"),
], ids=["rank-too-high", "no-master", "nfs-unreachable", "unknown-profile"])
def test_bad_node_settings_fail_fast_through_make(docker_engine, overrides, message):
    env = {"PROFILE": "cpu", **overrides}
    started = time.monotonic()
    result = make("node-up", env=env, timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert message in result.stderr, dump_make(result)
    assert elapsed < 60
    assert bench_containers() == []


def dump_make(result) -> str:
    return (f"rc={result.returncode}\nstdout:\n{result.stdout[-2000:]}\n"
            f"stderr:\n{result.stderr[-2000:]}")


def test_bench_single_without_gpu_fails_fast_naming_the_fix(docker_engine):
    if shutil.which("nvidia-smi"):
        pytest.skip(reason="this machine has an NVIDIA driver: the no-GPU path cannot be "
                    "shown here (CI machines have none, so CI runs it)")
    started = time.monotonic()
    result = make("bench-single", timeout=120)
    assert result.returncode != 0
    assert time.monotonic() - started < 30
    assert "nvidia" in result.stderr.lower() and "make bench-cpu" in result.stderr
    assert "docker build" not in result.stdout, "it fails before building anything"


def test_make_nfs_up_serves_until_make_nfs_down(nfs_image, compose_variant,
                                                staged_fashion_mnist):
    # The shell wins over the env file.
    env = {"NFS_EXPORT_DIR": str(staged_fashion_mnist), **compose_variant}
    try:
        up = make("nfs-up", env=env, timeout=180)
        assert up.returncode == 0, dump_make(up)
        assert "serving" in up.stdout
        listing = subprocess.run(["nfs-ls", _nfs_url("")], capture_output=True, text=True,
                                 timeout=60)
        assert listing.returncode == 0 and manifest.MANIFEST_NAME in listing.stdout
    finally:
        down = make("nfs-down", env=env, timeout=180)
    assert down.returncode == 0, dump_make(down)
    assert bench_containers() == []  # bench-nfs_* included
