"""scripts/ensure-docker.sh starts a daemon where none runs, even when a dead daemon's pid
file is left behind (a restarted machine keeps /var/run; dockerd refuses to start while
the number in it names any process, and after a restart another process often has it)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

FAKES = {
    # docker: the daemon answers once the fake dockerd has started.
    "docker": 'if [ "$1" = info ]; then [ -e "$STATE/started" ]; exit; fi\nexit 0\n',
    # dockerd: refuses a pid file that exists, as the real one does, else "starts".
    "dockerd": 'pidfile=""\nwhile [ $# -gt 0 ]; do [ "$1" = --pidfile ] && pidfile=$2; shift; '
               'done\n[ -n "$pidfile" ] || { echo "no --pidfile" >&2; exit 3; }\n'
               'if [ -e "$pidfile" ]; then echo "failed to start daemon: pid file found" >&2; '
               'exit 1; fi\necho $$ > "$pidfile"; touch "$STATE/started"\n',
    "docker-compose": "exit 0\n",
    "pgrep": "exit 1\n",              # no dockerd runs
    "systemctl": "exit 0\n",
    "sudo": 'exec "$@"\n',
}


@pytest.fixture
def fake_host(tmp_path):
    scripts, fake_bin, state = tmp_path / "scripts", tmp_path / "bin", tmp_path / "state"
    for folder in (scripts, fake_bin, state):
        folder.mkdir()
    shutil.copy(REPO / "scripts" / "ensure-docker.sh", scripts)
    for name in ("install-compose-v2.sh", "install-host.sh"):
        (scripts / name).write_text("#!/bin/sh\nexit 0\n")
    for name, body in FAKES.items():
        (fake_bin / name).write_text("#!/bin/sh\n" + body)
    for path in [*scripts.iterdir(), *fake_bin.iterdir()]:
        path.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}", "STATE": str(state),
           "DOCKER_PIDFILE": str(state / "docker.pid"), "DOCKERD_LOG": str(state / "log")}
    return scripts / "ensure-docker.sh", env, state


def _run(script: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)


def test_a_dead_daemons_pid_file_is_removed_and_the_daemon_starts(fake_host):
    script, env, state = fake_host
    (state / "docker.pid").write_text("1\n")   # pid 1 is alive, and is no dockerd
    proc = _run(script, env)
    assert proc.returncode == 0, proc.stderr
    assert "left by a Docker daemon that is no longer running (pid 1)" in proc.stderr
    assert "the Docker daemon answers" in proc.stderr
    assert (state / "started").exists()


def test_without_a_pid_file_it_starts_and_says_nothing_of_one(fake_host):
    script, env, state = fake_host
    proc = _run(script, env)
    assert proc.returncode == 0, proc.stderr
    assert "removing" not in proc.stderr and (state / "started").exists()


def test_a_daemon_that_never_answers_is_one_error_naming_its_log(fake_host):
    script, env, state = fake_host
    fake_dockerd = Path(env["PATH"].split(":")[0]) / "dockerd"
    fake_dockerd.write_text("#!/bin/sh\necho 'failed to start daemon: broken' >&2\nexit 1\n")
    proc = subprocess.run(["bash", "-c", 'seq() { echo 1; }; export -f seq; bash "$0"',
                           str(script)], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 1
    assert f"did not answer within 60 s; see {state / 'log'}" in proc.stderr
    assert "failed to start daemon: broken" in proc.stderr   # the log's tail, shown
