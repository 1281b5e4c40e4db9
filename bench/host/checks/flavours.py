"""docker/cuda-flavours.tsv read for the GPU checks: each flavour's CUDA line and driver
floor, the flavour a driver runs, and the fix for a driver or an image that do not fit
(word for word what scripts/check-gpu.sh prints: tests/test_doctor_gpu.py runs both)."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

FLAVOURS = Path(__file__).resolve().parents[3] / "docker" / "cuda-flavours.tsv"
# What nvidia-container-cli says when the image's NVIDIA_REQUIRE_CUDA is above the driver's.
_CUDA_REFUSAL = re.compile(r"unsatisfied condition: cuda\s*>=\s*([0-9]+(?:\.[0-9]+)?)")


@dataclasses.dataclass(frozen=True, slots=True)
class Flavour:
    """A row of docker/cuda-flavours.tsv: the torch wheels' CUDA line and its driver floor."""

    name: str
    cuda: str
    min_driver: int


def flavours(table: Path = FLAVOURS) -> dict[str, Flavour]:
    """{name: flavour} of the table (``default`` is an alias of one of them)."""
    rows = {}
    for line in table.read_text().splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) < 4:
            continue
        rows[fields[0]] = Flavour(fields[0], fields[1], int(fields[2]))
    return rows


def flavour_for_driver(major: int, table: dict[str, Flavour]) -> Flavour | None:
    """The newest CUDA line a driver runs (``default`` is an alias, never named)."""
    fits = [f for f in table.values() if f.name != "default" and f.min_driver <= major]
    return max(fits, key=lambda f: _cuda_key(f.cuda), default=None)


def flavour_for_cuda(cuda: str, table: dict[str, Flavour]) -> Flavour | None:
    """The named flavour of CUDA line ``cuda`` (what an image asking for cuda>=X was built
    for), or None where the table has no such line. ``13`` is 13.0."""
    wanted = _cuda_key(cuda if "." in cuda else cuda + ".0")
    return next((f for f in table.values()
                 if f.name != "default" and _cuda_key(f.cuda) == wanted), None)


def _cuda_key(cuda: str) -> tuple[int, ...]:
    return tuple(int(x) for x in cuda.split("."))


def driver_major(driver: str) -> int | None:
    """The major number of an nvidia-smi driver version (580 of 580.95.05), or None."""
    major = driver.split(".")[0]
    return int(major) if major.isascii() and major.isdigit() else None


def driver_advice(driver: str, flavour: Flavour, table: dict[str, Flavour]) -> str:
    """What to do when ``driver`` is below ``flavour``'s floor: the exact build line of a
    flavour it does run. Word for word what scripts/check-gpu.sh prints (one wording:
    tests/test_doctor_gpu.py runs both)."""
    works = flavour_for_driver(driver_major(driver) or 0, table)
    if works is None:
        return (f"driver {driver} is older than every flavour's minimum "
                f"(docker/cuda-flavours.tsv): update the driver to {flavour.min_driver} or "
                "newer")
    return (f"driver {driver} is older than {flavour.min_driver}, the minimum for "
            f"TORCH_FLAVOUR={flavour.name} (CUDA {flavour.cuda}). Update the driver, or build "
            f"for this one: make build TORCH_FLAVOUR={works.name} (then pass "
            f"TORCH_FLAVOUR={works.name} to the bench targets too)")


def refusal_advice(said: str, driver: str, flavour: Flavour,
                   table: dict[str, Flavour]) -> str | None:
    """The fix for a container the NVIDIA runtime refused with ``unsatisfied condition:
    cuda>=X`` (the image needs a newer driver), or None for any other failure. The floor
    is the one of the CUDA line the image asks for: --torch-flavour may not be the image's."""
    match = _CUDA_REFUSAL.search(said)
    if match is None:
        return None
    cuda = match.group(1)
    needed = flavour_for_cuda(cuda, table)
    head = f"the image needs CUDA {cuda} (the NVIDIA runtime refused it: cuda>={cuda}): "
    mismatch = "" if needed is None or needed.cuda == flavour.cuda else (
        f"; --torch-flavour {flavour.name} (CUDA {flavour.cuda}) is not the image's "
        f"flavour, {needed.name}")
    major = driver_major(driver)
    if needed is None:
        works = flavour_for_driver(major or 0, table)
        fix = (f"make build TORCH_FLAVOUR={works.name} (then pass TORCH_FLAVOUR={works.name} "
               "to the bench targets too)" if works else "update the driver")
        return head + (f"docker/cuda-flavours.tsv has no CUDA {cuda} line, so the image was "
                       f"not built from it; for driver {driver}: {fix}")
    if major is not None and major >= needed.min_driver:
        return head + (f"driver {driver} meets its minimum {needed.min_driver}, so the "
                       "container toolkit misreads it: update nvidia-container-toolkit "
                       "(scripts/install-host.sh gpu) and restart Docker") + mismatch
    return head + driver_advice(driver, needed, table) + mismatch
