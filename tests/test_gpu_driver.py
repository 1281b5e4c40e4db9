"""The driver floor: scripts/check-gpu.sh against a fake nvidia-smi, and the flavour table."""
from __future__ import annotations

import os
import subprocess

import pytest

from conftest import REPO

CHECK = REPO / "scripts" / "check-gpu.sh"
TABLE = REPO / "docker" / "cuda-flavours.tsv"


def fake_nvidia_smi(tmp_path, driver: str) -> dict:
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir(exist_ok=True)
    tool.write_text("#!/bin/sh\n"
                    'case "$*" in *driver_version*) echo "' + driver + '";;\n'
                    '*) echo "GPU 0: NVIDIA GeForce RTX 3060 (UUID: GPU-0)";; esac\n')
    tool.chmod(0o755)
    return {**os.environ, "PATH": f"{tool.parent}:{os.environ['PATH']}"}


def check(env, *args):
    return subprocess.run(["bash", str(CHECK), *args], env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("driver,flavour,works", [
    ("535.104.05", "default", "cu126"),
    ("550.54.14", "cu130", "cu126"),
])
def test_an_old_driver_fails_naming_a_build_that_runs(tmp_path, driver, flavour, works):
    proc = check(fake_nvidia_smi(tmp_path, driver), flavour)
    assert proc.returncode == 1
    assert f"driver {driver} is older than 580" in proc.stderr
    assert f"make build TORCH_FLAVOUR={works}" in proc.stderr


def test_a_driver_older_than_every_flavour_says_to_update(tmp_path):
    proc = check(fake_nvidia_smi(tmp_path, "470.256.02"), "cu126")
    assert proc.returncode == 1
    assert "older than every flavour's minimum" in proc.stderr and "525" in proc.stderr


@pytest.mark.parametrize("driver,flavour", [("580.65.06", "default"), ("535.104.05", "cu126")])
def test_a_driver_at_the_floor_passes_to_the_docker_checks(tmp_path, driver, flavour):
    proc = check(fake_nvidia_smi(tmp_path, driver), flavour)
    assert "older than" not in proc.stderr
    # What follows is about Docker (this host has no NVIDIA runtime), not the driver.
    assert proc.returncode == 0 or "Docker" in proc.stderr


def test_an_unknown_flavour_is_a_user_error(tmp_path):
    proc = check(fake_nvidia_smi(tmp_path, "580.65.06"), "cu128")
    assert proc.returncode == 2 and "TORCH_FLAVOUR=cu128" in proc.stderr


def test_the_makefile_takes_the_base_image_from_the_table():
    rows = {line.split("\t")[0]: line.split("\t") for line in TABLE.read_text().splitlines()
            if line and not line.startswith("#")}
    assert set(rows) == {"default", "cu130", "cu126"}
    for flavour, (_, cuda, _, image) in rows.items():
        out = subprocess.run(["make", "--no-print-directory", "-n", "build",
                              f"TORCH_FLAVOUR={flavour}"], cwd=REPO, capture_output=True,
                             text=True, timeout=60)
        printed = subprocess.run(["make", "--no-print-directory", "-s", "-p", "nothing",
                                  f"TORCH_FLAVOUR={flavour}"], cwd=REPO, capture_output=True,
                                 text=True, timeout=60).stdout
        assert f"CUDA_BASE_IMAGE := {image.strip()}" in printed, out.stderr
        assert f"nvidia/cuda:{cuda}." in image
