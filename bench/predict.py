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
import dataclasses
import math
import statistics
import sys
from pathlib import Path

from bench import record
from bench.allreduce_config import bus_factor
from bench.config import OneLineErrorParser
from bench.options import ConfigError
from bench.topology import parse_positive_ints
from bench.units import format_rate, parse_rate


@dataclasses.dataclass(frozen=True, slots=True)
class Link:
    """The alpha-beta model of one all-reduce: ``latency_s + bus_factor * bytes / busbw``,
    and what it costs a rank's CPUs: ``cpu_latency_s + cpu_s_per_bus_byte * bus_factor *
    bytes`` (gloo copies and sums on the CPU; measured by the all-reduce sweep)."""

    busbw_Bps: float      # bytes per second one link carries
    latency_s: float = 0.0
    source: str = ""
    rate_bps: int | None = None   # the link's rate, to find measurements taken on it
    cpu_latency_s: float = 0.0
    cpu_s_per_bus_byte: float = 0.0

    @classmethod
    def nominal(cls, rate_bps: int, latency_s: float = 0.0) -> Link:
        return cls(rate_bps / 8, latency_s, f"nominal {format_rate(rate_bps)}", rate_bps)

    @classmethod
    def from_allreduce(cls, rec: dict) -> Link:
        sizes = rec["sizes"]
        link = (rec.get("env") or {}).get("link") or {}
        on = f" on a {format_rate(link['rate_bps'])} link" if link else ""
        largest = sizes[-1]
        # Records from before the sweep measured CPU time carry none: no CPU cost then.
        cpu_per_byte = largest.get("cpu_time_s", 0.0) / (
            bus_factor(rec["world_size"]) * largest["size_bytes"])
        return cls(largest["busbw_GBps"] * 1e9, sizes[0]["time_s"],
                   f"measured busbw {largest['busbw_GBps'] * 8:.3f} Gbit/s over "
                   f"{rec['world_size']} ranks{on}", link.get("rate_bps"),
                   sizes[0].get("cpu_time_s", 0.0), cpu_per_byte)

    @property
    def efficiency(self) -> float | None:
        """busbw against the link's rate, where the rate is known."""
        return self.busbw_Bps * 8 / self.rate_bps if self.rate_bps else None

    def allreduce_s(self, size_bytes: float, nodes: int) -> float:
        return self.latency_s + bus_factor(nodes) * size_bytes / self.busbw_Bps

    def allreduce_cpu_s(self, size_bytes: float, nodes: int) -> float:
        return self.cpu_latency_s + self.cpu_s_per_bus_byte * bus_factor(nodes) * size_bytes

    def faster(self, factor: float) -> Link:
        """The wire ``factor`` times faster; the hosts' CPU cost per byte stays."""
        return dataclasses.replace(self, busbw_Bps=self.busbw_Bps * factor,
                                   source=f"{self.source} x{factor:g}", rate_bps=None)

    def at_rate(self, rate_bps: int) -> Link:
        """This measured link's efficiency, latency and CPU cost on a ``rate_bps`` wire: the
        planned upgrade predicted from the link a lab has (a record without a known rate
        is taken at 100% efficiency)."""
        efficiency = self.efficiency or 1.0
        return dataclasses.replace(
            self, busbw_Bps=rate_bps / 8 * efficiency, rate_bps=rate_bps,
            source=f"{format_rate(rate_bps)} at the {efficiency:.0%} efficiency, latency and "
                   f"CPU cost of the {self.source}")


def measured_rates(records: list[dict], link: Link) -> dict[tuple, list[float]]:
    """samples/s of ok multi-node records taken on ``link``'s rate, by (setup, nodes)."""
    found: dict[tuple, list[float]] = {}
    for rec in record.training(records):
        rate = ((rec.get("env") or {}).get("link") or {}).get("rate_bps")
        if rec.get("status") == "ok" and (rec.get("nnodes") or 1) > 1 \
                and link.rate_bps is not None and rate == link.rate_bps \
                and (rec.get("samples_per_s") or 0) > 0:
            found.setdefault((setup_key(rec), rec["nnodes"]), []).append(rec["samples_per_s"])
    return found


@dataclasses.dataclass(frozen=True, slots=True)
class Timeline:
    """One synced step of a single-node run: when buckets were ready, what they sent."""

    ready_s: tuple[float, ...]
    sent_bytes: tuple[float, ...]
    step_s: float
    calls_per_bucket: float = 1.0
    # The CPUs a rank computes on, where its all-reduces run on the same CPUs (training on
    # CPU: gloo's thread takes its share from the compute threads); None on GPUs.
    compute_cpus: int | None = None

    @classmethod
    def of(cls, rec: dict) -> Timeline:
        timeline = rec["bucket_timeline"]
        buckets = len(timeline["ready_s"])
        calls = (rec.get("allreduce_calls_per_step") or buckets) / buckets
        on_cpu = (rec.get("config") or {}).get("distributed", {}).get("device") == "cpu"
        threads = (rec.get("env") or {}).get("torch_threads") or 1
        return cls(tuple(timeline["ready_s"]), tuple(timeline["sent_bytes"]),
                   timeline["step_s"], calls, threads if on_cpu else None)

    @property
    def tail_s(self) -> float:
        """After the last bucket is ready: the optimizer step and the rest."""
        return max(0.0, self.step_s - self.ready_s[-1])

    def compressed(self, ratio: float) -> Timeline:
        return dataclasses.replace(self, sent_bytes=tuple(b * ratio for b in self.sent_bytes))

    def accumulated(self, micro_batches: int) -> Timeline:
        """Gradient accumulation: the earlier micro-batches (forward and backward, about
        r_last each) come first; the buckets are sent once, on the last."""
        shift = (micro_batches - 1) * self.ready_s[-1]
        return dataclasses.replace(self, ready_s=tuple(r + shift for r in self.ready_s),
                                   step_s=self.step_s + shift)

    def scaled_batch(self, factor: float) -> Timeline:
        """A batch ``factor`` times larger: forward and backward scale with it (assumed
        linear), the optimizer's tail does not."""
        ready = tuple(r * factor for r in self.ready_s)
        return dataclasses.replace(self, ready_s=ready, step_s=ready[-1] + self.tail_s)


@dataclasses.dataclass(frozen=True, slots=True)
class Prediction:
    nodes: int
    step_s: float
    comm_s: float          # all-reduce time of the step, hidden or not
    exposed_s: float       # what the step waits for beyond its own compute
    stolen_s: float = 0.0  # how much later compute ends: CPU time the all-reduces took from it

    @property
    def hidden_share(self) -> float:
        return 1 - self.exposed_s / self.comm_s if self.comm_s else 1.0


def predict_step(timeline: Timeline, link: Link, nodes: int) -> Prediction:
    """The step time over ``nodes`` nodes (see the module docstring for the model)."""
    if nodes == 1:
        return Prediction(1, timeline.step_s, 0.0, 0.0)
    calls = timeline.calls_per_bucket
    wire = [calls * link.allreduce_s(sent / calls, nodes) for sent in timeline.sent_bytes]
    cpu = [calls * link.allreduce_cpu_s(sent / calls, nodes) if timeline.compute_cpus
           else 0.0 for sent in timeline.sent_bytes]
    compute_end, comm_end, comm = _simulate(timeline, wire, cpu)
    exposed = max(0.0, comm_end - compute_end)
    return Prediction(nodes, max(compute_end, comm_end) + timeline.tail_s, comm, exposed,
                      compute_end - timeline.ready_s[-1])


_EPS = 1e-12


def _comm_pace(wire_s: float, cpu_s: float, cpus: int, beside_compute: bool
               ) -> tuple[float, float]:
    """(CPUs an all-reduce takes, the share of it done per second).

    Alone it runs at wire speed, or at CPU speed where its CPU work is the longer. Beside
    backward on the same ``cpus`` it wants ``cpu_s / wire_s`` of a CPU and gets at most a
    fair share (the scheduler splits the CPUs over the compute threads and gloo's).
    """
    if cpu_s <= _EPS:
        return 0.0, 1 / wire_s if wire_s > _EPS else math.inf
    wants = cpu_s / wire_s if wire_s > _EPS else math.inf
    takes = min(wants, cpus / (cpus + 1) if beside_compute else 1.0)
    return takes, takes / cpu_s


def _simulate(timeline: Timeline, wire: list[float],
              cpu: list[float]) -> tuple[float, float, float]:
    """Backward and DDP's all-reduces side by side, event by event, until both are done.

    ``work`` is how far backward is, in seconds of the single-node run; bucket i is handed
    over once ``work`` reaches ready_i and sent after the one before it. While an
    all-reduce takes ``c`` CPUs of backward's ``k``, backward runs at ``(k - c) / k`` of its
    single-node speed. Returns (when backward ends, when the last all-reduce ends, the
    all-reduces' time in all).
    """
    k = timeline.compute_cpus or 1
    ready, last_ready = timeline.ready_s, timeline.ready_s[-1]
    t = work = comm_total = comm_end = 0.0
    compute_end = 0.0 if last_ready <= 0 else None
    next_bucket, sending, progress, started = 0, None, 0.0, 0.0
    while True:
        if sending is None and next_bucket < len(ready) and ready[next_bucket] <= work + _EPS:
            sending, progress, started = next_bucket, 0.0, t
            next_bucket += 1
        computing = compute_end is None
        if sending is None and not computing:
            return compute_end, comm_end, comm_total
        taken, pace = (_comm_pace(wire[sending], cpu[sending], k, computing)
                       if sending is not None else (0.0, 0.0))
        compute_pace = (k - taken) / k if computing else 0.0
        # Advance to the next event: the all-reduce done, or backward at its next bucket.
        dt = (1 - progress) / pace if pace else math.inf
        if computing:
            target = next(r for r in ready if r > work + _EPS)
            dt = min(dt, (target - work) / compute_pace)
        t, work = t + dt, work + compute_pace * dt
        if sending is not None:
            progress = 1.0 if math.isinf(pace) else progress + pace * dt
            if progress >= 1 - 1e-9:
                comm_total, comm_end, sending = comm_total + t - started, t, None
        if computing and work >= last_ready - _EPS:
            work, compute_end = last_ready, t


@dataclasses.dataclass(frozen=True, slots=True)
class Scaling:
    """A prediction against the single-node run it came from."""

    prediction: Prediction
    samples_per_step_node: float
    base_step_s: float

    @property
    def samples_per_s(self) -> float:
        return self.prediction.nodes * self.samples_per_step_node / self.prediction.step_s

    @property
    def speedup(self) -> float:
        return self.samples_per_s / (self.samples_per_step_node / self.base_step_s)

    @property
    def efficiency(self) -> float:
        return self.speedup / self.prediction.nodes


def scaling(timeline: Timeline, link: Link, nodes: int, samples_per_step_node: float) -> Scaling:
    return Scaling(predict_step(timeline, link, nodes), samples_per_step_node, timeline.step_s)


def levers(rec: dict, link: Link, nodes: int, others: dict[str, dict]) -> list[tuple[str, float]]:
    """(lever, predicted samples/s at ``nodes``) for each lever, best first.

    ``others``: single-node records of the same setup with another comm hook, by hook.
    """
    timeline = Timeline.of(rec)
    per_node = rec["global_batch_size"]
    rows = [("as measured", _rate(timeline, link, nodes, per_node)),
            ("link 10x faster", _rate(timeline, link.faster(10), nodes, per_node)),
            ("batch 2x larger (estimated)",
             _rate(timeline.scaled_batch(2), link, nodes, 2 * per_node)),
            ("grad-accum 4", _rate(timeline.accumulated(4), link, nodes, 4 * per_node))]
    if rec.get("comm_hook") == "none" and "fp16" not in others:
        rows.append(("comm-hook fp16 (derived: half the bytes)",
                     _rate(timeline.compressed(0.5), link, nodes, per_node)))
    for hook, other in sorted(others.items()):
        rows.append((f"comm-hook {hook}", _rate(Timeline.of(other), link, nodes,
                                                other["global_batch_size"])))
    return sorted(rows, key=lambda row: -row[1])


def _rate(timeline: Timeline, link: Link, nodes: int, samples_per_step_node: float) -> float:
    return nodes * samples_per_step_node / predict_step(timeline, link, nodes).step_s


# The setup a single-node record stands for; records that differ only in the comm hook are
# the compression lever of one another.
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
    from bench.table import parse_where, select

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
