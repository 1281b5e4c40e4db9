"""Trainer overhead: bench.train vs a plain DDP loop, same model, batch, threads, one command.

  python scripts/overhead.py [--nproc 2] [--repeats 3] [--steps 20] [--image-size 64]

Runs the two alternately (A B A B ...) so drift on a noisy machine hits both, then prints
each side's median samples/s and the ratio trainer/plain (goal: 0.98 or more).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def torchrun(nproc: int, target: list[str], port: int) -> str:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
           "--master_addr", "127.0.0.1", "--master_port", str(port), *target]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"overhead: {' '.join(target[:2])} failed:\n{out.stderr[-2000:]}")
    return out.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=64)
    a = p.parse_args()
    shared = ["--model", a.model, "--batch-size", str(a.batch_size), "--image-size",
              str(a.image_size), "--steps", str(a.steps), "--warmup-steps", str(a.warmup_steps)]
    trainer, plain = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            out = torchrun(a.nproc, ["-m", "bench.train", *shared, "--data", "synthetic",
                                     "--log-every", "0", "--results", f"{tmp}/runs.jsonl"],
                           29600 + 2 * i)
            lines = out.splitlines()
            trainer.append(json.loads(lines[lines.index("==> bench-record <==") + 1])
                           ["samples_per_s"])
            plain.append(json.loads(torchrun(a.nproc, ["scripts/plain_ddp_loop.py", *shared],
                                             29601 + 2 * i).splitlines()[-1])["samples_per_s"])
            print(f"repeat {i + 1}/{a.repeats}: trainer {trainer[-1]:.1f}  plain {plain[-1]:.1f} "
                  "samples/s", file=sys.stderr, flush=True)
    t, q = statistics.median(trainer), statistics.median(plain)
    print(f"{a.model} synthetic batch {a.batch_size} image {a.image_size}, {a.nproc} procs x "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}, {a.repeats} repeats")
    print(f"trainer median {t:.1f} samples/s  (runs: {', '.join(f'{x:.1f}' for x in trainer)})")
    print(f"plain   median {q:.1f} samples/s  (runs: {', '.join(f'{x:.1f}' for x in plain)})")
    print(f"ratio trainer/plain = {t / q:.3f}  (goal >= 0.98)")


if __name__ == "__main__":
    main()
