"""The checks that `bench doctor` and each launcher's preflight share, split by what they
check: a row per host and check (PASS, WARN or FAIL, with the detail or the fix) and the
one table both print.

  remote      how a check reaches a host (ssh) and what a host check looks at
  ssh         the host answers over ssh, resolves every host name, keeps time
  containers  Docker and Compose, the image here or on a host, the same image everywhere
  flavours    docker/cuda-flavours.tsv: the CUDA lines and their driver floors
  gpu         the driver, the NVSwitch fabric, torch in the image with the GPUs attached,
              MIG mode; GPUs per host
  rdma        ibv_devinfo in the image with the HCAs attached (profile gpu-ib)
  network     the NCCL/gloo interface, public addresses, the rendezvous port
  data        /dev/shm and the dataset volume
  slurm       the Slurm controller, partition, nodes, munge, the same venv or image
  preflight   each launcher's list, and how a preflight prints its rows and fails
"""
from __future__ import annotations

import dataclasses

from tabulate import tabulate

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
HEADERS = ("host", "check", "result", "detail / fix")


@dataclasses.dataclass(slots=True)
class Row:
    host: str
    check: str
    result: str
    detail: str


def table(rows: list[Row]) -> str:
    """The rows as doctor prints them (a GitHub-flavoured table): one renderer for
    `bench doctor` and every launcher's preflight."""
    return tabulate([dataclasses.astuple(r) for r in rows], headers=list(HEADERS),
                    tablefmt="github")


def tally(rows: list[Row]) -> str:
    """``1 FAIL, 0 WARN, 9 PASS``."""
    return ", ".join(f"{sum(r.result == result for r in rows)} {result}"
                     for result in (FAIL, WARN, PASS))
