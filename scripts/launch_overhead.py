"""Per-cell launch overhead of the matrix, natively, through Compose and through Slurm.

  python scripts/launch_overhead.py [--repeats 3] [--image bench-trainer:cpu] [--no-slurm]

Runs the same small cell (2 nodes x 1 process on loopback, smallcnn, synthetic data) as a
matrix through each launcher and prints, from the records, the time from the job's launch
to the end of its first training step (startup) and from the end of its last step to the
record being written (teardown). Goal: under 10 s per cell through Compose. Slurm runs
on the two-node test cluster of scripts/slurm-cluster.sh (started here if it is not up):
its startup includes sbatch, scheduling and srun; its teardown the launcher's polling of
the job's end state (--poll of 1 s).
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
    p.add_argument("--no-slurm", action="store_true", help="skip the Slurm launcher")
    a = p.parse_args()
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    launchers = ["native", "compose"]
    if not a.no_slurm:
        cluster = REPO / "scripts" / "slurm-cluster.sh"
        subprocess.run([str(cluster), "start"], check=True)
        conf = subprocess.run([str(cluster), "env"], capture_output=True, text=True, check=True)
        env["SLURM_CONF"] = conf.stdout.strip().split("=", 1)[1]
        launchers.append("slurm")
    with tempfile.TemporaryDirectory() as tmp:
        env_file = Path(tmp) / "node.env"
        bind = f"\nDATA_MOUNT_TYPE=none\nDATA_MOUNT_OPTIONS=bind\nDATA_DEVICE={tmp}\n"
        env_file.write_text((REPO / "compose" / ".env.example").read_text() + bind
                            + "GLOO_SOCKET_IFNAME=lo\nOMP_NUM_THREADS=1\n")
        rows = []
        extras = {"native": [], "slurm": ["--device", "cpu"],
                  "compose": ["--image", a.image, "--env-file", str(env_file), "--profile",
                              "cpu"]}
        for launcher in launchers:
            extra = [] if launcher == "slurm" else extras[launcher]
            device = extras["slurm"] if launcher == "slurm" else []
            results = Path(tmp) / f"{launcher}.jsonl"
            cmd = [sys.executable, "-m", "bench", "matrix", "--launcher", launcher,
                   "--topologies", "2x1", "--batch-sizes", "16", "--models", "smallcnn",
                   "--repeats", str(a.repeats), "--results", str(results), *extra,
                   "--", "--steps", "5", "--warmup-steps", "1", "--log-every", "0", *device]
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
    for name in launchers:
        phases = {f: m for launcher, f, m, _, _ in rows if launcher == name}
        total = phases["startup_s"] + phases["teardown_s"]
        goal = " (goal < 10 s)" if name == "compose" else ""
        print(f"{name} overhead per cell: {total:.2f} s{goal}")


if __name__ == "__main__":
    main()
