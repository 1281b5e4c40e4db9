"""The trainer's configuration: one dataclass per component, validated once at the entry point.

Every field is a CLI flag (see ``bench.options``). ``TrainConfig.from_args`` parses the
command line, validates every section and resolves the ``auto`` defaults (device, backend,
image size, class count), so what the record stores is what actually ran. ``--precision
auto`` is the exception: it depends on every GPU of the job, so the ranks resolve it once the
job has formed (``bench.rank.precision``) into the record's own ``precision``, and the config
keeps ``auto``, as asked.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import shutil
import sys
import sysconfig
import typing
from pathlib import Path

from bench.catalog import DEFAULT_IMAGE_SIZE, MODEL_NAMES, PATCH_SIDE
from bench.manifest import MANIFEST_NAME
from bench.nvidia_smi import no_cuda_reason
from bench.options import (
    ConfigError,
    add_flags,
    checks_environment,
    from_namespace,
    option,
    require,
    require_range,
)
from bench.paths import check_writable_file
from bench.units import parse_size

DATA_SOURCES = ("synthetic", "fashion-mnist", "imagefolder", "cifar10")
# What a job's steps run in; ``auto`` is resolved to one of them on the ranks, once the job
# has formed and every GPU is known (bench.rank.precision): the record's ``precision``.
TRAINED_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
PRECISIONS = ("auto", *TRAINED_PRECISIONS)
DEVICES = ("auto", "cuda", "cpu")
MANIFEST_CHECKS = ("all", "sample", "off")
# Where an image folder's JPEGs are decoded: by PIL in the loader's worker processes, or in
# one batched call on the training device (torchvision.io.decode_jpeg; nvJPEG on a GPU).
DECODERS = ("loader", "device")
BACKENDS = ("auto", "nccl", "gloo")
# The comm hooks, each with the element type it all-reduces (the gradients are float32;
# PowerSGD's P and Q factors too). gloo's CPU cost per byte depends on it: it sums float16
# in software, about twice float32's CPU time per bus byte in the emulated-accuracy
# reference sweeps.
HOOK_WIRE_DTYPE = {"none": "float32", "fp16": "float16", "bf16": "bfloat16",
                   "powersgd": "float32"}
COMM_HOOKS = tuple(HOOK_WIRE_DTYPE)
MAX_BATCH_SIZE = 1 << 20
MAX_TIMEOUT_S = 7 * 86400   # a week: longer is a typo, and would outlive any deadline

# Files each on-disk format must have, checked before anything starts.
FASHION_MNIST_FILES = (
    "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte",
)


@dataclasses.dataclass(kw_only=True, slots=True)
class ModelConfig:
    """Which network to train and its shape."""

    model: str = option("resnet18", "network to train", choices=MODEL_NAMES)
    image_size: int | None = option(None, "input image side in pixels (default: 224 for "
                                    "torchvision models, 32 for vit_tiny, 28 for mlp/smallcnn)")
    num_classes: int | None = option(None, "output classes (default: the dataset's; 1000 "
                                     "for synthetic data)")
    mlp_width: int = option(4096, "hidden width of the deep-and-wide mlp")
    mlp_depth: int = option(8, "hidden layers of the deep-and-wide mlp")

    def __post_init__(self) -> None:
        require(self.model in MODEL_NAMES, "model", self.model, f"one of {', '.join(MODEL_NAMES)}")
        if self.image_size is None:
            self.image_size = DEFAULT_IMAGE_SIZE.get(self.model, 224)
        require_range(self.image_size, "image_size", 8, 4096)
        patch = PATCH_SIDE.get(self.model)
        if patch:
            require(self.image_size % patch == 0, "image_size", self.image_size,
                    f"{self.model} needs a multiple of {patch} (its patch size)")
        if self.model.startswith("resnet"):
            require(self.image_size >= 32, "image_size", self.image_size,
                    "resnets downsample 32x: use 32 or more")
        require_range(self.num_classes, "num_classes", 2, 1_000_000, optional=True)
        require_range(self.mlp_width, "mlp_width", 1, 1 << 20)
        require_range(self.mlp_depth, "mlp_depth", 1, 1024)


@dataclasses.dataclass(kw_only=True, slots=True)
class DataConfig:
    """Where the samples come from and how they are batched."""

    data: str = option("synthetic", "data source: synthetic (one random batch on the device: "
                       "times compute and communication only) or a real dataset",
                       choices=DATA_SOURCES)
    data_dir: Path | None = option(None, "dataset directory (required for real data)")
    download: bool = option(False, "download cifar10 into --data-dir if it is missing")
    batch_size: int = option(64, "samples per device per step (the global batch is this "
                             "x world size x --grad-accum)")
    workers: int | None = option(None, "DataLoader worker processes per rank for real data "
                                 "(default: the CPU cores per local rank less one, 2 to 8)")
    max_train_samples: int | None = option(None, "use only the first N training samples")
    max_eval_samples: int | None = option(None, "use only the first N test samples")
    manifest_check: str = option("all", "before training, check the dataset against its "
                                 "MANIFEST.sha256: all files, a sample, or off",
                                 choices=MANIFEST_CHECKS)
    manifest_sample: int = option(64, "files checked with --manifest-check sample")
    decode: str = option("loader", "where --data imagefolder's JPEGs are decoded and resized: "
                         "loader (PIL, per sample, in the worker processes) or device "
                         "(the loader only reads the files; one batched decode_jpeg on the "
                         "training device: use it when the CPU cannot keep a GPU fed)",
                         choices=DECODERS)

    def __post_init__(self) -> None:
        require(self.data in DATA_SOURCES, "data", self.data, f"one of {', '.join(DATA_SOURCES)}")
        require_range(self.batch_size, "batch_size", 1, MAX_BATCH_SIZE)
        require_range(self.workers, "workers", 0, 256, optional=True)
        require(self.manifest_check in MANIFEST_CHECKS, "manifest_check", self.manifest_check,
                f"one of {', '.join(MANIFEST_CHECKS)}")
        require_range(self.manifest_sample, "manifest_sample", 1, 10_000_000)
        for name in ("max_train_samples", "max_eval_samples"):
            require_range(getattr(self, name), name, 1, 1 << 40, optional=True)
        require(self.decode in DECODERS, "decode", self.decode, f"one of {', '.join(DECODERS)}")
        require(self.decode == "loader" or self.data == "imagefolder", "decode", self.decode,
                f"--data {self.data} is not JPEG files: --decode device is for --data "
                "imagefolder; leave --decode at loader")
        if self.data == "synthetic":
            return
        require(self.data_dir is not None, "data_dir", None,
                f"--data {self.data} needs --data-dir pointing at the dataset")
        assert self.data_dir is not None  # narrowed for type checkers
        if not checks_environment():
            return
        if self.data == "cifar10" and self.download and not self.data_dir.is_dir():
            # torchvision creates and fills the directory: there is no manifest to check.
            require(self.manifest_check == "off", "manifest_check", self.manifest_check,
                    "a fresh --download has no MANIFEST.sha256: stage it with `bench dataset "
                    "stage cifar10 --download` (which writes one), or pass --manifest-check off")
            return
        download_hint = " (add --download for cifar10)" if self.data == "cifar10" else ""
        require(self.data_dir.is_dir(), "data_dir", self.data_dir,
                "no such directory" + download_hint)
        if self.data == "fashion-mnist":
            missing = [n for n in FASHION_MNIST_FILES if not find_idx_file(self.data_dir, n)]
            require(not missing, "data_dir", self.data_dir,
                    f"missing Fashion-MNIST files {', '.join(missing)} (raw or .gz); Debian's "
                    "dataset-fashion-mnist package installs them")
        elif self.data == "cifar10":
            require((self.data_dir / "cifar-10-batches-py").is_dir(), "data_dir", self.data_dir,
                    "no cifar-10-batches-py inside; add --download to fetch it")
        elif self.data == "imagefolder":
            require((self.data_dir / "train").is_dir(), "data_dir", self.data_dir,
                    "imagefolder needs train/<class>/<image> (and optionally val/<class>/...)")
        # Without a manifest there is nothing to check the bytes against: training on them
        # unverified is the user's explicit choice, never a silent fallback.
        require(self.manifest_check == "off" or (self.data_dir / MANIFEST_NAME).is_file(),
                "manifest_check", self.manifest_check,
                f"{self.data_dir} has no {MANIFEST_NAME}: stage the dataset with `bench "
                "dataset stage` (which writes one), or pass --manifest-check off to train on "
                "unverified files")


def find_idx_file(directory: Path, name: str) -> Path | None:
    """The raw or gzipped idx file ``name`` in ``directory``, or None."""
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


@dataclasses.dataclass(kw_only=True, slots=True)
class ScheduleConfig:
    """How long to train and what to measure: throughput (--steps) or time to train (--epochs)."""

    steps: int | None = option(None, "throughput mode: time N steps after the warm-up")
    epochs: int | None = option(None, "time-to-train mode: train E epochs, evaluating after each")
    warmup_steps: int = option(5, "untimed steps before the timed ones (--steps mode)")
    target_accuracy: float | None = option(None, "record the time to reach this eval accuracy "
                                           "(0-1, --epochs mode)")
    lr: float = option(0.01, "SGD learning rate (momentum 0.9)")
    seed: int = option(0, "random seed; rank r uses seed + r for its data")
    log_every: int = option(10, "print progress every N steps on rank 0 (0: never)")
    comm_probe_steps: int = option(10, "after training, time this many steps without "
                                   "gradient sync (no_sync): the difference to the synced "
                                   "steps is the exposed communication time (0: skip)")
    link_probe_mib: float = option(4.0, "after training, on several nodes: time each link "
                                   "between node leaders with a buffer of this many MiB, "
                                   "to name a node whose link is slow (0: skip)")
    telemetry: bool = option(True, "sample each GPU through NVML during the timed steps "
                             "(utilization, power, clocks, temperature, energy)")
    telemetry_interval: float = option(0.1, "seconds between GPU telemetry samples")

    def __post_init__(self) -> None:
        require((self.steps is None) != (self.epochs is None), "steps",
                self.steps, "give exactly one of --steps (throughput) or --epochs (time to train)")
        require_range(self.steps, "steps", 1, 10_000_000, optional=True)
        require_range(self.epochs, "epochs", 1, 100_000, optional=True)
        require_range(self.warmup_steps, "warmup_steps", 0, 1_000_000)
        require_range(self.target_accuracy, "target_accuracy", 0, 1, low_open=True,
                      optional=True)
        require(self.target_accuracy is None or self.epochs is not None, "target_accuracy",
                self.target_accuracy, "only applies with --epochs")
        require_range(self.lr, "lr", 0, 100, low_open=True)
        require_range(self.seed, "seed", 0, 2**32 - 1)
        require_range(self.log_every, "log_every", 0, 10_000_000)
        require_range(self.comm_probe_steps, "comm_probe_steps", 0, 100_000)
        require_range(self.link_probe_mib, "link_probe_mib", 0, 1024)
        require_range(self.telemetry_interval, "telemetry_interval", 0.01, 60)


@dataclasses.dataclass(kw_only=True, slots=True)
class PrecisionConfig:
    """Numeric precision and compiler switches."""

    precision: str = option("fp32", "fp32 (tf32 off), tf32, bf16 or fp16 autocast "
                            "(fp16 uses a GradScaler), or auto: bf16 where every GPU of the "
                            "job has it natively (compute capability 8.0 or later), else "
                            "fp16; fp32 on CPU", choices=PRECISIONS)
    channels_last: bool = option(False, "use the channels-last memory format")
    compile: bool = option(False, "wrap the model in torch.compile")

    def __post_init__(self) -> None:
        require(self.precision in PRECISIONS, "precision", self.precision,
                f"one of {', '.join(PRECISIONS)}")
        if self.compile and checks_environment():
            missing = compile_toolchain_missing()
            require(not missing, "compile", True, f"torch.compile builds C++ and Triton code "
                    f"at run time, and this environment has no {' and no '.join(missing)}: "
                    "run without --compile, or install them (Debian: g++ python3-dev)")


def compile_toolchain_missing() -> list[str]:
    """What torch.compile (Inductor's C++ and Triton's C launchers) needs and cannot find:
    a C++ compiler and this Python's headers."""
    missing = []
    if not any(shutil.which(cxx) for cxx in ("g++", "c++", "clang++")):
        missing.append("C++ compiler")
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        missing.append("Python.h")
    return missing


STRATEGIES = ("ddp", "fsdp")


@dataclasses.dataclass(kw_only=True, slots=True)
class DistributedConfig:
    """Process group and DistributedDataParallel settings."""

    device: str = option("auto", "cuda, cpu, or auto (cuda when available)", choices=DEVICES)
    backend: str = option("auto", "process group backend: auto is nccl on cuda, gloo on cpu",
                          choices=BACKENDS)
    timeout: float = option(300.0, "seconds a collective or rendezvous may wait for a peer "
                            "before the run fails")
    bucket_cap_mb: float | None = option(None, "DDP gradient bucket size in MiB (default: "
                                         "DDP's own, 25 MiB after a 1 MiB first bucket so "
                                         "that the last layers' gradients start early)")
    static_graph: bool = option(False, "tell DDP the graph is static")
    grad_accum: int = option(1, "micro-batches per optimizer step; gradients sync on the last "
                             "(no_sync on the others)")
    comm_hook: str = option("none", "gradient communication hook: none (plain all-reduce), "
                            "fp16 or bf16 (compress to 16 bits), powersgd (low-rank)",
                            choices=COMM_HOOKS)
    powersgd_rank: int = option(1, "PowerSGD's matrix approximation rank (higher: more bytes, "
                                "closer to the true gradient)")
    powersgd_warmup: int = option(10, "PowerSGD: steps of plain all-reduce before compression "
                                  "starts (torch's start_powerSGD_iter)")
    strategy: str = option("ddp", "data parallelism: ddp (every rank holds the whole model) "
                           "or fsdp (FSDP2 fully_shard: parameters, gradients and optimizer "
                           "state sharded across ranks)", choices=STRATEGIES)
    memory_cap: str | None = option(None, "host memory each rank may allocate beyond what it "
                                    "holds once torch and the process group are up, e.g. "
                                    "2GiB: more is an out-of-memory (status oom), as on a "
                                    "smaller machine (RLIMIT_DATA)")

    def __post_init__(self) -> None:
        require(self.strategy in STRATEGIES, "strategy", self.strategy,
                f"one of {', '.join(STRATEGIES)}")
        if self.strategy == "fsdp":
            require(self.comm_hook == "none", "comm_hook", self.comm_hook,
                    "comm hooks are DDP's: use --comm-hook none with --strategy fsdp")
            require(not self.static_graph, "static_graph", True, "is a DDP setting: leave it "
                    "out with --strategy fsdp")
        if self.memory_cap is not None:
            require(parse_size(self.memory_cap, "--memory-cap") >= 1 << 20, "memory_cap",
                    self.memory_cap, "must be at least 1MiB")
        require(self.device in DEVICES, "device", self.device, f"one of {', '.join(DEVICES)}")
        require(self.backend in BACKENDS, "backend", self.backend, f"one of {', '.join(BACKENDS)}")
        require_range(self.timeout, "timeout", 0, MAX_TIMEOUT_S, low_open=True)
        require_range(self.bucket_cap_mb, "bucket_cap_mb", 0, 65536, low_open=True,
                      optional=True)
        require_range(self.grad_accum, "grad_accum", 1, 4096)
        require(self.comm_hook in COMM_HOOKS, "comm_hook", self.comm_hook,
                f"one of {', '.join(COMM_HOOKS)}")
        require_range(self.powersgd_rank, "powersgd_rank", 1, 4096)
        # torch's PowerSGD needs at least 2 plain steps to set up its error feedback.
        require_range(self.powersgd_warmup, "powersgd_warmup", 2, 1_000_000)


@dataclasses.dataclass(kw_only=True, slots=True)
class OutputConfig:
    """Where the run record goes."""

    results: Path = option(Path("results/runs.jsonl"), "JSON-lines file the run record is "
                           "appended to")

    def __post_init__(self) -> None:
        # Checked before training: a record that cannot be written is a measurement lost.
        if checks_environment():
            check_writable_file(self.results, "--results")


# Each section's name (its key in TrainConfig and in the record) -> its class and flag title.
SECTIONS: dict[str, tuple[type[typing.Any], str]] = {
    "model": (ModelConfig, "model"),
    "data": (DataConfig, "data"),
    "schedule": (ScheduleConfig, "schedule"),
    "precision": (PrecisionConfig, "precision"),
    "distributed": (DistributedConfig, "distributed"),
    "output": (OutputConfig, "output"),
}

# Fields that say where results go, not what was measured: left out of the config hash so
# the same measurement written elsewhere is still recognised as the same.
_UNHASHED = {("output", "results"), ("schedule", "log_every")}


@dataclasses.dataclass(kw_only=True, slots=True)
class TrainConfig:
    """The whole run: each component receives only its own section."""

    model: ModelConfig
    data: DataConfig
    schedule: ScheduleConfig
    precision: PrecisionConfig
    distributed: DistributedConfig
    output: OutputConfig

    def __post_init__(self) -> None:
        if self.schedule.epochs is not None:
            require(self.data.data != "synthetic", "epochs", self.schedule.epochs,
                    "time to train needs a real dataset (--data fashion-mnist, cifar10 or "
                    "imagefolder); use --steps with synthetic data")
        hook = self.distributed
        if hook.comm_hook == "powersgd" and self.schedule.steps is not None:
            # Otherwise the timed steps would mix plain and compressed all-reduces.
            require(self.schedule.warmup_steps >= hook.powersgd_warmup, "warmup_steps",
                    self.schedule.warmup_steps, f"must cover --powersgd-warmup "
                    f"({hook.powersgd_warmup}) so every timed step is compressed: raise "
                    "--warmup-steps or lower --powersgd-warmup")
        if self.distributed.strategy == "fsdp":
            # Measured on an H100: FSDP2 refuses non-contiguous parameters, which is what
            # channels-last makes of convolution weights.
            require(not self.precision.channels_last, "channels_last", True,
                    "FSDP2 shards only contiguous parameters: use --no-channels-last with "
                    "--strategy fsdp")
        if checks_environment():
            self._resolve_device()

    def _resolve_device(self) -> None:
        dist = self.distributed
        dist.device, dist.backend = resolve_device(dist.device, dist.backend)

    @staticmethod
    def parser(prog: str = "bench train") -> argparse.ArgumentParser:
        parser = OneLineErrorParser(
            prog=prog, description="Train one configuration and append its record to "
            "--results. Run under torchrun for several processes or nodes.")
        for cls, title in SECTIONS.values():
            add_flags(parser, cls, title)
        return parser

    @classmethod
    def from_args(cls, argv: list[str] | None, prog: str = "bench train") -> TrainConfig:
        """Parse and validate; raises ConfigError (or SystemExit(2) from argparse)."""
        namespace = cls.parser(prog).parse_args(argv)
        sections = {name: from_namespace(section_cls, namespace)
                    for name, (section_cls, _) in SECTIONS.items()}
        return cls(**sections)

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self), default=str))

    def hash(self) -> str:
        """A short stable hash of what was measured (not where it was written)."""
        resolved = self.to_dict()
        for section, field in _UNHASHED:
            resolved[section].pop(field, None)
        blob = json.dumps(resolved, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def resolve_device(device: str, backend: str) -> tuple[str, str]:
    """``auto`` device and backend made concrete (cuda and nccl where torch sees a GPU), and
    the combinations that cannot run refused."""
    import torch  # deferred: keeps config parsing importable without torch work

    has_cuda = torch.cuda.is_available()
    if device == "auto":
        device = "cuda" if has_cuda else "cpu"
    if device == "cuda" and not has_cuda:
        # Asked of nvidia-smi only now: on an NVSwitch system whose Fabric Manager is down,
        # the reason names it and the fix.
        raise ConfigError("--device", "cuda", no_cuda_reason())
    if backend == "auto":
        backend = "nccl" if device == "cuda" else "gloo"
    require(not (backend == "nccl" and device == "cpu"), "backend", "nccl",
            "nccl needs CUDA devices; use --backend gloo on cpu")
    return device, backend


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the flag (exit code 2, as argparse)."""


    def error(self, message: str) -> typing.NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


__all__ = ["TrainConfig", "ConfigError"] + [cls.__name__ for cls, _ in SECTIONS.values()]
