"""NVSwitch Fabric Manager and MIG, without a GPU: a fake nvidia-smi first on PATH answers as
the driver would (an 8-GPU NVSwitch system trained or not, PCIe GPUs, a driver that rejects
the fabric query fields, GPUs in MIG mode), and scripts/check-gpu.sh, bench doctor's rows,
the trainer's device check and the GPU sharing of simulated nodes read it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import nvidia_smi
from bench.config import resolve_device
from bench.host import gpus
from bench.host.checks import FAIL, PASS, WARN, gpu
from bench.host.checks.remote import Hosts, Remote
from bench.nvidia_smi import Fabric, MigGpu
from bench.options import ConfigError
from bench.topology import Topology
from conftest import REPO

CHECK_GPU = REPO / "scripts" / "check-gpu.sh"
DRIVER = "580.95.05"
REJECTED = 'Field "fabric.state" is not a valid field to query.\n\n'
UUIDS = [f"GPU-{i}a2b3c4d-0000-1111-2222-33334444555{i}" for i in range(8)]
SLICES = [f"MIG-{i}f0e1d2c-aaaa-bbbb-cccc-ddddeeeeffff" for i in range(4)]
HERE = Remote(lambda host, line: ["/bin/sh", "-c", line])   # a "host" that is this machine
PROBE = ('{"available": true, "count": 8, "torch": "2.14.1", "cuda": "13.0", '
         '"nccl": "2.28.9"}')


def fabric_csv(*states: tuple[str, str]) -> str:
    """The fabric query's answer, one line per GPU."""
    return "".join(f"{i}, {DRIVER}, {state}, {status}\n"
                   for i, (state, status) in enumerate(states))


def q_log(*fabrics: tuple[str, str] | None) -> str:
    """``nvidia-smi -q`` as a driver prints it: per GPU its sections, a ``Fabric`` one where
    the driver has it (None: a driver from before the fabric query)."""
    lines = ["", "==============NVSMI LOG==============", "",
             "Timestamp                                 : Tue Jul 14 08:12:38 2026",
             f"Driver Version                            : {DRIVER}",
             "CUDA Version                              : 13.0", "",
             f"Attached GPUs                             : {len(fabrics)}"]
    for i, fabric in enumerate(fabrics):
        lines += [f"GPU 00000000:{0x18 + i:02X}:00.0",
                  "    Product Name                          : NVIDIA H100 80GB HBM3",
                  "    MIG Mode",
                  "        Current                           : Disabled",
                  "        Pending                           : Disabled",
                  "    Platform Info",
                  "        GPU Fabric GUID                   : N/A"]
        if fabric is not None:
            lines += ["    Fabric",
                      f"        State                             : {fabric[0]}",
                      f"        Status                            : {fabric[1]}",
                      "        CliqueId                          : 0",
                      "        ClusterUUID                       : 00000000-0000-0000-0000-0000",
                      "        Health",
                      "            Summary                       : N/A"]
        lines.append("    Processes                             : None")
    return "\n".join(lines) + "\n"


def listing(count: int = 8, mig_on: tuple[int, ...] = ()) -> str:
    """``nvidia-smi -L``: the GPUs, and the MIG devices under those in MIG mode."""
    lines = []
    for i in range(count):
        lines.append(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: {UUIDS[i]})")
        if i in mig_on:
            lines += [f"  MIG 3g.40gb     Device  0: (UUID: {SLICES[0]})",
                      f"  MIG 2g.20gb     Device  1: (UUID: {SLICES[1]})"]
    return "\n".join(lines) + "\n"


def mig_csv(*modes: str) -> str:
    return "".join(f"{i}, {UUIDS[i]}, {mode}\n" for i, mode in enumerate(modes))


def fake_tools(tmp_path: Path, *, fabric: str = "", fabric_rc: int = 0, q: str = "",
               mig: str = "", mig_rc: int = 0, count: int = 8,
               mig_on: tuple[int, ...] = ()) -> dict[str, str]:
    """An environment whose PATH starts with a fake nvidia-smi (each call is logged in
    bin/calls) and a docker whose run prints the GPU probe's answer."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, text in {"fabric.out": fabric, "fabric.rc": str(fabric_rc), "q.out": q,
                       "mig.out": mig, "mig.rc": str(mig_rc), "driver.out": DRIVER + "\n",
                       "list.out": listing(count, mig_on), "probe.out": PROBE + "\n"}.items():
        (bindir / name).write_text(text)
    tools = {
        "nvidia-smi": '#!/bin/sh\nhere=$(dirname "$0")\necho "$*" >> "$here/calls"\n'
                      'case "$*" in\n'
                      '  *fabric.state*) cat "$here/fabric.out"\n'
                      '    exit "$(cat "$here/fabric.rc")";;\n'
                      '  -q) cat "$here/q.out";;\n'
                      '  *mig.mode.current*) cat "$here/mig.out"; exit "$(cat "$here/mig.rc")";;\n'
                      '  *driver_version*) cat "$here/driver.out";;\n'
                      '  -L) cat "$here/list.out";;\n'
                      '  *) exit 9;;\nesac\n',
        "docker": '#!/bin/sh\ncase "$1" in run) cat "$(dirname "$0")/probe.out";; esac\n'}
    for name, script in tools.items():
        (bindir / name).write_text(script)
        (bindir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "bin" / "calls"
    return log.read_text().splitlines() if log.exists() else []


ALL_TRAINED = [("Completed", "Success")] * 8
NOT_STARTED = [("Not Started", "N/A")] * 8
ONE_IN_PROGRESS = [("Completed", "Success")] * 5 + [("In Progress", "N/A")] \
    + [("Completed", "Success")] * 2
TRAINING_FAILED = [("Completed", "Unknown Error")] + [("Completed", "Success")] * 7
PCIE = [("N/A", "N/A")] * 2

# Scenario -> (fake nvidia-smi's answers, the GPU, state and status named, or None: passes).
SCENARIOS = {
    "nvswitch trained": (dict(fabric=fabric_csv(*ALL_TRAINED)), None),
    "fabric manager down": (dict(fabric=fabric_csv(*NOT_STARTED)),
                            ("GPU 0 (and 7 more)", "Not Started", "N/A")),
    "training in progress": (dict(fabric=fabric_csv(*ONE_IN_PROGRESS)),
                             ("GPU 5", "In Progress", "N/A")),
    "training failed": (dict(fabric=fabric_csv(*TRAINING_FAILED)),
                        ("GPU 0", "Completed", "Unknown Error")),
    "pcie gpus": (dict(fabric=fabric_csv(*PCIE), count=2), None),
    "old driver, fabric manager down": (
        dict(fabric=REJECTED, fabric_rc=2, q=q_log(*NOT_STARTED)),
        ("GPU 0 (and 7 more)", "Not Started", "N/A")),
    "old driver, trained": (dict(fabric=REJECTED, fabric_rc=2, q=q_log(*ALL_TRAINED)), None),
    "old driver, pcie": (dict(fabric=REJECTED, fabric_rc=2, q=q_log(*PCIE), count=2), None),
    "older driver, no fabric reported": (
        dict(fabric=REJECTED, fabric_rc=2, q=q_log(*[None] * 8)), None),
    "unreadable answer": (dict(fabric="0, 580.95.05, Completed\n"), None),
}


def expected_line(named: tuple[str, str, str]) -> str:
    gpu_text, state, status = named
    return (f"Fabric Manager: {gpu_text} reports NVSwitch fabric state {state}, status "
            f"{status}: CUDA starts on no GPU of this system until the fabric is trained: "
            "sudo systemctl start nvidia-fabricmanager (the nvidia-fabricmanager package "
            f"must match the driver's version, {DRIVER})")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_fabric_reading_names_fabric_manager_only_where_it_holds_cuda_back(
        tmp_path, monkeypatch, scenario):
    answers, named = SCENARIOS[scenario]
    monkeypatch.setenv("PATH", fake_tools(tmp_path, **answers)["PATH"])
    reading = nvidia_smi.read_fabric(nvidia_smi.run_here)
    problem = reading.problem() if reading is not None else None
    assert problem == (expected_line(named) if named else None)
    rejected = answers.get("fabric_rc") == 2
    assert ("-q" in calls(tmp_path)) is rejected, "-q only where the query is rejected"
    if scenario in ("nvswitch trained", "old driver, trained"):
        assert reading is not None and all(g.on_nvswitch and g.trained for g in reading.gpus)
    if scenario in ("pcie gpus", "old driver, pcie"):
        assert reading is not None and not any(g.on_nvswitch for g in reading.gpus)
    if scenario in ("older driver, no fabric reported", "unreadable answer"):
        assert reading is None


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_check_gpu_says_doctors_line(tmp_path, monkeypatch, scenario):
    """scripts/check-gpu.sh and bench doctor's gpu row: one wording, from the same answers
    (doctor's remote lines run here, through sh, as ssh would run them on the host)."""
    answers, named = SCENARIOS[scenario]
    env = fake_tools(tmp_path, **answers)
    out = subprocess.run(["bash", str(CHECK_GPU)], env=env, capture_output=True, text=True,
                         timeout=60)
    monkeypatch.setenv("PATH", env["PATH"])
    row, versions = gpu.gpu_row(Hosts(("gpu1",), HERE, image="bench-trainer:cuda"), "gpu1")
    if named:
        assert out.returncode == 1
        assert out.stderr.splitlines() == [f"check-gpu: {expected_line(named)}"]
        assert (row.result, row.detail, versions) == (FAIL, expected_line(named), None)
        assert not any("docker" in c for c in calls(tmp_path)), "no probe behind the fabric"
    else:
        assert "Fabric" not in out.stderr
        # What follows is about Docker (this machine has no NVIDIA runtime), not the GPUs.
        assert out.returncode == 0 or "Docker" in out.stderr, out.stderr
        assert row.result == PASS and "8 GPU(s) usable" in row.detail, row.detail
        trained = scenario in ("nvswitch trained", "old driver, trained")
        assert row.detail.endswith("; NVSwitch fabric trained") is trained


def test_fabric_states_nvidia_smi_prints():
    assert Fabric("0", "Completed", "Success").trained
    assert Fabric("0", "N/A", "N/A").trained and not Fabric("0", "N/A", "N/A").on_nvswitch
    assert Fabric("0", "[Not Supported]", "[N/A]").trained
    for state, status in [("Not Started", "N/A"), ("In Progress", "N/A"),
                          ("Completed", "Insufficient Resources"), ("Unknown", "Success")]:
        assert not Fabric("1", state, status).trained, (state, status)


@pytest.mark.parametrize("text", [
    "0, 580.95.05, Completed, Success; rm -rf /\n",      # a line that is not nvidia-smi's
    "0, 580.95.05, Completed, Success, extra\n",
    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\n",        # another command's answer
    "",
])
def test_an_answer_not_matched_whole_is_left_unjudged(text):
    assert nvidia_smi.fabric_from_csv(text) is None


def test_the_trainer_names_fabric_manager_where_torch_sees_no_cuda(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("PATH", fake_tools(tmp_path, fabric=fabric_csv(*NOT_STARTED))["PATH"])
    with pytest.raises(ConfigError) as error:
        resolve_device("cuda", "auto")
    assert str(error.value) == ("--device=cuda: no CUDA device is visible to torch: "
                                + expected_line(("GPU 0 (and 7 more)", "Not Started", "N/A")))
    assert resolve_device("auto", "auto") == ("cpu", "gloo")


def test_without_a_fabric_problem_the_refusal_stays_plain(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("PATH", fake_tools(tmp_path, fabric=fabric_csv(*PCIE), count=2)["PATH"])
    with pytest.raises(ConfigError, match=r"^--device=cuda: no CUDA device is visible to "
                                          r"torch; use --device cpu$"):
        resolve_device("cuda", "auto")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))   # no nvidia-smi at all
    with pytest.raises(ConfigError, match="use --device cpu$"):
        resolve_device("cuda", "auto")


def test_bench_train_refuses_in_one_line_naming_fabric_manager(tmp_path):
    env = {**fake_tools(tmp_path, fabric=fabric_csv(*ONE_IN_PROGRESS)),
           "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO)}   # torch sees no GPU
    out = subprocess.run([sys.executable, "-m", "bench", "train", "--device", "cuda",
                          "--steps", "1", "--results", str(tmp_path / "runs.jsonl")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "bench train: error: --device=cuda: no CUDA device is visible to torch: "
        + expected_line(("GPU 5", "In Progress", "N/A"))]


# --- MIG ----------------------------------------------------------------------------------------
def test_mig_modes_and_slices_as_nvidia_smi_lists_them(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_tools(tmp_path, mig=mig_csv("Enabled", "Disabled"),
                                          count=2, mig_on=(0,))["PATH"])
    assert nvidia_smi.read_mig(nvidia_smi.run_here) == [
        MigGpu("0", UUIDS[0], "Enabled", (SLICES[0], SLICES[1])),
        MigGpu("1", UUIDS[1], "Disabled", ())]


@pytest.mark.parametrize("answers, expected", [
    (dict(mig=mig_csv("[N/A]", "[N/A]")), [MigGpu("0", UUIDS[0], "[N/A]"),
                                           MigGpu("1", UUIDS[1], "[N/A]")]),
    (dict(mig='Field "mig.mode.current" is not a valid field to query.\n', mig_rc=2), []),
    (dict(mig="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
              "driver.\n", mig_rc=9), None),
    (dict(mig="0, GPU-0, Enabled; reboot\n"), None),
])
def test_no_mig_capable_gpu_an_old_driver_and_a_broken_one(tmp_path, monkeypatch, answers,
                                                            expected):
    monkeypatch.setenv("PATH", fake_tools(tmp_path, count=2, **answers)["PATH"])
    assert nvidia_smi.read_mig(nvidia_smi.run_here) == expected
    assert "-L" not in calls(tmp_path), "slices are listed only for a GPU in MIG mode"


MIG_ON_0 = [MigGpu("0", UUIDS[0], "Enabled", (SLICES[0],)), MigGpu("1", UUIDS[1], "Disabled")]


@pytest.mark.parametrize("topology, visible", [((1, 1), ["0"]), ((2, 1), ["1", "0"]),
                                               ((1, 2), ["0", "1"]), ((1, 1), [UUIDS[0]])])
def test_ranks_on_a_gpu_in_mig_mode_are_refused_with_the_fix(topology, visible):
    with pytest.raises(ConfigError) as error:
        gpus.assign(Topology(*topology), visible, MIG_ON_0)
    assert str(error.value) == (
        f"--topologies={Topology(*topology)}: GPU 0 is in MIG mode and CUDA gives a process "
        "one MIG device (a slice of a GPU) at most, so this job's ranks would run on a slice "
        "or fail: turn MIG off (sudo nvidia-smi -i 0 -mig 0, then reset the GPU if it says "
        f"pending), or run one rank on one slice: CUDA_VISIBLE_DEVICES={SLICES[0]} with "
        "--topologies 1x1")


def test_gpus_out_of_mig_mode_are_shared_out_as_before():
    assert gpus.assign(Topology(1, 1), ["1"], MIG_ON_0) == ["1"]
    not_capable = [MigGpu(str(i), UUIDS[i], "[N/A]") for i in range(4)]
    assert gpus.assign(Topology(2, 2), ["0", "1", "2", "3"], not_capable) == ["0,1", "2,3"]


def test_one_rank_on_one_named_slice_runs_and_several_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_tools(tmp_path, mig=mig_csv("Enabled"), count=1,
                                          mig_on=(0,))["PATH"])
    visible = gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": f"{SLICES[0]},{SLICES[1]}"})
    assert gpus.assign(Topology(1, 1), visible) == [SLICES[0]]
    assert calls(tmp_path) == [], "a named slice needs no question to nvidia-smi"
    for topology in (Topology(2, 1), Topology(1, 2)):
        with pytest.raises(ConfigError, match=rf"^--topologies={topology}: "
                                              r"CUDA_VISIBLE_DEVICES names MIG devices"):
            gpus.assign(topology, visible)
    with pytest.raises(ConfigError, match=r"^CUDA_VISIBLE_DEVICES=MIG-\$\(reboot\): a MIG "):
        gpus.assign(Topology(1, 1), ["MIG-$(reboot)"])


def test_the_matrix_refuses_a_gpu_in_mig_mode_in_one_line(tmp_path):
    env = {**fake_tools(tmp_path, mig=mig_csv("Enabled", "Disabled"), count=2, mig_on=(0,)),
           "PYTHONPATH": str(REPO)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    out = subprocess.run([sys.executable, "-m", "bench", "matrix", "--topologies", "1x2",
                          "--results", str(tmp_path / "runs.jsonl"), "--", "--steps", "1"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("bench matrix: error: --topologies=1x2: GPU 0 is in MIG mode")
    assert "sudo nvidia-smi -i 0 -mig 0" in line and f"CUDA_VISIBLE_DEVICES={SLICES[0]}" in line
    assert not (tmp_path / "runs.jsonl").exists()


def test_the_matrix_runs_one_rank_on_a_named_slice(tmp_path):
    env = {**fake_tools(tmp_path, mig=mig_csv("Enabled"), count=1, mig_on=(0,)),
           "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": SLICES[0]}
    out = subprocess.run([sys.executable, "-m", "bench", "matrix", "--topologies", "1x1",
                          "--dry-run", "--results", str(tmp_path / "runs.jsonl"), "--",
                          "--steps", "1"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"CUDA_VISIBLE_DEVICES={SLICES[0]}" in out.stdout


def _mig_row(tmp_path, monkeypatch, gpus_per_node=1, **answers):
    monkeypatch.setenv("PATH", fake_tools(tmp_path, **answers)["PATH"])
    return gpu.mig_row(Hosts(("gpu1",), HERE, gpus_per_node=gpus_per_node), "gpu1")


def test_doctor_reports_mig_mode_per_gpu(tmp_path, monkeypatch):
    row = _mig_row(tmp_path, monkeypatch, mig=mig_csv("Disabled", "Disabled", "[N/A]"),
                   count=3)
    assert (row.check, row.result) == ("mig", PASS)
    assert row.detail == "MIG mode: GPU 0 Disabled, GPU 1 Disabled, GPU 2 N/A"


def test_doctor_fails_a_gpu_in_mig_mode_with_the_command_that_turns_it_off(tmp_path,
                                                                            monkeypatch):
    row = _mig_row(tmp_path, monkeypatch, mig=mig_csv("Disabled", "Enabled"), count=2,
                   mig_on=(1,))
    assert row.result == FAIL
    assert row.detail == (
        "MIG mode: GPU 0 Disabled, GPU 1 Enabled (2 slices): CUDA gives a process one MIG "
        "device (a slice of a GPU) at most, so this host's ranks would run on slices or "
        "fail: turn MIG off (sudo nvidia-smi -i 1 -mig 0, then reset the GPU if it says "
        "pending)")


def test_doctors_mig_row_on_an_old_driver_a_cpu_host_and_a_cpu_job(tmp_path, monkeypatch):
    row = _mig_row(tmp_path, monkeypatch, mig='Field "mig.mode.current" is not a valid field '
                   "to query.\n", mig_rc=2)
    assert row.result == PASS and "no MIG mode" in row.detail
    assert _mig_row(tmp_path, monkeypatch, mig="garbage\n").result == WARN
    assert _mig_row(tmp_path, monkeypatch, mig=mig_csv("Enabled"), gpus_per_node=0) is None
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # no nvidia-smi: the gpu row warns
    assert gpu.mig_row(Hosts(("cpu1",), HERE), "cpu1") is None
