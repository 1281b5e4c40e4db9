"""``python -m bench predict``: what N nodes would give, from one measured single-node run.

  python -m bench predict results/runs.jsonl --link 5gbit --nodes 2,4
  python -m bench predict results/runs.jsonl --link-from results/comm-1gbit.jsonl
  python -m bench predict results/runs.jsonl --link-from results/comm-1gbit.jsonl --link 5gbit

The model, per optimizer step of the single-node run (its record's bucket timeline):

- bucket i becomes ready r_i seconds into the step and sends s_i bytes (after the comm
  hook's compression); the step ends T seconds in, ``T - r_last`` after the last bucket
  (the optimizer's share);
- over N nodes one all-reduce of m bytes takes  a + 2(N-1)/N x m / B  (the ring all-reduce:
  latency a, bus bandwidth B), and each bucket's hook issues c of them (calls per step
  divided by buckets: 1 for plain, fp16 and bf16, 3 for PowerSGD);
- DDP sends buckets in order, one at a time, each as soon as it is ready and the previous
  one is done; so communication hides behind the rest of backward (the overlap) and what
  is left over delays the step:  T_N = max(end of backward, end of the last bucket) +
  (T - r_last);
- on CPU, gloo's copies and sums run on the CPUs backward computes on: an all-reduce of m
  bytes costs each rank  a_cpu + b_cpu x 2(N-1)/N x m  CPU seconds, which it takes from
  backward while they overlap (at most a fair share of the CPUs), so backward ends later
  than r_last. At 1 Gbit this is small beside the wire time; at 5 Gbit on one CPU per node
  it is most of it. On GPUs it is not charged.

Not modelled: ranks drifting apart between the all-reduces they share (PowerSGD has three
per bucket), and hosts slowing each other when they run the same memory-bound phase at
once. On emulated hosts here both make PowerSGD about 15% faster in prediction than
measured; plain all-reduce came within 6% (results/reference/emulated-cpu/).

Where the results also hold multi-node runs of the same setup measured on the same link
rate (emulated links record theirs), their median stands beside the prediction with the
ratio measured / predicted.

The link is a nominal rate (``--link 5gbit``: B is the rate, a is ``--latency``, no CPU
cost), an all-reduce record measured on it (``--link-from``: a and a_cpu are the smallest
message's time and CPU time, B the busbw and b_cpu the CPU time per byte at the largest),
or both: the measured link moved to the nominal rate, keeping its efficiency (busbw against
its rate), latency and CPU cost; that is a lab's planned upgrade predicted from the link it
has. The output also says which lever would help most at the largest N: a faster link,
compression, larger batches, or gradient accumulation.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

from bench import record
from bench.analysis.prediction import Link, Timeline, levers, scaling
from bench.config import OneLineErrorParser
from bench.options import ConfigError
from bench.topology import Topology, parse_positive_ints
from bench.units import parse_rate


def measured_rates(records: list[dict], link: Link) -> dict[tuple, list[float]]:
    """samples/s of ok multi-node records taken on ``link``'s rate, by (setup, nodes).
    Uneven nodes (1+1+2) are left out: the model predicts N nodes like the measured one."""
    found: dict[tuple, list[float]] = {}
    for rec in record.training(records):
        rate = ((rec.get("env") or {}).get("link") or {}).get("rate_bps")
        if rec.get("status") == "ok" and (rec.get("nnodes") or 1) > 1 \
                and not Topology.of_record(rec).uneven \
                and link.rate_bps is not None and rate == link.rate_bps \
                and (rec.get("samples_per_s") or 0) > 0:
            found.setdefault((setup_key(rec), rec["nnodes"]), []).append(rec["samples_per_s"])
    return found


def setup_key(rec: dict) -> tuple:
    cfg = rec.get("config", {})
    key = (cfg.get("model", {}).get("model"), cfg.get("model", {}).get("image_size"),
           rec.get("batch_size_per_device"), cfg.get("distributed", {}).get("grad_accum"),
           cfg.get("precision", {}).get("precision"), rec.get("nproc_per_node"))
    return (*key, rec.get("comm_hook"))


def single_node_runs(records: list[dict]) -> dict[tuple, dict]:
    """Per setup, the median of its ok single-node training records with a bucket timeline
    (by samples/s; the lower middle of an even count): one noisy repeat should not move
    the prediction."""
    repeats: dict[tuple, list[dict]] = {}
    for rec in record.training(records):
        if rec.get("status") == "ok" and rec.get("nnodes") == 1 and _predictable(rec):
            repeats.setdefault(setup_key(rec), []).append(rec)
    return {key: sorted(recs, key=lambda r: r["samples_per_s"])[(len(recs) - 1) // 2]
            for key, recs in repeats.items()}


def host_stamped_gpu_timeline(rec: dict) -> bool:
    """Whether a GPU record's bucket timeline was stamped by the host clock (records from
    before CUDA events): it shows when the CPU queued each bucket, not when the GPU had it
    ready, so it sees almost no overlap and would predict speedups too low."""
    on_gpu = rec.get("peak_memory_kind") == "cuda_max_allocated"
    stamped_by = (rec.get("bucket_timeline") or {}).get("stamped_by", "host_clock")
    return on_gpu and stamped_by != "cuda_events"


def _predictable(rec: dict) -> bool:
    """Whether a (schema-valid) record has what the model needs: a bucket timeline with a
    bucket, a positive step time, a throughput and a global batch."""
    timeline = rec.get("bucket_timeline") or {}
    ready, sent = timeline.get("ready_s") or [], timeline.get("sent_bytes") or []
    return not host_stamped_gpu_timeline(rec) \
        and bool(ready) and len(ready) == len(sent) and timeline.get("step_s", 0) > 0 \
        and (rec.get("samples_per_s") or 0) > 0 and (rec.get("global_batch_size") or 0) > 0


def link_of(args: argparse.Namespace) -> Link:
    """--link-from: the measured link; with --link too, that measurement moved to the
    nominal rate (the upgrade a lab plans, from the link it has); --link alone: nominal."""
    if args.link_from:
        sweeps = [r for r in record.load(args.link_from, "--link-from")
                  if r.get("mode") == "allreduce" and r.get("status") == "ok"
                  and (r.get("world_size") or 0) > 1 and r.get("sizes")
                  and r["sizes"][-1]["busbw_GBps"] > 0]
        if not sweeps:
            raise ConfigError("--link-from", args.link_from, "holds no ok all-reduce record "
                              "over 2 or more ranks: run bench allreduce on the link first")
        measured = Link.from_allreduce(sweeps[-1])
        return measured.at_rate(parse_rate(args.link, "--link")) if args.link else measured
    if not args.link:
        raise ConfigError("--link", "(not given)", "give a nominal rate (--link 5gbit), an "
                          "all-reduce record measured on the link (--link-from FILE), or both")
    return Link.nominal(parse_rate(args.link, "--link"), args.latency)


def report(runs: dict[tuple, dict], link: Link, nodes: list[int],
           measured: dict[tuple, list[float]] | None = None) -> str:
    """The prediction tables; where ``measured`` has the same setup and node count on the
    same link, the measured median and measured / predicted stand beside the prediction."""
    measured = measured or {}
    lines = [f"link: {link.source}, latency {link.latency_s * 1e3:.2f} ms per all-reduce",
             _cpu_cost_line(link, runs)]
    for key, rec in runs.items():
        timeline = Timeline.of(rec)
        model, size, batch, accum, precision, procs, hook = key
        per_node = rec["global_batch_size"]
        lines += ["", f"## {model} {size}px, batch {batch}/device x {procs} per node, "
                  f"grad-accum {accum}, {precision}, comm-hook {hook}",
                  f"measured on 1 node: {per_node / timeline.step_s:.1f} samples/s, step "
                  f"{timeline.step_s * 1e3:.1f} ms, {sum(timeline.sent_bytes) / 1e6:.2f} MB "
                  "sent per step", "",
                  "| nodes | step ms | samples/s | speedup | efficiency | all-reduce ms | "
                  "hidden | compute later ms | measured samples/s | measured/predicted |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for n in nodes:
            s = scaling(timeline, link, n, per_node)
            p = s.prediction
            seen = measured.get((key, n))
            median = statistics.median(seen) if seen else None
            beside = (f"{median:.1f} (n={len(seen)}) | {median / s.samples_per_s:.2f}"
                      if median else "- | -")
            lines.append(f"| {n} | {p.step_s * 1e3:.1f} | {s.samples_per_s:.1f} | "
                         f"{s.speedup:.2f} | {s.efficiency:.0%} | {p.comm_s * 1e3:.1f} | "
                         f"{p.hidden_share:.0%} | {p.stolen_s * 1e3:.1f} | {beside} |")
        others = {o["comm_hook"]: o for k, o in runs.items()
                  if k[:-1] == key[:-1] and o is not rec}
        ranked = levers(rec, link, max(nodes), others)
        base = per_node / timeline.step_s
        lines += ["", f"levers at {max(nodes)} nodes (samples/s, speedup over 1 node):"]
        lines += [f"- {name}: {rate:.1f} ({rate / base:.2f}x)" for name, rate in ranked]
        best = next(name for name, _ in ranked if name != "as measured") \
            if ranked[0][0] == "as measured" and len(ranked) > 1 else ranked[0][0]
        lines.append(f"most help: {best}")
    return "\n".join(lines)


def _cpu_cost_line(link: Link, runs: dict[tuple, dict]) -> str:
    on_cpu = any(Timeline.of(rec).compute_cpus for rec in runs.values())
    if link.cpu_s_per_bus_byte or link.cpu_latency_s:
        used = "taken from backward's CPUs" if on_cpu else "not charged: training on GPUs"
        return (f"all-reduce CPU cost: {link.cpu_latency_s * 1e3:.2f} ms per call + "
                f"{link.cpu_s_per_bus_byte * 1e9:.2f} ns per byte moved ({used})")
    if on_cpu:
        return ("all-reduce CPU cost: unknown, taken as 0; a CPU job computes beside its "
                "all-reduces, so it will run slower than this: give --link-from an "
                "all-reduce record measured on these hosts")
    return "all-reduce CPU cost: not charged (training on GPUs)"


def main(argv: list[str] | None = None, prog: str = "bench predict") -> int:
    p = OneLineErrorParser(prog=prog, description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="+", help="results files with single-node "
                   "training records (taken: nnodes 1, status ok)")
    p.add_argument("--link", help="a nominal link rate, e.g. 1gbit, 5gbit, 10gbit; with "
                   "--link-from: the rate to move the measured link to")
    p.add_argument("--link-from", type=Path, help="a results file with an all-reduce "
                   "record measured on the link (its latest one is used)")
    p.add_argument("--latency", type=float, default=0.0,
                   help="with --link: seconds of latency per all-reduce (default: 0)")
    p.add_argument("--nodes", default="2,4", help="node counts to predict (default: 2,4)")
    p.add_argument("--where", action="append", default=[], metavar="FIELD=VALUE",
                   help="only matching records (fields as in bench table)")
    args = p.parse_args(argv)
    from bench.analysis.table import parse_where, select

    try:
        nodes = parse_positive_ints(args.nodes, "--nodes")
        if not math.isfinite(args.latency) or args.latency < 0:
            raise ConfigError("--latency", args.latency, "must be 0 or more seconds (a finite "
                              "number)")
        if args.latency and args.link_from:
            raise ConfigError("--latency", args.latency, "only sets a nominal link's latency; "
                              "--link-from uses the measured one: drop --latency")
        where = parse_where(args.where)
        # Each file must hold a valid record; invalid lines are skipped with a warning.
        records = select([r for f in args.results for r in record.load(f, "results")], where)
        chosen_link = link_of(args)
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    runs = single_node_runs(records)
    refused = sum(1 for r in record.training(records) if host_stamped_gpu_timeline(r))
    if refused:
        print(f"{prog}: warning: {refused} GPU record(s) skipped: their bucket timeline was "
              "stamped by the host clock (when the CPU queued each bucket, not when the GPU "
              "had it ready), which hides the overlap; rerun them with this version, which "
              "stamps with CUDA events", file=sys.stderr)
    if not runs:
        print(f"{prog}: error: no ok single-node training record with a bucket timeline in "
              f"{', '.join(map(str, args.results))}: run the trainer on one node first "
              "(e.g. make bench-cpu or --topologies 1x1)", file=sys.stderr)
        return 2
    print(report(runs, chosen_link, nodes, measured_rates(records, chosen_link)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
