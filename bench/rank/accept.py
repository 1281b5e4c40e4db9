"""``torchrun -m bench.rank.accept``: the acceptance run's measurements, on every rank.

Three stages, each a collective every rank enters (``bench.accept_config`` has the flags):

- **device**: every device at once, as training uses them: matrix multiply in each
  precision the device supports, device memory bandwidth (a copy), pinned host-to-device
  bandwidth (GPUs), and the training throughput of a reference workload on the device
  alone (no gradient synchronisation). Each figure is timed ``repeats`` times, each repeat
  started together on every rank and at least ``REPEAT_S`` long (``timed_repeats``). What the
  device's own counters said meanwhile (GPU: clock, temperature, throttle reasons; CPU: the
  cgroup's quota and how often it throttled) goes with the figures; on a CPU device, so
  does the CPU time the rank got in each repeat (``cpus``) and its thread count.
- **link**: each pair of nodes all-reduces ``--link-size`` between their leaders, in rounds
  in which every node is in one pair (``round_robin``), so a node's bad link shows in every
  round and a bad pair in one.
- **data**: each node's leader reads the dataset through its mount, dropping each file from
  the page cache first (``posix_fadvise``), so the figure is the mount's, not memory's.

Rank 0 gathers everything into one record (mode ``accept``); ``bench accept`` judges it.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from bench.accept_config import PROG, AcceptConfig, round_robin, skeleton
from bench.config import DistributedConfig, ModelConfig
from bench.rank import dataread, environment, front, job, nccl_capture
from bench.rank.distributed import DistContext, all_gather_objects, barrier

# Each timed repeat runs at least this long (calls are batched): many periods of a CPU
# quota (20-100 ms), so a repeat is not one lucky or unlucky period.
REPEAT_S = 0.5
MAX_CALLS = 10_000
# CPU seconds of every thread of this process (ns-precise, unlike os.times' clock ticks: a
# quarter-CPU rank gets a dozen ticks in a repeat). Bound here, apart from ``time``, which
# the tests replace with a fake clock.
_process_cpu_s = time.process_time
# What runs before each timed repeat: a barrier in the device stage, nothing elsewhere.
Align = Callable[[], object]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclasses.dataclass(frozen=True, slots=True)
class Repeats:
    """One figure's timed repeats: seconds per call, and the CPUs' worth of time this
    process got during each (CPU seconds of all its threads over wall seconds; None where a
    repeat's wall time could not be told)."""

    seconds: list[float]
    cpus: list[float | None]

    def cpu_field(self) -> dict:
        """``{"cpus": [...]}`` where every repeat's share is known and positive, else {}."""
        if self.cpus and all(c is not None and c > 0 for c in self.cpus):
            # Four significant digits, not places: a rank stopped for most of a repeat
            # keeps a share above zero, which the schema requires of every figure.
            return {"cpus": [float(f"{c:.4g}") for c in self.cpus if c is not None]}
        return {}


def timed_repeats(fn: Callable[[], object], device: torch.device, repeats: int,
                  align: Align = lambda: None) -> Repeats:
    """Seconds per call, ``repeats`` times: each repeat batches enough calls to last at
    least ``REPEAT_S`` (counted from one warm call), so a fast call is not all timer.
    With each, the CPU time the process got meanwhile: a rank that other load or a quota
    kept off its CPU for part of a repeat runs that repeat slower, and the judge tells that
    apart from a slow device by it.

    ``align`` runs before each repeat (the device stage passes a barrier): every rank's
    repeat then starts together, so peers are timed beside the same neighbours. Ranks that
    drift apart would time one figure beside another's (a training step beside a memory
    copy), and on hosts that share memory or a CPU the one that drew the heavier neighbour
    would read slow for no fault of its own."""
    fn()
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    one = max(time.perf_counter() - start, 1e-7)
    # ceil: a call of 0.3 s batched once would make a 0.3 s repeat, a few periods of a CPU
    # quota, and a repeat's share of them is its noise.
    calls = max(1, min(MAX_CALLS, math.ceil(REPEAT_S / one)))
    seconds: list[float] = []
    cpus: list[float | None] = []
    for _ in range(repeats):
        align()
        start, cpu_start = time.perf_counter(), _process_cpu_s()
        for _ in range(calls):
            fn()
        _sync(device)
        wall, cpu = time.perf_counter() - start, _process_cpu_s() - cpu_start
        seconds.append(wall / calls)
        cpus.append(cpu / wall if wall > 0 else None)
    return Repeats(seconds, cpus)


def _cpus_on_cpu(timed: Repeats, device: torch.device) -> dict:
    """The repeats' CPU time where the device is the CPU (a GPU's figures do not hang on
    the host's CPU time the same way: its note has the GPU's own counters)."""
    return timed.cpu_field() if device.type == "cpu" else {}


def precisions(device: torch.device) -> list[tuple[str, torch.dtype, bool]]:
    """(name, dtype, tf32) the device computes natively."""
    if device.type != "cuda":
        return [("fp32", torch.float32, False)]
    out = [("fp32", torch.float32, False), ("tf32", torch.float32, True)]
    if torch.cuda.is_bf16_supported():
        out.append(("bf16", torch.bfloat16, False))
    out.append(("fp16", torch.float16, False))
    return out


def matmul_figures(cfg: AcceptConfig, ctx: DistContext, align: Align) -> dict[str, dict]:
    n = cfg.matmul_size
    figures = {}
    for name, dtype, tf32 in precisions(ctx.device):
        a = torch.randn(n, n, device=ctx.device).to(dtype)
        b = torch.randn(n, n, device=ctx.device).to(dtype)
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            timed = timed_repeats(lambda a=a, b=b: torch.mm(a, b), ctx.device, cfg.repeats,
                                  align)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous
        figures[f"matmul {name}"] = {"unit": "GFLOP/s",
                                     "values": [2 * n ** 3 / s / 1e9 for s in timed.seconds],
                                     **_cpus_on_cpu(timed, ctx.device)}
    return figures


def memory_figure(cfg: AcceptConfig, ctx: DistContext, align: Align) -> dict:
    count = cfg.memory_bytes // 4
    source = torch.ones(count, dtype=torch.float32, device=ctx.device)
    target = torch.empty_like(source)
    timed = timed_repeats(lambda: target.copy_(source), ctx.device, cfg.repeats, align)
    # A copy reads and writes every byte.
    return {"unit": "GB/s", "values": [2 * count * 4 / s / 1e9 for s in timed.seconds],
            **_cpus_on_cpu(timed, ctx.device)}


def host_to_device_figure(cfg: AcceptConfig, ctx: DistContext, align: Align) -> dict:
    count = min(cfg.memory_bytes, 256 << 20) // 4
    host = torch.ones(count, dtype=torch.float32).pin_memory()
    target = torch.empty(count, dtype=torch.float32, device=ctx.device)
    timed = timed_repeats(lambda: target.copy_(host, non_blocking=True), ctx.device,
                          cfg.repeats, align)
    return {"unit": "GB/s", "values": [count * 4 / s / 1e9 for s in timed.seconds]}


def train_figure(cfg: AcceptConfig, ctx: DistContext, align: Align) -> dict:
    """Samples per second of the reference workload on this device alone: forward,
    backward and an SGD step on synthetic data (bf16 autocast and channels-last on GPUs
    that support them, as a lab trains there)."""
    from bench.rank.models import build_model, input_shape

    model_cfg = ModelConfig(model=cfg.train_model, mlp_width=512, mlp_depth=4)
    model = build_model(model_cfg, 1000).to(ctx.device)
    batch = torch.randn(cfg.train_batch, *input_shape(model_cfg), device=ctx.device)
    labels = torch.randint(0, 1000, (cfg.train_batch,), device=ctx.device)
    fast = ctx.device.type == "cuda" and torch.cuda.is_bf16_supported()
    if fast and len(batch.shape) == 4:
        model = model.to(memory_format=torch.channels_last)
        batch = batch.contiguous(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()

    def steps() -> None:
        for _ in range(cfg.train_steps):
            with torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=fast):
                loss = loss_fn(model(batch), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    timed = timed_repeats(steps, ctx.device, cfg.repeats, align)
    return {"unit": "samples/s",
            "values": [cfg.train_batch * cfg.train_steps / s for s in timed.seconds],
            **_cpus_on_cpu(timed, ctx.device),
            "workload": f"{cfg.train_model} batch {cfg.train_batch}"
                        + (" bf16 channels-last" if fast else " fp32")}


# --- what the device's own counters say ---------------------------------------------------

def cgroup_cpu() -> dict:
    """This process's cgroup CPU quota (CPUs, None: none) and throttling counters, v2 or
    v1; empty where they cannot be read."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
            return _cgroup_figures(base / "cpu.max", base / "cpu.stat", v2=True)
        if "cpu" in controllers.split(","):
            for mount in ("cpu,cpuacct", "cpu"):
                base = Path("/sys/fs/cgroup") / mount / path.lstrip("/")
                if base.is_dir():
                    return _cgroup_figures(base, base / "cpu.stat", v2=False)
    return {}


def _cgroup_figures(limits: Path, stat: Path, *, v2: bool) -> dict:
    try:
        if v2:
            quota, period = limits.read_text().split()
            cpus = None if quota == "max" else int(quota) / int(period)
        else:
            quota_us = int((limits / "cpu.cfs_quota_us").read_text())
            period_us = int((limits / "cpu.cfs_period_us").read_text())
            cpus = None if quota_us < 0 else quota_us / period_us
        counters = dict(line.split() for line in stat.read_text().splitlines())
        return {"quota_cpus": cpus, "periods": int(counters.get("nr_periods", 0)),
                "throttled": int(counters.get("nr_throttled", 0))}
    except (OSError, ValueError):
        return {}


def cpu_usage() -> tuple[float, float]:
    """(wall seconds, CPU seconds of every thread of this process so far)."""
    return time.monotonic(), _process_cpu_s()


def cpu_note(before: dict, after: dict, used: tuple[float, float],
             since: tuple[float, float]) -> str:
    """How much CPU this rank got while it measured (CPUs' worth: a rank held back by a
    quota or by other load gets less than its threads asked for), and its cgroup's quota
    and throttling where the cgroup can be read (not inside ``ip netns exec``, which mounts
    a /sys without it)."""
    wall = used[0] - since[0]
    words = [f"got {(used[1] - since[1]) / wall:.2g} CPUs' worth of time, "
             f"{torch.get_num_threads()} thread(s)"] if wall > 0 else []
    if before and after and before.get("quota_cpus") is not None:
        periods = after["periods"] - before["periods"]
        throttled = after["throttled"] - before["throttled"]
        share = throttled / periods if periods > 0 else 0.0
        words.append(f"cgroup quota {after['quota_cpus']:.3g} CPU, throttled in {share:.0%} "
                      "of its periods")
    return "; ".join(words)


def gpu_note(device: torch.device) -> str:
    """Clock, temperature and throttle reasons from NVML; empty where NVML is absent."""
    if device.type != "cuda":
        return ""
    try:
        from bench.rank import telemetry

        nvml = telemetry._load_nvml()
        handle = nvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        clock = nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
        top = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)
        temperature = nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
        reasons = telemetry.throttle_names(
            nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
    except Exception:  # noqa: BLE001 - no telemetry is a missing note, not a failure
        return ""
    busy = [r for r in reasons if r != "gpu_idle"]
    return (f"SM clock {clock}/{top} MHz, {temperature} C"
            + (f", throttled: {', '.join(busy)}" if busy else ""))


def figure_names(device: torch.device) -> list[str]:
    """The device stage's figures on ``device``, in the order it measures them."""
    return [f"matmul {name}" for name, _, _ in precisions(device)] + ["memory bandwidth"] \
        + (["host-to-device pinned"] if device.type == "cuda" else []) + ["training"]


def device_stage(cfg: AcceptConfig, ctx: DistContext) -> list[dict]:
    """Every rank's device figures, gathered (a collective).

    Each repeat starts at a barrier on every rank (``timed_repeats``), which needs every
    rank to time the same figures, as many times. A rank on another device type (a node
    whose GPUs are not visible, under gloo) times others: then no repeat is aligned, and
    each rank's note says why, rather than the barriers mismatching and the stage hanging."""
    plans = all_gather_objects(ctx, figure_names(ctx.device))
    aligned = all(plan == plans[0] for plan in plans)
    align: Align = (lambda: barrier(ctx)) if aligned else (lambda: None)
    before, since = cgroup_cpu(), cpu_usage()
    figures = matmul_figures(cfg, ctx, align)
    figures["memory bandwidth"] = memory_figure(cfg, ctx, align)
    if ctx.device.type == "cuda":
        figures["host-to-device pinned"] = host_to_device_figure(cfg, ctx, align)
    figures["training"] = train_figure(cfg, ctx, align)
    note = gpu_note(ctx.device) if ctx.device.type == "cuda" else \
        cpu_note(before, cgroup_cpu(), cpu_usage(), since)
    if not aligned:
        kinds = sorted({str(plan) for plan in plans})
        note = "; ".join(filter(None, [note, f"repeats not aligned across ranks: the ranks "
                                       f"time {len(kinds)} different sets of figures "
                                       "(devices of more than one type)"]))
    mine = {**environment.rank_identity(ctx), "figures": figures, "note": note}
    if ctx.device.type == "cpu":
        mine["threads"] = torch.get_num_threads()
    return all_gather_objects(ctx, mine)


# --- links --------------------------------------------------------------------------------

def link_stage(cfg: AcceptConfig, ctx: DistContext) -> list[dict]:
    """Each pair of nodes' leaders all-reduce ``link_bytes``, pairs in rounds; the bus
    bandwidth of each repeat, gathered (a collective)."""
    members = all_gather_objects(ctx, (ctx.rank, ctx.node_rank, ctx.local_rank))
    leaders = {node: rank for rank, node, local in members if local == 0}
    nodes = sorted(leaders)
    if len(nodes) < 2:
        return []
    groups = {}
    for a, b in ((a, b) for a in nodes for b in nodes if a < b):
        # Every rank creates every group, in the same order (new_group is a collective).
        groups[(a, b)] = dist.new_group([leaders[a], leaders[b]])
    count = max(1, cfg.link_bytes // 4)
    buffer = torch.ones(count, dtype=torch.float32, device=ctx.device)
    mine = []
    for round_pairs in round_robin(len(nodes)):
        dist.barrier()
        for a, b in round_pairs:
            pair = (nodes[a], nodes[b])
            if ctx.local_rank == 0 and ctx.node_rank in pair:
                row = _time_pair(cfg, ctx, groups[pair], buffer, pair)
                if ctx.node_rank == pair[0]:     # both ends time it; one row per pair
                    mine.append(row)
    dist.barrier()
    return sorted((row for rows in all_gather_objects(ctx, mine) for row in rows),
                  key=lambda row: row["nodes"])


def _time_pair(cfg: AcceptConfig, ctx: DistContext, group, buffer: torch.Tensor,
               pair: tuple[int, int]) -> dict:
    dist.all_reduce(buffer, group=group)    # opens the connection
    values = []
    for _ in range(cfg.repeats):
        dist.barrier(group=group)
        _sync(ctx.device)
        start = time.perf_counter()
        dist.all_reduce(buffer, group=group)
        _sync(ctx.device)
        seconds = time.perf_counter() - start
        # Two ranks: the bus factor 2(n-1)/n is 1, bus bandwidth is size over time.
        values.append(buffer.numel() * 4 / seconds / 1e9)
    return {"nodes": list(pair), "bytes": buffer.numel() * 4, "unit": "GB/s",
            "values": values}


# --- the data path ------------------------------------------------------------------------

def data_stage(cfg: AcceptConfig, ctx: DistContext) -> list[dict]:
    """Each node's leader reads the dataset (``bench.rank.dataread``); gathered."""
    mine = []
    if ctx.local_rank == 0 and (cfg.data_dir is not None or cfg.data_url):
        if cfg.data_url:
            source, files = cfg.data_url, dataread.nfs_files(cfg.data_url)
            read = dataread.read_nfs
        else:
            source, files = str(cfg.data_dir), dataread.files_under(cfg.data_dir)
            read = dataread.read_local
        mb, per_s = [], []
        for _ in range(cfg.repeats if files else 0):
            seconds, done, begun = read(files, cfg.data_max_bytes)
            mb.append(done / seconds / 1e6)
            per_s.append(begun / seconds)
        # The whole dataset's bytes: what one sample costs to read, however little was.
        total = sum(size for _, size in files)
        mine.append({"node": ctx.node_rank, "path": source, "files": len(files),
                     "bytes": total, "samples": cfg.data_samples or None,
                     "MBps": mb, "files_per_s": per_s})
    return [row for rows in all_gather_objects(ctx, mine) for row in rows]


def run(cfg: AcceptConfig) -> int:
    def measure(ctx: DistContext, rec: dict) -> None:
        for stage in cfg.stage_list:
            if ctx.is_leader:
                print(f"[accept] {stage} ...", file=sys.stderr, flush=True)
            if stage == "device":
                rec["devices"] = device_stage(cfg, ctx)
            elif stage == "link":
                rec["links"] = link_stage(cfg, ctx)
                # Again, now that the pairs' connections crossed the network between nodes.
                rec["nccl_transport"] = nccl_capture.gather(ctx)
            else:
                rec["data"] = data_stage(cfg, ctx)

    def headline(rec: dict) -> str:
        trained = [statistics.median(d["figures"]["training"]["values"])
                   for d in rec["devices"]]
        return (f"{len(rec['devices'])} device(s)"
                + (f", training {min(trained):.1f}-{max(trained):.1f} samples/s"
                   if trained else "")
                + f", {len(rec['links'])} link pair(s), {len(rec['data'])} data path(s)")

    # The network NCCL chose is judged with the rest (bench accept's transport rows), not
    # refused before anything is measured.
    return job.run(PROG, skeleton(cfg), cfg.results,
                   DistributedConfig(device=cfg.device, backend=cfg.backend,
                                     timeout=cfg.timeout), measure, headline,
                   enforce_net=False)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return front.main("bench.rank.accept", argv, prog, run)


if __name__ == "__main__":
    job.exit_process(main())
