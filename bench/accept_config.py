"""The acceptance run's measurements and their configuration, torch-free.

``bench.rank.accept`` measures, under torchrun, on every rank at once: each device (matrix
multiply in the precisions it supports, memory bandwidth, pinned host-to-device copies on
GPUs, and training throughput of a small reference workload), each pair of nodes' link
(an all-reduce at the bucket size between the two node leaders, pairs scheduled in rounds
in which every node is in one pair), and each node's read of the dataset through its
mount. The host (``bench accept``) parses these flags, and judges the record the rank side
writes (``bench.analysis.acceptance``).
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
from pathlib import Path

from bench import record
from bench.catalog import MODEL_NAMES
from bench.config import BACKENDS, DEVICES, MAX_TIMEOUT_S, OneLineErrorParser, resolve_device
from bench.options import (
    ConfigError,
    add_flags,
    checks_environment,
    from_namespace,
    option,
    require,
    require_range,
    settings_dict,
    settings_hash,
)
from bench.paths import check_writable_file
from bench.units import parse_size

PROG = "bench accept-rank"
STAGES = ("device", "link", "data")
MAX_LINK_BYTES = 1 << 30
MAX_MEMORY_BYTES = 16 << 30
# The memory-bandwidth copy, past the caches, or it measures who else is in them: on four
# emulated hosts sharing two CPUs, a 16 MiB copy (L2 4 MiB a core) read 4-18% below its
# peers in 10 of 48 clean rows, a 128 MiB one at most 3.7% below (results/reference/
# accept-faults/memory-size/). On a GPU, 1 GiB is far past its L2.
AUTO_MEMORY_SIZE = {"cuda": "1GiB", "cpu": "128MiB"}
MAX_DATA_BYTES = 64 << 30


# nfs://HOST[:PORT]/PATH[?version=3|4]: a host name or IPv4 address (not starting with "-"),
# a path of plain names (they travel in argv, and in URLs nfs-ls and nfs-cat parse).
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}" \
    r"[A-Za-z0-9])?)*)"
NFS_URL = re.compile(rf"nfs://{_HOST}(?::[0-9]{{1,5}})?(?:/[A-Za-z0-9_.+=,@-]+)+/?"
                     r"(?:\?version=[34])?")  # matched whole (fullmatch)


def check_nfs_url(url: str) -> None:
    """ConfigError unless ``url`` is a plain nfs:// URL (see NFS_URL)."""
    parts = url.split("?")[0].split("/")[3:]
    if len(url) > 1024 or not NFS_URL.fullmatch(url) or any(p in (".", "..") for p in parts):
        raise ConfigError("--data-url", url, "must be nfs://HOST/PATH with an optional "
                          "?version=3 or 4, the path plain names (letters, digits, "
                          "'_.+=,@-'), e.g. nfs://10.0.0.1/datasets/fashion-mnist?version=4")


def parse_stages(text: str, setting: str = "--stages") -> tuple[str, ...]:
    """A comma-separated subset of STAGES, each once, kept in STAGES' order."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in STAGES]
    if not names or unknown or len(set(names)) != len(names):
        raise ConfigError(setting, text, f"must list stages from {','.join(STAGES)}, each "
                          "once, e.g. device,link")
    return tuple(stage for stage in STAGES if stage in names)


@dataclasses.dataclass(kw_only=True, slots=True)
class AcceptConfig:
    """What the rank side measures, and how often."""

    stages: str = option(",".join(STAGES), "stages to measure: device, link, data")
    repeats: int = option(5, "timed repeats of every figure (the verdicts' noise)")
    matmul_size: int = option(0, "matrix side of the matmul figure (0: 4096 on cuda, 512 "
                              "on cpu)")
    memory_size: str = option("auto", "bytes copied for the memory-bandwidth figure (auto: "
                              f"{AUTO_MEMORY_SIZE['cuda']} on cuda, "
                              f"{AUTO_MEMORY_SIZE['cpu']} on cpu)")
    link_size: str = option("25MiB", "all-reduce message between each pair of nodes: DDP's "
                            "bucket size")
    train_model: str = option("auto", "the reference workload trained on each device "
                              "(auto: resnet50 in bf16 on cuda, the mlp 512x4 on cpu)")
    train_batch: int = option(64, "its batch size per device")
    train_steps: int = option(10, "its timed steps per repeat")
    data_dir: Path | None = option(None, "the dataset directory as this node mounts it "
                                   "(the data stage reads every file under it)")
    data_url: str | None = option(None, "instead of --data-dir: the dataset's nfs:// URL, "
                                  "read with libnfs's user-space client (nfs-ls, nfs-cat), "
                                  "e.g. nfs://10.0.0.1/datasets/fashion-mnist?version=4")
    data_max_size: str = option("512MiB", "bytes the data stage reads at most per repeat")
    data_samples: int = option(0, "samples the dataset directory holds (0: unknown): "
                               "turns training's samples/s into the bytes it reads")
    device: str = option("auto", "cuda, cpu, or auto (cuda when available)", choices=DEVICES)
    backend: str = option("auto", "auto is nccl on cuda, gloo on cpu", choices=BACKENDS)
    timeout: float = option(300.0, "seconds a collective may wait for a peer")
    results: Path = option(Path("results/accept-figures.jsonl"), "JSON-lines file the "
                           "figures are appended to")
    # Resolved by __post_init__.
    stage_list: tuple[str, ...] = ()
    memory_bytes: int = 0
    link_bytes: int = 0
    data_max_bytes: int = 0

    def __post_init__(self) -> None:
        self.stage_list = parse_stages(self.stages)
        require_range(self.repeats, "repeats", 2, 1000)
        require_range(self.matmul_size, "matmul_size", 0, 65536)
        require_range(self.train_batch, "train_batch", 1, 65536)
        require_range(self.train_steps, "train_steps", 1, 100_000)
        require_range(self.data_samples, "data_samples", 0, 1 << 40)
        require_range(self.timeout, "timeout", 0, MAX_TIMEOUT_S, low_open=True)
        require(self.train_model in ("auto", *MODEL_NAMES), "train_model", self.train_model,
                f"must be auto or one of {', '.join(MODEL_NAMES)}")
        self.link_bytes = parse_size(self.link_size, "--link-size")
        require(4 <= self.link_bytes <= MAX_LINK_BYTES, "link_size", self.link_size,
                "must be from 4 bytes to 1GiB")
        self.data_max_bytes = parse_size(self.data_max_size, "--data-max-size")
        require(1 <= self.data_max_bytes <= MAX_DATA_BYTES, "data_max_size",
                self.data_max_size, "must be from 1 byte to 64GiB")
        if self.data_url is not None:
            check_nfs_url(self.data_url)
            if self.data_dir is not None:
                raise ConfigError("--data-url", self.data_url, "give --data-dir or "
                                  "--data-url, not both")
        if "data" in self.stage_list and self.data_dir is None and self.data_url is None:
            raise ConfigError("--data-dir", None, "the data stage needs the dataset "
                              "directory, e.g. --data-dir /data/fashion-mnist (or its "
                              "nfs:// URL, --data-url)")
        if not checks_environment():
            if self.memory_size != "auto":
                parse_size(self.memory_size, "--memory-size")
            return
        check_writable_file(self.results, "--results")
        if self.data_url is not None and "data" in self.stage_list \
                and not shutil.which("nfs-cat"):
            raise ConfigError("--data-url", self.data_url, "needs nfs-ls and nfs-cat on "
                              "this node: install libnfs-utils, or mount the dataset and "
                              "give --data-dir")
        if self.data_dir is not None and "data" in self.stage_list \
                and not self.data_dir.is_dir():
            raise ConfigError("--data-dir", self.data_dir, "is not a directory on this node: "
                              "mount the dataset there first")
        self.device, self.backend = resolve_device(self.device, self.backend)
        if self.memory_size == "auto":
            self.memory_size = AUTO_MEMORY_SIZE["cuda" if self.device == "cuda" else "cpu"]
        self.memory_bytes = parse_size(self.memory_size, "--memory-size")
        require(1 << 20 <= self.memory_bytes <= MAX_MEMORY_BYTES, "memory_size",
                self.memory_size, "must be from 1MiB to 16GiB")
        if self.train_model == "auto":
            self.train_model = "resnet50" if self.device == "cuda" else "mlp"
        if not self.matmul_size:
            self.matmul_size = 4096 if self.device == "cuda" else 512

    @classmethod
    def from_args(cls, argv: list[str] | None, prog: str = PROG) -> AcceptConfig:
        parser = OneLineErrorParser(prog=prog, description=__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        add_flags(parser, cls, "acceptance measurements")
        return from_namespace(cls, parser.parse_args(argv))

    def to_dict(self) -> dict:
        return settings_dict(self)

    def hash(self) -> str:
        return settings_hash(self)


def round_robin(nodes: int) -> list[list[tuple[int, int]]]:
    """Every pair of ``nodes`` once, in rounds in which each node is in at most one pair
    (the circle method: n-1 rounds for even n, n for odd). All pairs of a round run at
    once, so a node's bad link shows in every round and is isolated in n-1 of them."""
    players: list[int | None] = list(range(nodes))
    if nodes % 2:
        players.append(None)       # a bye: the node drawn against it rests that round
    count = len(players)
    rounds = []
    for _ in range(count - 1):
        pairs = []
        for i in range(count // 2):
            a, b = players[i], players[count - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(sorted(pairs))
        players = [players[0], players[-1], *players[1:-1]]
    return [r for r in rounds if r]


def skeleton(cfg: AcceptConfig) -> dict:
    return {"schema_version": record.SCHEMA_VERSION, "run_id": record.new_run_id(),
            "utc_time": record.utc_now(), "mode": "accept", "status": "error",
            "error": None, "config": cfg.to_dict(), "config_hash": cfg.hash(),
            "world_size": None, "nnodes": None, "nproc_per_node": None,
            "backend": cfg.backend, "devices": [], "links": [], "data": []}
