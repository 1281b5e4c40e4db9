"""PowerSGD's local work (no collectives) on two CPUs of this machine, in phase against out
of phase, as two emulated hosts run it. Each of two processes, pinned to CPU 0 and CPU 1
with one torch thread, trains the workload (synthetic data, SGD with momentum) and after
each backward does PowerSGD's own work on every gradient (error feedback; per matrix
P = M Q, orthogonalise P, Q = M^T P, M' = P Q^T, error = M - M'; vectors as they are).
In phase: a barrier before every step, so both run the hook's work at the same moments
(as DDP's ranks do). Out of phase: the second process starts its block half a step late
and nothing syncs inside it (as a one-node cell beside its neighbour). Blocks of >= 1 s,
in pairs, in turn first. Prints per pair the median hook time and the median step without
it, in phase and out, both processes' mean.

  .venv/bin/python hook_in_phase.py MODEL BATCH [IMAGE] [WIDTHxDEPTH] [--pairs 8] [--rank 1]
"""
import argparse, json, math, multiprocessing as mp, os, statistics, time
import torch, torch.nn.functional as F
from bench.config import ModelConfig
from bench.rank.models import build_model, input_shape

def hook_state(model, rank):
    state = []
    for p in model.parameters():
        shape = p.shape
        n, m = (shape[0], math.prod(shape[1:])) if p.dim() > 1 else (0, 0)
        compress = p.dim() > 1 and n * m > (n + m) * rank * 2   # torch's min_compression_rate 2
        q = torch.randn(m, rank) if compress else None
        state.append((p, torch.zeros_like(p), q))
    return state

def hook_work(state):
    for p, err, q in state:
        g = p.grad
        g.add_(err)
        if q is None:
            continue
        mat = g.view(g.shape[0], -1)
        pm = mat @ q
        pm, _ = torch.linalg.qr(pm)
        q.copy_(mat.t() @ pm)
        approx = pm @ q.t()
        torch.sub(mat, approx, out=err.view_as(mat))
        mat.copy_(approx)

def worker(idx, args, barrier, out, shared):
    os.sched_setaffinity(0, {idx})
    torch.set_num_threads(1)
    torch.manual_seed(0)
    width, depth = (int(x) for x in args.shape.split("x")) if args.shape else (4096, 8)
    cfg = ModelConfig(model=args.model, image_size=args.image, mlp_width=width, mlp_depth=depth) \
        if args.image else ModelConfig(model=args.model, mlp_width=width, mlp_depth=depth)
    model = build_model(cfg, 1000)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, *input_shape(cfg)); y = torch.randint(0, 1000, (args.batch,))
    state = hook_state(model, args.rank)
    def step():
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        F.cross_entropy(model(x), y).backward()
        t1 = time.perf_counter()
        hook_work(state)
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        return (t1 - t0) + (t3 - t2), t2 - t1
    for _ in range(3): step()
    barrier.wait()
    t = time.perf_counter(); [step() for _ in range(5)]
    if idx == 0: shared.value = (time.perf_counter() - t) / 5
    barrier.wait()
    step_s = shared.value   # one block length for both: each block's barriers must match
    block = max(4, math.ceil(1.0 / step_s))
    pairs = []
    for pair in range(args.pairs):
        med = {}
        for in_phase in ((True, False) if pair % 2 == 0 else (False, True)):
            barrier.wait()
            if not in_phase and idx == 1:
                time.sleep(step_s / 2)
            rows = []
            for _ in range(block):
                if in_phase: barrier.wait()
                rows.append(step())
            med[in_phase] = (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows))
        pairs.append(med)
    out.put((idx, step_s, block, [[p[True][1], p[False][1], p[True][0], p[False][0]] for p in pairs]))

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("model"); ap.add_argument("batch", type=int)
    ap.add_argument("--image", type=int); ap.add_argument("--shape")
    ap.add_argument("--pairs", type=int, default=8); ap.add_argument("--rank", type=int, default=1)
    args = ap.parse_args()
    barrier, out, shared = mp.Barrier(2), mp.Queue(), mp.Value('d', 0.0)
    procs = [mp.Process(target=worker, args=(i, args, barrier, out, shared)) for i in range(2)]
    [p.start() for p in procs]
    got = sorted(out.get() for _ in procs); [p.join() for p in procs]
    pairs = [[statistics.fmean(g[3][k][j] for g in got) for j in range(4)] for k in range(args.pairs)]
    hook_ratio = statistics.median(p[0] / p[1] for p in pairs)
    rest_ratio = statistics.median(p[2] / p[3] for p in pairs)
    print(json.dumps({"model": args.model, "batch": args.batch, "image": args.image, "shape": args.shape,
                      "step_s": [g[1] for g in got], "block": got[0][2],
                      "pairs_ms[hook in, hook out, rest in, rest out]": [[round(v * 1000, 2) for v in p] for p in pairs],
                      "hook_in_phase_ratio": round(hook_ratio, 3), "rest_in_phase_ratio": round(rest_ratio, 3)}))
