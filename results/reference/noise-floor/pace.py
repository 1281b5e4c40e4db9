"""Issue 29's noise floor: the demo's own workload (resnet18, 32 px, batch 16, one torch
thread, SGD with momentum, synthetic data, no network) training on one CPU, every step
stamped (wall clock), for SECONDS. run.sh runs one copy per CPU at once, as the demo's
emulated hosts compute; floor.py reads the stamps.

    taskset -c N python pace.py SECONDS OUT.json
"""
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.config import ModelConfig  # noqa: E402
from bench.rank import allocator  # noqa: E402
from bench.rank.models import build_model, input_shape  # noqa: E402

torch.set_num_threads(1)
allocator.keep_freed_memory()       # as the trainer does
config = ModelConfig(model="resnet18", image_size=32)
model = build_model(config, 1000)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
xb, yb = torch.randn(16, *input_shape(config)), torch.randint(0, 1000, (16,))


def step() -> None:
    opt.zero_grad(set_to_none=False)
    F.cross_entropy(model(xb), yb).backward()
    opt.step()


for _ in range(10):
    step()
end = time.time() + float(sys.argv[1])
stamps = []
while time.time() < end:
    start = time.time()
    step()
    stamps.append((start, time.time() - start))
Path(sys.argv[2]).write_text(json.dumps(stamps))
