"""Where a training step's time goes, by torch.profiler, for the step shapes the trainer runs.

Issue 28: the one-rank DDP probe step (from which the bucket timeline and the prediction
come) ran 4.3-4.7 ms longer than the bare step on an H100. This times, alternated, the same
model and batch as

  bare     the one-process step the trainer times (no DDP, no hook);
  ddp      one-rank DDP with its built-in C++ all-reduce;
  probe    one-rank DDP with the trainer's observed hook (bench.rank.traffic.wrap_model),
           its per-bucket stamps off (no step begun);
  stamped  the same, each step begun and ended on its GradientTraffic as the trainer's
           traffic probe does (a CUDA event per bucket ready, issued and done);

then profiles a few steps of each and writes, per variant, the ops with the most device time
and a Chrome trace (gzipped), so the extra time can be named.

  python3 scripts/profile_step.py --device cuda --model resnet50 --batch-size 256 \
      --precision bf16 --channels-last --out DIR

Prints one JSON line per variant (mean step ms over the timed rounds) and writes
DIR/profile-VARIANT.txt and DIR/trace-VARIANT.json.gz.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import shutil
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from bench.config import TRAINED_PRECISIONS, DistributedConfig, ModelConfig  # noqa: E402
from bench.rank.clock import StepClock  # noqa: E402
from bench.rank.distributed import DistContext  # noqa: E402
from bench.rank.loop import Precision, Trainer  # noqa: E402
from bench.rank.models import build_model  # noqa: E402
from bench.rank.traffic import GradientTraffic, wrap_model  # noqa: E402

VARIANTS = ("bare", "ddp", "probe", "stamped")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--precision", choices=TRAINED_PRECISIONS, default="bf16")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds")
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    if min(args.steps, args.rounds, args.profile_steps, args.batch_size) < 1:
        parser.error("--steps, --rounds, --profile-steps and --batch-size must be 1 or more")
    return args


def one_rank_group(device: torch.device) -> DistContext:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29555")
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, rank=0, world_size=1)
    return DistContext(rank=0, local_rank=0, world_size=1, local_world_size=1, node_rank=0,
                       device=device, backend=backend)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    args.out.mkdir(parents=True, exist_ok=True)
    ctx = one_rank_group(device)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    torch.manual_seed(0)
    model = build_model(ModelConfig(model=args.model, image_size=args.image_size), 1000)
    model = model.to(device, memory_format=fmt)
    precision = Precision.setup(args.precision, device)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size,
                         device=device).contiguous(memory_format=fmt)
    labels = torch.randint(0, 1000, (args.batch_size,), device=device)
    clock = StepClock(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    cfg = DistributedConfig(device=args.device)
    observers = {name: GradientTraffic(clock) for name in ("probe", "stamped")}
    wrapped = {"bare": model,
               "ddp": wrap_model(model, ctx, cfg, GradientTraffic(clock), observe=False),
               "probe": wrap_model(model, ctx, cfg, observers["probe"], observe=True),
               "stamped": wrap_model(model, ctx, cfg, observers["stamped"], observe=True)}
    trainers = {name: Trainer(m, optimizer, precision, lambda b: b, 1)
                for name, m in wrapped.items()}

    def batches():
        while True:
            yield images, labels

    def timed(name: str, steps: int) -> float:
        trainer, source = trainers[name], batches()
        stamps = observers["stamped"] if name == "stamped" else None
        start = mark = clock.mark()
        for _ in range(steps):
            if stamps:
                stamps.begin_step(mark)
            trainer.step(source)
            mark = clock.mark()
            if stamps:
                stamps.end_step(mark)
        return clock.seconds(start, mark) / steps

    for name in VARIANTS:  # warm-up: cuDNN's search, DDP's first-iteration rebuild
        timed(name, 5)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name in VARIANTS:
            times[name].append(timed(name, args.steps))
    for name in VARIANTS:
        print(json.dumps({"variant": name, "model": args.model, "batch": args.batch_size,
                          "precision": args.precision, "channels_last": args.channels_last,
                          "step_ms_rounds": [round(t * 1e3, 3) for t in times[name]],
                          "step_ms_median": round(statistics.median(times[name]) * 1e3, 3)}),
              flush=True)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    for name in VARIANTS:
        with torch.profiler.profile(activities=activities) as prof:
            timed(name, args.profile_steps)
        table = prof.key_averages().table(sort_by=sort, row_limit=40)
        (args.out / f"profile-{name}.txt").write_text(table)
        trace = args.out / f"trace-{name}.json"
        prof.export_chrome_trace(str(trace))
        with trace.open("rb") as raw, gzip.open(f"{trace}.gz", "wb") as packed:
            shutil.copyfileobj(raw, packed)
        trace.unlink()
        print(f"[profile] {name}: {args.out}/profile-{name}.txt", file=sys.stderr, flush=True)
    dist.destroy_process_group()
    time.sleep(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
