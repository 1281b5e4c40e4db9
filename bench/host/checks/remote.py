"""How a host check reaches a host, and what it looks at.

``Remote`` runs one shell line on a host over ssh. The ssh command line itself is the
launcher's (``bench.host.launchers.ssh.ssh_argv`` bound to its options, ``--`` right before
the host): the caller passes it in, so the checks sit below the launchers that use them.
``Hosts`` is the job the host checks judge: the hosts (the first leads), the image, the
node settings, the dataset, the rendezvous port, the CUDA flavour, GPUs per node and the
trainer's Compose profile.
"""
from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable

from bench.host.checks.flavours import Flavour, flavours
from bench.shell import words
from bench.topology import host_address

DEFAULT_TIMEOUT_S = 300.0


def shell(script: str, *values: str) -> str:
    """``sh -c SCRIPT`` with ``values`` as its arguments, as one quoted line."""
    return words(["sh", "-c", script, "bench-doctor", *values])


@dataclasses.dataclass(frozen=True, slots=True)
class Remote:
    """Shell lines on hosts: ``argv(host, line)`` is the ssh command line that runs one."""

    argv: Callable[[str, str], list[str]]
    timeout: float = DEFAULT_TIMEOUT_S   # the longest any one check may take

    def run(self, host: str, command: str,
            timeout: float | None = None) -> subprocess.CompletedProcess:
        """``command`` on ``host``; a check that outlives ``timeout`` (at most the
        remote's own) reads as exit status 124, as timeout(1) says it."""
        limit = min(timeout, self.timeout) if timeout else self.timeout
        argv = self.argv(host, command)
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 124, "", f"no answer in {limit:g} s")

    def start(self, host: str, command: str) -> subprocess.Popen:
        """``command`` on ``host`` in the background, its output readable line by line."""
        return subprocess.Popen(self.argv(host, command), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)


@dataclasses.dataclass(frozen=True, slots=True)
class Hosts:
    """The job the host checks judge, and how they reach its hosts."""

    names: tuple[str, ...]              # as given (user@host); the first leads
    remote: Remote
    image: str = "bench-trainer:cuda"
    settings: dict[str, str] = dataclasses.field(default_factory=dict)
    dataset: str = "fashion-mnist"
    master_port: int = 29500
    flavour: str = "default"            # a name of docker/cuda-flavours.tsv
    gpus_per_node: int = 1              # 0: a CPU job, the GPUs are not checked
    profile: str = "gpu"                # gpu-ib: the HCAs are checked too (checks.rdma)
    table: dict[str, Flavour] = dataclasses.field(default_factory=flavours)

    @property
    def master(self) -> str:
        """MASTER_ADDR: the first host, without user@."""
        return host_address(self.names[0])

    @property
    def cuda(self) -> Flavour:
        """The flavour whose driver floor the GPU hosts need."""
        return self.table[self.flavour]

    def run(self, host: str, command: str,
            timeout: float | None = None) -> subprocess.CompletedProcess:
        return self.remote.run(host, command, timeout)
