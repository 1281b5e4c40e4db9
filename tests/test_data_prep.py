"""Real data is prepared once per batch on the device, and loaders get enough workers."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bench.rank import data


def _per_sample(image: torch.Tensor, channels: int, size: int) -> torch.Tensor:
    """What the loader workers used to do for every sample: the reference to match."""
    mean, std = data.FASHION_MNIST_STATS
    x = (image.float().div(255) - mean).div(std).unsqueeze(0)
    if x.shape[-1] != size:
        x = F.interpolate(x.unsqueeze(0), size=size, mode="bilinear",
                          align_corners=False).squeeze(0)
    return x.expand(channels, -1, -1)


@pytest.mark.parametrize("channels, size", [(1, 28), (3, 32), (3, 64)])
def test_batch_preparation_matches_the_per_sample_transform(channels, size):
    raw = torch.randint(0, 256, (5, 1, 28, 28), dtype=torch.uint8)
    prepared = data.fashion_mnist_on_device(channels, size)(raw)
    assert prepared.shape == (5, channels, size, size) and prepared.dtype == torch.float32
    expected = torch.stack([_per_sample(img[0], channels, size) for img in raw])
    torch.testing.assert_close(prepared, expected)


def test_to_device_prepares_and_sets_the_memory_format():
    bundle = data.DataBundle(num_classes=10, train=None, eval=None,
                             memory_format=torch.channels_last,
                             prepare=data.fashion_mnist_on_device(3, 32))
    images, labels = bundle.to_device((torch.zeros(4, 1, 28, 28, dtype=torch.uint8),
                                       torch.arange(4)))
    assert images.shape == (4, 3, 32, 32)
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert labels.tolist() == [0, 1, 2, 3]


def test_the_dataset_hands_out_raw_bytes(tmp_path):
    import gzip
    import struct

    images = torch.arange(2 * 28 * 28, dtype=torch.int64).remainder(256).to(torch.uint8)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(
        struct.pack(">HBBIII", 0, 8, 3, 2, 28, 28) + bytes(images.tolist())))
    (tmp_path / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(
        struct.pack(">HBBI", 0, 8, 1, 2) + bytes([3, 7])))
    dataset = data.FashionMNIST(tmp_path, "train")
    image, label = dataset[1]
    assert image.dtype == torch.uint8 and image.shape == (1, 28, 28) and int(label) == 7


@pytest.mark.parametrize("cores, local_ranks, workers", [
    (2, 1, 2), (16, 1, 8), (16, 2, 7), (16, 8, 2), (64, 8, 7), (128, 4, 8)])
def test_default_workers_scale_with_the_cores_per_local_rank(monkeypatch, cores,
                                                             local_ranks, workers):
    monkeypatch.setattr(data.os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert data.loader_workers(None, local_ranks) == workers
    assert data.loader_workers(3, local_ranks) == 3, "--workers wins"
