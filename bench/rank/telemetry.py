"""GPU telemetry during the timed steps, through NVML (the ``nvidia-ml-py`` package).

A thread per rank samples its own GPU every ``interval_s``: utilization, memory used,
power, SM clock, temperature and the clock-throttle reasons. The record gets the median and
max of each, the energy the GPUs used over the timed steps (NVML's energy counter where the
GPU has one, else the sampled power integrated over time), the energy per sample and the
samples per watt. Where NVML or a GPU is absent, the figures are null with the reason:
never a made-up value.

The sampler never touches the training stream: NVML reads the driver's counters from
another thread, so the timed loop waits for nothing it does.
"""
from __future__ import annotations

import statistics
import threading
import time

# NVML's clock-throttle reason bits (nvml.h, nvmlClocksEventReason*), by name.
THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
    0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
METRICS = ("gpu_util_pct", "memory_used_bytes", "power_w", "sm_clock_mhz", "temperature_c")


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def _load_nvml():
    """The pynvml module, initialised; raises ImportError or its NVMLError."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


class GpuSampler:
    """Samples one GPU from a thread between ``start`` and ``stop``."""

    def __init__(self, nvml, handle, interval_s: float = 0.1) -> None:
        self.nvml, self.handle, self.interval_s = nvml, handle, interval_s
        self.samples: list[dict] = []
        self.throttle_mask = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._energy_start: float | None = None
        self.energy_j: float | None = None
        self.energy_source: str | None = None
        self.error: str | None = None
        self.seconds = 0.0
        self._started = 0.0

    def _energy_mj(self) -> float | None:
        try:  # Volta and later: millijoules since the driver loaded
            return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except self.nvml.NVMLError:
            return None

    def _throttle(self) -> int:
        getter = getattr(self.nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(getter(self.handle))

    def sample(self) -> dict:
        nvml, handle = self.nvml, self.handle
        self.throttle_mask |= self._throttle()
        return {"t": time.monotonic(),
                "gpu_util_pct": float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                "memory_used_bytes": float(nvml.nvmlDeviceGetMemoryInfo(handle).used),
                "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                "sm_clock_mhz": float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
                "temperature_c": float(nvml.nvmlDeviceGetTemperature(
                    handle, nvml.NVML_TEMPERATURE_GPU))}

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.sample())
            except Exception as error:  # NVMLError (a lost GPU...): no figures, not a crash
                self.error = f"NVML stopped answering: {error}"
                return
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._started = time.monotonic()
        self._energy_start = self._energy_mj()
        self._thread = threading.Thread(target=self._run, name="gpu-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.error is None:
            try:  # the end of the window, whatever the interval
                self.samples.append(self.sample())
            except Exception as error:
                self.error = f"NVML stopped answering: {error}"
        self.seconds = time.monotonic() - self._started
        end = self._energy_mj()
        if self._energy_start is not None and end is not None:
            self.energy_j, self.energy_source = (end - self._energy_start) / 1000.0, "counter"
        else:
            self.energy_j, self.energy_source = _integrate_power(self.samples), "sampled_power"

    def summary(self) -> dict | None:
        """This GPU's median and max of each metric, and its energy over the window; None
        when sampling failed (``error`` says why)."""
        if self.error is not None or not self.samples:
            self.error = self.error or "no samples were taken"
            return None
        out = {name: {"median": statistics.median(s[name] for s in self.samples),
                      "max": max(s[name] for s in self.samples)} for name in METRICS}
        out.update(samples=len(self.samples), seconds=self.seconds, energy_j=self.energy_j,
                   energy_source=self.energy_source,
                   throttle_reasons=throttle_names(self.throttle_mask))
        return out


def _integrate_power(samples: list[dict]) -> float | None:
    """Joules by the trapezoid rule over the power samples."""
    if len(samples) < 2:
        return None
    return sum((b["t"] - a["t"]) * (a["power_w"] + b["power_w"]) / 2
               for a, b in zip(samples, samples[1:], strict=False))


def sampler_for(device, interval_s: float = 0.1, nvml=None) -> tuple[GpuSampler | None, str]:
    """A sampler for this rank's torch device, or None and the reason there is none."""
    if getattr(device, "type", "cpu") != "cuda":
        return None, "not a GPU run: NVML telemetry samples CUDA devices"
    try:
        nvml = nvml or _load_nvml()
    except ImportError:
        return None, "pynvml (nvidia-ml-py) is not installed"
    except Exception as error:  # pynvml.NVMLError: no driver, no permission
        return None, f"NVML did not start: {error}"
    try:
        handle = _handle(nvml, device)
    except nvml.NVMLError as error:
        return None, f"NVML does not know this GPU: {error}"
    return GpuSampler(nvml, handle, interval_s), ""


def _handle(nvml, device):
    """NVML's handle of a torch device. By UUID: under CUDA_VISIBLE_DEVICES, torch's index
    is not NVML's."""
    import torch

    uuid = str(getattr(torch.cuda.get_device_properties(device), "uuid", "") or "")
    if uuid:
        return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    return nvml.nvmlDeviceGetHandleByIndex(device.index or 0)


# --- the GPU's own settings, once per rank: env.ranks[i].gpu_settings ---------------------

# The matrix of ``nvidia-smi topo -m`` is kept up to this many characters (a 16-GPU host
# with its NICs prints about 4,000).
TOPOLOGY_CHARS = 16384


def _ask(nvml, name: str, *args):
    """One NVML getter's answer, or None where this GPU, driver or pynvml lacks it (NVML's
    Not Supported, No Permission; an older pynvml without the function)."""
    getter = getattr(nvml, name, None)
    if getter is None:
        return None
    try:
        return getter(*args)
    except Exception:  # noqa: BLE001 - pynvml.NVMLError and its many subclasses
        return None


def _watts(milliwatts) -> float | None:
    return None if milliwatts is None else float(milliwatts) / 1000.0


def _int(value) -> int | None:
    return None if value is None else int(value)


def _pair(value) -> tuple[bool | None, bool | None]:
    """(current, pending) of NVML's ECC and MIG modes: 1 is enabled."""
    try:
        current, pending = value
    except (TypeError, ValueError):
        return None, None
    return bool(current), bool(pending)


SETTINGS_FIELDS = ("power_limit_w", "enforced_power_limit_w", "default_power_limit_w",
                   "sm_app_clock_mhz", "memory_app_clock_mhz", "sm_default_app_clock_mhz",
                   "memory_default_app_clock_mhz", "sm_max_clock_mhz", "memory_max_clock_mhz",
                   "clock_event_reasons", "ecc_enabled", "ecc_pending", "mig_enabled",
                   "mig_pending", "persistence_mode", "pcie_gen", "pcie_max_gen",
                   "pcie_width", "pcie_max_width", "topology")


def settings_of(nvml, handle, topology: str | None = None) -> dict:
    """What this GPU is set to, each field null where NVML does not answer it: the power
    limit (the configured one, the enforced one and the default), the applications clocks
    (configured and default) beside the maximum, the clock event reasons at this moment
    (clocks held by the applications-clocks setting or ``nvidia-smi -lgc`` read as
    ``applications_clocks_setting``: NVML has no getter for locked clocks), ECC and MIG
    modes (current and pending), persistence mode, the PCIe link's generation and width
    (now and the most it can), and ``nvidia-smi topo -m`` where given."""
    sm, memory = getattr(nvml, "NVML_CLOCK_SM", 1), getattr(nvml, "NVML_CLOCK_MEM", 2)
    ecc, ecc_pending = _pair(_ask(nvml, "nvmlDeviceGetEccMode", handle))
    mig, mig_pending = _pair(_ask(nvml, "nvmlDeviceGetMigMode", handle))
    reasons = _ask(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:
        reasons = _ask(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    persistence = _ask(nvml, "nvmlDeviceGetPersistenceMode", handle)
    return {
        "reason": None,
        "power_limit_w": _watts(_ask(nvml, "nvmlDeviceGetPowerManagementLimit", handle)),
        "enforced_power_limit_w": _watts(_ask(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)),
        "default_power_limit_w": _watts(_ask(nvml, "nvmlDeviceGetPowerManagementDefaultLimit",
                                             handle)),
        "sm_app_clock_mhz": _int(_ask(nvml, "nvmlDeviceGetApplicationsClock", handle, sm)),
        "memory_app_clock_mhz": _int(_ask(nvml, "nvmlDeviceGetApplicationsClock", handle,
                                          memory)),
        "sm_default_app_clock_mhz": _int(_ask(nvml, "nvmlDeviceGetDefaultApplicationsClock",
                                              handle, sm)),
        "memory_default_app_clock_mhz": _int(_ask(
            nvml, "nvmlDeviceGetDefaultApplicationsClock", handle, memory)),
        "sm_max_clock_mhz": _int(_ask(nvml, "nvmlDeviceGetMaxClockInfo", handle, sm)),
        "memory_max_clock_mhz": _int(_ask(nvml, "nvmlDeviceGetMaxClockInfo", handle, memory)),
        "clock_event_reasons": None if reasons is None else throttle_names(int(reasons)),
        "ecc_enabled": ecc, "ecc_pending": ecc_pending,
        "mig_enabled": mig, "mig_pending": mig_pending,
        "persistence_mode": None if persistence is None else bool(persistence),
        "pcie_gen": _int(_ask(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle)),
        "pcie_max_gen": _int(_ask(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle)),
        "pcie_width": _int(_ask(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle)),
        "pcie_max_width": _int(_ask(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle)),
        "topology": topology[:TOPOLOGY_CHARS] if topology else None,
    }


def no_settings(reason: str) -> dict:
    """A GPU rank's settings where NVML gave none: every field null, and why."""
    return {"reason": reason, **dict.fromkeys(SETTINGS_FIELDS)}


def gpu_settings(device, topology: str | None = None, nvml=None) -> dict | None:
    """This rank's GPU settings (``settings_of``); None for a CPU rank; every field null
    with the reason where NVML is absent or does not know the GPU."""
    if getattr(device, "type", "cpu") != "cuda":
        return None
    try:
        nvml = nvml or _load_nvml()
    except ImportError:
        return no_settings("pynvml (nvidia-ml-py) is not installed")
    except Exception as error:  # pynvml.NVMLError: no driver, no permission
        return no_settings(f"NVML did not start: {error}")
    try:
        handle = _handle(nvml, device)
    except Exception as error:  # noqa: BLE001 - NVMLError: not this GPU
        return no_settings(f"NVML does not know this GPU: {error}")
    return settings_of(nvml, handle, topology)


def driver_version(device, nvml=None) -> str | None:
    """The driver this rank's GPU runs under, from NVML; None on CPU or where NVML is
    absent."""
    if getattr(device, "type", "cpu") != "cuda":
        return None
    try:
        nvml = nvml or _load_nvml()
    except Exception:  # noqa: BLE001 - ImportError, NVMLError
        return None
    version = _ask(nvml, "nvmlSystemGetDriverVersion")
    if isinstance(version, bytes):   # pynvml before 11.5 answered bytes
        version = version.decode(errors="replace")
    return str(version) if version else None


def combine(per_rank: list[dict | None], reasons: list[str], samples_per_s: float,
            timed_samples: float) -> dict:
    """The job's telemetry from every rank's summary: medians of the ranks' medians, the
    max of their maxes, the energy of all GPUs together per sample, and samples per watt
    (the job's throughput over all GPUs' mean power)."""
    if not per_rank or any(summary is None for summary in per_rank):
        reason = next((r for r in reasons if r), "no telemetry")
        return {"source": None, "reason": reason}
    out: dict = {"source": "nvml", "reason": None, "gpus": len(per_rank)}
    for name in METRICS:
        out[name] = {"median": statistics.median(s[name]["median"] for s in per_rank),
                     "max": max(s[name]["max"] for s in per_rank)}
    energies = [s["energy_j"] for s in per_rank]
    energy = sum(energies) if all(e is not None for e in energies) else None
    seconds = max(s["seconds"] for s in per_rank)
    out["energy_j"] = energy
    out["energy_source"] = per_rank[0]["energy_source"]
    out["energy_per_sample_j"] = energy / timed_samples if energy and timed_samples else None
    mean_power = energy / seconds if energy and seconds > 0 else None
    out["samples_per_watt"] = samples_per_s / mean_power if mean_power else None
    out["throttle_reasons"] = sorted({r for s in per_rank for r in s["throttle_reasons"]})
    out["per_rank"] = per_rank
    return out
