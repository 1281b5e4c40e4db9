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


def parse_list(text: str, setting: str = "--topologies") -> list[Topology]:
    """``"1x1,1x2 2x1"`` -> topologies; commas or spaces separate; duplicates are refused."""
    items = [item for item in re.split(r"[,\s]+", text.strip()) if item]
    if not items:
        raise ConfigError(setting, "''", "give at least one topology, e.g. 1x1,1x2,2x1")
    topologies = [Topology.parse(item, setting) for item in items]
    if len(set(topologies)) != len(topologies):
        raise ConfigError(setting, text, "lists a topology twice")
    return topologies


def parse_positive_ints(text: str, setting: str) -> list[int]:
    """``"64,128 256"`` -> [64, 128, 256], for batch sizes and the like."""
    items = [item for item in re.split(r"[,\s]+", text.strip()) if item]
    if not items:
        raise ConfigError(setting, "''", "give at least one positive integer, e.g. 64,128")
    values = []
    for item in items:
        if not item.isdigit() or int(item) < 1:
            raise ConfigError(setting, item, "must be a positive integer, e.g. 64,128")
        values.append(int(item))
    if len(set(values)) != len(values):
        raise ConfigError(setting, text, "lists a value twice")
    return values


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
