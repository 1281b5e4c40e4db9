"""GPU telemetry against a fake NVML that follows pynvml's API, and the summary arithmetic.
(The real NVML path ran on a lent H100: results/reference/gpu-h100/.)"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import types

import pytest

from bench.rank import telemetry
from conftest import REPO


class NVMLError(Exception):
    pass


def fake_nvml(*, power_w: float = 300.0, util=(90, 95, 99), energy_counter: bool = True,
              fail_after: int | None = None, throttle: int = 0x4 | 0x20):
    """pynvml's calls the sampler makes, with scripted readings. The energy counter runs at
    ``power_w`` in real time, as the driver's would."""
    state = {"calls": 0, "t0": time.monotonic()}

    def reading():
        state["calls"] += 1
        if fail_after is not None and state["calls"] > fail_after:
            raise NVMLError("GPU is lost")
        return state["calls"]

    def utilization(handle):
        n = reading()
        return types.SimpleNamespace(gpu=util[n % len(util)], memory=10)

    def energy(handle):
        if not energy_counter:
            raise NVMLError("Not Supported")
        return 1e6 + (time.monotonic() - state["t0"]) * power_w * 1000  # mJ

    return types.SimpleNamespace(
        NVMLError=NVMLError, NVML_CLOCK_SM=1, NVML_TEMPERATURE_GPU=0,
        nvmlDeviceGetUtilizationRates=utilization,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=40e9, total=80e9),
        nvmlDeviceGetPowerUsage=lambda h: int(power_w * 1000),
        nvmlDeviceGetClockInfo=lambda h, kind: 1980 if kind == 1 else 0,
        nvmlDeviceGetTemperature=lambda h, kind: 61,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: throttle,
        nvmlDeviceGetTotalEnergyConsumption=energy)


def _sampled(nvml, seconds: float = 0.35) -> telemetry.GpuSampler:
    sampler = telemetry.GpuSampler(nvml, handle="gpu0", interval_s=0.05)
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    return sampler


def test_the_sampler_summarises_every_metric():
    sampler = _sampled(fake_nvml())
    summary = sampler.summary()
    assert summary["samples"] >= 4
    assert summary["gpu_util_pct"]["max"] == 99 and 90 <= summary["gpu_util_pct"]["median"] <= 99
    assert summary["power_w"] == {"median": 300.0, "max": 300.0}
    assert summary["sm_clock_mhz"]["median"] == 1980 and summary["temperature_c"]["max"] == 61
    assert summary["memory_used_bytes"]["max"] == 40e9
    assert summary["throttle_reasons"] == ["sw_power_cap", "sw_thermal_slowdown"]
    assert summary["energy_source"] == "counter"
    assert summary["energy_j"] == pytest.approx(300 * summary["seconds"], rel=0.05)


def test_without_an_energy_counter_power_is_integrated():
    summary = _sampled(fake_nvml(power_w=250, energy_counter=False)).summary()
    assert summary["energy_source"] == "sampled_power"
    span = summary["seconds"]
    assert summary["energy_j"] == pytest.approx(250 * span, rel=0.25)


def test_a_gpu_lost_mid_run_gives_no_figures_and_says_why():
    sampler = _sampled(fake_nvml(fail_after=2))
    assert sampler.summary() is None
    assert "GPU is lost" in sampler.error


def test_combined_figures_are_the_jobs():
    def rank(util, power, energy):
        return {**{m: {"median": 1.0, "max": 1.0} for m in telemetry.METRICS},
                "gpu_util_pct": {"median": util, "max": util + 5},
                "power_w": {"median": power, "max": power}, "energy_j": energy,
                "energy_source": "counter", "seconds": 10.0, "samples": 100,
                "throttle_reasons": ["sw_power_cap"] if util < 90 else []}

    out = telemetry.combine([rank(80, 300, 3000.0), rank(96, 350, 3500.0)], ["", ""],
                            samples_per_s=2000.0, timed_samples=20_000)
    assert out["source"] == "nvml" and out["gpus"] == 2
    assert out["gpu_util_pct"] == {"median": 88.0, "max": 101}
    assert out["energy_j"] == 6500.0
    assert out["energy_per_sample_j"] == pytest.approx(6500 / 20_000)
    # 2000 samples/s over a mean draw of 650 W
    assert out["samples_per_watt"] == pytest.approx(2000 / 650)
    assert out["throttle_reasons"] == ["sw_power_cap"]


def test_one_rank_without_telemetry_makes_the_job_null_with_the_reason():
    out = telemetry.combine([None], ["pynvml (nvidia-ml-py) is not installed"], 100.0, 1000)
    assert out == {"source": None, "reason": "pynvml (nvidia-ml-py) is not installed"}


def test_no_gpu_no_sampler(monkeypatch):
    sampler, reason = telemetry.sampler_for(types.SimpleNamespace(type="cpu"))
    assert sampler is None and "not a GPU run" in reason
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as if not installed
    sampler, reason = telemetry.sampler_for(types.SimpleNamespace(type="cuda", index=0))
    assert sampler is None and "not installed" in reason


def test_the_table_shows_telemetry_columns(tmp_path):
    rec = json.loads((REPO / "results" / "reference" / "gpu-h100" / "trainer.jsonl")
                     .read_text().splitlines()[0])
    rec["telemetry"] = telemetry.combine([{
        **{m: {"median": 2.0, "max": 2.0} for m in telemetry.METRICS},
        "gpu_util_pct": {"median": 97.0, "max": 100.0}, "energy_j": 1000.0,
        "energy_source": "counter", "seconds": 5.0, "samples": 50, "throttle_reasons": []}],
        [""], samples_per_s=4000.0, timed_samples=20_000)
    results = tmp_path / "runs.jsonl"
    results.write_text(json.dumps(rec) + "\n")
    out = subprocess.run([sys.executable, "-m", "bench", "table", str(results), "--columns",
                          "gpu_util,energy,samples_per_watt"], cwd=REPO, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    header, _, row = out.stdout.strip().splitlines()[-3:]
    assert "GPU util %" in header and "J/sample" in header and "samples/W" in header
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[-3:] == ["97", "0.05", "20.00"]
    bad = subprocess.run([sys.executable, "-m", "bench", "table", str(results), "--columns",
                          "watts"], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2 and "--columns=watts" in bad.stderr


# --- the GPU's own settings, per rank (env.ranks[i].gpu_settings) --------------------------

def fake_settings_nvml(*, unsupported: tuple[str, ...] = ()):
    """pynvml's setting getters as an H200 answers them (700 W, 1980/3201 MHz applications
    clocks, ECC on, MIG off, PCIe gen 5 x16); each name in ``unsupported`` raises NVML's
    Not Supported instead."""
    answers = {
        "nvmlDeviceGetPowerManagementLimit": lambda h: 700_000,
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 650_000,
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: 700_000,
        "nvmlDeviceGetApplicationsClock": lambda h, kind: {1: 1980, 2: 3201}[kind],
        "nvmlDeviceGetDefaultApplicationsClock": lambda h, kind: {1: 1980, 2: 3201}[kind],
        "nvmlDeviceGetMaxClockInfo": lambda h, kind: {1: 1980, 2: 3201}[kind],
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0x1 | 0x2,
        "nvmlDeviceGetEccMode": lambda h: [1, 1],
        "nvmlDeviceGetMigMode": lambda h: [0, 1],
        "nvmlDeviceGetPersistenceMode": lambda h: 1,
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetCurrPcieLinkWidth": lambda h: 8,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: 16,
        "nvmlSystemGetDriverVersion": lambda: "580.159.04",
        "nvmlDeviceGetHandleByIndex": lambda index: f"gpu{index}",
    }

    def refuse(*args):
        raise NVMLError("Not Supported")

    for name in unsupported:
        answers[name] = refuse
    return types.SimpleNamespace(NVMLError=NVMLError, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2,
                                 **answers)


def _validates_as_a_rank(entry: dict) -> None:
    from bench import record

    rec = json.loads((REPO / "results" / "reference" / "emulated-cpu" / "1gbit.jsonl")
                     .read_text().splitlines()[0])
    rec["env"]["ranks"] = [{**rec["env"]["ranks"][0], **entry}]
    assert record.problem_of(rec) is None


def test_every_setting_is_read_through_nvml():
    settings = telemetry.settings_of(fake_settings_nvml(), "gpu0", "\tGPU0\nGPU0\t X \n")
    assert settings == {
        "reason": None, "power_limit_w": 700.0, "enforced_power_limit_w": 650.0,
        "default_power_limit_w": 700.0, "sm_app_clock_mhz": 1980,
        "memory_app_clock_mhz": 3201, "sm_default_app_clock_mhz": 1980,
        "memory_default_app_clock_mhz": 3201, "sm_max_clock_mhz": 1980,
        "memory_max_clock_mhz": 3201,
        "clock_event_reasons": ["gpu_idle", "applications_clocks_setting"],
        "ecc_enabled": True, "ecc_pending": True, "mig_enabled": False, "mig_pending": True,
        "persistence_mode": True, "pcie_gen": 5, "pcie_max_gen": 5, "pcie_width": 8,
        "pcie_max_width": 16, "topology": "\tGPU0\nGPU0\t X \n"}
    assert list(settings) == ["reason", *telemetry.SETTINGS_FIELDS]
    _validates_as_a_rank({"gpu_settings": settings})


def test_a_setting_nvml_does_not_answer_is_null_not_a_failure():
    """A GeForce has no ECC, a PCIe-less SXM board may refuse the link getters, an older
    pynvml lacks MIG: each such field is null and the rest stand."""
    nvml = fake_settings_nvml(unsupported=("nvmlDeviceGetEccMode",
                                           "nvmlDeviceGetCurrPcieLinkGeneration",
                                           "nvmlDeviceGetPowerManagementLimit"))
    del nvml.nvmlDeviceGetMigMode
    settings = telemetry.settings_of(nvml, "gpu0")
    assert settings["ecc_enabled"] is None and settings["ecc_pending"] is None
    assert settings["mig_enabled"] is None and settings["pcie_gen"] is None
    assert settings["power_limit_w"] is None and settings["enforced_power_limit_w"] == 650.0
    assert settings["topology"] is None and settings["pcie_max_width"] == 16
    _validates_as_a_rank({"gpu_settings": settings})


def test_settings_are_null_on_cpu_and_say_why_without_nvml(monkeypatch):
    assert telemetry.gpu_settings(types.SimpleNamespace(type="cpu")) is None
    monkeypatch.setitem(sys.modules, "pynvml", None)
    cuda = types.SimpleNamespace(type="cuda", index=0)
    missing = telemetry.gpu_settings(cuda)
    assert missing["reason"] == "pynvml (nvidia-ml-py) is not installed"
    assert all(missing[name] is None for name in telemetry.SETTINGS_FIELDS)
    assert telemetry.driver_version(cuda) is None
    _validates_as_a_rank({"gpu_settings": missing})


def test_a_long_topology_matrix_is_cut_to_what_the_schema_takes():
    settings = telemetry.settings_of(fake_settings_nvml(), "gpu0", "GPU0\tX\n" * 10_000)
    assert len(settings["topology"]) == telemetry.TOPOLOGY_CHARS
    _validates_as_a_rank({"gpu_settings": settings})


def test_each_rank_records_its_versions_and_settings(monkeypatch):
    """rank_info on a GPU rank (NVML and nvidia-smi faked): its torch, CUDA, NCCL, the
    driver NVML reports, its GPU's settings, and the host's topology on local rank 0 only."""
    import torch

    from bench.rank import environment

    nvml = fake_settings_nvml()
    monkeypatch.setattr(telemetry, "_load_nvml", lambda: nvml)
    monkeypatch.setattr(telemetry, "_handle", lambda nvml, device: "gpu0")
    monkeypatch.setattr(environment, "device_name", lambda device: "NVIDIA H200")
    monkeypatch.setattr(environment, "topology_matrix", lambda: "\tGPU0\tNIC0\nGPU0\t X \tSYS\n")
    cuda = types.SimpleNamespace(type="cuda", index=0)
    first = environment.rank_info(types.SimpleNamespace(rank=0, local_rank=0, node_rank=0,
                                                        device=cuda))
    second = environment.rank_info(types.SimpleNamespace(rank=1, local_rank=1, node_rank=0,
                                                         device=cuda))
    assert first["torch"] == torch.__version__ and first["cuda"] == torch.version.cuda
    assert first["driver"] == "580.159.04" and first["device"] == "NVIDIA H200"
    assert first["gpu_settings"]["power_limit_w"] == 700.0
    assert first["gpu_settings"]["topology"].startswith("\tGPU0")
    assert second["gpu_settings"]["topology"] is None, "the node's matrix once"
    _validates_as_a_rank(first)
    cpu = environment.rank_info(types.SimpleNamespace(rank=0, local_rank=0, node_rank=0,
                                                      device=torch.device("cpu")))
    assert cpu["gpu_settings"] is None and cpu["driver"] is None
    assert cpu["torch"] == torch.__version__
    _validates_as_a_rank(cpu)
