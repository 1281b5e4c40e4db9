"""``python -m bench.rank.train`` / ``torchrun -m bench.rank.train``: train one configuration,
record it.

Whatever happens inside the run (an OOM, a dead peer, a bug), rank 0 still appends a record
with its status and message, so a sweep gets a row instead of a stack trace.
"""
from __future__ import annotations

import resource
import sys
from pathlib import Path

import torch

from bench import manifest, record
from bench.config import TrainConfig
from bench.rank import allocator, distributed, front, job, linkprobe, phases, summary, telemetry
from bench.rank.breakdown import StepParts, reporting_to
from bench.rank.clock import StepClock
from bench.rank.data import build_data
from bench.rank.loop import (
    Precision,
    Trainer,
    comm_probe,
    observe_steps,
    run_epochs,
    run_steps,
)
from bench.rank.models import MODELS, build_model, flops_per_sample, parameter_count
from bench.rank.precision import resolve_precision
from bench.rank.traffic import GradientTraffic, observes_timed_steps, shard_model, wrap_model
from bench.units import parse_size

PROG = "bench train"
TRAFFIC_PROBE_STEPS = 5   # one process: DDP steps observed for bytes and bucket timeline
# Steps the probe runs under its new DDP wrapper before it observes any. On a GPU the first
# steps after wrapping are slower (results/reference/gpu-h200/README.md, "The one-rank
# probe's gap": the first round after wrapping 55.73 ms against 55.06 at batch 256, 33.17
# against 30.28 at 128, one H200), and one warm-up step left that in the probe's timeline,
# the step predict scales from. On CPU one step is what the accuracy check ran with.
PROBE_WARMUP_STEPS = {"cuda": 3, "cpu": 1}


def probe_warmup_steps(device_type: str, comm_hook: str, powersgd_warmup: int) -> int:
    """The probe's untimed steps: the wrapper's own warm-up, then PowerSGD's plain ones, so
    that what is counted is what it sends once compressing."""
    return PROBE_WARMUP_STEPS.get(device_type, 1) + \
        (powersgd_warmup if comm_hook == "powersgd" else 0)


def peak_memory(ctx: distributed.DistContext) -> tuple[int, str, list[int]]:
    """The largest rank's peak memory, its kind, and every rank's (rank order)."""
    if ctx.device.type == "cuda":
        peak, kind = torch.cuda.max_memory_allocated(ctx.device), "cuda_max_allocated"
    else:  # ru_maxrss is in KiB on Linux
        peak, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "max_rss"
    every = [int(p) for p in distributed.all_gather_objects(ctx, int(peak))]
    return max(every), kind, every


class MemoryCapExceeded(job.ExpectedFailure):
    status = "oom"


def _held_bytes() -> int:
    """This process's private writable memory now (VmData): what RLIMIT_DATA counts."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmData:"):
            return int(line.split()[1]) * 1024
    raise OSError("no VmData in /proc/self/status")


def apply_memory_cap(cap: str | None) -> dict | None:
    """Let this rank allocate at most ``cap`` more host memory than it holds now (torch and
    the process group loaded, nothing built yet): an allocation past it fails as it would
    on a smaller machine, and the run ends with status oom and these figures."""
    if cap is None:
        return None
    budget = parse_size(cap, "--memory-cap")
    # The wrappers (DDP's and FSDP's constructors) import torch._dynamo, some 100 MiB of
    # modules: loaded now, it is part of what the rank holds, not of the model's budget.
    import torch._dynamo  # noqa: F401  (here only: a run without a cap loads it when wrapping)
    allocator.allocate_exactly()
    held = _held_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = held + budget if hard == resource.RLIM_INFINITY else min(held + budget, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    return {"cap_bytes": budget, "held_bytes": held, "limit_bytes": limit}


def verify_dataset(cfg: TrainConfig, ctx: distributed.DistContext) -> str | None:
    """Before anything trains, every node must read the bytes the manifest promises. One
    process per node reads them (an ImageNet-size export over NFS must not be read once per
    rank); every rank then learns whether any node failed, so all stop together."""
    digest, problem = None, None
    if ctx.local_rank == 0:
        try:
            digest = manifest.verify(cfg.data.data_dir, cfg.data.manifest_check,
                                     cfg.data.manifest_sample, cfg.schedule.seed)
        except manifest.ManifestMismatch as mismatch:
            problem = mismatch
    # 1 + the highest failing node's rank, or 0 when every node matched.
    failed = int(distributed.max_across_ranks(ctx, float(ctx.node_rank + 1 if problem else 0)))
    if problem:
        raise problem
    if failed:
        raise manifest.ManifestMismatch(f"the dataset does not match its manifest on node "
                                        f"{failed - 1} (that node's log names the file)")
    return digest


def traffic_probe(cfg: TrainConfig, ctx: distributed.DistContext, model, optimizer,
                  precision: Precision, data, clock: StepClock,
                  traffic: GradientTraffic) -> int:
    """A few steps of the same model under a DDP wrapper whose all-reduce is observed, as
    the timed steps of a job with a compression hook are. For one process, which trained
    bare (a one-rank group), and for a job whose plain all-reduce stayed DDP's built-in one.
    Returns how many steps ``traffic`` observed. PowerSGD first runs its plain warm-up
    steps, so what is counted is what it sends once compressing."""
    if cfg.distributed.strategy == "fsdp":
        # FSDP replaces the parameters: the training optimizer lets go of the old ones (and
        # their state) first, so the probe holds no second copy of the model.
        optimizer.param_groups.clear()
        optimizer.state.clear()
        wrapped = shard_model(model, traffic)
        optimizer = torch.optim.SGD(wrapped.parameters(), lr=cfg.schedule.lr, momentum=0.9)
    else:
        # The same parameters and optimizer: DDP's buckets take the place of the gradients
        # (set to None after each step), so the probe needs no memory training did not.
        wrapped = wrap_model(model, ctx, cfg.distributed, traffic, observe=True)
    trainer = Trainer(wrapped, optimizer, precision, data.to_device, cfg.distributed.grad_accum)
    warmup = probe_warmup_steps(ctx.device.type, cfg.distributed.comm_hook,
                                cfg.distributed.powersgd_warmup)
    steps = max(TRAFFIC_PROBE_STEPS, cfg.schedule.comm_probe_steps)
    if ctx.is_leader:
        print(f"[bench] traffic probe: {steps} steps with the gradient all-reduce observed",
              file=sys.stderr, flush=True)
    batches = data.endless()
    for _ in range(warmup):
        trainer.step(batches)
    traffic.reset()
    observe_steps(trainer, batches, steps, clock, traffic)
    return steps


def measure(cfg: TrainConfig, ctx: distributed.DistContext, rec: dict) -> None:
    """Build everything, train, and fill ``rec`` with the figures. Raises on failure."""
    # First: a precision this job's GPUs cannot run fails it before anything is read or built.
    rec["precision"] = resolve_precision(cfg.precision.precision, ctx)
    rec["global_batch_size"] = cfg.data.batch_size * cfg.distributed.grad_accum * ctx.world_size
    if cfg.data.data_dir is not None:
        rec["dataset_manifest_sha256"] = verify_dataset(cfg, ctx)
    rec["strategy"] = cfg.distributed.strategy
    rec["memory_cap"] = apply_memory_cap(cfg.distributed.memory_cap)
    try:
        _measure(cfg, ctx, rec)
    except (RuntimeError, MemoryError) as error:
        if rec["memory_cap"] and job.is_allocation_failure(error):
            cap = rec["memory_cap"]
            raise MemoryCapExceeded(
                f"out of memory under --memory-cap {cfg.distributed.memory_cap}: "
                f"{job.one_line(error)} (the rank held {cap['held_bytes'] / 2**20:.0f} MiB "
                f"before building the model, and may allocate "
                f"{cap['cap_bytes'] / 2**20:.0f} MiB more)") from error
        raise


def _measure(cfg: TrainConfig, ctx: distributed.DistContext, rec: dict) -> None:
    torch.manual_seed(cfg.schedule.seed)  # same initial weights on every rank
    channels = MODELS[cfg.model.model].in_channels
    memory_format = torch.channels_last if cfg.precision.channels_last else torch.contiguous_format
    data = build_data(cfg.data, channels=channels, size=cfg.model.image_size,
                      num_classes=cfg.model.num_classes, rank=ctx.rank,
                      world_size=ctx.world_size, seed=cfg.schedule.seed, device=ctx.device,
                      local_world_size=ctx.local_world_size, memory_format=memory_format)
    rec["num_classes"] = data.num_classes
    rec["loader_workers"] = data.workers
    model = build_model(cfg.model, data.num_classes)
    rec["param_count"] = parameter_count(model)
    fps = flops_per_sample(cfg.model, data.num_classes)
    model = model.to(ctx.device, memory_format=memory_format)
    clock = StepClock(ctx.device)
    traffic = GradientTraffic(clock)
    parts = StepParts(clock)
    # One process is the denominator of every speedup, so it trains bare, as a lab's
    # single-GPU script would: no DDP, no hook. What a larger job of it would send (bytes,
    # bucket timeline) is measured afterwards by a short probe under one-rank DDP.
    single = ctx.world_size == 1
    observed = observes_timed_steps(cfg.distributed, ctx.world_size)
    fsdp = cfg.distributed.strategy == "fsdp"
    if single:
        wrapped = model
    elif fsdp:
        wrapped = shard_model(model, traffic, host_timed=ctx.device.type == "cpu")
    else:
        wrapped = wrap_model(model, ctx, cfg.distributed, traffic, observe=observed)
    # How the timed steps synchronised gradients: nothing (one process), DDP's built-in
    # all-reduce, a comm hook (fp16, bf16, powersgd) in Python, or FSDP's collectives.
    rec["gradient_sync"] = "none" if single else "fsdp" if fsdp else \
        "comm_hook" if observed else "ddp_builtin"
    if cfg.precision.compile:
        wrapped = torch.compile(wrapped)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.schedule.lr, momentum=0.9)
    precision = Precision.setup(rec["precision"], ctx.device)
    rec["cudnn_benchmark"] = torch.backends.cudnn.benchmark
    trainer = Trainer(wrapped, optimizer, precision, data.to_device, cfg.distributed.grad_accum)
    samples_per_step = rec["global_batch_size"]
    if ctx.is_leader:
        print(f"[bench] {cfg.model.model} on {ctx.world_size} x {ctx.device.type} in "
              f"{rec['precision']}, global batch "
              f"{samples_per_step} samples/step, {rec['param_count']:,} parameters",
              file=sys.stderr, flush=True)
    sampler, no_telemetry = telemetry.sampler_for(ctx.device, cfg.schedule.telemetry_interval) \
        if cfg.schedule.telemetry else (None, "off (--no-telemetry)")

    def timing_starts() -> None:
        traffic.reset()
        if sampler:
            sampler.start()

    phases.mark("model_built")
    reporting_to(parts)
    if cfg.schedule.steps is not None:
        result = run_steps(trainer, data, ctx, cfg.schedule, clock, samples_per_step,
                           on_timing_start=timing_starts, observer=traffic, parts=parts)
    else:
        # Evaluate the bare module: eval shards differ in length across ranks, and DDP's
        # forward would wait for peers that have already finished.
        timing_starts()
        result = run_epochs(trainer, model, data, ctx, cfg.schedule, clock, samples_per_step,
                            observer=traffic, parts=parts)
    reporting_to(None)
    if sampler:
        sampler.stop()
    step_parts = parts.resolved()
    observed_steps = len(result.step_times)
    if not observed:
        try:
            observed_steps = traffic_probe(cfg, ctx, model, optimizer, precision, data, clock,
                                           traffic)
        except RuntimeError as error:  # the measurement stands; only its traffic is unknown
            if "can't allocate memory" not in str(error) and \
                    not isinstance(error, torch.OutOfMemoryError):
                raise
            rec["traffic_probe_error"] = job.one_line(error)
            traffic.reset()
            observed_steps = 0
        phases.mark("traffic_probe_done")
    rec["traffic_by_kind"] = {kind: size / observed_steps
                              for kind, size in traffic.by_kind.items()} \
        if observed_steps else None
    per_step = (traffic.bytes / observed_steps, traffic.calls / observed_steps) \
        if observed_steps else (None, None)
    result.nosync_step_times = comm_probe(trainer, data, ctx, cfg.schedule.comm_probe_steps,
                                          clock)
    phases.mark("comm_probe_done")
    device_names = [rank["device"] or "" for rank in rec["env"]["ranks"]]
    rec.update(summary.figures(result, ctx, samples_per_step=samples_per_step,
                               grad_bytes_per_step=per_step[0],
                               allreduce_calls_per_step=per_step[1],
                               flops_per_sample=fps, device_names=device_names,
                               precision=rec["precision"]))
    rec.update(summary.communication(result, ctx, rec["grad_bytes_per_step"]))
    links = linkprobe.probe(ctx, int(cfg.schedule.link_probe_mib * 2**20)) \
        if ctx.world_size > 1 else None
    phases.mark("link_probe_done")
    rec.update(summary.stragglers(result, step_parts, ctx, rec, links,
                                  "single" if single else "fsdp" if fsdp else "ddp",
                                  clock.stamped_by))
    rec["bucket_timeline"] = traffic.timeline()
    if rec["bucket_timeline"] is not None:
        # Observed in the timed steps, the timeline is the trained program's; from the
        # probe, of the bare model under DDP, eager even where training was compiled.
        rec["bucket_timeline"]["compiled"] = bool(cfg.precision.compile and observed)
    summary_here = sampler.summary() if sampler else None
    summaries = distributed.all_gather_objects(
        ctx, {"summary": summary_here,
              "reason": sampler.error if sampler and summary_here is None else no_telemetry})
    rec["telemetry"] = telemetry.combine(
        [s["summary"] for s in summaries], [s["reason"] for s in summaries],
        rec["samples_per_s"], samples_per_step * len(result.step_times))
    rec["peak_memory_bytes"], rec["peak_memory_kind"], rec["peak_memory_per_rank"] = \
        peak_memory(ctx)


def run(cfg: TrainConfig) -> int:
    """Run a validated config; returns the exit code (0 ok, 1 failed)."""
    phases.mark_start()
    return job.run(PROG, record.train_skeleton(cfg), cfg.output.results, cfg.distributed,
                   lambda ctx, rec: measure(cfg, ctx, rec),
                   record.training_headline)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return front.main("bench.rank.train", argv, prog, run)


if __name__ == "__main__":
    job.exit_process(main())
