"""Topologies written NODESxGPUS (``1x1``, ``1x2``, ``2x1``, ``2x2``) or, for uneven nodes,
GPUs per node joined by ``+`` (``1+1+2``), and the other list settings of the command line
(batch sizes, choices, hosts): parsed here and only here.

On CPU runs the second number counts processes per node. Every value gets a bound: a
huge number is as sure a typo as a zero, and a host name is a strict pattern, never
anything an ``ssh`` or a shell could read as an option or as syntax.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re

from bench.options import ConfigError

# The largest job this stack plans for: a typo such as 99999999x1 is refused, not tried.
MAX_NODES = 1024
MAX_PROCS_PER_NODE = 64
# The default bound of parse_positive_ints (batch sizes, accumulation steps, node counts).
MAX_LIST_INT = 1 << 20
# At most this many characters of a bad value are echoed back in the error line.
_SHOWN = 80

_PATTERN = re.compile(r"\s*([0-9]+)\s*[xX]\s*([0-9]+)\s*", re.ASCII)
_INT = re.compile(r"[0-9]+", re.ASCII)
# user@host: a POSIX-style login name (letters, digits, _ . -; not starting with - or .).
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}", re.ASCII)
# One DNS label (RFC 1123): letters, digits and inner hyphens, 1-63 characters.
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)
_IPV6_CHARS = re.compile(r"[0-9A-Fa-f:.]+", re.ASCII)
_HOST_HELP = ("write a DNS name (letters, digits, inner '-' and '.'), an IPv4 or IPv6 "
              "address, or user@host, e.g. node1,node2.lab.example,10.0.0.2")


def shown(value: object) -> str:
    """``value`` as an error line shows it: one line, printable ASCII (anything else as
    Python escapes, so a look-alike letter shows as \\u0430), at most 80 characters."""
    text = _printable(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "..."


def shown_path(path: object) -> str:
    """A file's path as an error line shows it: as ``shown``, but a long one keeps its end,
    the file's own name, and drops the start (a temporary directory's deep path cut after
    80 characters would name no file at all)."""
    text = _printable(path)
    return text if len(text) <= _SHOWN else "..." + text[-(_SHOWN - 3):]


def _printable(value: object) -> str:
    """``value`` on one line of printable ASCII (anything else as Python escapes); ''
    shown as such."""
    text = str(value)
    if not text:
        return "''"
    return text if text.isascii() and text.isprintable() else ascii(text)


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Topology:
    """``nodes`` nodes with ``procs`` processes (one per GPU) each, or, for uneven nodes
    (``1+1+2``), ``per_node`` processes on each node in node order (``procs`` is then the
    most on any node). Global ranks are contiguous per node, in node order, as torchrun
    assigns them."""

    nodes: int
    procs: int
    per_node: tuple[int, ...] = ()

    @classmethod
    def of_counts(cls, counts: list[int] | tuple[int, ...]) -> Topology:
        """From processes per node in node order: NxG when all are equal."""
        counts = tuple(counts)
        if len(set(counts)) == 1:
            return cls(len(counts), counts[0])
        return cls(len(counts), max(counts), counts)

    @classmethod
    def of_record(cls, rec: dict) -> Topology:
        """The topology a record ran on (its per-node process counts where it has them)."""
        counts = rec.get("procs_per_node")
        if isinstance(counts, list) and counts and all(isinstance(c, int) and c > 0
                                                        for c in counts):
            return cls.of_counts(counts)
        return cls(rec.get("nnodes") or 1, rec.get("nproc_per_node") or 1)

    @property
    def uneven(self) -> bool:
        return bool(self.per_node)

    def procs_on(self, node: int) -> int:
        """Processes on node ``node`` (0-based, node order)."""
        return self.per_node[node] if self.per_node else self.procs

    @property
    def counts(self) -> tuple[int, ...]:
        return self.per_node or (self.procs,) * self.nodes

    @property
    def devices(self) -> int:
        return sum(self.counts)

    @property
    def setup(self) -> str:
        """The lab table's name for it."""
        if self.devices == 1:
            return "single GPU"
        return "multi-GPU" if self.nodes == 1 else "multi-node"

    def __str__(self) -> str:
        if self.per_node:
            return "+".join(map(str, self.per_node))
        return f"{self.nodes}x{self.procs}"

    @classmethod
    def parse(cls, text: str, setting: str = "--topologies") -> Topology:
        if "+" in text:
            return cls._parse_uneven(text, setting)
        match = _PATTERN.fullmatch(text)
        if not match:
            raise ConfigError(setting, shown(text), "write NODESxGPUS, e.g. 1x1, 1x2, 2x1, or "
                              "GPUs per node joined by '+' for uneven nodes, e.g. 1+1+2")
        nodes, procs = (_bounded_int(digits) for digits in match.groups())
        if nodes < 1 or procs < 1:
            raise ConfigError(setting, shown(text),
                              "nodes and GPUs per node must both be at least 1")
        if nodes > MAX_NODES or procs > MAX_PROCS_PER_NODE:
            raise ConfigError(setting, shown(text), f"at most {MAX_NODES} nodes and "
                              f"{MAX_PROCS_PER_NODE} GPUs (processes) per node, e.g. 2x8")
        return cls(nodes, procs)

    @classmethod
    def _parse_uneven(cls, text: str, setting: str) -> Topology:
        parts = text.strip().split("+")
        if not all(_INT.fullmatch(part.strip()) for part in parts):
            raise ConfigError(setting, shown(text), "write GPUs (processes) per node joined "
                              "by '+', in host order, e.g. 1+1+2")
        counts = [_bounded_int(part.strip()) for part in parts]
        if not all(1 <= c <= MAX_PROCS_PER_NODE for c in counts) or len(counts) > MAX_NODES:
            raise ConfigError(setting, shown(text), f"each node 1 to {MAX_PROCS_PER_NODE} "
                              f"GPUs (processes), at most {MAX_NODES} nodes")
        return cls.of_counts(counts)


def _bounded_int(digits: str) -> int:
    """ASCII digits -> int; an absurdly long number (which int() would refuse past 4,300
    digits) reads as one past any bound here."""
    return int(digits) if len(digits) <= 18 else 10**18


def _items(text: str, setting: str, example: str) -> list[str]:
    """The items of a list setting: commas or spaces separate; at least one."""
    items = [item for item in re.split(r"[,\s]+", text.strip()) if item]
    if not items:
        raise ConfigError(setting, "''", f"give at least one, e.g. {example}")
    return items


def parse_list(text: str, setting: str = "--topologies") -> list[Topology]:
    """``"1x1,1x2 2x1"`` -> topologies; duplicates are refused."""
    items = _items(text, setting, "1x1,1x2,2x1")
    topologies = [Topology.parse(item, setting) for item in items]
    if len(set(topologies)) != len(topologies):
        raise ConfigError(setting, shown(text), "lists a topology twice")
    return topologies


def parse_positive_ints(text: str, setting: str, maximum: int = MAX_LIST_INT) -> list[int]:
    """``"64,128 256"`` -> [64, 128, 256], for batch sizes and the like, each in
    1..``maximum`` (default 1,048,576)."""
    values = []
    for item in _items(text, setting, "64,128"):
        if not _INT.fullmatch(item) or not 1 <= _bounded_int(item) <= maximum:
            raise ConfigError(setting, shown(item),
                              f"must be a positive integer, at most {maximum:,}, e.g. 64,128")
        values.append(int(item))
    if len(set(values)) != len(values):
        raise ConfigError(setting, shown(text), "lists a value twice")
    return values


def parse_choices(text: str, allowed: tuple[str, ...], setting: str) -> list[str]:
    """``"fp32,bf16"`` -> names, each one of ``allowed``."""
    items = _items(text, setting, ",".join(allowed[:2]))
    bad = [item for item in items if item not in allowed]
    if bad:
        raise ConfigError(setting, shown(",".join(bad)), f"choose from {', '.join(allowed)}")
    return items


def host_address(host: str) -> str:
    """The address part of a parsed host: ``user@node1`` -> ``node1`` (MASTER_ADDR)."""
    return host.rpartition("@")[2]


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def check_host(host: str, setting: str = "HOSTS") -> str:
    """``host`` if it is a strict host name, else ConfigError naming ``setting``.

    Accepted: a DNS name (labels of letters, digits and inner hyphens, 253 characters at
    most), an IPv4 address, an IPv6 address without brackets or zone, each optionally
    behind ``user@``. Nothing else, so a host is never an ssh option (``-oProxyCommand=``)
    nor shell syntax, whatever reads it.
    """
    if host.startswith("-"):
        raise ConfigError(setting, shown(host), "a host name never starts with '-' (ssh "
                          f"would read it as an option): {_HOST_HELP}")
    user, at, address = host.rpartition("@")
    if at and not _USER.fullmatch(user):
        raise ConfigError(setting, shown(host), "the user of user@host is letters, digits, "
                          "_ . - (not starting with - or .), e.g. bench@node1")
    if ":" in address:
        valid = bool(_IPV6_CHARS.fullmatch(address)) and _is_ip(address)
    else:
        labels = address.split(".")
        valid = len(address) <= 253 and all(_LABEL.fullmatch(label) for label in labels)
        if valid and all(label.isdigit() for label in labels):
            valid = _is_ip(address)  # all-numeric: an IPv4 address or nothing
    if not valid:
        raise ConfigError(setting, shown(host), f"is not a host name: {_HOST_HELP}")
    return host


def parse_hosts(text: str, setting: str = "HOSTS") -> list[str]:
    """``"host1,host2"`` -> hosts in node-rank order, each a strict host name (see
    ``check_host``); empty or duplicate names are refused."""
    hosts = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not host for host in hosts):
        raise ConfigError(setting, shown(text), "an empty host name: write host1,host2[,...]")
    if len(hosts) > MAX_NODES:
        raise ConfigError(setting, f"({len(hosts)} hosts)", f"at most {MAX_NODES} hosts")
    for host in hosts:
        check_host(host, setting)
    addresses = [host_address(host).lower() for host in hosts]
    if len(set(addresses)) != len(addresses):
        duplicate = next(h for h, a in zip(hosts, addresses, strict=True) if addresses.count(a) > 1)
        raise ConfigError(setting, shown(text), f"lists {duplicate} twice: each host is one "
                          "node")
    return hosts
