"""One preflight list: what each launcher checks before the first job of a matrix, drawn
from the checks `bench doctor` runs (the same function gives the same row), printed as
doctor prints them (on stderr, each line led by ``[preflight]``). A FAIL stops the matrix
before any job with one error line instead: the failing row.

  native   nothing: the matrix checked this host's GPUs for every topology
  compose  the image is on this machine (doctor's image row, here)
  ssh      every host answers over ssh (doctor's ssh row) and has the GPUs the
           topologies ask of it; one ssh call per host
  netns    ip, tc and taskset are installed and this runs as root
  slurm    the controller answers, the partition is listed and up (doctor --slurm's first
           two rows)
  k8s      doctor --k8s's rows: bench.host.launchers.k8s.preflight.cluster_checks
"""
from __future__ import annotations

import sys
from collections.abc import Iterable

from bench.host import netlab
from bench.host.checks import FAIL, PASS, Row, table
from bench.host.checks.containers import LOCAL, local_image_row
from bench.host.checks.gpu import GPU_COUNT, gpu_count_row
from bench.host.checks.remote import Remote
from bench.host.checks.slurm import controller_row, partition_row
from bench.host.checks.ssh import ssh_row
from bench.topology import Topology

GPU_COUNT_TIMEOUT_S = 60.0
SLURM_TIMEOUT_S = 60.0
PREFIX = "[preflight] "


def native() -> list[Row]:
    """The native launcher's: nothing; the matrix checked this host's GPUs for every
    topology."""
    return []


def compose(image: str) -> list[Row]:
    """The Compose launcher's: every node starts from ``image``, here."""
    return [local_image_row(image)]


def ssh(remote: Remote, hosts: Iterable[str], topologies: list[Topology]) -> list[Row]:
    """The SSH launcher's: per host, its ``ssh`` row and, where it answers, its ``gpus``
    row against the most processes any topology puts on that node (one ssh call)."""
    rows = []
    for index, host in enumerate(hosts):
        out = remote.run(host, GPU_COUNT, timeout=GPU_COUNT_TIMEOUT_S)
        rows.append(ssh_row(host, out))
        if rows[-1].result == PASS:
            wanted = max((t.procs_on(index) for t in topologies if t.nodes > index), default=0)
            rows.append(gpu_count_row(host, index, out, wanted))
    return rows


def netns() -> list[Row]:
    """The netns launcher's: the tools that build the lab are installed, and root runs it."""
    try:
        netlab.check_prerequisites()
    except netlab.LabError as error:
        return [Row(LOCAL, "netns", FAIL, str(error))]
    return [Row(LOCAL, "netns", PASS, "ip, tc and taskset installed; running as root")]


def slurm(partition: str | None, timeout: float = SLURM_TIMEOUT_S) -> list[Row]:
    """The Slurm launcher's: doctor --slurm's controller row and, where it answers, its
    partition row."""
    rows = [controller_row(timeout)]
    if rows[-1].result != FAIL:
        rows.append(partition_row(partition, timeout)[0])
    return rows


def require(rows: list[Row], advisory: Iterable[str] = ()) -> None:
    """The first FAIL among the checks not ``advisory`` (a FAIL only worth a look) raises
    RuntimeError: one line, the failing row, as the house says a user error (the matrix
    prints it and exits 2). Else the rows go to stderr as doctor's table, each line led by
    ``[preflight]``: what was checked, and any warning."""
    skipped = set(advisory)
    failed = next((r for r in rows if r.result == FAIL and r.check not in skipped), None)
    if failed is not None:
        raise RuntimeError(f"{failed.host} {failed.check}: {failed.detail}")
    if rows:
        for line in table(rows).splitlines():
            print(PREFIX + line, file=sys.stderr)
