"""Which part of training's shape makes an all-reduce take less compute than the sweep's
probe says: one all-reduce per step amid compute against several back to back, and the
baseline (alternate steps without one against 0.15 s of compute alone before and after).

Every step: a barrier, FIRST pieces of compute on the main thread, then in a "with" step
CALLS all-reduces of 2 MiB handed over (async) one after another, each when the one before
is done, the compute going on between (polled after each piece); in a "without" step
SECOND pieces. POLL=0: one all-reduce, then SECOND pieces whatever it does, as shape.py
does, but with the hand-over call inside the timed span (its time is reported: shape.py
left it out); STAMP=1 stamps its end by a callback. Blocks in the order without, with,
without, with; the first 3 steps of each left out. Around each "with" block, 0.15 s of
compute alone (the probe's baseline). PIECE=mm: 512 x 512 matmuls (10 then 12 pieces);
PIECE=cnnB: smallcnn's forward and backward at batch B (FIRST and SECOND from the
environment). Reports, per rank: the time per all-reduce, and the compute lost per
all-reduce against each baseline."""
import json
import os
import statistics
import time

import torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
A = torch.randn(512, 512); OUT = torch.empty_like(A)
X = torch.ones(2122 * 1024 // 4)
CALLS = int(os.environ.get("CALLS", "1"))
# POLL=0: one all-reduce, then a fixed SECOND pieces whatever it does (shape.py's way); its
# end stamped by a callback when gloo completes it.
POLL = os.environ.get("POLL", "1") == "1"
done_at, handed = [], []
STAMP = os.environ.get("STAMP", "1") == "1"
FIRST, SECOND, STEPS, ALONE_S = 10, 12, 30, 0.15


PIECE = os.environ.get("PIECE", "mm")
if PIECE == "mm":
    def piece():
        torch.mm(A, A, out=OUT)
else:
    # PIECE=cnnB: smallcnn's forward and backward at batch B (no optimizer, no DDP).
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from bench.config import ModelConfig
    from bench.rank.models import build_model
    model = build_model(ModelConfig(model="smallcnn"), 1000)
    batch = int(PIECE[3:])
    xb, yb = torch.randn(batch, 1, 28, 28), torch.randint(0, 1000, (batch,))

    def piece():
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
    FIRST, SECOND = int(os.environ["FIRST"]), int(os.environ["SECOND"])


def compute_for(seconds):
    began, n = time.perf_counter(), 0
    while time.perf_counter() - began < seconds:
        piece(); n += 1
    return n / (time.perf_counter() - began)


def with_step():
    """(span, pieces) from the first hand-over to the last all-reduce done."""
    began, n = time.perf_counter(), 0
    if not POLL:
        work = dist.all_reduce(X, async_op=True)
        handed.append(time.perf_counter() - began)
        if STAMP:
            work.get_future().then(lambda _: done_at.append(time.perf_counter() - began))
        for _ in range(SECOND):
            piece()
        work.wait()
        return time.perf_counter() - began, SECOND
    for _ in range(CALLS):
        work = dist.all_reduce(X, async_op=True)
        while not work.is_completed():
            piece(); n += 1
        work.wait()
    return time.perf_counter() - began, n


def without_step():
    began = time.perf_counter()
    for _ in range(SECOND):
        piece()
    return SECOND / (time.perf_counter() - began)


compute_for(ALONE_S)
alternate_rates, alone_rates, spans, rates_with = [], [], [], []
for mode in ("without", "with", "without", "with"):
    if mode == "with":
        alone_rates.append(compute_for(ALONE_S))
    for step in range(STEPS):
        dist.barrier()
        for _ in range(FIRST):
            piece()
        if mode == "with":
            span, n = with_step()
            if step >= 3:
                spans.append(span); rates_with.append(n / span)
        else:
            rate = without_step()
            if step >= 3:
                alternate_rates.append(rate)
    if mode == "with":
        alone_rates.append(compute_for(ALONE_S))
span = statistics.median(spans)
rate_with = statistics.median(rates_with)


def lost_ms(base):
    return round(max(0.0, 1 - rate_with / base) * span / CALLS * 1e3, 2)


row = {"done_after_ms": round(statistics.median(done_at[3:]) * 1e3, 2) if done_at else None,
       "handover_ms": round(statistics.median(handed[3:]) * 1e3, 2) if handed else None,
       "ms_per_call": round(span / CALLS * 1e3, 2),
       "lost_vs_alternate_ms": lost_ms(statistics.median(alternate_rates)),
       "lost_vs_alone_ms": lost_ms(statistics.fmean(alone_rates)),
       "piece_ms_alternate": round(1e3 / statistics.median(alternate_rates), 2),
       "piece_ms_alone": round(1e3 / statistics.fmean(alone_rates), 2)}
rows = [None] * world
dist.all_gather_object(rows, row)
if rank == 0:
    print(json.dumps({"world": world, "calls": CALLS, "by_rank": rows}))
dist.destroy_process_group()
