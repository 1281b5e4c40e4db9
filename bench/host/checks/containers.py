"""Containers: the Docker engine and Compose answer, the trainer image is there (on a host
over ssh, or on this one for the Compose launcher), and it is the same image everywhere."""
from __future__ import annotations

import subprocess

from bench.host.checks import FAIL, PASS, Row
from bench.host.checks.remote import Remote
from bench.shell import words

# torch/CUDA/NCCL as one comparable string. NCCL's version is linked in, so it reads
# without a GPU; a CPU build has none.
NCCL = ("n = torch.cuda.nccl.version() if hasattr(torch._C, '_nccl_version') else None; "
        "nccl = '.'.join(map(str, n)) if isinstance(n, tuple) else n")
VERSIONS = f"import torch; {NCCL}; print(torch.__version__, torch.version.cuda, nccl)"
LOCAL = "local"   # the host column of a check run on this machine
# (image id, torch/CUDA/NCCL) as a host reports them, or None where it has no image.
Found = tuple[str, str]


def docker_row(remote: Remote, host: str) -> Row:
    """The Docker engine answers on ``host`` and Compose (v2 or v1) is installed."""
    out = remote.run(host, "docker info >/dev/null 2>&1 && (docker compose version "
                     ">/dev/null 2>&1 || docker-compose version >/dev/null 2>&1)")
    if out.returncode == 0:
        return Row(host, "docker", PASS, "engine answers, Compose installed")
    return Row(host, "docker", FAIL, "Docker or Compose missing or not running: "
               "scripts/install-host.sh docker, then scripts/ensure-docker.sh")


def image_row(remote: Remote, host: str, image: str) -> tuple[Row, Found | None]:
    """``image`` is on ``host``: its id and the torch/CUDA/NCCL inside (one container)."""
    ident = remote.run(host, words(["docker", "image", "inspect", "-f", "{{.Id}}", image]))
    if ident.returncode != 0:
        return Row(host, "image", FAIL, f"image {image} missing on {host}: run make build "
                   "there, or docker save it here and docker load it there"), None
    versions = remote.run(host, words(["docker", "run", "--rm", "--entrypoint", "python3",
                                       image, "-c", VERSIONS]), timeout=300)
    found = versions.stdout.strip() if versions.returncode == 0 else "unreadable"
    return (Row(host, "image", PASS, f"{ident.stdout.strip()[:19]}, torch/CUDA/NCCL {found}"),
            (ident.stdout.strip(), found))


def same_image_rows(images: dict[str, Found | None]) -> list[Row]:
    """A FAIL per host where the hosts' images (id, or torch/CUDA/NCCL) differ."""
    present = {host: found for host, found in images.items() if found}
    if len(set(present.values())) <= 1:
        return []
    return [Row(host, "image", FAIL, f"differs across hosts: {image_id[:19]} ({versions}); "
                "build or load the same image everywhere")
            for host, (image_id, versions) in present.items()]


def local_image_row(image: str) -> Row:
    """``image`` is on this machine (the Compose launcher's nodes all start from it); no
    container is started, so it costs one ``docker image inspect``."""
    try:
        out = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", image],
                             capture_output=True, text=True)
    except FileNotFoundError:
        return Row(LOCAL, "image", FAIL, "docker not found: scripts/install-host.sh docker")
    if out.returncode != 0:
        return Row(LOCAL, "image", FAIL, f"--image={image}: no such image here: build it "
                   "with `make build` (GPU) or `make build-cpu`")
    return Row(LOCAL, "image", PASS, f"{image} {out.stdout.strip()[:19]}")
