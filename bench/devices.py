"""Peak dense throughput per device and precision, for MFU.

Dense (no structured sparsity) vendor figures in TFLOP/s. GeForce tensor cores run
bf16/fp16 with fp32 accumulation (what autocast uses) at half their fp16-accumulate rate,
and their tf32 at the fp32 rate; those are the figures here (L40S runs fp32 accumulation at
full rate). Sources: NVIDIA H100/H200/A100/L40S datasheets, the Ampere GA102/GA104 and Ada
AD102/AD103 architecture whitepapers; ../shared/GPU-REVIEW.md (W2) has the derivations.

Names are matched exactly, after normalising what ``torch.cuda.get_device_name()`` returns
(case, the "NVIDIA"/"GeForce" prefixes, spacing and dashes). A variant that is not listed
(a Laptop part, a new suffix) gets no peak, hence no MFU, rather than the base card's: a
missing figure is better than a wrong one.
"""
from __future__ import annotations

import re

_H100_SXM = {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}
_H100_NVL = {"fp32": 60.0, "tf32": 417.5, "bf16": 835.0, "fp16": 835.0}

# Key -> (peaks, the normalised names torch reports for it).
DEVICES: dict[str, tuple[dict[str, float], tuple[str, ...]]] = {
    "H100 SXM": (_H100_SXM, ("h100 80gb hbm3", "h100 sxm5 80gb", "h100")),
    "H100 PCIe": ({"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0},
                  ("h100 pcie",)),
    "H100 NVL": (_H100_NVL, ("h100 nvl",)),
    "H200": (_H100_SXM, ("h200", "h200 141gb hbm3e")),
    "H200 NVL": (_H100_NVL, ("h200 nvl",)),
    "GH200": (_H100_SXM, ("gh200 480gb", "gh200 144g hbm3e", "gh200")),
    "A100": ({"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
             ("a100 sxm4 40gb", "a100 sxm4 80gb", "a100 pcie 40gb", "a100 pcie 80gb",
              "a100 80gb pcie", "a100")),
    "L40S": ({"fp32": 91.6, "tf32": 183.0, "bf16": 362.0, "fp16": 362.0}, ("l40s",)),
    "RTX 4090": ({"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2}, ("rtx 4090",)),
    "RTX 4090 D": ({"fp32": 73.5, "tf32": 73.5, "bf16": 147.0, "fp16": 147.0},
                   ("rtx 4090 d",)),
    "RTX 4080": ({"fp32": 48.7, "tf32": 48.7, "bf16": 97.5, "fp16": 97.5}, ("rtx 4080",)),
    "RTX 4080 SUPER": ({"fp32": 52.2, "tf32": 52.2, "bf16": 104.4, "fp16": 104.4},
                       ("rtx 4080 super",)),
    "RTX 3060": ({"fp32": 12.7, "tf32": 12.7, "bf16": 25.5, "fp16": 25.5}, ("rtx 3060",)),
    "RTX 3060 Ti": ({"fp32": 16.2, "tf32": 16.2, "bf16": 32.4, "fp16": 32.4},
                    ("rtx 3060 ti",)),
}
NO_PEAK = "none"  # CPUs and unlisted devices: MFU is not computed
_BY_NAME = {name: key for key, (_, names) in DEVICES.items() for name in names}


def normalise(device_name: str) -> str:
    """``NVIDIA GeForce RTX 4090 D`` -> ``rtx 4090 d``; ``NVIDIA A100-SXM4-80GB`` ->
    ``a100 sxm4 80gb``."""
    text = re.sub(r"[\s_-]+", " ", device_name.lower()).strip()
    return re.sub(r"^(nvidia )?(geforce )?", "", text)


def device_key(device_name: str) -> str:
    """The table row for a device name, or ``none``."""
    return _BY_NAME.get(normalise(device_name), NO_PEAK)


def peak_tflops(device_name: str, precision: str) -> float | None:
    key = device_key(device_name)
    return None if key == NO_PEAK else DEVICES[key][0][precision]


def job_peak(device_names: list[str], precision: str) -> tuple[str, float | None]:
    """(key, peak) for a job: the slowest device sets the pace of a synchronous job, so the
    peak is the smallest over its ranks; any rank on an unlisted device means no MFU."""
    keys = sorted({device_key(name) for name in device_names})
    if not keys or NO_PEAK in keys:
        return NO_PEAK, None
    key = min(keys, key=lambda k: DEVICES[k][0][precision])
    return (key if len(keys) == 1 else "+".join(keys)), DEVICES[key][0][precision]
