"""Emulated links: several "hosts" on one machine, each in its own network namespace.

    switch namespace:  bridge br0
                        |-- p0 <veth> eth0 in node 0 (169.254.100.1/24)
                        |-- p1 <veth> eth0 in node 1 (169.254.100.2/24)
                        ...

Every link is shaped with tc tbf at the chosen rate on both of its ends (the node's egress
and the switch port's egress toward the node), as a switch with ports of that rate would
be. netem is not in this kernel, so there is rate but no added delay. Each node is pinned
to its own CPUs, so one core stands for one host.

One host can be made slow for real, as a straggler is: its own link rate (``node_rates``:
both ends of its link shaped at that rate), or a CPU quota (``cpu_quotas``: a fraction of
one CPU, enforced by a cgroup per node that every process started on the node joins, see
``bench.host.cgroups``).

All traffic stays inside namespaces this module creates and removes: on success, on a
failure, on Ctrl-C or SIGTERM (``Lab`` is a context manager), and, for a harness killed
outright, on the next start, which removes the namespaces of dead owners (``clean``). The
cgroups of CPU quotas go the same ways. Needs root and iproute2.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from bench.host import cgroups
from bench.shell import words
from bench.units import format_rate, tc_rate

PREFIX = "benchlab"
SUBNET = "169.254.100"
INTERFACE = "eth0"
# A server joined to the lab (``Lab.attach_server``): past any node's address.
SERVER_ADDRESS = f"{SUBNET}.254"
_OWNED = re.compile(rf"^{PREFIX}-(\d+)-([0-9a-f]+)-")


class LabError(RuntimeError):
    """The lab could not be built (no root, no iproute2, a tc error)."""


def _ip(*args: str) -> None:
    _run(["ip", *args])


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise LabError(f"`{words(argv)}` failed: {result.stderr.strip()}")


def namespaces() -> list[str]:
    """Every network namespace on the machine (names only)."""
    result = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean(*, everything: bool = False) -> list[str]:
    """Remove lab namespaces and CPU-quota cgroups whose owner process is gone (all of ours
    with ``everything``)."""
    removed = []
    for name in namespaces():
        owned = _OWNED.match(name)
        if owned and (everything or not _pid_alive(int(owned.group(1)))):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
            removed.append(name)
    return removed + cgroups.clean_stale(_OWNED, _pid_alive, everything=everything)


def lab_cgroups() -> list[str]:
    """The names of the lab cgroups on this machine (none without a cpu controller)."""
    try:
        mount = cgroups.find_mount()
    except cgroups.CgroupError:
        return []
    return [path.name for path, _owner in cgroups.owned(mount, _OWNED)]


def tbf_burst(rate_bps: int) -> int:
    """Bucket size in bytes: enough for a few ms at the rate (the qdisc's timer granularity)
    and never below 256 KiB, so a 64 KiB GSO segment always fits."""
    return max(256 * 1024, rate_bps // 8 // 250)


def check_prerequisites() -> None:
    missing = [tool for tool in ("ip", "tc", "taskset") if shutil.which(tool) is None]
    if missing:
        raise LabError(f"{', '.join(missing)} not found: install iproute2 and util-linux")
    if os.geteuid() != 0:
        raise LabError("network namespaces need root: run as root (CI does)")


@dataclasses.dataclass(slots=True)
class Node:
    rank: int
    namespace: str
    address: str
    cpus: list[int]
    rate_bps: int
    cpu_quota: float | None = None   # CPUs it may use (a fraction of one); None: no cap
    cgroup: Path | None = None       # its quota's cgroup, once the lab is built

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this node's namespace, on its CPUs, within its quota."""
        inside = ["ip", "netns", "exec", self.namespace, "taskset", "-c",
                  ",".join(map(str, self.cpus)), *argv]
        return cgroups.join_argv(self.cgroup, inside) if self.cgroup else inside


def check_quotas(quotas: Sequence[float | None], pinned: Sequence[int]) -> None:
    """LabError unless there is one quota per node, each None or a finite number of CPUs
    in [cgroups.MIN_QUOTA, the CPUs pinned to that node]."""
    if len(quotas) != len(pinned):
        raise LabError(f"{len(quotas)} CPU quota(s) for {len(pinned)} node(s): give one per "
                       "node")
    for rank, (quota, cpus) in enumerate(zip(quotas, pinned, strict=True)):
        if quota is not None and not cgroups.MIN_QUOTA <= quota <= cpus:
            raise LabError(f"node {rank}'s CPU quota {quota!r}: must be in "
                           f"{cgroups.MIN_QUOTA:g}-{cpus} (its pinned CPUs)")


def placed_cpus(nodes: int, cpus_per_node: int | None,
                node_cpus: Sequence[Sequence[int]]) -> list[list[int]]:
    """Each node's CPUs: ``node_cpus`` where given (one set per node, each CPU one of this
    machine's), else ``cpus_per_node`` each (default: the machine's CPUs split evenly, at
    least one), dealt round the machine's CPUs."""
    total = os.cpu_count() or 1
    if node_cpus:
        if cpus_per_node is not None:
            raise LabError("CPUs per node and a CPU set per node are both given: give one")
        if len(node_cpus) != nodes:
            raise LabError(f"{len(node_cpus)} CPU set(s) for {nodes} node(s): give one per "
                           "node")
        for rank, cpus in enumerate(node_cpus):
            if not cpus or any(not 0 <= cpu < total for cpu in cpus):
                raise LabError(f"node {rank}'s CPUs {list(cpus)}: each must be one of this "
                               f"machine's 0-{total - 1}, at least one")
        return [sorted(set(cpus)) for cpus in node_cpus]
    per_node = cpus_per_node or max(1, total // nodes)
    return [[(rank * per_node + i) % total for i in range(per_node)] for rank in range(nodes)]


class Lab:
    """``with Lab(2, 1_000_000_000) as lab:`` -> lab.nodes[i].wrap(argv) runs on node i."""

    def __init__(self, nodes: int, rate_bps: int, *, cpus_per_node: int | None = None,
                 node_rates: Sequence[int | None] = (),
                 cpu_quotas: Sequence[float | None] = (),
                 node_cpus: Sequence[Sequence[int]] = ()):
        """``node_rates``: a rate per node (None: ``rate_bps``); ``cpu_quotas``: a quota
        per node in CPUs (None: none); ``node_cpus``: the CPUs of each node (instead of
        ``cpus_per_node``). Empty: every node at ``rate_bps``, no quotas, CPUs dealt
        round."""
        if not 1 <= nodes <= 253:  # a /24, with .254 kept for a server
            raise LabError(f"a lab has 1 to 253 nodes, not {nodes}")
        self.rate_bps = rate_bps
        self.rate = tc_rate(rate_bps)
        tag = f"{PREFIX}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.switch = f"{tag}-sw"
        cpus = placed_cpus(nodes, cpus_per_node, node_cpus)
        rates = list(node_rates) or [None] * nodes
        quotas = list(cpu_quotas) or [None] * nodes
        if len(rates) != nodes:
            raise LabError(f"{len(rates)} link rate(s) for {nodes} node(s): give one per node")
        check_quotas(quotas, [len(c) for c in cpus])
        self.nodes = [Node(rank, f"{tag}-n{rank}", f"{SUBNET}.{rank + 1}", cpus[rank],
                           rates[rank] or rate_bps, quotas[rank])
                      for rank in range(nodes)]
        self.server_rate_bps: int | None = None
        self._created: list[str] = []
        self._cgroups: list[tuple[cgroups.Mount, Path]] = []

    @property
    def master_addr(self) -> str:
        return self.nodes[0].address

    def describe(self) -> str:
        own = [f"node {n.rank} at {format_rate(n.rate_bps)}" for n in self.nodes
               if n.rate_bps != self.rate_bps]
        own += [f"node {n.rank} held to {n.cpu_quota:g} CPU" for n in self.nodes
                if n.cpu_quota is not None]
        if self.server_rate_bps:
            own.append(f"a server at {SERVER_ADDRESS} on {format_rate(self.server_rate_bps)}")
        return (f"{len(self.nodes)} namespace node(s) on a {format_rate(self.rate_bps)} "
                f"switch (tbf), {len(self.nodes[0].cpus)} CPU(s) each"
                + (f"; {', '.join(own)}" if own else ""))

    def __enter__(self) -> Lab:
        check_prerequisites()
        clean()
        try:
            self._build()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def _add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self._created.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _shape(self, namespace: str, device: str, rate_bps: int) -> None:
        _run(["ip", "netns", "exec", namespace, "tc", "qdisc", "replace", "dev", device,
              "root", "tbf", "rate", tc_rate(rate_bps), "burst", str(tbf_burst(rate_bps)),
              "latency", "50ms"])

    def _build(self) -> None:
        self._add_namespace(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for node in self.nodes:
            port = f"p{node.rank}"
            self._add_namespace(node.namespace)
            _ip("-n", node.namespace, "link", "add", INTERFACE, "type", "veth", "peer",
                "name", port, "netns", self.switch)
            _ip("-n", node.namespace, "addr", "add", f"{node.address}/24", "dev", INTERFACE)
            _ip("-n", node.namespace, "link", "set", INTERFACE, "up")
            _ip("-n", self.switch, "link", "set", port, "master", "br0")
            _ip("-n", self.switch, "link", "set", port, "up")
            # Both ends, as a switch port of that rate would be: the node's egress and
            # the switch's egress toward it.
            self._shape(node.namespace, INTERFACE, node.rate_bps)
            self._shape(self.switch, port, node.rate_bps)
        self._build_cgroups()

    def attach_server(self, pid: int, rate_bps: int | None = None) -> str:
        """Join the network namespace of process ``pid`` (a server's container, started
        with no network) to the switch as one more host, its link shaped at ``rate_bps``
        (default: the lab's) on both ends; returns its address (``SERVER_ADDRESS``). The
        name given to that namespace goes with the lab; the namespace itself with the
        process."""
        rate = rate_bps or self.rate_bps
        name = f"{self.switch[:-len('-sw')]}-srv"
        _ip("netns", "attach", name, str(pid))
        self._created.append(name)
        _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", name, "link", "add", INTERFACE, "type", "veth", "peer", "name", "psrv",
            "netns", self.switch)
        _ip("-n", name, "addr", "add", f"{SERVER_ADDRESS}/24", "dev", INTERFACE)
        _ip("-n", name, "link", "set", INTERFACE, "up")
        _ip("-n", self.switch, "link", "set", "psrv", "master", "br0")
        _ip("-n", self.switch, "link", "set", "psrv", "up")
        self._shape(name, INTERFACE, rate)
        self._shape(self.switch, "psrv", rate)
        self.server_rate_bps = rate
        return SERVER_ADDRESS

    def _build_cgroups(self) -> None:
        if all(node.cpu_quota is None for node in self.nodes):
            return
        try:
            mount = cgroups.find_mount()
            for node in self.nodes:
                if node.cpu_quota is None:
                    continue
                # Named as its namespace, so that clean() finds it by its owner's pid.
                path = cgroups.create(mount, node.namespace, node.cpu_quota)
                self._cgroups.append((mount, path))
                node.cgroup = path
        except cgroups.CgroupError as error:
            raise LabError(str(error)) from None

    def destroy(self) -> None:
        """Delete every namespace made (their veths go with them) and every cgroup. Safe
        to call twice."""
        for name in reversed(self._created):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
        self._created.clear()
        for mount, path in reversed(self._cgroups):
            if not cgroups.remove(mount, path):
                print(f"[netlab] warning: the cgroup {path} could not be removed; the next "
                      "lab removes it", file=sys.stderr)
        self._cgroups.clear()
        for node in self.nodes:
            node.cgroup = None

    def env(self, node: Node | None = None) -> dict[str, str]:
        """What a node's processes need: gloo on the lab interface, its link's rate, its
        share of its CPUs and its CPU quota (where it has one). Without ``node``: the
        lab's own rate and share, as every node has them when none has its own."""
        rate = tc_rate(node.rate_bps) if node else self.rate
        share = self.share_of(node) if node else self.cpu_share
        env = {"GLOO_SOCKET_IFNAME": INTERFACE, "NCCL_SOCKET_IFNAME": INTERFACE,
               "BENCH_LINK_RATE": rate, "BENCH_LINK_KIND": "emulated",
               "BENCH_LINK_CPU_SHARE": f"{share:.6g}"}
        if node is not None and node.cpu_quota is not None:
            env["BENCH_LINK_CPU_QUOTA"] = f"{node.cpu_quota:.6g}"
        return env

    @property
    def cpu_share(self) -> float:
        """The share of its pinned CPUs a node has when every node is busy: 0.5 where four
        nodes share two CPUs. The predictor runs gloo's CPU work at this pace. Nodes
        pinned unevenly (two on one CPU, one alone on another): the least of theirs."""
        total = os.cpu_count() or 1
        if self._pinned_evenly():
            pinned = sum(len(node.cpus) for node in self.nodes)
            return min(1.0, total / pinned)
        return min(self._busy_share(node) for node in self.nodes)

    def _pinned_evenly(self) -> bool:
        """Every node on as many CPUs, dealt round them all (the default placement): the
        fair scheduler then gives each the machine's CPUs over all their pins."""
        return placed_cpus(len(self.nodes), len(self.nodes[0].cpus), ()) == \
            [node.cpus for node in self.nodes]

    def _busy_share(self, node: Node) -> float:
        """``node``'s share of its CPUs when every node is busy: on each, one over the nodes
        pinned to it (two nodes on CPU 0: half of it each)."""
        sharing = collections.Counter(cpu for other in self.nodes for cpu in other.cpus)
        return statistics.fmean(1 / sharing[cpu] for cpu in node.cpus)

    def share_of(self, node: Node) -> float:
        """``node``'s share of its pinned CPUs: its quota over them where it has one (the
        cgroup caps it there whatever its neighbours do; a quota above its fair share
        still cannot take more than the CPUs give), else its share of them when every node
        is busy (the lab's ``cpu_share`` where the nodes are pinned evenly)."""
        share = self.cpu_share if self._pinned_evenly() else self._busy_share(node)
        if node.cpu_quota is None:
            return share
        return min(share, node.cpu_quota / len(node.cpus))


@contextmanager
def terminate_raises() -> Iterator[None]:
    """SIGTERM (and SIGHUP) raise SystemExit while inside, so ``finally`` and ``__exit__``
    clean up as they do for Ctrl-C; Python's default would end the process on the spot."""
    def raise_exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, raise_exit) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
