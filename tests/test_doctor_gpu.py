"""bench doctor's GPU check, without a GPU: scripted answers from nvidia-smi and from the
image's probe. A host passes only when torch in the image, run with the GPUs attached,
sees CUDA and enough devices, on a driver at least the flavour's minimum."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.host import doctor
from bench.host.checks import FAIL, PASS, WARN


class ScriptedDoctor(doctor.Doctor):
    """Answers each remote command from a script instead of ssh."""

    def __init__(self, answers: dict[str, tuple[int, str]], **kwargs):
        super().__init__(["gpu1"], "bench-trainer:cuda", {}, None, "fashion-mnist", 29500,
                         **kwargs)
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
    d = ScriptedDoctor(answers, **kwargs)
    versions = d.check_gpu("gpu1")
    (row,) = d.rows
    return row, versions, d.commands


def test_a_ready_gpu_host_passes_and_reports_nccl():
    row, versions, commands = _check()
    assert row.result == PASS and "8 GPU(s) usable" in row.detail and "NCCL 2.28.9" in row.detail
    assert versions == "2.14.1 13.0 2.28.9"
    probe = next(c for c in commands if "docker run" in c)
    assert "--gpus all" in probe and "torch.cuda.is_available()" in probe


def test_a_driver_below_the_floor_names_the_flavour_it_runs():
    row, versions, commands = _check(driver="550.54.15")
    assert row.result == FAIL and versions is None
    assert "driver 550.54.15 is older than 580" in row.detail
    assert "make build TORCH_FLAVOUR=cu126" in row.detail
    assert not any("docker run" in c for c in commands), "no container on a refused driver"


def test_the_containers_cuda_refusal_is_the_driver_not_the_toolkit():
    row, _, _ = _check(probe=(125, "nvidia-container-cli: requirement error: unsatisfied "
                                   "condition: cuda>=13.0, please update your driver"))
    assert row.result == FAIL and "the image refuses this driver" in row.detail
    assert "nvidia-container-toolkit" not in row.detail


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
    row, versions, _ = _check(driver=(127, "nvidia-smi: command not found"))
    assert row.result == WARN and versions is None


@pytest.mark.parametrize("major, expected", [(530, "cu126"), (579, "cu126"), (580, "cu130"),
                                             (600, "cu130"), (500, None)])
def test_the_newest_flavour_a_driver_runs(major, expected):
    found = doctor.flavour_for_driver(major, doctor.flavours())
    assert (found.name if found else None) == expected


def test_an_unknown_flavour_is_refused():
    out = subprocess.run([sys.executable, "-m", "bench", "doctor", "--hosts", "a",
                          "--torch-flavour", "cu128"], capture_output=True, text=True,
                         cwd=doctor.FLAVOURS.parent.parent)
    assert out.returncode == 2 and "--torch-flavour=cu128" in out.stderr
