"""What the trainer reads and shares: /dev/shm is large enough (the trainer containers
share the host's: ipc host) and the dataset volume mounts in the image and matches its
manifest."""
from __future__ import annotations

from bench.host.checks import FAIL, PASS, WARN, Row
from bench.host.checks.remote import Hosts, Remote
from bench.shell import words

SHM_MINIMUM = 1 << 30


def shm_row(remote: Remote, host: str) -> Row:
    """/dev/shm on ``host`` is at least 1 GiB."""
    out = remote.run(host, "df -k --output=size /dev/shm | tail -n 1")
    text = out.stdout.strip()
    size = int(text) * 1024 if text.isdigit() else 0
    result = PASS if size >= SHM_MINIMUM else FAIL
    return Row(host, "shm", result, f"/dev/shm {size / (1 << 30):.1f} GiB" +
               ("" if result == PASS else ": enlarge it (mount -o remount,size=8G /dev/shm)"))


def dataset_row(job: Hosts, host: str) -> Row:
    """The settings' DATA_MOUNT_* volume mounts in the image on ``host`` and the dataset
    there matches its manifest (16 files sampled); WARN where no volume is set."""
    get = job.settings.get
    if not get("DATA_MOUNT_TYPE"):
        return Row(host, "dataset", WARN, "no DATA_MOUNT_* settings: dataset not checked")
    mount = (f"type=volume,dst=/data,volume-driver=local,"
             f"volume-opt=type={get('DATA_MOUNT_TYPE')},"
             f"\"volume-opt=o={get('DATA_MOUNT_OPTIONS')}\","
             f"volume-opt=device={get('DATA_DEVICE')}")
    out = job.run(host, words(["docker", "run", "--rm", "--mount", mount, "--entrypoint",
                               "python3", job.image, "-m", "bench", "dataset", "verify",
                               f"/data/{job.dataset}", "--sample", "16"]), timeout=300)
    text = (out.stdout + out.stderr).strip().splitlines()
    if out.returncode == 0:
        return Row(host, "dataset", PASS, text[-1] if text else "matches its manifest")
    return Row(host, "dataset", FAIL, (text[-1] if text else "mount failed")[:160])
