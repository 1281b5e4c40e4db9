"""The Makefile and README promise the same front door."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.config import TrainConfig
from bench.options import on_head
from conftest import EXAMPLE_ENV, REPO, run_make

PROMISED = ["build", "wheels", "bench-single", "bench-multigpu", "bench-cpu", "nfs-up",
            "nfs-down", "dataset", "test", "lint", "clean", "help"]


def test_make_help_lists_every_promised_target():
    out = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    listed = {line.split()[0] for line in out.stdout.splitlines() if line.strip()}
    assert set(PROMISED) <= listed, set(PROMISED) - listed


def test_readme_first_screen_gives_the_two_commands():
    first_screen = "\n".join((REPO / "README.md").read_text().splitlines()[:15])
    assert "make bench-cpu" in first_screen and "make test" in first_screen


def test_bench_predict_passes_every_node_count_and_the_measured_link(fake_venv):
    def predict_argv(*overrides: str) -> list[str]:
        proc = run_make("bench-predict", "RESULTS=runs.jsonl", f"VENV={fake_venv.path}",
                        *overrides)
        assert proc.returncode == 0, proc.stderr
        return fake_venv.bench_calls("predict")[-1]

    assert predict_argv() == ["runs.jsonl", "--link", "5gbit", "--nodes", "2,4"]
    assert predict_argv("LINK_FROM=comm.jsonl", "NODES=2,8") == [
        "runs.jsonl", "--link", "5gbit", "--link-from", "comm.jsonl", "--nodes", "2,8"]


def test_make_test_installs_its_own_prerequisites_first():
    """`make test` from the README works on a fresh Debian machine: its first prerequisite
    installs what the tests need (where missing); CI does nothing but call it."""
    makefile = (REPO / "Makefile").read_text()
    test_rule = re.search(r"^test: (.*?)##", makefile, re.MULTILINE)
    assert test_rule and test_rule.group(1).split()[0] == "test-deps", test_rule
    recipe = makefile.split("\ntest-deps:", 1)[1].split("\n\n", 1)[0]
    assert "scripts/install-host.sh" in recipe and "parts=(test docker)" in recipe
    ci = (REPO / ".ci" / "run").read_text()
    assert "apt-get install" not in ci and "pip install" not in ci
    commands = [line for line in ci.splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert "make test" in commands
    assert not any(re.search(r"\b(apt|apt-get|pip|pip3|dpkg)\b", c) for c in commands), commands


def test_install_host_knows_the_test_packages():
    script = (REPO / "scripts" / "install-host.sh").read_text()
    for package in ("libnfs-utils", "openssh-server", "iproute2"):
        assert package in script
    proc = subprocess.run(["scripts/install-host.sh", "no-such-part"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "test" in proc.stderr.splitlines()[-1], proc.stderr



# --- the GPU targets' defaults (issue 28) --------------------------------------------------------
# Run through the real make with a recording venv: `-o gpu-ready` leaves out the GPU check
# and the image build that bench-single and bench-multigpu need first (no GPU or Docker
# here); bench-multigpu's own GPU count still comes from scripts/check-gpu.sh, which
# reads a fake nvidia-smi and docker.
def gpu_host(tmp_path: Path, gpus: int) -> dict[str, str]:
    """The environment of a host whose nvidia-smi lists ``gpus`` GPUs (driver 580) and
    whose Docker has the NVIDIA runtime."""
    tools = tmp_path / "gpu-host"
    tools.mkdir()
    listing = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})\\n" for i in range(gpus))
    scripts = {"nvidia-smi": f"case \"$*\" in *driver_version*) echo 580.95.05;; "
                             f"*) printf '{listing}';; esac",
               "docker": "echo '{\"nvidia\":{\"path\":\"nvidia-container-runtime\"}}'"}
    for name, body in scripts.items():
        (tools / name).write_text(f"#!/bin/sh\n{body}\n")
        (tools / name).chmod(0o755)
    return {"PATH": f"{tools}:{os.environ['PATH']}"}


def matrix_call(fake_venv, target: str, *args: str, env: dict | None = None):
    """The one bench matrix call of ``target``: its own flags, the trainer flags after
    --, and its launcher settings."""
    skip_gpu_checks = ["-o", "gpu-ready"] if target in ("bench-single", "bench-multigpu") else []
    before = len(fake_venv.bench_calls("matrix"))
    proc = run_make(target, *skip_gpu_checks, f"VENV={fake_venv.path}", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    (argv,) = fake_venv.bench_calls("matrix")[before:]
    settings = fake_venv.bench_settings("matrix")[-1]
    split = argv.index("--")
    return argv[:split], argv[split + 1:], settings


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("target,args", [("bench-single", []), ("bench-multigpu", []),
                                         ("bench-multinode", ["HOSTS=h1,h2"])])
def test_gpu_targets_train_autocast_channels_last_on_cuda(target, args, fake_venv, tmp_path):
    own, trainer, settings = matrix_call(fake_venv, target, *args, env=gpu_host(tmp_path, 1))
    assert flag(own, "--precisions") == "auto"
    assert trainer == ["--steps", "50", "--device", "cuda", "--channels-last"]
    assert settings["BENCH_LAUNCHER_PROFILE"] == "gpu"


def test_strict_fp32_is_a_setting_away_and_cpu_targets_keep_it(fake_venv, tmp_path):
    own, trainer, _ = matrix_call(fake_venv, "bench-single", "PRECISION=fp32",
                                  "MATRIX_ARGS=--no-channels-last")
    assert flag(own, "--precisions") == "fp32"
    # The trainer takes a flag's last value: MATRIX_ARGS comes after the target's defaults.
    with on_head():
        cfg = TrainConfig.from_args([*trainer, "--precision", "fp32"])
    assert cfg.precision.channels_last is False and cfg.distributed.device == "cuda"
    own, trainer, _ = matrix_call(fake_venv, "bench-matrix")
    assert flag(own, "--precisions") == "fp32" and trainer == ["--steps", "10"]


@pytest.mark.parametrize("gpus,topologies", [
    (1, "1x1"), (2, "1x1,1x2"), (3, "1x1,1x2,1x3"), (4, "1x1,1x2,1x4"),
    (6, "1x1,1x2,1x4,1x6"), (8, "1x1,1x2,1x4,1x8"), (16, "1x1,1x2,1x4,1x8,1x16")])
def test_bench_multigpu_runs_the_powers_of_two_up_to_every_gpu(gpus, topologies, fake_venv,
                                                               tmp_path):
    own, _, _ = matrix_call(fake_venv, "bench-multigpu", env=gpu_host(tmp_path, gpus))
    assert flag(own, "--topologies") == topologies


@pytest.fixture
def node_env(tmp_path) -> Path:
    """A node settings file whose BENCH_ARGS turn channels-last off."""
    path = tmp_path / "node.env"
    path.write_text(EXAMPLE_ENV.read_text().replace(
        "BENCH_ARGS=--steps 20 --model resnet18", "BENCH_ARGS=--steps 20 --no-channels-last"))
    return path


@pytest.mark.parametrize("profile,precision,expected", [
    ("gpu", None, ["--precision", "auto", "--device", "cuda", "--channels-last"]),
    ("gpu-ib", None, ["--precision", "auto", "--device", "cuda", "--channels-last"]),
    ("gpu", "fp32", ["--precision", "fp32", "--device", "cuda", "--channels-last"]),
    ("cpu", None, ["--precision", "fp32"]),
])
def test_node_up_passes_the_gpu_profiles_defaults_before_bench_args(profile, precision, expected,
                                                                    fake_venv, node_env):
    # BENCH_ARGS is read by the real python (the recording one answers nothing).
    python = fake_venv.path / "bin" / "python"
    shebang, recording = python.read_text().split("\n", 1)
    python.write_text(f'{shebang}\n[ "$1" != -c ] || exec {sys.executable} "$@"\n{recording}')
    proc = run_make("node-up", f"VENV={fake_venv.path}", f"NODE_ENV={node_env}",
                    f"PROFILE={profile}", *([f"PRECISION={precision}"] if precision else []))
    assert proc.returncode == 0, proc.stderr
    (argv,) = fake_venv.bench_calls("compose")
    assert flag(argv, "--profile") == profile
    trainer = argv[argv.index("--") + 1:]
    assert trainer == [*expected, "--steps", "20", "--no-channels-last"], trainer


def test_readme_and_make_help_state_the_gpu_defaults():
    readme = (REPO / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `bench-single`"))
    assert "`PRECISION` (`auto`" in row and "--no-channels-last" in row, row
    out = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True,
                         text=True, timeout=60).stdout
    single = next(line for line in out.splitlines() if line.split()[0] == "bench-single")
    assert "PRECISION (auto" in single and "--no-channels-last" in single, single
