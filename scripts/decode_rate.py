"""Can this host's CPUs decode JPEGs as fast as its GPU trains on them? (issue 28)

``--data imagefolder`` decodes and resizes every sample with PIL in the DataLoader's worker
processes (at most 8 per rank by default). This writes a folder of JPEGs shaped like
ImageNet's (about 500x375, quality 90, photographs' smooth regions and edges rather than
noise, which would decode far more slowly), then measures, in images per second:

  loader, 1 process     PIL decode + resize + normalise, as one worker does it;
  loader, W workers     the same through a DataLoader with the trainer's worker count;
  device decode (DEV)   the files read by the workers and decoded in one batched
                        torchvision.io.decode_jpeg on the device (``--decode device``),
                        resized and normalised there: nvJPEG on a GPU; on a CPU-only host
                        the same call on the CPU, for reference;

and sets them against what training takes: ``--need`` images/s, or the best
``samples_per_s_per_device`` of a results file (``--need-from``), or else the training
figures of results/reference/devices.json. Where the loader falls short, it says to train
with ``--decode device``.

  python3 scripts/decode_rate.py --dir /tmp/jpegs --images 512 --need 4690
  python3 scripts/decode_rate.py --dir /tmp/jpegs --need-from results/single-TAG.jsonl

Prints a table and writes one JSON line per figure with ``--json FILE``.
"""
from __future__ import annotations

import json
import math
import os
import pathlib
import random
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from bench import record  # noqa: E402
from bench.config import DataConfig, OneLineErrorParser  # noqa: E402
from bench.options import ConfigError  # noqa: E402
from bench.rank.data import build_data, loader_workers  # noqa: E402

REFERENCE = pathlib.Path(__file__).resolve().parent.parent / "results" / "reference" / \
    "devices.json"


def write_jpegs(directory: pathlib.Path, count: int, classes: int, seed: int) -> None:
    """``count`` JPEGs under directory/train/class<k>/: smooth gradients, a few shapes
    and mild grain, 400-600 x 300-450 pixels, quality 90: decoding costs about what a
    photograph of that size does."""
    from PIL import Image, ImageDraw, ImageFilter

    rng = random.Random(seed)
    for index in range(count):
        folder = directory / "train" / f"class{index % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{index:06d}.jpg"
        if path.exists():
            continue
        width, height = rng.randint(400, 600), rng.randint(300, 450)
        left = [rng.randint(0, 255) for _ in range(3)]
        right = [rng.randint(0, 255) for _ in range(3)]
        gradient = Image.linear_gradient("L").resize((width, height))
        image = Image.composite(Image.new("RGB", (width, height), tuple(left)),
                                Image.new("RGB", (width, height), tuple(right)), gradient)
        draw = ImageDraw.Draw(image)
        for _ in range(12):
            x, y = rng.randint(0, width), rng.randint(0, height)
            r = rng.randint(10, 120)
            draw.ellipse((x - r, y - r, x + r, y + r),
                         fill=tuple(rng.randint(0, 255) for _ in range(3)))
        image = image.filter(ImageFilter.GaussianBlur(2))
        grain = Image.effect_noise((width, height), 24).convert("RGB")
        Image.blend(image, grain, 0.2).save(path, quality=90)


def rate(data, batches: int) -> float:
    """Images per second through ``data``'s loader and its device step, after one batch."""
    iterator = iter(data.train)
    data.to_device(next(iterator))           # workers started, first batch out of the way
    if data.device.type == "cuda":
        torch.cuda.synchronize()
    start, images = time.perf_counter(), 0
    for _ in range(batches):
        batch, _labels = data.to_device(next(iterator))
        images += batch.shape[0]
    if data.device.type == "cuda":
        torch.cuda.synchronize()
    return images / (time.perf_counter() - start)


def measure(directory: pathlib.Path, size: int, batch: int, batches: int, workers: int,
            decode: str, device: torch.device) -> float:
    cfg = DataConfig(data="imagefolder", data_dir=directory, batch_size=batch,
                     workers=workers, manifest_check="off", decode=decode)
    data = build_data(cfg, channels=3, size=size, num_classes=None, rank=0, world_size=1,
                      seed=0, device=device)
    threads = torch.get_num_threads()
    if workers == 0 and decode == "loader":
        torch.set_num_threads(1)     # as one loader worker runs: one thread
    try:
        return rate(data, batches)
    finally:
        torch.set_num_threads(threads)


def needs(args) -> list[tuple[str, float]]:
    """What training takes, images/s per device, with where the figure comes from."""
    if args.need is not None:
        return [("--need", args.need)]
    if args.need_from is not None:
        rows = [r for r in record.load(args.need_from, "--need-from")
                if r.get("status") == "ok" and r.get("samples_per_s_per_device")]
        if not rows:
            raise ConfigError("--need-from", args.need_from, "has no ok training row with "
                              "samples_per_s_per_device: give --need IMAGES_PER_S")
        best = max(rows, key=lambda r: r["samples_per_s_per_device"])
        return [(f"{args.need_from} (best row)", float(best["samples_per_s_per_device"]))]
    models = json.loads(REFERENCE.read_text())["models"]
    return [(f"{model}: {name}", float(value)) for model, figures in models.items()
            for name, value in figures.items() if name.startswith("training")]


def main(argv: list[str] | None = None) -> int:
    parser = OneLineErrorParser(prog="decode_rate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=pathlib.Path, required=True,
                        help="the JPEG folder: written here where missing (train/class*/)")
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--image-size", type=int, default=224, help="the model's input side")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, help="default: the trainer's (bench.rank.data)")
    parser.add_argument("--need", type=float, help="images/s one device trains")
    parser.add_argument("--need-from", type=pathlib.Path, help="a results file")
    parser.add_argument("--json", type=pathlib.Path, help="append one JSON line per figure")
    args = parser.parse_args(argv)
    try:
        for name, value, low, high in (("--images", args.images, 16, 1_000_000),
                                       ("--image-size", args.image_size, 8, 4096),
                                       ("--batch-size", args.batch_size, 1, 4096),
                                       ("--workers", args.workers, 0, 64)):
            if value is not None and not low <= value <= high:
                raise ConfigError(name, value, f"give {low} to {high}")
        if args.need is not None and not (math.isfinite(args.need) and args.need > 0):
            raise ConfigError("--need", args.need, "give a positive images/s figure")
        if args.images < 2 * args.batch_size:
            raise ConfigError("--images", args.images, f"give at least two batches "
                              f"({2 * args.batch_size}) to time one after the first")
        wanted = needs(args)
    except ConfigError as error:
        print(f"decode_rate: error: {error}", file=sys.stderr)
        return 2
    write_jpegs(args.dir, args.images, classes=8, seed=0)
    workers = args.workers if args.workers is not None else loader_workers(None, 1)
    batches = args.images // args.batch_size - 1
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    figures = [("loader, 1 process", measure(args.dir, args.image_size, args.batch_size,
                                             batches, 0, "loader", torch.device("cpu"))),
               (f"loader, {workers} workers", measure(args.dir, args.image_size,
                                                      args.batch_size, batches, workers,
                                                      "loader", torch.device("cpu"))),
               (f"device decode ({device.type})", measure(args.dir, args.image_size,
                                                          args.batch_size, batches, workers,
                                                          "device", device))]
    print(f"decode_rate: {args.images} JPEGs in {args.dir}, resized to {args.image_size}, "
          f"batch {args.batch_size}, {os.cpu_count()} CPUs, torch {torch.__version__}")
    for name, value in figures:
        print(f"  {name:28s} {value:10,.0f} images/s")
    loader = figures[1][1]
    for source, need in wanted:
        verdict = ("keeps up" if loader >= need else
                   f"falls short ({loader / need:.0%} of it): train with --decode device")
        print(f"  training takes {need:,.0f} images/s ({source}): the loader {verdict}")
    if args.json:
        with args.json.open("a") as out:
            for name, value in figures:
                out.write(json.dumps({"figure": name, "images_per_s": value,
                                      "cpus": os.cpu_count(), "torch": torch.__version__,
                                      "device": device.type, "images": args.images,
                                      "image_size": args.image_size}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
