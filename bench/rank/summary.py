"""Turn a rank's raw timings into the record's figures."""
from __future__ import annotations

from bench.analysis import straggler
from bench.devices import NO_PEAK, job_peak
from bench.rank.distributed import DistContext, all_gather_objects, max_across_ranks
from bench.rank.loop import LoopResult

FIRST_LOSSES_KEPT = 5


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0-100), as numpy's default."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def figures(result: LoopResult, ctx: DistContext, *, samples_per_step: int,
            grad_bytes_per_step: float | None, allreduce_calls_per_step: float | None,
            flops_per_sample: int | None,
            device_names: list[str],
            precision: str) -> dict:
    """The measured part of the record. A collective: every rank must call it."""
    steps = len(result.step_times)
    # The slowest rank sets the job's pace, so throughput uses the largest time of any rank.
    train_seconds = max_across_ranks(ctx, result.train_seconds)
    timed_seconds = max_across_ranks(ctx, result.timed_seconds)
    global_rate = steps * samples_per_step / train_seconds if train_seconds > 0 else None
    per_device_rate = global_rate / ctx.world_size if global_rate else None
    achieved = (flops_per_sample * per_device_rate / 1e12
                if flops_per_sample and per_device_rate else None)
    peak_key, peak = job_peak(device_names, precision) if ctx.device.type == "cuda" \
        else (NO_PEAK, None)
    wait = sum(result.data_waits)
    return {
        "timed_steps": steps,
        "samples_per_s": global_rate,
        "samples_per_s_per_device": per_device_rate,
        "samples_per_s_steady": steady_rate(result, ctx, samples_per_step),
        "step_time_s": {"p50": percentile(result.step_times, 50),
                        "p90": percentile(result.step_times, 90),
                        "max": max(result.step_times, default=None),
                        "mean": result.train_seconds / steps if steps else None},
        "data_wait_share": wait / result.train_seconds if result.train_seconds else None,
        "train_time_s": train_seconds,
        "total_time_s": timed_seconds,
        "epochs": result.epochs,
        "time_to_target_s": result.time_to_target,
        "eval_loss": result.eval_loss,
        "eval_accuracy": result.eval_accuracy,
        "first_step_done": result.first_step_done,
        "last_step_done": result.last_step_done,
        "first_losses": result.losses[:FIRST_LOSSES_KEPT],
        "final_loss": result.losses[-1] if result.losses else None,
        "grad_bytes_per_step": grad_bytes_per_step,
        "allreduce_calls_per_step": allreduce_calls_per_step,
        "flops_per_sample": flops_per_sample,
        "achieved_tflops_per_device": achieved,
        "device_peak_key": peak_key,
        "device_peak_tflops": peak,
        "mfu": achieved / peak if achieved and peak else None,
    }


def steady_rate(result: LoopResult, ctx: DistContext, samples_per_step: int) -> float | None:
    """Epochs mode: samples/s over the epochs after the first (whose first steps are
    un-warmed), the slowest rank's time; None with one epoch and in steps mode (its warm-up
    steps are already left out). A collective where there are 2+ epochs (every rank has
    as many)."""
    if len(result.epochs) < 2:
        return None
    seconds = max_across_ranks(ctx, result.train_seconds - result.first_epoch_seconds)
    steps = len(result.step_times) - result.first_epoch_steps
    return steps * samples_per_step / seconds if steps > 0 and seconds > 0 else None


def communication(result: LoopResult, ctx: DistContext, grad_bytes_per_step: float | None) -> dict:
    """The communication a step exposes: the median synced step minus the median step
    without gradient sync (the probe), both taken from the slowest rank. DDP overlaps the
    rest of the all-reduce with backward. A collective: every rank must call it."""
    synced = max_across_ranks(ctx, percentile(result.step_times, 50) or 0.0)
    unsynced = max_across_ranks(ctx, percentile(result.nosync_step_times, 50) or 0.0)
    if not result.nosync_step_times or not synced:
        return {"comm_probe_steps": len(result.nosync_step_times), "step_time_nosync_s": None,
                "comm_exposed_s": None, "comm_share": None, "comm_achieved_GBps": None}
    exposed = synced - unsynced   # may come out slightly negative from noise: kept as is
    achieved = (grad_bytes_per_step / exposed / 1e9
                if grad_bytes_per_step and exposed > 0 else None)
    return {"comm_probe_steps": len(result.nosync_step_times), "step_time_nosync_s": unsynced,
            "comm_exposed_s": exposed, "comm_share": exposed / synced,
            "comm_achieved_GBps": achieved}


def stragglers(result: LoopResult, step_parts: list[dict[str, float]], ctx: DistContext,
               rec: dict, links: dict | None, strategy: str, stamped_by: str) -> dict:
    """The record's step breakdown, straggler and drop-the-slowest prediction, from every
    rank's timed steps. A collective: every rank must call it; the leader's answer counts."""
    me = rec["env"]["ranks"][ctx.rank] if ctx.rank < len(rec["env"]["ranks"]) else {}
    mine = {"rank": ctx.rank, "node": ctx.node_rank,
            "host": me.get("hostname") or "", "device": me.get("device") or "",
            "step_s": result.step_times, "parts": {}}
    names = sorted({name for step in step_parts for name in step})
    mine["parts"] = {name: [step.get(name, 0.0) for step in step_parts] for name in names}
    every = all_gather_objects(ctx, mine)
    ranks = [straggler.RankSteps(**r) for r in every]
    link_list = [straggler.Link(link["from_node"], link["to_node"], link["s"])
                 for link in (links or {}).get("links", [])]
    verdict = straggler.judge(ranks, strategy, link_list, rec.get("samples_per_s"))
    if links is not None:
        links = {**links, "slow_node": verdict.slow_link_node}
    return {"step_breakdown": straggler.breakdown(ranks, strategy, stamped_by),
            "straggler": verdict.straggler, "straggler_check": verdict.check,
            "without_slowest": verdict.without_slowest, "link_probe": links}
