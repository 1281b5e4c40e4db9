"""What backward's thread does in PowerSGD's synchronous part, one rank against two.

The synchronous part of bucket b's hook (from backward reaching the bucket, or, with the
hooks serialized as on gloo, from the previous bucket's chain being done, to the hook
returning) read 1.55-2.17 times as long on two emulated hosts as in the one-node probe,
from the records' median marks (../powersgd-sync-part/). This times it step by step and
splits it on backward's thread, with the trainer's own DDP
wrapping (bench.rank.traffic.wrap_model, PowerSGD on gloo, hooks serialized, the one-rank
probe's first all-reduce deferred as the trainer's is):

- wake: from the previous bucket's chain done (stamped on the completing thread) to
  backward's thread running again after waiting for it (0 where it had not waited);
- work: the hook's own work up to its first all-reduce (error feedback, the copies, Q's
  orthogonalisation, the P matmul): its wall time and backward thread's CPU time in it
  (CLOCK_THREAD_CPUTIME_ID), and the involuntary context switches of that thread;
- issue: from calling the first all-reduce to the hook having returned (the collective
  handed to gloo's thread, the chain attached), wall and CPU, switches.

Wall time less CPU time is time backward's thread was ready but off the CPU (nothing in
these stretches blocks, but for the enqueue's mutex): another thread ran there. And per
bucket after the first, the race: backward goes on at the later of its reaching the bucket
and the previous bucket's chain being done; how far the mean of that later time is past the
later of the two means (what a timeline of typical times leaves out).

  # two ranks on two emulated hosts (one CPU each), and two one-rank jobs side by side
  .venv/bin/python results/reference/powersgd-wake/sync_probe.py mlp 8 --shape 2048x2 \
      --rate 1gbit --out /tmp/wake
Modes in --order: "one" (two one-rank jobs side by side, as a one-node cell and its
neighbour run) and "two" (one two-rank job), each in a fresh lab. Writes
OUT/<mode>-rank<r>-of<n>-<pid>.jsonl, one line per timed step, and prints per mode the
medians (ms); ``--summarise --out DIR`` reads a DIR again (.jsonl or .jsonl.gz).
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _tid_switches() -> int:
    tid = threading.get_native_id()
    with open(f"/proc/self/task/{tid}/status") as status:
        for line in status:
            if line.startswith("nonvoluntary_ctxt_switches"):
                return int(line.split()[1])
    return 0


class Stamps:
    """Per step, per bucket: the stretches of backward's thread named above."""

    def __init__(self) -> None:
        self.current: list[dict] | None = None
        self.issue_at: tuple[float, float, int] | None = None
        self.backward_tid: int | None = None
        self.last_done: float | None = None
        self.began = 0.0
        # This step's collectives (issued, done; from its start) and chains done, in order.
        self.calls: list[dict] = []
        self.chains_done: list[float] = []
        # The last stamp on backward's thread.
        self.previous: tuple[float, float, int] | None = None

    def stamp(self) -> tuple[float, float, int]:
        return time.perf_counter(), time.thread_time(), _tid_switches()


def rank_main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.nn.functional as F

    from bench.config import DistributedConfig, ModelConfig
    from bench.rank import allocator, distributed, traffic
    from bench.rank.clock import StepClock
    from bench.rank.models import build_model, input_shape

    torch.set_num_threads(1)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    allocator.keep_freed_memory()
    cfg = DistributedConfig(device="cpu", backend="gloo", comm_hook=args.hook)
    ctx = distributed.init(cfg)
    stamps = Stamps()

    counter = traffic._COUNTER
    plain_all_reduce = type(counter).all_reduce

    def all_reduce(self, tensor, *a, **kw):
        first = (stamps.current is not None and stamps.issue_at is None
                 and threading.get_native_id() == stamps.backward_tid)
        if first:
            stamps.issue_at = stamps.stamp()
        issued = time.perf_counter()
        work = plain_all_reduce(self, tensor, *a, **kw)
        if stamps.current is not None and kw.get("async_op"):
            call = {"issued_at": issued - stamps.began, "done_at": None}
            stamps.calls.append(call)

            def completed(_future, call=call, began=stamps.began):
                call["done_at"] = time.perf_counter() - began
            work.get_future().add_done_callback(completed)
        return work

    type(counter).all_reduce = all_reduce
    plain_done = traffic._ObservedHook.done

    def done(self, future):
        stamps.last_done = time.perf_counter()
        stamps.chains_done.append(stamps.last_done - stamps.began)
        return plain_done(self, future)

    traffic._ObservedHook.done = done

    def observed(obs, bucket):
        start = stamps.stamp()
        buffer = bucket.buffer()
        obs.traffic.bucket_ready(buffer.numel() * buffer.element_size())
        waited = obs.pending is not None and not obs.pending.done()
        if obs.pending is not None:
            obs.pending.wait()
        woke = stamps.stamp()
        previous_done = stamps.last_done   # the chain before this bucket's, if it has ended
        stamps.backward_tid = threading.get_native_id()
        stamps.issue_at = None
        future = obs.hook(obs.state, bucket).then(obs.done)
        returned = stamps.stamp()
        obs.traffic.bucket_issued()
        traffic._COUNTER.release()
        if obs.serialize:
            obs.pending = future
        issue = stamps.issue_at or returned
        before = stamps.previous or start
        stamps.previous = returned
        if stamps.current is not None:
            stamps.current.append({
                # From the step's start, as the trainer's bucket timeline stamps them.
                "ready_at": start[0] - stamps.began, "issued_at": returned[0] - stamps.began,
                "previous_done_at": (previous_done - stamps.began)
                if previous_done is not None else None,
                "compute_s": start[0] - before[0], "compute_cpu_s": start[1] - before[1],
                "waited": waited,
                "wait_s": woke[0] - start[0],
                "wake_s": woke[0] - previous_done if waited and previous_done else 0.0,
                "work_s": issue[0] - woke[0], "work_cpu_s": issue[1] - woke[1],
                "work_switches": issue[2] - woke[2],
                "issue_s": returned[0] - issue[0], "issue_cpu_s": returned[1] - issue[1],
                "issue_switches": returned[2] - issue[2]})
        return future

    traffic._observed = observed
    width, depth = (int(x) for x in args.shape.split("x"))
    model_cfg = ModelConfig(model=args.model, image_size=args.image, mlp_width=width,
                            mlp_depth=depth)
    torch.manual_seed(0)
    model = build_model(model_cfg, 1000)
    ddp = traffic.wrap_model(model, ctx, cfg, traffic.GradientTraffic(StepClock(ctx.device)),
                             observe=True)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    inputs = torch.randn(args.batch, *input_shape(model_cfg))
    labels = torch.randint(0, 1000, (args.batch,))
    out = Path(args.out) / f"{args.mode}-rank{ctx.rank}-of{ctx.world_size}-{os.getpid()}.jsonl"
    with out.open("w") as lines:
        for step in range(args.warmup + args.steps):
            timed = step >= args.warmup
            if step == args.warmup and args.nice_others:
                # A test: every thread but backward's (gloo's workers, the store's) at
                # another niceness, so that a wake on the shared CPU takes it at once or not.
                main = threading.get_native_id()
                for task in os.listdir("/proc/self/task"):
                    if int(task) != main:
                        os.setpriority(os.PRIO_PROCESS, int(task), args.nice_others)
            stamps.current = [] if timed else None
            began = stamps.began = time.perf_counter()
            stamps.last_done = None
            stamps.calls, stamps.chains_done = [], []
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(inputs), labels)
            forward = time.perf_counter()
            stamps.previous = stamps.stamp()
            loss.backward()
            backward = time.perf_counter()
            tail = stamps.stamp()
            if args.stagger_optimizer and ctx.rank % 2:
                # Out of phase with the other rank's optimizer: a test of what the two
                # hosts' optimizers at the same moments cost each other.
                time.sleep(args.stagger_optimizer)
            stepped = time.perf_counter()
            optimizer.step()
            stepped = time.perf_counter() - stepped
            if timed:
                stamps.current.append({"tail_s": tail[0] - stamps.previous[0],
                                       "tail_cpu_s": tail[1] - stamps.previous[1]})
                lines.write(json.dumps({"began": began,   # CLOCK_MONOTONIC: one per machine
                                        "step_s": time.perf_counter() - began,
                                        "forward_s": forward - began,
                                        "backward_s": backward - forward,
                                        "optimizer_s": stepped,
                                        "buckets": stamps.current,
                                        "calls": stamps.calls,
                                        "chains_done": stamps.chains_done}) + "\n")
    distributed.shutdown(synchronized=True)


def launch(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    from bench.host import netlab
    from bench.units import parse_rate

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, __file__, "--rank-side", args.model, str(args.batch),
          "--shape", args.shape, *(["--image", str(args.image)] if args.image else []),
          "--steps", str(args.steps), "--warmup", str(args.warmup), "--out", str(out),
          "--hook", args.hook, "--switch-interval", str(args.switch_interval),
          "--stagger-optimizer", str(args.stagger_optimizer),
          "--nice-others", str(args.nice_others)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for mode in args.order.split(","):
        with netlab.Lab(2, parse_rate(args.rate, "--rate"), cpus_per_node=1) as lab:
            procs = []
            for node in lab.nodes:
                world = {"WORLD_SIZE": "2", "RANK": str(node.rank), "LOCAL_RANK": "0",
                         "MASTER_ADDR": lab.master_addr, "MASTER_PORT": "29561"} \
                    if mode == "two" else {"WORLD_SIZE": "1", "RANK": "0"}
                procs.append(subprocess.Popen(node.wrap(me + ["--mode", mode]),
                                              env={**env, **lab.env(node), **world}))
            if any(p.wait() for p in procs):
                raise SystemExit(f"{mode}: a rank failed")
    summarise(out)


def summarise(out: Path) -> None:
    """Per mode (every rank of every run pooled), medians over steps, ms; then the two
    ranks' collectives side by side (``skews``)."""
    by_mode: dict[str, list[dict]] = {}
    for path in sorted(out.glob("*.jsonl*")):
        opened = gzip.open(path, "rt") if path.suffix == ".gz" else path.open()
        with opened as lines:
            by_mode.setdefault(path.name.split("-")[0], []).extend(map(json.loads, lines))
    med = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    for mode, steps in by_mode.items():
        buckets = len(steps[0]["buckets"]) - 1
        opt = [s.get("optimizer_s", s["step_s"] - s["forward_s"] - s["backward_s"])
               for s in steps]
        print(f"{mode}: {len(steps)} steps; step {med([s['step_s'] for s in steps]):.1f}, "
              f"forward {med([s['forward_s'] for s in steps]):.1f}, backward "
              f"{med([s['backward_s'] for s in steps]):.1f} (its tail after the last hook "
              f"{med([s['buckets'][-1]['tail_s'] for s in steps]):.1f}), optimizer "
              f"{med(opt):.1f}")
        for b in range(buckets):
            rows = [s["buckets"][b] for s in steps]
            per_step = [r["issued_at"] - max(r["ready_at"], r["previous_done_at"] or 0.0)
                        for r in rows]
            done = [r["previous_done_at"] for r in rows if r["previous_done_at"] is not None]
            from_medians = med([r["issued_at"] for r in rows]) - max(
                med([r["ready_at"] for r in rows]), med(done) if len(done) == len(rows) else 0)
            print(f"  bucket {b}: compute before it {med([r['compute_s'] for r in rows]):5.1f} "
                  f"(cpu {med([r['compute_cpu_s'] for r in rows]):5.1f}); "
                  f"waited in {sum(r['waited'] for r in rows)} steps, wake "
                  f"{med([r['wake_s'] for r in rows if r['waited']] or [0]):.2f}; "
                  f"sync part per step {med(per_step):5.1f}, from the marks' medians "
                  f"{from_medians:5.1f}; its work {med([r['work_s'] for r in rows]):5.1f} "
                  f"(cpu {med([r['work_cpu_s'] for r in rows]):5.1f}, off-cpu "
                  f"{med([r['work_s'] - r['work_cpu_s'] for r in rows]):4.2f}, switches "
                  f"{statistics.fmean(r['work_switches'] for r in rows):.2f}), issue "
                  f"{med([r['issue_s'] for r in rows]):4.2f} (cpu "
                  f"{med([r['issue_cpu_s'] for r in rows]):4.2f})")
            if b == 0:
                continue
            # The race: backward's thread goes on at max(ready, previous chain done). A
            # timeline of typical times takes the later of the two means; the steps pay
            # the mean of the later one, which is more where the two are close and vary.
            ready = [r["ready_at"] for r in rows]
            previous = [r["previous_done_at"] or 0.0 for r in rows]
            later = [max(a, d) for a, d in zip(ready, previous, strict=True)]
            mean, sd = statistics.fmean, statistics.pstdev
            print(f"    race: ready {mean(ready) * 1e3:5.1f} +- {sd(ready) * 1e3:4.1f}, "
                  f"previous chain done {mean(previous) * 1e3:5.1f} +- "
                  f"{sd(previous) * 1e3:4.1f}; the later of the two {mean(later) * 1e3:5.1f}, "
                  f"{(mean(later) - max(mean(ready), mean(previous))) * 1e3:4.2f} past the "
                  f"later mean (two independent normals of these means and spreads: "
                  f"{normal_race_s(ready, previous) * 1e3:4.2f})")
        chains(mode, steps)
    print("two ranks side by side:")
    skews(out)


def chains(mode: str, steps: list[dict]) -> None:
    """Each bucket's chain, from the hook's return to its last callback, in its parts: its
    three collectives (issued to done) and the hook's work between them (on the thread
    that completed the one before: unpacking, the Q matmul and orthogonalisation, the
    decompression)."""
    usable = [s for s in steps if s.get("calls") and len(s["calls"]) == 3 * len(s["chains_done"])
              and all(c["done_at"] is not None for c in s["calls"])]
    if not usable:
        return   # not PowerSGD's three collectives a bucket
    med = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    for b in range(len(usable[0]["chains_done"])):
        parts: dict[str, list[float]] = {}
        for s in usable:
            c1, c2, c3 = s["calls"][3 * b:3 * b + 3]
            for name, seconds in (
                    ("first collective", c1["done_at"] - c1["issued_at"]),
                    ("unpack", c2["issued_at"] - c1["done_at"]),
                    ("P all-reduce", c2["done_at"] - c2["issued_at"]),
                    ("Q matmul", c3["issued_at"] - c2["done_at"]),
                    ("Q all-reduce", c3["done_at"] - c3["issued_at"]),
                    ("decompress", s["chains_done"][b] - c3["done_at"]),
                    ("chain", s["chains_done"][b] - s["buckets"][b]["issued_at"])):
                parts.setdefault(name, []).append(seconds)
        print(f"  {mode} bucket {b} chain ({len(usable)} steps): " + ", ".join(
            f"{name} {med(values):.2f}" for name, values in parts.items()))


def skews(out: Path) -> None:
    """The two ranks of each two-rank run side by side, step by step (perf_counter is the
    machine's monotonic clock, one for every process on it): per collective of each
    chain, how much later one rank issued it than the other (the earlier one waits that
    out: the slowest rank), and how long it took on the later one (the collective's own
    cost, nobody to wait for). Medians, ms."""
    runs: dict[str, list[Path]] = {}
    for path in sorted(out.glob("two-rank*")):
        runs.setdefault(path.name.split("-")[1], []).append(path)
    if len(runs) != 2:
        return
    steps_by_run = []
    for first, second in zip(*runs.values(), strict=False):
        both = []
        for path in (first, second):
            opened = gzip.open(path, "rt") if path.suffix == ".gz" else path.open()
            with opened as lines:
                both.append([json.loads(line) for line in lines])
        steps_by_run.extend(zip(*both, strict=False))
    usable = [pair for pair in steps_by_run
              if all(s.get("calls") and "began" in s for s in pair)
              and len(pair[0]["calls"]) == len(pair[1]["calls"])
              and all(c["done_at"] is not None for s in pair for c in s["calls"])]
    if not usable:
        return
    calls = len(usable[0][0]["calls"])
    per_bucket = calls // max(1, len(usable[0][0]["chains_done"]))
    med = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    names = ("first collective", "P all-reduce", "Q all-reduce") if per_bucket == 3 \
        else ("all-reduce",) * per_bucket
    for c in range(calls):
        skew, own, apart = [], [], []
        for a, b in usable:
            issue = [s["began"] + s["calls"][c]["issued_at"] for s in (a, b)]
            done = [s["began"] + s["calls"][c]["done_at"] for s in (a, b)]
            later = 0 if issue[0] >= issue[1] else 1
            skew.append(abs(issue[0] - issue[1]))
            apart.append(abs(done[0] - done[1]))
            call = (a, b)[later]["calls"][c]
            own.append(call["done_at"] - call["issued_at"])
        print(f"  bucket {c // per_bucket} {names[c % per_bucket]}: one rank issued it "
              f"{med(skew):.2f} later than the other (mean "
              f"{statistics.fmean(skew) * 1e3:.2f}); on that rank it took {med(own):.2f} "
              f"(mean {statistics.fmean(own) * 1e3:.2f}); the ranks saw it done "
              f"{med(apart):.2f} apart (mean {statistics.fmean(apart) * 1e3:.2f}); "
              f"{len(skew)} steps")
    start = [abs(a["began"] - b["began"]) for a, b in usable]
    print(f"  the step's start: {med(start):.2f} apart (mean "
          f"{statistics.fmean(start) * 1e3:.2f})")


def normal_race_s(a: list[float], b: list[float]) -> float:
    """E[max(A, B)] - max(E[A], E[B]) for independent normal A and B of these samples'
    means and spreads (Clark, 1961): where that matches the steps' own, the cost is the
    race of two varying times, not a slower part of the step."""
    theta = math.hypot(statistics.pstdev(a), statistics.pstdev(b))
    if theta == 0:
        return 0.0
    delta = abs(statistics.fmean(a) - statistics.fmean(b)) / theta
    pdf = math.exp(-delta * delta / 2) / math.sqrt(2 * math.pi)
    tail = 0.5 * math.erfc(delta / math.sqrt(2))
    return theta * (pdf - delta * tail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("batch", type=int)
    parser.add_argument("--shape", default="1024x4")
    parser.add_argument("--image", type=int, default=None)
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--switch-interval", type=float, default=0.0,
                        help="Python's GIL switch interval in the ranks, seconds (default: "
                        "Python's, 0.005)")
    parser.add_argument("--nice-others", type=int, default=0,
                        help="niceness of every thread but backward's once timing starts "
                        "(-20 to 19; 0: left as they are)")
    parser.add_argument("--stagger-optimizer", type=float, default=0.0,
                        help="seconds the odd ranks sleep before each optimizer step")
    parser.add_argument("--hook", default="powersgd", choices=("powersgd", "none"),
                        help="none: DDP's plain all-reduce hook, one collective a bucket")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--order", default="one,two,one,two")
    parser.add_argument("--out", required=True)
    parser.add_argument("--mode", default="")
    parser.add_argument("--rank-side", action="store_true")
    parser.add_argument("--summarise", action="store_true")
    args = parser.parse_args()
    if args.summarise:
        summarise(Path(args.out))
    elif args.rank_side:
        rank_main(args)
    else:
        launch(args)


if __name__ == "__main__":
    main()
