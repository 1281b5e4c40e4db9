"""bench doctor's GPU check, without a GPU: scripted answers from nvidia-smi and from the
image's probe. A host passes only when torch in the image, run with the GPUs attached,
sees CUDA and enough devices, on a driver at least the flavour's minimum."""
from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys

import pytest

from bench import nvidia_smi
from bench.host.checks import FAIL, PASS, WARN, containers, gpu, remote
from bench.host.checks.flavours import FLAVOURS, driver_advice, flavour_for_driver, flavours
from bench.host.checks.remote import Hosts, Remote
from bench.host.launchers.ssh import ssh_argv, ssh_base
from conftest import REPO

CHECK_GPU = REPO / "scripts" / "check-gpu.sh"
REFUSAL = ("docker: Error response from daemon: failed to create task for container: "
           "OCI runtime create failed: nvidia-container-cli: requirement error: unsatisfied "
           "condition: cuda>=13.0, please update your driver to a newer version, or use an "
           "earlier cuda container: unknown.")


class Scripted:
    """A remote that answers each command from a script instead of ssh."""

    def __init__(self, answers: dict[str, tuple[int, str]]):
        self.answers, self.commands = answers, []

    def run(self, host, command, timeout=None):
        self.commands.append(command)
        for key, (code, text) in self.answers.items():
            if key in command:
                return subprocess.CompletedProcess([], code, text if code == 0 else "",
                                                   "" if code == 0 else text)
        raise AssertionError(f"unexpected command {command}")


def _probe(available=True, count=8, nccl="2.28.9"):
    return json.dumps({"available": available, "count": count if available else 0,
                       "torch": "2.14.1", "cuda": "13.0", "nccl": nccl if available else None})


def _check(driver="580.95.05", probe=(0, _probe()), **kwargs):
    answers = {"nvidia-smi --query-gpu": driver if isinstance(driver, tuple) else (0, driver),
               "docker run --rm --gpus all": probe}
    d = Scripted(answers)
    row, versions = gpu.gpu_row(Hosts(("gpu1",), d, image="bench-trainer:cuda", **kwargs),
                                "gpu1")
    return row, versions, d.commands


def test_a_ready_gpu_host_passes_and_reports_nccl():
    row, versions, commands = _check()
    assert row.result == PASS and "8 GPU(s) usable" in row.detail and "NCCL 2.28.9" in row.detail
    assert "driver 580.95.05 >= 580" in row.detail
    assert versions == "2.14.1 13.0 2.28.9"
    (probe,) = [shlex.split(c) for c in commands if "docker run" in c]
    assert probe[:5] == ["docker", "run", "--rm", "--gpus", "all"]
    assert probe[-3:] == ["bench-trainer:cuda", "-c", gpu.GPU_PROBE]
    assert "torch.cuda.is_available()" in probe[-1]


def test_the_probe_reaches_ssh_as_one_argv_with_the_gpus_attached(monkeypatch):
    """Through the real Remote.run: ssh options, ``--``, the host, then the remote command,
    whose words are the probe's argv (the image name quoted, whatever it holds)."""
    seen = []

    def fake_run(argv, **kwargs):
        seen.append(argv)
        answer = "580.95.05" if "nvidia-smi" in argv[-1] else _probe()
        return subprocess.CompletedProcess(argv, 0, answer, "")

    monkeypatch.setattr(remote.subprocess, "run", fake_run)
    d = Hosts(("gpu1",), Remote(functools.partial(ssh_argv, ssh_base(None))),
              image="registry.example:5000/bench-trainer:cuda")
    assert gpu.gpu_row(d, "gpu1")[1] == "2.14.1 13.0 2.28.9"
    # The driver's version, the NVSwitch fabric's state (bench.nvidia_smi), then the probe.
    _, fabric, probe = seen
    assert shlex.split(fabric[-1]) == list(nvidia_smi.FABRIC_QUERY)
    for argv in seen:
        assert argv[0] == "ssh" and argv[-3:-1] == ["--", "gpu1"]
    assert shlex.split(probe[-1]) == gpu.gpu_probe_argv(
        "registry.example:5000/bench-trainer:cuda")
    assert "--gpus" in shlex.split(probe[-1])


def test_a_driver_below_the_floor_names_the_flavour_it_runs():
    row, versions, commands = _check(driver="550.54.15")
    assert row.result == FAIL and versions is None
    assert "driver 550.54.15 is older than 580" in row.detail
    assert "make build TORCH_FLAVOUR=cu126" in row.detail
    assert not any("docker run" in c for c in commands), "no container on a refused driver"


def test_the_containers_cuda_refusal_is_the_driver_not_the_toolkit():
    # --torch-flavour says cu126 (driver 550 passes its floor), but the image is CUDA 13.0:
    # the runtime refuses it, and the floor named is the image's, with a build that runs.
    row, versions, _ = _check(driver="550.54.15", probe=(125, REFUSAL), flavour="cu126")
    assert row.result == FAIL and versions is None
    assert "nvidia-container-toolkit" not in row.detail
    assert row.detail.startswith("the image needs CUDA 13.0")
    assert ("driver 550.54.15 is older than 580, the minimum for TORCH_FLAVOUR=cu130 (CUDA "
            "13.0). Update the driver, or build for this one: make build TORCH_FLAVOUR=cu126"
            in row.detail)
    assert "--torch-flavour cu126 (CUDA 12.6) is not the image's flavour, cu130" in row.detail


def test_a_refusal_for_a_cuda_line_outside_the_table_still_names_a_build():
    refusal = REFUSAL.replace("cuda>=13.0", "cuda>=12.9")
    row, _, _ = _check(driver="550.54.15", probe=(125, refusal), flavour="cu126")
    assert row.result == FAIL and "has no CUDA 12.9 line" in row.detail
    assert "make build TORCH_FLAVOUR=cu126" in row.detail


def test_a_refusal_on_a_driver_above_the_floor_points_at_the_toolkit():
    row, _, _ = _check(driver="580.95.05", probe=(125, REFUSAL))
    assert row.result == FAIL and "meets its minimum 580" in row.detail
    assert "nvidia-container-toolkit" in row.detail and "make build" not in row.detail


def test_a_missing_toolkit_is_named():
    row, _, _ = _check(probe=(125, 'could not select device driver "" with capabilities: '
                                   '[[gpu]]'))
    assert row.result == FAIL and "nvidia-container-toolkit" in row.detail


def test_torch_without_cuda_fails_even_where_nvidia_smi_works():
    row, _, _ = _check(probe=(0, _probe(available=False)))
    assert row.result == FAIL and "sees no GPU" in row.detail


def test_too_few_devices_fail():
    row, _, _ = _check(probe=(0, _probe(count=2)), gpus_per_node=4)
    assert row.result == FAIL and "2 GPU(s) visible to torch, --gpus-per-node 4" in row.detail


def test_a_cpu_host_is_a_warning():
    row, versions, _ = _check(driver=(127, "bash: line 1: nvidia-smi: command not found"))
    assert row.result == WARN and versions is None


def test_a_broken_driver_is_a_failure_not_a_cpu_host():
    row, _, commands = _check(driver=(18, "Failed to initialize NVML: Driver/library version "
                                          "mismatch"))
    assert row.result == FAIL and "Driver/library version mismatch" in row.detail
    assert not any("docker run" in c for c in commands)


def test_an_unreadable_driver_version_fails():
    row, _, _ = _check(driver="N/A")
    assert row.result == FAIL and "no driver version ('N/A')" in row.detail


def test_a_cpu_job_does_not_check_the_gpus():
    row, versions, commands = _check(gpus_per_node=0)
    assert row.result == PASS and "not checked" in row.detail
    assert versions is None and commands == []


def _check_gpu_sh(tmp_path, driver: str, flavour: str) -> str:
    """scripts/check-gpu.sh's first line against a fake nvidia-smi reporting ``driver``."""
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir(exist_ok=True)
    tool.write_text("#!/bin/sh\ncase \"$*\" in *driver_version*) echo '" + driver + "';;\n"
                    "*) echo 'GPU 0: NVIDIA H100 (UUID: GPU-0)';; esac\n")
    tool.chmod(0o755)
    out = subprocess.run(["bash", str(CHECK_GPU), flavour], capture_output=True, text=True,
                         env={**os.environ, "PATH": f"{tool.parent}:{os.environ['PATH']}"},
                         timeout=60)
    assert out.returncode == 1, out.stderr
    return out.stderr.splitlines()[0].removeprefix("check-gpu: ")


@pytest.mark.parametrize("driver, flavour", [("535.104.05", "default"),
                                             ("550.54.14", "cu130"),
                                             ("470.256.02", "cu126"),
                                             ("470.256.02", "default")])
def test_doctor_and_check_gpu_say_the_same_words(tmp_path, driver, flavour):
    """One wording for the driver floor: the host check and the cluster check agree."""
    table = flavours()
    row, _, _ = _check(driver=driver, flavour=flavour)
    assert row.detail == driver_advice(driver, table[flavour], table)
    assert row.detail == _check_gpu_sh(tmp_path, driver, flavour)


def test_the_probes_run_on_this_torch():
    """The probe texts are real Python: they report what this torch sees, and NCCL's
    version, which needs no device (a CUDA build on a machine without GPU reads it too)."""
    for code in (containers.VERSIONS, gpu.GPU_PROBE):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    import torch
    assert found["torch"] == torch.__version__
    assert found["available"] is torch.cuda.is_available()
    if torch.version.cuda:
        assert found["nccl"].count(".") == 2


@pytest.mark.parametrize("major, expected", [(530, "cu126"), (579, "cu126"), (580, "cu130"),
                                             (600, "cu130"), (500, None)])
def test_the_newest_flavour_a_driver_runs(major, expected):
    found = flavour_for_driver(major, flavours())
    assert (found.name if found else None) == expected


def test_an_unknown_flavour_is_refused():
    out = subprocess.run([sys.executable, "-m", "bench", "doctor", "--hosts", "a",
                          "--torch-flavour", "cu128"], capture_output=True, text=True,
                         cwd=FLAVOURS.parent.parent)
    assert out.returncode == 2 and "--torch-flavour=cu128" in out.stderr
