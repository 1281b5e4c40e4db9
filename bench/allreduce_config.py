"""The all-reduce sweep's configuration and its arithmetic, torch-free.

The head parses and checks a sweep's flags (bench matrix --workload allreduce) and the
analysis turns its times into bus bandwidth without importing torch; ``bench.rank.allreduce``
runs the sweep under torchrun.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from bench import record
from bench.config import (
    BACKENDS,
    DEVICES,
    MAX_TIMEOUT_S,
    MODEL_NAMES,
    ModelConfig,
    OneLineErrorParser,
    resolve_device,
)
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

PROG = "bench allreduce"
# Element types by name, and their size in bytes (the rank maps them to torch dtypes).
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
DEFAULT_MAX_SIZE = {"cuda": "512MiB", "cpu": "64MiB"}
MAX_MESSAGE_BYTES = 16 << 30
# The schema's bound on a record's phase pairs (lockstep_workload.phase_pairs).
PHASE_PAIRS_MAX = 64


@dataclasses.dataclass(kw_only=True, slots=True)
class AllreduceConfig:
    """The sweep: sizes, iterations, data type, and where the processes talk."""

    min_size: str = option("1KiB", "smallest message (bytes per rank), e.g. 1KiB")
    max_size: str = option("auto", "largest message; sizes double from --min-size up to it "
                           "(auto: 512MiB on cuda, 64MiB on cpu)")
    iters: int = option(20, "timed all-reduces per size")
    warmup_iters: int = option(5, "untimed all-reduces per size before the timed ones")
    dtype: str = option("float32", "element type", choices=tuple(DTYPE_BYTES))
    check: bool = option(True, "check every size's result against the expected sum")
    beside_compute: bool = option(False, "also time each size while a compute thread works "
                                  "beside it, and record the compute it loses (on CPU, "
                                  "where backward and gloo share the CPUs)")
    lockstep: bool = option(False, "also time the ranks computing in lockstep, the same "
                            "work between syncs as DDP's steps: how long the slowest rank "
                            "keeps the others waiting, for stretches of 10-640 ms (on CPU)")
    lockstep_model: str | None = option(
        None, "with --lockstep, also time this network's own training steps in lockstep "
        "(synthetic data, no gradient sync): the job's model, whose pace between hosts "
        "need not be a matmul's; bench predict charges the job's syncs by it",
        choices=MODEL_NAMES)
    lockstep_batch_size: int = option(16, "batch per rank of --lockstep-model")
    lockstep_image_size: int | None = option(None, "input side of --lockstep-model, as the "
                                             "trainer's --image-size")
    lockstep_mlp_width: int = option(4096, "--lockstep-model mlp's hidden width, as the "
                                     "trainer's --mlp-width")
    lockstep_mlp_depth: int = option(8, "--lockstep-model mlp's hidden layers, as the "
                                     "trainer's --mlp-depth")
    lockstep_phase_pairs: int = option(8, "with --lockstep-model, pairs of blocks of its "
                                       "steps in phase (synced before each optimizer step, "
                                       "as DDP's last gradient sync is) and out of phase "
                                       "(half a step apart), the optimizer timed apart: what "
                                       "hosts that share a machine's CPUs cost each other "
                                       "computing at once; 0: none")
    device: str = option("auto", "cuda, cpu, or auto (cuda when available)", choices=DEVICES)
    backend: str = option("auto", "auto is nccl on cuda, gloo on cpu", choices=BACKENDS)
    timeout: float = option(300.0, "seconds a collective may wait for a peer")
    results: Path = option(Path("results/runs.jsonl"), "JSON-lines file the record is "
                           "appended to")
    # Resolved from the strings above by __post_init__.
    sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        require_range(self.iters, "iters", 1, 1_000_000)
        require_range(self.lockstep_batch_size, "lockstep_batch_size", 1, 65536)
        require_range(self.lockstep_phase_pairs, "lockstep_phase_pairs", 0, PHASE_PAIRS_MAX)
        if self.lockstep_model is not None:
            require(self.lockstep, "lockstep_model", self.lockstep_model,
                    "goes with --lockstep (the probe it adds a workload to); add --lockstep")
            self.lockstep_workload()   # its shape checked here, before anything starts
        require_range(self.warmup_iters, "warmup_iters", 0, 1_000_000)
        require_range(self.timeout, "timeout", 0, MAX_TIMEOUT_S, low_open=True)
        # The sizes first: only an "auto" largest size waits for the device (its default).
        element = DTYPE_BYTES[self.dtype]
        low = parse_size(self.min_size, "--min-size")
        require(low >= element, "min_size", self.min_size, f"must hold one {self.dtype} "
                f"element ({element} bytes)")
        high = None if self.max_size == "auto" else parse_size(self.max_size, "--max-size")
        if high is not None:
            self._check_largest(low, high)
        if not checks_environment():
            return   # off the node: the device is unknown, so is the default largest size
        check_writable_file(self.results, "--results")
        # Last: on a node this asks torch whether a GPU is there (3 s to import on a small CPU).
        self.device, self.backend = resolve_device(self.device, self.backend)
        if high is None:   # the device's default, against an explicit --min-size
            self.max_size = DEFAULT_MAX_SIZE[self.device]
            high = parse_size(self.max_size, "--max-size")
            self._check_largest(low, high)
        self.sizes = message_sizes(low, high)
        # On GPUs the compute is not on the CPUs gloo or NCCL's proxy threads use.
        require(not self.beside_compute or self.device == "cpu", "beside_compute", True,
                "measures the compute a CPU loses; use it with --device cpu")
        require(not self.lockstep or self.device == "cpu", "lockstep", True,
                "times compute on the CPUs; use it with --device cpu")

    def _check_largest(self, low: int, high: int) -> None:
        require(high >= low, "max_size", self.max_size, f"must be at least --min-size "
                f"({self.min_size})")
        # Every rank allocates the largest message twice (data and check): 16 GiB bounds it.
        require(high <= MAX_MESSAGE_BYTES, "max_size", self.max_size, "must be at most 16GiB")

    def lockstep_workload(self) -> ModelConfig | None:
        """The network --lockstep-model names, shaped as the trainer would shape it; its
        errors name the --lockstep-* flag."""
        if self.lockstep_model is None:
            return None
        try:
            return ModelConfig(model=self.lockstep_model, image_size=self.lockstep_image_size,
                               mlp_width=self.lockstep_mlp_width,
                               mlp_depth=self.lockstep_mlp_depth)
        except ConfigError as error:
            raise ConfigError(error.flag.replace("--", "--lockstep-", 1), error.value,
                              error.allowed) from None

    @classmethod
    def from_args(cls, argv: list[str] | None, prog: str = PROG) -> AllreduceConfig:
        parser = OneLineErrorParser(prog=prog, description=__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        add_flags(parser, cls, "all-reduce sweep")
        return from_namespace(cls, parser.parse_args(argv))

    def to_dict(self) -> dict:
        return settings_dict(self)

    def hash(self) -> str:
        return settings_hash(self)


def message_sizes(low: int, high: int) -> tuple[int, ...]:
    """Doubling from ``low`` while not above ``high``."""
    sizes = [low]
    while sizes[-1] * 2 <= high:
        sizes.append(sizes[-1] * 2)
    return tuple(sizes)


def bus_factor(world_size: int) -> float:
    """nccl-tests' all-reduce factor: each rank sends and receives 2(n-1)/n of the data."""
    return 2 * (world_size - 1) / world_size


def bandwidths(size_bytes: int, seconds: float,
               world_size: int) -> tuple[float | None, float | None]:
    """(algbw, busbw) in GB/s (1e9 bytes per second), as nccl-tests prints them; (None,
    None) for one rank: nothing crosses a link, so size / time is a memory copy's rate (an
    H100 showed 10.9 TB/s), not a bandwidth, and the record says null."""
    if world_size < 2:
        return None, None
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * bus_factor(world_size)


def headline(rec: dict) -> str:
    """A sweep's one line (the command's last, the matrix's): the peak busbw, or why
    there is none."""
    peak = rec.get("busbw_peak_GBps")
    if peak is None:
        return ("one rank: no bandwidth (nothing crosses a link); every size checked"
                if (rec.get("world_size") or 0) < 2 else "no bandwidth measured")
    return f"busbw up to {peak:.3f} GB/s"


def skeleton(cfg: AllreduceConfig) -> dict:
    return {"schema_version": record.SCHEMA_VERSION, "run_id": record.new_run_id(),
            "utc_time": record.utc_now(), "mode": "allreduce", "status": "error",
            "error": None, "config": cfg.to_dict(), "config_hash": cfg.hash(),
            "world_size": None, "nnodes": None, "nproc_per_node": None,
            "backend": cfg.backend, "dtype": cfg.dtype, "sizes": []}
