"""Per-cell launch overhead of the matrix, natively and through Compose, in one command.

  python scripts/launch_overhead.py [--repeats 3] [--image bench-trainer:cpu]

Runs the same small cell (2 nodes x 1 process on loopback, smallcnn, synthetic data) as a
matrix through each launcher and prints, from the records, the time from the job's launch
to the end of its first training step (startup) and from the end of its last step to the
record being written (teardown). Goal: under 10 s per cell through Compose.
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--image", default="bench-trainer:cpu")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env_file = Path(tmp) / "node.env"
        bind = f"\nDATA_MOUNT_TYPE=none\nDATA_MOUNT_OPTIONS=bind\nDATA_DEVICE={tmp}\n"
        env_file.write_text((REPO / "compose" / ".env.example").read_text() + bind
                            + "GLOO_SOCKET_IFNAME=lo\nOMP_NUM_THREADS=1\n")
        rows = []
        for launcher, extra in (("native", []), ("compose", ["--image", a.image, "--env-file",
                                                            str(env_file), "--profile", "cpu"])):
            results = Path(tmp) / f"{launcher}.jsonl"
            cmd = [sys.executable, "-m", "bench", "matrix", "--launcher", launcher,
                   "--topologies", "2x1", "--batch-sizes", "16", "--models", "smallcnn",
                   "--repeats", str(a.repeats), "--results", str(results), *extra,
                   "--", "--steps", "5", "--warmup-steps", "1", "--log-every", "0"]
            env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
            out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"launch_overhead: the {launcher} matrix failed:\n{out.stderr[-2000:]}")
            matrix = [json.loads(line)["matrix"] for line in results.read_text().splitlines()]
            for field in ("startup_s", "teardown_s"):
                values = [m[field] for m in matrix]
                rows.append((launcher, field, statistics.median(values), min(values),
                             max(values)))
    print(f"2 nodes x 1 process on loopback, smallcnn, 5 steps, {a.repeats} repeats per launcher")
    print(f"{'launcher':<9} {'phase':<11} {'median s':>9} {'min s':>7} {'max s':>7}")
    for launcher, field, med, low, high in rows:
        print(f"{launcher:<9} {field:<11} {med:>9.2f} {low:>7.2f} {high:>7.2f}")
    compose = {f: m for launcher, f, m, _, _ in rows if launcher == "compose"}
    total = compose["startup_s"] + compose["teardown_s"]
    print(f"compose overhead per cell: {total:.2f} s (goal < 10 s)")


if __name__ == "__main__":
    main()
