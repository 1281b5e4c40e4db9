"""The lab's shared data: an NFS server on its own emulated host, behind its own link.

A lab's dataset lives on one server that every node reads through the same switch, so the
server's link is shared by all of them. To judge the data path the way it is in a lab,
``--launcher netns --nfs-export DIR`` serves DIR from the stack's NFS image (NFS-Ganesha,
``NFS_IMAGE``, read-only, NFSv4 on TCP 2049, the same hardening as Compose's nfs service)
in a container with no network of its own, whose namespace then joins the lab's switch as
one more host (``netlab.Lab.attach_server``), its link shaped at ``--nfs-link``. The nodes
read it at ``nfs://169.254.100.254/datasets/...`` with libnfs's user-space client (this
kernel has no NFS client): ``bench accept ... -- --data-url URL``.

The container is removed when the job ends, however it ends; one left by a harness killed
outright is removed by the next lab (its name carries its owner's pid, as the lab's
namespaces do).
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.host import netlab
from bench.options import ConfigError, check_image

REPO = Path(__file__).resolve().parents[2]
SECCOMP_PROFILE = REPO / "nfs" / "seccomp.json"
DEFAULT_IMAGE = "bench-nfs:latest"
PSEUDO_PATH = "/datasets"
READY_S = 60
# The export travels in docker's --mount, where a comma or quote would start another field.
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9_.+@=/-]*")


def url(path: str = "") -> str:
    """The nfs:// URL of ``path`` under the export, as the lab's nodes reach it."""
    tail = f"/{path.strip('/')}" if path.strip("/") else ""
    return f"nfs://{netlab.SERVER_ADDRESS}{PSEUDO_PATH}{tail}?version=4"


def check_export(text: str, setting: str = "--nfs-export") -> Path:
    """The export directory: an existing directory, by a plain absolute path."""
    path = Path(text).resolve()
    if not _PLAIN_PATH.fullmatch(str(path)) or len(str(path)) > 1024:
        raise ConfigError(setting, text, "must be a directory whose path is letters, digits "
                          "and '_.+@=/-' only (it is passed to docker --mount)")
    if not path.is_dir():
        raise ConfigError(setting, text, "is not a directory: give the directory to serve, "
                          "e.g. the export `make dataset` staged")
    return path


def image() -> str:
    """NFS_IMAGE (as Compose's nfs service), or the image `make build-nfs` tags."""
    return check_image(os.environ.get("NFS_IMAGE") or DEFAULT_IMAGE, "NFS_IMAGE")


def remove_stale() -> list[str]:
    """Remove lab NFS containers whose owner process is gone."""
    names = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}", "--filter",
                            f"name=^{netlab.PREFIX}-"], capture_output=True, text=True)
    stale = [name for name in names.stdout.split()
             if (owned := netlab._OWNED.match(name)) and not netlab._pid_alive(
                 int(owned.group(1)))]
    for name in stale:
        subprocess.run(["docker", "rm", "-f", "--", name], capture_output=True)
    return stale


def _docker(argv: list[str]) -> str:
    done = subprocess.run(["docker", *argv], capture_output=True, text=True)
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["no message"])[-1][:300]
        raise netlab.LabError(f"the lab's NFS server: docker {argv[0]} failed: {detail}")
    return done.stdout.strip()


def _wait_ready(lab: netlab.Lab, name: str) -> None:
    """Until node 0 lists the export (the server answers through the lab's switch)."""
    deadline = time.monotonic() + READY_S
    while True:
        listed = subprocess.run(["ip", "netns", "exec", lab.nodes[0].namespace, "nfs-ls",
                                 url()], capture_output=True, text=True)
        if listed.returncode == 0:
            return
        if time.monotonic() > deadline:
            logs = subprocess.run(["docker", "logs", "--tail", "5", name],
                                  capture_output=True, text=True)
            raise netlab.LabError(f"the lab's NFS server did not answer at {url()} in "
                                  f"{READY_S} s: {listed.stderr.strip()[:200]}; its log: "
                                  f"{(logs.stdout + logs.stderr).strip()[-300:]}")
        time.sleep(0.5)


@contextmanager
def served(lab: netlab.Lab, export: Path, rate_bps: int | None) -> Iterator[str]:
    """Serve ``export`` from a host of ``lab`` at ``rate_bps`` (default: the lab's link);
    yields the export's URL. Call inside the lab's ``with``."""
    remove_stale()
    name = f"{lab.switch[:-len('-sw')]}-nfs"
    try:
        _docker(["run", "-d", "--rm", "--name", name, "--network", "none",
                 "-e", f"NFS_CLIENTS={netlab.SUBNET}.0/24", "-e", "NFS_ACCESS=RO",
                 "-e", "NFS_SQUASH=root_squash", "-e", f"NFS_PSEUDO_PATH={PSEUDO_PATH}",
                 "--mount", f"type=bind,source={export},target=/export,readonly",
                 "--cap-drop", "ALL", "--cap-add", "DAC_READ_SEARCH",
                 "--security-opt", f"seccomp={SECCOMP_PROFILE}",
                 "--security-opt", "no-new-privileges:true", image()])
        pid = int(_docker(["inspect", "-f", "{{.State.Pid}}", name]))
        lab.attach_server(pid, rate_bps)
        _wait_ready(lab, name)
        yield url()
    finally:
        subprocess.run(["docker", "rm", "-f", "--", name], capture_output=True)
