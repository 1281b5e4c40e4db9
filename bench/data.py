"""Data sources: synthetic batches on the device, or real datasets sharded across ranks.

Every source yields batches shaped for the model (channels and image size), so the train
loop does not know where samples come from.
"""
from __future__ import annotations

import dataclasses
import gzip
import struct
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

from bench.config import DataConfig, find_idx_file

Batch = tuple[torch.Tensor, torch.Tensor]

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
    """Fashion-MNIST from its idx files, adapted to the model's channels and size."""

    def __init__(self, directory: Path, split: str, channels: int, size: int):
        prefix = "train" if split == "train" else "t10k"
        self.images = read_idx(find_idx_file(directory, f"{prefix}-images-idx3-ubyte"))
        self.labels = read_idx(find_idx_file(directory, f"{prefix}-labels-idx1-ubyte")).long()
        self.channels, self.size = channels, size

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> Batch:
        mean, std = FASHION_MNIST_STATS
        image = (self.images[index].float().div(255) - mean).div(std).unsqueeze(0)
        if image.shape[-1] != self.size:
            image = F.interpolate(image.unsqueeze(0), size=self.size, mode="bilinear",
                                  align_corners=False).squeeze(0)
        return image.expand(self.channels, -1, -1).contiguous(), self.labels[index]


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


def _datasets(cfg: DataConfig, channels: int, size: int) -> tuple[Dataset, Dataset | None, int]:
    """(train, test or None, class count) for a real data source."""
    directory = Path(cfg.data_dir)
    if cfg.data == "fashion-mnist":
        return (FashionMNIST(directory, "train", channels, size),
                FashionMNIST(directory, "test", channels, size), 10)
    if cfg.data == "cifar10":
        from torchvision.datasets import CIFAR10

        tf = _pil_transform(channels, size, CIFAR10_STATS)
        return (CIFAR10(directory, train=True, transform=tf, download=cfg.download),
                CIFAR10(directory, train=False, transform=tf, download=cfg.download), 10)
    if cfg.data == "imagefolder":
        from torchvision.datasets import ImageFolder

        tf = _pil_transform(channels, size, IMAGENET_STATS)
        train = ImageFolder(directory / "train", transform=tf)
        val_dir = directory / "val"
        test = ImageFolder(val_dir, transform=tf) if val_dir.is_dir() else None
        return train, test, len(train.classes)
    raise ValueError(f"unknown data source {cfg.data!r}")


def _first(dataset: Dataset, limit: int | None) -> Dataset:
    return dataset if limit is None or limit >= len(dataset) else Subset(dataset, range(limit))


def build_data(cfg: DataConfig, *, channels: int, size: int, num_classes: int | None,
               rank: int, world_size: int, seed: int, device: torch.device,
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
                                           labels.to(device)))

    train_set, test_set, classes = _datasets(cfg, channels, size)
    train_set = _first(train_set, cfg.max_train_samples)
    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=seed, drop_last=True)
    loader_args = dict(batch_size=cfg.batch_size, num_workers=cfg.workers,
                       pin_memory=device.type == "cuda", persistent_workers=cfg.workers > 0)
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
    return DataBundle(num_classes=num_classes or classes, train=train, eval=evaluation,
                      train_samples=len(train) * cfg.batch_size * world_size)
