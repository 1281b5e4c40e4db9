"""What nvidia-smi says of a machine's GPUs beyond their count: the NVSwitch fabric and MIG.

- The fabric. On an NVSwitch system (HGX/DGX A100, H100) CUDA starts on no GPU until the
  nvidia-fabricmanager service has trained the fabric: torch then sees no CUDA device and
  the cause is nowhere in its words. ``nvidia-smi --query-gpu=fabric.state,fabric.status``
  says it per GPU (``Completed``/``Success`` when trained, ``N/A`` on a GPU without
  NVSwitch); a driver that knows no such field refuses the query (exit 2, ``Field
  "fabric.state" is not a valid field to query.``) and ``nvidia-smi -q``'s ``Fabric``
  section is read instead; a driver older still reports neither, and nothing is judged.
- MIG. A GPU in MIG mode gives each process one MIG device (a slice) at most, so ranks
  placed on it by GPU index run on a slice, or on nothing.

Every line read is matched whole (fullmatch) against what nvidia-smi prints; one that is
not is left unjudged, never guessed at. scripts/check-gpu.sh says ``fabric_problem``'s line
word for word (tests/test_fabric_mig.py holds them together).

No torch: the shared core. bench.config names Fabric Manager through ``no_cuda_reason``
where torch sees no GPU; the host side (bench doctor, the GPU sharing of simulated nodes)
reads the same answers from a host over ssh or here.
"""
from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence

FABRIC_QUERY = ("nvidia-smi", "--query-gpu=index,driver_version,fabric.state,fabric.status",
                "--format=csv,noheader")
FULL_QUERY = ("nvidia-smi", "-q")
MIG_QUERY = ("nvidia-smi", "--query-gpu=index,uuid,mig.mode.current", "--format=csv,noheader")
LIST = ("nvidia-smi", "-L")
LOCAL_TIMEOUT_S = 30.0
MIG_WHY = "CUDA gives a process one MIG device (a slice of a GPU) at most"
FABRIC_FIX = ("sudo systemctl start nvidia-fabricmanager (the nvidia-fabricmanager package "
              "must match the driver's version")

# A state or status as nvidia-smi prints it: words, maybe in brackets ("[N/A]").
_WORD = r"\[?[A-Za-z][A-Za-z0-9 _/.()-]{0,63}\]?"
_INDEX = r"[0-9]{1,3}"
_DRIVER = r"[0-9]{2,4}(?:\.[0-9]{1,4}){1,3}"
_GPU_UUID = r"GPU-[0-9A-Fa-f-]{8,64}"
# MIG-<uuid> (R470 and later), or MIG-GPU-<uuid>/<GPU instance>/<compute instance> (R450).
MIG_UUID = re.compile(r"MIG-(?:[0-9A-Fa-f-]{8,64}|GPU-[0-9A-Fa-f-]{8,64}/[0-9]{1,3}/[0-9]{1,3})")
_FABRIC_LINE = re.compile(rf"({_INDEX}), ({_DRIVER}), ({_WORD}), ({_WORD})")
_MIG_LINE = re.compile(rf"({_INDEX}), ({_GPU_UUID}), ({_WORD})")
_LIST_GPU = re.compile(rf"GPU ({_INDEX}): [^\x00-\x1f]{{1,120}} \(UUID: ({_GPU_UUID})\)")
_LIST_MIG = re.compile(
    rf" +MIG [0-9a-z.+]{{1,40}} +Device +{_INDEX}: \(UUID: ({MIG_UUID.pattern})\)")
# nvidia-smi -q: a GPU opens at its PCI address, a section is a heading four spaces in,
# its values eight spaces in; the driver's version heads the log.
_Q_GPU = re.compile(r"GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
_Q_SECTION = re.compile(r" {4}([A-Za-z][A-Za-z0-9 ]{0,63})")
_Q_VALUE = re.compile(rf" {{8}}([A-Za-z][A-Za-z ]{{0,63}}?) *: ({_WORD})")
_Q_DRIVER = re.compile(rf"Driver Version *: ({_DRIVER})")
# What a GPU without NVSwitch, or a field the GPU does not have, reads as.
_NOT_THERE = {"N/A", "[N/A]", "Not Supported", "[Not Supported]"}

# How a reading runs one nvidia-smi command: (exit status, what it printed).
Run = Callable[[Sequence[str]], tuple[int, str]]


@dataclasses.dataclass(frozen=True, slots=True)
class Fabric:
    """One GPU's NVSwitch fabric as nvidia-smi reports it."""

    gpu: str      # its index
    state: str    # Completed, In Progress, Not Started, N/A ...
    status: str   # Success, N/A, or the error that stopped the training

    @property
    def trained(self) -> bool:
        """CUDA may start on it: the fabric trained, or no fabric at all."""
        return self.state in _NOT_THERE | {"Completed"} and \
            self.status in _NOT_THERE | {"Success"}

    @property
    def on_nvswitch(self) -> bool:
        return self.state not in _NOT_THERE


@dataclasses.dataclass(frozen=True, slots=True)
class FabricReading:
    gpus: tuple[Fabric, ...]
    driver: str   # the driver's version, which the fabricmanager package must match

    def problem(self) -> str | None:
        return fabric_problem(self.gpus, self.driver)


@dataclasses.dataclass(frozen=True, slots=True)
class MigGpu:
    """One GPU's MIG mode, and the MIG devices (slices) nvidia-smi -L lists under it."""

    index: str
    uuid: str
    mode: str                           # Enabled, Disabled, or [N/A] (not MIG-capable)
    slices: tuple[str, ...] = ()        # MIG-... UUIDs

    @property
    def enabled(self) -> bool:
        return self.mode == "Enabled"


def rejected(returncode: int, out: str) -> bool:
    """Whether nvidia-smi refused a --query-gpu (a field this driver does not know)."""
    return returncode != 0 or "is not a valid field to query" in out


def fabric_from_csv(text: str) -> FabricReading | None:
    """FABRIC_QUERY's answer; None where a line is not what nvidia-smi prints."""
    gpus, driver = [], ""
    for line in filter(None, map(str.strip, text.splitlines())):
        found = _FABRIC_LINE.fullmatch(line)
        if found is None:
            return None
        index, driver, state, status = found.groups()
        gpus.append(Fabric(index, state, status))
    return FabricReading(tuple(gpus), driver) if gpus else None


def fabric_from_q(text: str) -> FabricReading | None:
    """``nvidia-smi -q``'s Fabric sections, GPU by GPU in the order listed (the index
    order); None where a GPU has none (a driver older than the fabric query), or the
    driver's version is missing."""
    states: list[dict[str, str]] = []
    driver, section = "", ""
    for line in text.splitlines():
        line = line.rstrip()
        if _Q_GPU.fullmatch(line):
            states.append({})
            section = ""
        elif (head := _Q_SECTION.fullmatch(line)) is not None:
            section = head.group(1)
        elif (value := _Q_VALUE.fullmatch(line)) is not None:
            if states and section == "Fabric" and value.group(1) in ("State", "Status"):
                states[-1][value.group(1)] = value.group(2)
        elif not line.startswith(" ") and (version := _Q_DRIVER.fullmatch(line)):
            driver = version.group(1)
    if not driver or not states or not all("State" in s and "Status" in s for s in states):
        return None
    return FabricReading(tuple(Fabric(str(i), s["State"], s["Status"])
                               for i, s in enumerate(states)), driver)


def read_fabric(run: Run) -> FabricReading | None:
    """The fabric of every GPU: the query, else (a driver that rejects it) ``-q``; None
    where nvidia-smi reports none, or nothing readable."""
    code, out = run(FABRIC_QUERY)
    if not rejected(code, out):
        return fabric_from_csv(out)
    code, out = run(FULL_QUERY)
    return fabric_from_q(out) if code == 0 else None


def fabric_problem(gpus: Sequence[Fabric], driver: str) -> str | None:
    """One line naming Fabric Manager, the first GPU it holds back, its state and the fix;
    None where every GPU may start CUDA."""
    held = [gpu for gpu in gpus if not gpu.trained]
    if not held:
        return None
    first = held[0]
    more = f" (and {len(held) - 1} more)" if len(held) > 1 else ""
    return (f"Fabric Manager: GPU {first.gpu}{more} reports NVSwitch fabric state "
            f"{first.state}, status {first.status}: CUDA starts on no GPU of this system "
            f"until the fabric is trained: {FABRIC_FIX}, {driver})")


def mig_from_csv(text: str) -> list[MigGpu] | None:
    """MIG_QUERY's answer; None where a line is not what nvidia-smi prints."""
    gpus = []
    for line in filter(None, map(str.strip, text.splitlines())):
        found = _MIG_LINE.fullmatch(line)
        if found is None:
            return None
        index, uuid, mode = found.groups()
        gpus.append(MigGpu(index, uuid, mode))
    return gpus


def mig_slices(listing: str) -> dict[str, tuple[str, ...]]:
    """GPU index -> the MIG devices ``nvidia-smi -L`` lists under it (lines it does not
    recognise are skipped)."""
    slices: dict[str, list[str]] = {}
    current = None
    for line in listing.splitlines():
        line = line.rstrip()
        if (gpu := _LIST_GPU.fullmatch(line)) is not None:
            current = gpu.group(1)
            slices[current] = []
        elif current is not None and (mig := _LIST_MIG.fullmatch(line)) is not None:
            slices[current].append(mig.group(1))
    return {gpu: tuple(found) for gpu, found in slices.items()}


def read_mig(run: Run) -> list[MigGpu] | None:
    """Every GPU's MIG mode, with the slices of those in MIG mode; empty where this driver
    has no MIG (older than R450); None where nvidia-smi is missing, fails, or answers
    nothing readable."""
    code, out = run(MIG_QUERY)
    if "is not a valid field to query" in out:
        return []
    gpus = mig_from_csv(out) if code == 0 else None
    if gpus is None or not any(gpu.enabled for gpu in gpus):
        return gpus
    code, listing = run(LIST)
    slices = mig_slices(listing) if code == 0 else {}
    return [dataclasses.replace(gpu, slices=slices.get(gpu.index, ())) for gpu in gpus]


def mig_fix(gpu: MigGpu) -> str:
    """How to run on a GPU in MIG mode: MIG off, or one rank on one named slice."""
    named = gpu.slices[0] if gpu.slices else "MIG-<UUID from nvidia-smi -L>"
    return (f"turn MIG off (sudo nvidia-smi -i {gpu.index} -mig 0, then reset the GPU if it "
            f"says pending), or run one rank on one slice: CUDA_VISIBLE_DEVICES={named} with "
            "--topologies 1x1")


def run_here(argv: Sequence[str]) -> tuple[int, str]:
    """One nvidia-smi command on this machine; 127 where there is none, as a shell says."""
    if shutil.which(argv[0]) is None:
        return 127, ""
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True,
                             timeout=LOCAL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return 124, ""
    return out.returncode, out.stdout + out.stderr


def no_cuda_reason(run: Run = run_here) -> str:
    """Why torch sees no CUDA device, where nvidia-smi shows it (Fabric Manager), and the
    fix; else the plain refusal."""
    reading = read_fabric(run)
    problem = reading.problem() if reading is not None else None
    if problem is not None:
        return f"no CUDA device is visible to torch: {problem}"
    return "no CUDA device is visible to torch; use --device cpu"
