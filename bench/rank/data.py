"""Data sources: synthetic batches on the device, or real datasets sharded across ranks.

Every source yields batches shaped for the model (channels and image size), so the train
loop does not know where samples come from.
"""
from __future__ import annotations

import dataclasses
import gzip
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

from bench.config import DataConfig, find_idx_file

Batch = tuple[torch.Tensor, torch.Tensor]
Encoded = tuple[torch.Tensor, torch.Tensor]   # --decode device: files end to end, their lengths

# Per-dataset normalisation constants (mean, std of the training pixels, 0-1 scale).
FASHION_MNIST_STATS = (0.2860, 0.3530)
CIFAR10_STATS = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


@dataclasses.dataclass(slots=True)
class DataBundle:
    """What the loop needs from a data source."""

    num_classes: int
    train: DataLoader | None          # None for synthetic data
    eval: DataLoader | None           # None when the source has no test split
    synthetic_batch: Batch | None = None
    train_samples: int = 0            # samples per epoch across all ranks
    device: torch.device = torch.device("cpu")
    memory_format: torch.memory_format = torch.contiguous_format
    # Batch-wise work done on the device after the copy (None: the loader's batch is final).
    prepare: Callable[[torch.Tensor], torch.Tensor] | None = None
    workers: int = 0                  # loader worker processes per rank (0: none or synthetic)
    # --decode device: the loader's batch is the files' encoded bytes, decoded here.
    decode: Callable[[Encoded], torch.Tensor] | None = None

    def to_device(self, batch: Batch) -> Batch:
        """A loader batch on the device, prepared and in the model's memory format. The
        synthetic batch is already there, made once in that format: this is a no-op."""
        images, labels = batch
        if self.decode is not None:
            images = self.decode(images)   # type: ignore[arg-type] - encoded files
        else:
            images = images.to(self.device, non_blocking=True)
        if self.prepare is not None:
            images = self.prepare(images)
        return (images.contiguous(memory_format=self.memory_format),
                labels.to(self.device, non_blocking=True))

    def set_epoch(self, epoch: int) -> None:
        if self.train is not None and isinstance(self.train.sampler, DistributedSampler):
            self.train.sampler.set_epoch(epoch)

    def endless(self) -> Iterator[Batch]:
        """Batches forever: the synthetic batch, or the loader epoch after epoch."""
        if self.synthetic_batch is not None:
            while True:
                yield self.synthetic_batch
        assert self.train is not None
        epoch = 0
        while True:
            self.set_epoch(epoch)
            yield from self.train
            epoch += 1


def read_idx(path: Path) -> torch.Tensor:
    """Read an idx file (the MNIST family's format), raw or gzipped, as a uint8 tensor."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte idx file (magic {data[:4].hex()})")
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    payload = torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8)
    return payload.reshape(dims)


class FashionMNIST(Dataset):
    """Fashion-MNIST from its idx files. Samples stay raw 28x28 bytes: normalising, resizing
    and widening to the model's channels happen once per batch on the device
    (``fashion_mnist_on_device``), not per sample in the loader workers."""

    def __init__(self, directory: Path, split: str):
        prefix = "train" if split == "train" else "t10k"
        self.images = read_idx(find_idx_file(directory, f"{prefix}-images-idx3-ubyte"))
        self.labels = read_idx(find_idx_file(directory, f"{prefix}-labels-idx1-ubyte")).long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> Batch:
        return self.images[index].unsqueeze(0), self.labels[index]


def fashion_mnist_on_device(channels: int, size: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """uint8 (N, 1, 28, 28) on the device -> normalised float (N, channels, size, size)."""
    mean, std = FASHION_MNIST_STATS

    def prepare(images: torch.Tensor) -> torch.Tensor:
        images = (images.float().div(255) - mean).div(std)
        if images.shape[-1] != size:
            images = F.interpolate(images, size=size, mode="bilinear", align_corners=False)
        return images.expand(-1, channels, -1, -1)
    return prepare


def loader_workers(configured: int | None, local_world_size: int) -> int:
    """--workers, or by default the CPU cores this process may use per local rank, less one
    for the rank itself, from 2 to 8: enough to keep a GPU fed on decoded images without
    oversubscribing a small node."""
    if configured is not None:
        return configured
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(2, min(8, (cores or 1) // max(local_world_size, 1) - 1))


def _pil_transform(channels: int, size: int, stats):
    from torchvision import transforms as T

    mean, std = stats
    steps = [T.Resize((size, size))]
    if channels == 1:
        steps.append(T.Grayscale(1))
        mean, std = (sum(mean) / 3,), (sum(std) / 3,)
    else:
        steps.append(T.Lambda(lambda im: im.convert("RGB")))
    return T.Compose(steps + [T.ToTensor(), T.Normalize(mean, std)])


def _encoded(path: str) -> torch.Tensor:
    """A file's bytes as a uint8 tensor: what decode_jpeg takes."""
    from torchvision.io import read_file

    return read_file(path)


def _encoded_batch(samples: list[tuple[torch.Tensor, int]]) -> tuple[Encoded, torch.Tensor]:
    """A batch of files of different lengths, packed end to end in one tensor with their
    lengths: a worker hands the main process two tensors, not one shared-memory file
    descriptor per file (a list of 64 ran out of them)."""
    files = [data for data, _ in samples]
    return ((torch.cat(files), torch.tensor([len(f) for f in files])),
            torch.tensor([label for _, label in samples]))


def device_jpeg_decoder(channels: int, size: int, device: torch.device,
                        stats) -> Callable[[Encoded], torch.Tensor]:
    """Encoded JPEGs -> a normalised float batch (N, channels, size, size) on ``device``:
    one batched decode_jpeg there (nvJPEG on a GPU), then the resize and normalisation the
    loader path does with PIL (bilinear, antialiased)."""
    from torchvision.io import ImageReadMode, decode_jpeg

    mode = ImageReadMode.GRAY if channels == 1 else ImageReadMode.RGB
    mean, std = stats
    if channels == 1:
        mean, std = (sum(mean) / 3,), (sum(std) / 3,)
    mean_t = torch.tensor(mean, device=device).view(1, -1, 1, 1)
    std_t = torch.tensor(std, device=device).view(1, -1, 1, 1)

    def decode(encoded: Encoded) -> torch.Tensor:
        packed, lengths = encoded
        files = list(torch.split(packed, lengths.tolist()))
        try:
            images = decode_jpeg(files, mode=mode, device=device)
        except RuntimeError as error:
            raise ValueError(f"--decode device decodes JPEG files only, and one of this "
                             f"batch's is not one ({str(error).splitlines()[0]}): use "
                             "--decode loader for other formats") from None
        resized = [F.interpolate(image.unsqueeze(0).float(), size=(size, size),
                                 mode="bilinear", antialias=True, align_corners=False)
                   for image in images]
        return (torch.cat(resized).div_(255) - mean_t).div_(std_t)
    return decode


def _datasets(cfg: DataConfig, channels: int, size: int) -> tuple[Dataset, Dataset | None, int]:
    """(train, test or None, class count) for a real data source."""
    directory = Path(cfg.data_dir)
    if cfg.data == "fashion-mnist":
        return FashionMNIST(directory, "train"), FashionMNIST(directory, "test"), 10
    if cfg.data == "cifar10":
        from torchvision.datasets import CIFAR10

        tf = _pil_transform(channels, size, CIFAR10_STATS)
        return (CIFAR10(directory, train=True, transform=tf, download=cfg.download),
                CIFAR10(directory, train=False, transform=tf, download=cfg.download), 10)
    if cfg.data == "imagefolder":
        from torchvision.datasets import ImageFolder

        # --decode device: the workers only read each file; decoding is the device's.
        options = ({"loader": _encoded} if cfg.decode == "device" else
                   {"transform": _pil_transform(channels, size, IMAGENET_STATS)})
        train = ImageFolder(directory / "train", **options)
        val_dir = directory / "val"
        test = ImageFolder(val_dir, **options) if val_dir.is_dir() else None
        return train, test, len(train.classes)
    raise ValueError(f"unknown data source {cfg.data!r}")


def _first(dataset: Dataset, limit: int | None) -> Dataset:
    return dataset if limit is None or limit >= len(dataset) else Subset(dataset, range(limit))


def build_data(cfg: DataConfig, *, channels: int, size: int, num_classes: int | None,
               rank: int, world_size: int, seed: int, device: torch.device,
               local_world_size: int = 1,
               memory_format: torch.memory_format = torch.contiguous_format) -> DataBundle:
    """The data for this rank: a batch on the device, or loaders over its shard."""
    if cfg.data == "synthetic":
        classes = num_classes or 1000
        # Made once, on the device: the loop then times compute and communication only.
        generator = torch.Generator().manual_seed(seed + rank)
        images = torch.randn((cfg.batch_size, channels, size, size), generator=generator)
        labels = torch.randint(0, classes, (cfg.batch_size,), generator=generator)
        # In the model's memory format once, so no step converts it again.
        return DataBundle(num_classes=classes, train=None, eval=None,
                          synthetic_batch=(images.to(device, memory_format=memory_format),
                                           labels.to(device)),
                          device=device, memory_format=memory_format)

    train_set, test_set, classes = _datasets(cfg, channels, size)
    train_set = _first(train_set, cfg.max_train_samples)
    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=seed, drop_last=True)
    workers = loader_workers(cfg.workers, local_world_size)
    on_device = cfg.decode == "device"
    loader_args = dict(batch_size=cfg.batch_size, num_workers=workers,
                       pin_memory=device.type == "cuda" and not on_device,
                       persistent_workers=workers > 0,
                       **({"collate_fn": _encoded_batch} if on_device else {}))
    # drop_last keeps every timed step the same size.
    train = DataLoader(train_set, sampler=sampler, drop_last=True, **loader_args)
    if len(train) == 0:
        raise ValueError(f"--batch-size {cfg.batch_size} x {world_size} ranks is larger than "
                         f"the {len(train_set)} training samples: no full batch to train on")
    evaluation = None
    if test_set is not None:
        test_set = _first(test_set, cfg.max_eval_samples)
        # Each rank takes every world_size-th sample: no padding, so the accuracy is exact.
        shard = Subset(test_set, range(rank, len(test_set), world_size))
        evaluation = DataLoader(shard, shuffle=False, **loader_args)
    prepare = fashion_mnist_on_device(channels, size) if cfg.data == "fashion-mnist" else None
    decode = device_jpeg_decoder(channels, size, device, IMAGENET_STATS) if on_device else None
    return DataBundle(num_classes=num_classes or classes, train=train, eval=evaluation,
                      train_samples=len(train) * cfg.batch_size * world_size, device=device,
                      memory_format=memory_format, prepare=prepare, workers=workers,
                      decode=decode)
