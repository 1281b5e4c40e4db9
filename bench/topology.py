"""Topologies written NODESxGPUS (``1x1``, ``1x2``, ``2x1``, ``2x2``): parsed here and only here.

On CPU runs the second number counts processes per node.
"""
from __future__ import annotations

import dataclasses
import re

from bench.options import ConfigError

_PATTERN = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Topology:
    """``nodes`` nodes with ``procs`` processes (one per GPU) each."""

    nodes: int
    procs: int

    @property
    def devices(self) -> int:
        return self.nodes * self.procs

    @property
    def setup(self) -> str:
        """The lab table's name for it."""
        if self.devices == 1:
            return "single GPU"
        return "multi-GPU" if self.nodes == 1 else "multi-node"

    def __str__(self) -> str:
        return f"{self.nodes}x{self.procs}"

    @classmethod
    def parse(cls, text: str, setting: str = "--topologies") -> Topology:
        match = _PATTERN.match(text)
        if not match:
            raise ConfigError(setting, text or "''", "write NODESxGPUS, e.g. 1x1, 1x2, 2x1")
        nodes, procs = int(match.group(1)), int(match.group(2))
        if nodes < 1 or procs < 1:
            raise ConfigError(setting, text, "nodes and GPUs per node must both be at least 1")
        return cls(nodes, procs)


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
        raise ConfigError(setting, text, "lists a topology twice")
    return topologies


def parse_positive_ints(text: str, setting: str) -> list[int]:
    """``"64,128 256"`` -> [64, 128, 256], for batch sizes and the like."""
    values = []
    for item in _items(text, setting, "64,128"):
        if not item.isdigit() or int(item) < 1:
            raise ConfigError(setting, item, "must be a positive integer, e.g. 64,128")
        values.append(int(item))
    if len(set(values)) != len(values):
        raise ConfigError(setting, text, "lists a value twice")
    return values


def parse_choices(text: str, allowed: tuple[str, ...], setting: str) -> list[str]:
    """``"fp32,bf16"`` -> names, each one of ``allowed``."""
    items = _items(text, setting, ",".join(allowed[:2]))
    bad = [item for item in items if item not in allowed]
    if bad:
        raise ConfigError(setting, ",".join(bad), f"choose from {', '.join(allowed)}")
    return items


def parse_hosts(text: str, setting: str = "HOSTS") -> list[str]:
    """``"host1,host2"`` -> hosts in node-rank order; empty or duplicate names are refused."""
    hosts = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not host for host in hosts):
        raise ConfigError(setting, text or "''", "an empty host name: write host1,host2[,...]")
    if any(re.search(r"\s", host) for host in hosts):
        raise ConfigError(setting, text, "host names contain no spaces: write host1,host2")
    if len(set(hosts)) != len(hosts):
        duplicate = next(h for h in hosts if hosts.count(h) > 1)
        raise ConfigError(setting, text, f"lists {duplicate} twice: each host is one node")
    return hosts
