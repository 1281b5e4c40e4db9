"""Peak dense throughput per device and precision, for MFU.

Dense (no structured sparsity) vendor figures in TFLOP/s. Data-centre parts are the SXM
versions unless the name says PCIe. GeForce tensor cores run bf16/fp16 with fp32
accumulation (what autocast uses) at half their fp16-accumulate rate, and their tf32 at
the fp32 rate; those are the figures here. Sources: NVIDIA H100/H200/A100 datasheets, the
Ampere GA102 and Ada AD102 architecture whitepapers.
"""
from __future__ import annotations

# Matched against torch.cuda.get_device_name(), most specific first.
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H100 PCIe": {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0},
    "H100": {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
    "H200": {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
    "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
    "RTX 4090": {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2},
    "RTX 4080": {"fp32": 48.7, "tf32": 48.7, "bf16": 97.5, "fp16": 97.5},
    "RTX 3060": {"fp32": 12.7, "tf32": 12.7, "bf16": 25.5, "fp16": 25.5},
}
NO_PEAK = "none"  # CPUs and unlisted devices: MFU is not computed


def device_key(device_name: str) -> str:
    """The table row for a device name, or ``none``."""
    for key in PEAK_TFLOPS:
        if key.lower() in device_name.lower():
            return key
    return NO_PEAK


def peak_tflops(device_name: str, precision: str) -> float | None:
    row = PEAK_TFLOPS.get(device_key(device_name))
    return None if row is None else row[precision]
