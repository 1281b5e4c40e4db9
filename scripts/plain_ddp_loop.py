"""A minimal plain PyTorch DDP loop: the yardstick for the trainer's own overhead.

Deliberately independent of the bench package. Run under torchrun:
  torchrun --nproc_per_node 2 scripts/plain_ddp_loop.py --model resnet18 --batch-size 64 ...
or as one process on a GPU, the way a lab's single-GPU script trains (no DDP):
  python3 scripts/plain_ddp_loop.py --device cuda --precision bf16 --channels-last ...
Prints the global samples/s as JSON on its last line (rank 0).
"""
import argparse
import contextlib
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
parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
parser.add_argument("--channels-last", action="store_true")
args = parser.parse_args()

world = int(os.environ.get("WORLD_SIZE", 1))
rank = int(os.environ.get("RANK", 0))
local_rank = int(os.environ.get("LOCAL_RANK", 0))
cuda = args.device == "cuda"
device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(device)
    torch.backends.cudnn.benchmark = True
if world > 1:
    dist.init_process_group("nccl" if cuda else "gloo")
fmt = torch.channels_last if args.channels_last else torch.contiguous_format
torch.manual_seed(0)
model = getattr(tvm, args.model)(num_classes=1000).to(device, memory_format=fmt)
if world > 1:
    model = DDP(model, device_ids=[local_rank] if cuda else None)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
gen = torch.Generator().manual_seed(rank)
x = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=gen)
x = x.to(device, memory_format=fmt)
y = torch.randint(0, 1000, (args.batch_size,), generator=gen).to(device)
autocast = torch.autocast(args.device, dtype=torch.bfloat16) if args.precision == "bf16" \
    else contextlib.nullcontext()


def step():
    with autocast:
        loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def sync():
    if cuda:
        torch.cuda.synchronize()


for _ in range(args.warmup_steps):
    step()
sync()
start = time.perf_counter()
for _ in range(args.steps):
    step()
sync()
elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
if world > 1:
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
    dist.destroy_process_group()
if rank == 0:
    rate = args.steps * args.batch_size * world / elapsed.item()
    print(json.dumps({"samples_per_s": rate, "threads": torch.get_num_threads()}))
