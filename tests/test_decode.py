"""``--decode device``: an image folder's JPEGs read by the loader's workers and decoded in
one batched decode_jpeg on the training device (issue 28: PIL in at most 8 workers cannot
feed a GPU). On this CPU-only machine the device is the CPU: the same code path, nvJPEG
aside."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from bench import manifest, record
from bench.config import DataConfig
from bench.options import ConfigError
from bench.rank import train
from bench.rank.data import build_data
from conftest import REPO, validate


def _jpeg_folder(root, *, per_class: int = 6, png: bool = False):
    from PIL import Image, ImageDraw

    for split, count in (("train", per_class), ("val", 2)):
        for label, colour in (("dark", 30), ("light", 220)):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                image = Image.new("RGB", (48 + 8 * i, 36 + 4 * i), (colour, colour - 3 * i, 90))
                ImageDraw.Draw(image).ellipse((5, 5, 25 + i, 20 + i), fill=(255 - colour, 40, 9))
                image.save(folder / f"{i}.jpg", quality=92)
    if png:
        Image.new("RGB", (40, 30), (1, 2, 3)).save(root / "train" / "dark" / "odd.jpg",
                                                   format="PNG")
    manifest.write(root)
    return root


def _first_batch(root, decode: str, size: int = 32):
    cfg = DataConfig(data="imagefolder", data_dir=root, batch_size=4, workers=0,
                     manifest_check="off", decode=decode)
    data = build_data(cfg, channels=3, size=size, num_classes=None, rank=0, world_size=1,
                      seed=0, device=torch.device("cpu"))
    data.train.sampler.set_epoch(0)
    return data, data.to_device(next(iter(data.train)))


def test_the_device_decodes_the_same_batch_the_loader_does(tmp_path):
    root = _jpeg_folder(tmp_path / "images")
    loader_data, (by_loader, labels_loader) = _first_batch(root, "loader")
    device_data, (by_device, labels_device) = _first_batch(root, "device")
    assert device_data.decode is not None and loader_data.decode is None
    assert by_device.shape == by_loader.shape == (4, 3, 32, 32)
    assert by_device.dtype == by_loader.dtype == torch.float32
    assert torch.equal(labels_device, labels_loader)   # the same files, in the same order
    # PIL's antialiased resize against torch's: the same images, up to rounding (a pixel
    # level or two of 255, in normalised units about 0.01-0.03).
    assert (by_device - by_loader).abs().mean() < 0.05
    assert (by_device - by_loader).abs().max() < 0.5


def test_a_batch_crosses_from_a_worker_as_two_tensors(tmp_path):
    """Packed end to end with their lengths: one shared-memory descriptor per batch, not per
    file (a list of 64 files ran out of descriptors)."""
    root = _jpeg_folder(tmp_path / "images")
    cfg = DataConfig(data="imagefolder", data_dir=root, batch_size=4, workers=1,
                     manifest_check="off", decode="device")
    data = build_data(cfg, channels=1, size=16, num_classes=None, rank=0, world_size=1,
                      seed=0, device=torch.device("cpu"))
    (packed, lengths), labels = next(iter(data.train))
    assert packed.dtype == torch.uint8 and packed.dim() == 1 and lengths.shape == (4,)
    assert int(lengths.sum()) == packed.numel() and labels.shape == (4,)
    images, _ = data.to_device(((packed, lengths), labels))
    assert images.shape == (4, 1, 16, 16)


def test_a_file_that_is_not_a_jpeg_is_named_in_one_line(tmp_path):
    root = _jpeg_folder(tmp_path / "images", per_class=1, png=True)
    cfg = DataConfig(data="imagefolder", data_dir=root, batch_size=3, workers=0,
                     manifest_check="off", decode="device")
    data = build_data(cfg, channels=3, size=16, num_classes=None, rank=0, world_size=1,
                      seed=0, device=torch.device("cpu"))
    with pytest.raises(ValueError) as error:
        data.to_device(next(iter(data.train)))
    message = str(error.value)
    assert "\n" not in message and "--decode loader" in message and "JPEG" in message


@pytest.mark.parametrize("data", ["synthetic", "fashion-mnist", "cifar10"])
def test_decode_on_the_device_is_for_an_image_folder_only(data):
    with pytest.raises(ConfigError) as error:
        DataConfig(data=data, data_dir=None, decode="device")
    assert "--data imagefolder" in str(error.value) and "decode" in str(error.value)


@pytest.mark.parametrize("value, words", [("device", "--data imagefolder"),
                                          ("gpu", "invalid choice")])
def test_a_wrong_decode_is_one_line_and_exit_2(tmp_path, value, words):
    proc = subprocess.run([sys.executable, "-m", "bench", "train", "--decode", value,
                           "--results", str(tmp_path / "r.jsonl")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr


def test_training_on_device_decoded_jpegs_records_it(tmp_path):
    root = _jpeg_folder(tmp_path / "images")
    results = tmp_path / "runs.jsonl"
    code = train.main(["--epochs", "1", "--data", "imagefolder", "--data-dir", str(root),
                       "--decode", "device", "--model", "smallcnn", "--image-size", "28",
                       "--batch-size", "4", "--workers", "1", "--results", str(results)])
    assert code == 0
    (rec,) = [json.loads(line) for line in results.read_text().splitlines()]
    validate(rec)
    assert rec["status"] == "ok" and rec["config"]["data"]["decode"] == "device"
    assert rec["timed_steps"] == 3 and rec["eval_accuracy"] is not None


@pytest.mark.parametrize("data, decode, driver, share, offered", [
    ("imagefolder", "loader", "580.95", 0.35, True),     # GPUs waiting on PIL
    ("imagefolder", "loader", "580.95", 0.05, False),    # the loader keeps up
    ("imagefolder", "device", "580.95", 0.35, False),    # already on the device
    ("imagefolder", "loader", None, 0.35, False),        # CPU training: nothing to offer
    ("fashion-mnist", "loader", "580.95", 0.35, False),  # no JPEGs
    ("imagefolder", "loader", "580.95", None, False),    # nothing measured
])
def test_the_headline_offers_device_decoding_when_the_loader_holds_gpus_back(
        data, decode, driver, share, offered):
    rec = {"samples_per_s": 900.0, "data_wait_share": share,
           "config": {"data": {"data": data, "decode": decode}},
           "env": {"driver": driver, "cudnn": None}}
    line = record.training_headline(rec)
    assert line.startswith("900.0 samples/s")
    assert ("--decode device" in line) is offered
    if offered:
        assert f"{share:.0%}" in line


def test_the_decode_rate_script_sets_both_paths_against_what_training_takes(tmp_path):
    out = tmp_path / "rates.jsonl"
    proc = subprocess.run([sys.executable, "scripts/decode_rate.py", "--dir",
                           str(tmp_path / "jpegs"), "--images", "32", "--batch-size", "8",
                           "--workers", "1", "--need", "1000000", "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = [json.loads(line) for line in out.read_text().splitlines()]
    assert [f["figure"] for f in figures] == ["loader, 1 process", "loader, 1 workers",
                                              "device decode (cpu)"]
    assert all(f["images_per_s"] > 0 for f in figures)
    assert len(list((tmp_path / "jpegs" / "train").rglob("*.jpg"))) == 32
    assert "falls short" in proc.stdout and "--decode device" in proc.stdout


@pytest.mark.parametrize("args", [["--images", "8"], ["--need", "nan"], ["--need", "-3"],
                                  ["--workers", "999"]])
def test_the_decode_rate_script_refuses_a_bad_value_in_one_line(tmp_path, args):
    proc = subprocess.run([sys.executable, "scripts/decode_rate.py", "--dir",
                           str(tmp_path / "jpegs"), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "jpegs").exists()
