"""Issue 29: how fast one host trains beside a neighbour host that trains the same, that
starts a Python process importing torch over and over (a copy restarting), or that is
idle. Two roles on two CPUs (taskset), no network (compute only):

    python worker.py measure SECONDS OUT      # smallcnn b16 steps, each stamped (wall clock)
    python worker.py neighbour SCHEDULE OUT   # SCHEDULE: mode:seconds,... (train, import, idle)

run.sh runs both; summary.py joins the measured steps with the neighbour's modes."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROLE = sys.argv[1]
OUT = Path(sys.argv[3])


def trainer():
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from bench.config import ModelConfig
    from bench.rank import allocator
    from bench.rank.models import build_model, input_shape
    torch.set_num_threads(1)
    allocator.keep_freed_memory()
    config = ModelConfig(model="smallcnn")
    model = build_model(config, 1000)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    xb, yb = torch.randn(16, *input_shape(config)), torch.randint(0, 1000, (16,))

    def step():
        opt.zero_grad(set_to_none=False)
        F.cross_entropy(model(xb), yb).backward()
        opt.step()
    return step


if ROLE == "measure":
    step = trainer()
    for _ in range(10):
        step()
    end = time.time() + float(sys.argv[2])
    stamps = []
    while time.time() < end:
        start = time.time()
        step()
        stamps.append((start, time.time() - start))
    OUT.write_text(json.dumps(stamps))
else:
    modes = []
    for part in sys.argv[2].split(","):
        mode, seconds = part.split(":")
        began, until = time.time(), time.time() + float(seconds)
        if mode == "train":
            step = trainer()
            while time.time() < until:
                step()
        elif mode == "import":
            while time.time() < until:
                subprocess.run([sys.executable, "-c", "import torch, torch.nn"], check=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
        else:
            time.sleep(max(0.0, until - time.time()))
        modes.append((mode, began, time.time()))
    OUT.write_text(json.dumps(modes))
