"""A minimal plain PyTorch DDP loop: the yardstick for the trainer's own overhead.

Deliberately independent of the bench package. Run under torchrun:
  torchrun --nproc_per_node 2 scripts/plain_ddp_loop.py --model resnet18 --batch-size 64 ...
Prints the global samples/s as JSON on its last line (rank 0).
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torchvision.models as tvm
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="resnet18")
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--image-size", type=int, default=64)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--warmup-steps", type=int, default=5)
args = parser.parse_args()

world = int(os.environ.get("WORLD_SIZE", 1))
rank = int(os.environ.get("RANK", 0))
if world > 1:
    dist.init_process_group("gloo")
torch.manual_seed(0)
model = getattr(tvm, args.model)(num_classes=1000)
if world > 1:
    model = DDP(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
gen = torch.Generator().manual_seed(rank)
x = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=gen)
y = torch.randint(0, 1000, (args.batch_size,), generator=gen)


def step():
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


for _ in range(args.warmup_steps):
    step()
start = time.perf_counter()
for _ in range(args.steps):
    step()
elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
if world > 1:
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
    dist.destroy_process_group()
if rank == 0:
    rate = args.steps * args.batch_size * world / elapsed.item()
    print(json.dumps({"samples_per_s": rate, "threads": torch.get_num_threads()}))
