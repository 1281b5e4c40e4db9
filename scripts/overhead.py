"""Overhead checks on CPU, both sides measured alternately in one command.

  python scripts/overhead.py --against plain [--nproc 1]          # trainer vs a plain loop
                                                                  # (DDP; 1 process: no DDP)
  python scripts/overhead.py --against container --image IMAGE    # trainer: native vs container

Same model, batch, process and thread count on both sides. Runs A B A B ... so drift on a
noisy machine hits both, then prints each side's median samples/s and the ratio
(goal: 0.98 or more).
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
MARKER = "==> bench-record <=="  # bench.record.MARKER; this script stays importable alone


def _run(cmd: list[str], label: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "GLOO_SOCKET_IFNAME": "lo"}  # both sides talk over loopback only
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"overhead: {label} failed:\n{out.stderr[-2000:]}")
    return out.stdout


def _record_rate(stdout: str) -> float:
    lines = stdout.splitlines()
    return json.loads(lines[lines.index(MARKER) + 1])["samples_per_s"]


def _torchrun(nproc: int, port: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
            "--master_addr", "127.0.0.1", "--master_port", str(port)]


def trainer_native(a, shared, port, tmp):
    cmd = _torchrun(a.nproc, port) + ["-m", "bench.rank.train", *shared, "--data", "synthetic",
                                      "--log-every", "0", "--results", f"{tmp}/native.jsonl"]
    return _record_rate(_run(cmd, "native trainer"))


def plain_loop(a, shared, port, tmp):
    cmd = _torchrun(a.nproc, port) + ["scripts/plain_ddp_loop.py", *shared]
    return json.loads(_run(cmd, "plain loop").splitlines()[-1])["samples_per_s"]


def trainer_container(a, shared, port, tmp):
    # The image's own entrypoint (torchrun, then the trainer), as Compose starts it.
    args = " ".join([*shared, "--data", "synthetic", "--log-every", "0"])
    cmd = ["docker", "run", "--rm", "--network", "host", "--ipc", "host",
           "-e", f"NPROC_PER_NODE={a.nproc}", "-e", f"MASTER_PORT={port}",
           "-e", "OMP_NUM_THREADS=1", "-e", "GLOO_SOCKET_IFNAME=lo", "-e", f"BENCH_ARGS={args}",
           "-e", "RESULTS_FILE=/tmp/runs.jsonl", a.image]
    return _record_rate(_run(cmd, "container trainer"))


SIDES = {"plain": ("plain loop", plain_loop), "container": ("container", trainer_container)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--against", choices=sorted(SIDES), default="plain")
    p.add_argument("--image", default="bench-trainer:cpu", help="for --against container")
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
    label, other = SIDES[a.against]
    trainer, reference = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            trainer.append(trainer_native(a, shared, 29600 + 2 * i, tmp))
            reference.append(other(a, shared, 29601 + 2 * i, tmp))
            print(f"repeat {i + 1}/{a.repeats}: native trainer {trainer[-1]:.1f}  {label} "
                  f"{reference[-1]:.1f} samples/s", file=sys.stderr, flush=True)
    t, r = statistics.median(trainer), statistics.median(reference)
    print(f"{a.model} synthetic batch {a.batch_size} image {a.image_size}, {a.nproc} procs x "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}, {a.repeats} repeats")
    for name, median, runs in (("native trainer", t, trainer), (label, r, reference)):
        shown = ", ".join(f"{x:.1f}" for x in runs)
        print(f"{name:<14} median {median:.1f} samples/s  (runs: {shown})")
    if a.against == "plain":
        print(f"ratio trainer/plain = {t / r:.3f}  (goal >= 0.98)")
    else:
        print(f"ratio container/native = {r / t:.3f}  (goal >= 0.98)")


if __name__ == "__main__":
    main()
