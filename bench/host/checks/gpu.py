"""The GPUs: the driver is at least the flavour's floor (docker/cuda-flavours.tsv), an
NVSwitch fabric is trained (Fabric Manager), torch inside the image, run with the GPUs
attached (docker run --gpus all), sees CUDA and enough devices, and no GPU is in MIG mode;
and, for the SSH launcher, how many GPUs nvidia-smi lists on a host."""
from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence

from bench import nvidia_smi
from bench.host.checks import FAIL, PASS, WARN, Row
from bench.host.checks.containers import NCCL
from bench.host.checks.flavours import driver_advice, driver_major, refusal_advice
from bench.host.checks.remote import Hosts
from bench.shell import words

# Run in the image with the GPUs attached: what torch itself can use, and its versions.
GPU_PROBE = (f"import json, torch; {NCCL}; ok = torch.cuda.is_available(); "
             "print(json.dumps({'available': ok, 'count': torch.cuda.device_count() if ok "
             "else 0, 'torch': torch.__version__, 'cuda': torch.version.cuda, 'nccl': nccl}))")
DRIVER = "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
# GPUs nvidia-smi lists; 0 on a host without NVIDIA driver (the count of nothing).
GPU_COUNT = "nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true"


def gpu_probe_argv(image: str) -> list[str]:
    """The image's torch with every GPU attached, as `docker compose --profile gpu` runs it."""
    return ["docker", "run", "--rm", "--gpus", "all", "--entrypoint", "python3", image,
            "-c", GPU_PROBE]


def gpu_row(job: Hosts, host: str) -> tuple[Row, str | None]:
    """The ``gpu`` row, and torch/CUDA/NCCL as torch sees them with the GPUs attached
    (None where that could not be read)."""
    if job.gpus_per_node == 0:
        return Row(host, "gpu", PASS, "--gpus-per-node 0: a CPU job, GPUs not checked"), None
    refused, driver = driver_check(job, host)
    if refused is not None:
        return refused, None
    # Before the probe: with the fabric untrained torch sees no GPU, and the probe's failure
    # would point at the container toolkit.
    fabric = nvidia_smi.read_fabric(answers(job, host))
    problem = fabric.problem() if fabric is not None else None
    if problem is not None:
        return Row(host, "gpu", FAIL, problem), None
    trained = fabric is not None and any(gpu.on_nvswitch for gpu in fabric.gpus)
    out = job.run(host, words(gpu_probe_argv(job.image)), timeout=300)
    if out.returncode != 0:
        said = (out.stdout + out.stderr).strip()
        return Row(host, "gpu", FAIL, probe_failure(job, said, driver)), None
    try:
        found = json.loads(out.stdout.strip().splitlines()[-1])
        versions = f"{found['torch']} {found['cuda']} {found['nccl']}"
        available, count = bool(found["available"]), int(found["count"])
    except (ValueError, IndexError, KeyError, TypeError):
        return Row(host, "gpu", FAIL, f"unreadable GPU probe output: {out.stdout[:120]!r}"), None
    flavour = job.cuda
    if not available:
        return Row(host, "gpu", FAIL, f"torch {found['torch']} (CUDA {found['cuda']}) in "
                   f"{job.image} sees no GPU although nvidia-smi reports driver {driver}: "
                   "update nvidia-container-toolkit (1.17.5 or newer puts the image's CUDA "
                   "compat libraries in place), and check that the image was built for "
                   f"this driver (--torch-flavour {flavour.name}, "
                   "docker/cuda-flavours.tsv)"), versions
    if count < job.gpus_per_node:
        return Row(host, "gpu", FAIL, f"{count} GPU(s) visible to torch, --gpus-per-node "
                   f"{job.gpus_per_node} needed: check nvidia-smi -L on {host}, or lower "
                   "--gpus-per-node"), versions
    return Row(host, "gpu", PASS, f"{count} GPU(s) usable by torch {found['torch']}, "
               f"CUDA {found['cuda']}, NCCL {found['nccl']}; driver {driver} >= "
               f"{flavour.min_driver} (TORCH_FLAVOUR={flavour.name})"
               + ("; NVSwitch fabric trained" if trained else "")), versions


def answers(job: Hosts, host: str) -> nvidia_smi.Run:
    """nvidia-smi on ``host``, as bench.nvidia_smi's readings ask it: (status, output)."""
    def run(argv: Sequence[str]) -> tuple[int, str]:
        out = job.run(host, words(argv))
        return out.returncode, out.stdout + out.stderr
    return run


def mig_row(job: Hosts, host: str) -> Row | None:
    """The ``mig`` row: each GPU's MIG mode, FAIL where one is in MIG mode (each rank
    would run on a slice, or fail). None for a CPU job, and where nvidia-smi is missing or
    fails (the ``gpu`` row says so)."""
    if job.gpus_per_node == 0:
        return None
    run = answers(job, host)
    code, out = run(nvidia_smi.MIG_QUERY)
    if "is not a valid field to query" in out:
        return Row(host, "mig", PASS, "this driver reports no MIG mode (MIG came with R450)")
    if code != 0:
        return None
    gpus = nvidia_smi.mig_from_csv(out)
    if not gpus:
        return Row(host, "mig", WARN, f"unreadable MIG mode from nvidia-smi: {out[:120]!r}")
    enabled = [gpu for gpu in gpus if gpu.enabled]
    slices: dict[str, tuple[str, ...]] = {}
    if enabled:
        code, listing = run(nvidia_smi.LIST)
        slices = nvidia_smi.mig_slices(listing) if code == 0 else {}
    modes = ", ".join(f"GPU {gpu.index} {gpu.mode.strip('[]')}"
                      + (f" ({len(slices.get(gpu.index, ()))} slices)" if gpu.enabled else "")
                      for gpu in gpus)
    if not enabled:
        return Row(host, "mig", PASS, f"MIG mode: {modes}")
    first = enabled[0].index
    return Row(host, "mig", FAIL, f"MIG mode: {modes}: {nvidia_smi.MIG_WHY}, so this host's "
               f"ranks would run on slices or fail: turn MIG off (sudo nvidia-smi -i {first} "
               "-mig 0, then reset the GPU if it says pending)")


def driver_check(job: Hosts, host: str) -> tuple[Row | None, str]:
    """(None, the driver version) when it is at least the flavour's floor; else the row
    that refuses it (WARN on a host without NVIDIA driver, FAIL otherwise)."""
    smi = job.run(host, DRIVER)
    said = (smi.stdout + smi.stderr).strip()
    if smi.returncode == 127:  # the shell's "command not found"
        return Row(host, "gpu", WARN, "no NVIDIA driver (nvidia-smi not found): a CPU host "
                   "(gloo only)"), ""
    if smi.returncode != 0:
        # nvidia-smi is there but cannot reach the driver: a GPU host torch cannot use.
        last = (said.splitlines() or [f"exit {smi.returncode}"])[-1][:120]
        return Row(host, "gpu", FAIL, f"nvidia-smi fails on {host}: {last}: reload the "
                   "driver (after a driver update, a library mismatch needs a reboot)"), ""
    driver = (smi.stdout.strip().splitlines() or [""])[0].strip()
    major = driver_major(driver)
    if major is None:
        return Row(host, "gpu", FAIL, f"nvidia-smi reports no driver version ('{driver}'): "
                   "check the driver with nvidia-smi"), ""
    if major < job.cuda.min_driver:
        return Row(host, "gpu", FAIL, driver_advice(driver, job.cuda, job.table)), ""
    return None, driver


def probe_failure(job: Hosts, said: str, driver: str) -> str:
    """Why the GPU probe's container did not run, and the fix, from what Docker said."""
    refused = refusal_advice(said, driver, job.cuda, job.table)
    if refused:
        return refused
    if "could not select device driver" in said or "unknown runtime" in said:
        return ("Docker cannot give containers the GPUs: install nvidia-container-toolkit "
                "(scripts/install-host.sh gpu), then restart Docker")
    last = (said.splitlines() or ["no output"])[-1][:160]
    return f"the GPU probe (docker run --gpus all {job.image}) failed: {last}"


def gpu_count_row(host: str, index: int, out: subprocess.CompletedProcess,
                  wanted: int) -> Row:
    """The ``gpus`` row of node ``index``'s host from GPU_COUNT's answer: it holds the
    ``wanted`` processes (the most any topology puts there), one GPU each. A host without
    NVIDIA driver (a count of 0) runs CPU jobs: not judged."""
    text = out.stdout.strip() or "0"
    if not text.isdigit():
        return Row(host, "gpus", FAIL, f"unexpected GPU count {text[:40]!r} from nvidia-smi")
    gpus = int(text)
    if gpus == 0:
        return Row(host, "gpus", PASS, "no NVIDIA GPU: a CPU host")
    if wanted > gpus:
        return Row(host, "gpus", FAIL, f"--topologies=...x{wanted}: host {host} has {gpus} "
                   f"GPU(s): at most {index + 1}x{gpus} there")
    return Row(host, "gpus", PASS, f"{gpus} GPU(s), at most {wanted} process(es) there")
