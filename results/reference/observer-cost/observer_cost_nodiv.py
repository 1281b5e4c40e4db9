"""One rank, pinned to one CPU: the same model's step bare, under DDP's built-in all-reduce
(world size 1), and under DDP with the observed hook the traffic probe uses. Rounds
interleaved, each variant a window of STEPS steps; prints each window's mean step."""
import copy, os, statistics, sys, time
import torch, torch.distributed as dist
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29613")
torch.set_num_threads(1)
dist.init_process_group("gloo", rank=0, world_size=1)
from bench.config import ModelConfig, DistributedConfig
from bench.rank.models import build_model
from bench.rank.traffic import wrap_model, GradientTraffic
from bench.rank.clock import StepClock
from bench.rank.distributed import DistContext
from bench.rank.loop import Trainer, Precision, observe_steps

model_name, batch, rounds, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
extra = {"mlp_width": 1024, "mlp_depth": 2} if model_name == "mlp" else {}
mcfg = ModelConfig(model=model_name, num_classes=10, image_size=int(os.environ.get("SIZE", "32")) if model_name.startswith("resnet") else None, **extra)
ctx = DistContext(0, 0, 1, 1, 0, torch.device("cpu"), "gloo")
dcfg = DistributedConfig(device="cpu", comm_hook="none")
clock = StepClock(ctx.device)
torch.manual_seed(0)
base = build_model(mcfg, 10)
x = torch.randn(batch, base_ch := (1 if model_name in ("mlp", "smallcnn") else 3), mcfg.image_size, mcfg.image_size)
y = torch.randint(0, 10, (batch,))
def batches():
    while True:
        yield x, y
variants = {}
import bench.rank.traffic as T
def nodiv(state, bucket):
    return T._COUNTER.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])
orig = T.comm_hook
for name in ("bare", "builtin", "observed", "nodiv"):
    m = copy.deepcopy(base)
    traffic = GradientTraffic(clock)
    T.comm_hook = (lambda cfg: (None, nodiv)) if name == "nodiv" else orig
    wrapped = m if name == "bare" else wrap_model(m, ctx, dcfg, traffic, observe=name in ("observed", "nodiv"))
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    variants[name] = (Trainer(wrapped, opt, Precision.setup("fp32", ctx.device), lambda b: b, 1), traffic)
for name, (tr, traffic) in variants.items():   # warm-up
    observe_steps(tr, batches(), 5, clock, traffic)
times = {name: [] for name in variants}
for r in range(rounds):
    order = list(variants) if r % 2 == 0 else list(reversed(variants))
    for name in order:
        tr, traffic = variants[name]
        t0 = time.perf_counter()
        observe_steps(tr, batches(), steps, clock, traffic)
        times[name].append((time.perf_counter() - t0) / steps * 1e3)
for name, v in times.items():
    print(f"{model_name} b{batch} {name:9s} mean step ms per window: " + " ".join(f"{t:.1f}" for t in v) + f"  median {statistics.median(v):.1f}")
b = statistics.median(times["builtin"])
print(f"observed/builtin per round: " + " ".join(f"{o/bb:.3f}" for o, bb in zip(times["observed"], times["builtin"])))
print(f"nodiv/builtin per round: " + " ".join(f"{o/bb:.3f}" for o, bb in zip(times["nodiv"], times["builtin"])))
print(f"builtin/bare per round: " + " ".join(f"{bb/s:.3f}" for bb, s in zip(times["builtin"], times["bare"])))
dist.destroy_process_group()
