"""``python -m bench predict``: what N nodes would give, from one measured single-node run.

  python -m bench predict results/runs.jsonl --link 5gbit --nodes 2,4
  python -m bench predict results/runs.jsonl --link-from results/comm-1gbit.jsonl

The model, per optimizer step of the single-node run (its record's bucket timeline):

- bucket i becomes ready r_i seconds into the step and sends s_i bytes (after the comm
  hook's compression); the step ends T seconds in, ``T - r_last`` after the last bucket
  (the optimizer's share);
- over N nodes one all-reduce of m bytes takes  a + 2(N-1)/N x m / B  (the ring all-reduce:
  latency a, bus bandwidth B), and each bucket's hook issues c of them (calls per step
  divided by buckets: 1 for plain, fp16 and bf16, 3 for PowerSGD);
- DDP sends buckets in order, one at a time, each as soon as it is ready and the previous
  one is done; so communication hides behind the rest of backward (the overlap) and what
  is left over delays the step:  T_N = max(r_last, end of the last bucket) + (T - r_last).

Where the results also hold multi-node runs of the same setup measured on the same link
rate (emulated links record theirs), their median stands beside the prediction with the
ratio measured / predicted.

The link is a nominal rate (``--link 5gbit``: B is the rate, a is ``--latency``) or an
all-reduce record measured on it (``--link-from``: a is the smallest message's time, B the
busbw at the largest). The output also says which lever would help most at the largest N:
a faster link, compression, larger batches, or gradient accumulation.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

from bench import record
from bench.allreduce import bus_factor
from bench.config import OneLineErrorParser
from bench.options import ConfigError
from bench.topology import parse_positive_ints
from bench.units import format_rate, parse_rate


@dataclasses.dataclass(frozen=True, slots=True)
class Link:
    """The alpha-beta model of one all-reduce: ``latency_s + bus_factor * bytes / busbw``."""

    busbw_Bps: float      # bytes per second one link carries
    latency_s: float = 0.0
    source: str = ""
    rate_bps: int | None = None   # the link's rate, to find measurements taken on it

    @classmethod
    def nominal(cls, rate_bps: int, latency_s: float = 0.0) -> Link:
        return cls(rate_bps / 8, latency_s, f"nominal {format_rate(rate_bps)}", rate_bps)

    @classmethod
    def from_allreduce(cls, rec: dict) -> Link:
        sizes = rec["sizes"]
        link = (rec.get("env") or {}).get("link") or {}
        on = f" on a {format_rate(link['rate_bps'])} link" if link else ""
        return cls(sizes[-1]["busbw_GBps"] * 1e9, sizes[0]["time_s"],
                   f"measured busbw {sizes[-1]['busbw_GBps'] * 8:.3f} Gbit/s over "
                   f"{rec['world_size']} ranks{on}", link.get("rate_bps"))

    def allreduce_s(self, size_bytes: float, nodes: int) -> float:
        return self.latency_s + bus_factor(nodes) * size_bytes / self.busbw_Bps

    def faster(self, factor: float) -> Link:
        return Link(self.busbw_Bps * factor, self.latency_s, f"{self.source} x{factor:g}")


def measured_rates(records: list[dict], link: Link) -> dict[tuple, list[float]]:
    """samples/s of ok multi-node records taken on ``link``'s rate, by (setup, nodes)."""
    found: dict[tuple, list[float]] = {}
    for rec in record.training(records):
        rate = ((rec.get("env") or {}).get("link") or {}).get("rate_bps")
        if rec.get("status") == "ok" and (rec.get("nnodes") or 1) > 1 \
                and link.rate_bps is not None and rate == link.rate_bps:
            found.setdefault((setup_key(rec), rec["nnodes"]), []).append(rec["samples_per_s"])
    return found


@dataclasses.dataclass(frozen=True, slots=True)
class Timeline:
    """One synced step of a single-node run: when buckets were ready, what they sent."""

    ready_s: tuple[float, ...]
    sent_bytes: tuple[float, ...]
    step_s: float
    calls_per_bucket: float = 1.0

    @classmethod
    def of(cls, rec: dict) -> Timeline:
        timeline = rec["bucket_timeline"]
        buckets = len(timeline["ready_s"])
        calls = (rec.get("allreduce_calls_per_step") or buckets) / buckets
        return cls(tuple(timeline["ready_s"]), tuple(timeline["sent_bytes"]),
                   timeline["step_s"], calls)

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

    @property
    def hidden_share(self) -> float:
        return 1 - self.exposed_s / self.comm_s if self.comm_s else 1.0


def predict_step(timeline: Timeline, link: Link, nodes: int) -> Prediction:
    """The step time over ``nodes`` nodes (see the module docstring for the model)."""
    if nodes == 1:
        return Prediction(1, timeline.step_s, 0.0, 0.0)
    done = comm = 0.0
    for ready, sent in zip(timeline.ready_s, timeline.sent_bytes, strict=True):
        calls = timeline.calls_per_bucket
        duration = calls * link.allreduce_s(sent / calls, nodes)
        done = max(ready, done) + duration
        comm += duration
    last_ready = timeline.ready_s[-1]
    exposed = max(0.0, done - last_ready)
    return Prediction(nodes, max(last_ready, done) + timeline.tail_s, comm, exposed)


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
    """The latest ok single-node training record with a bucket timeline, per setup."""
    found: dict[tuple, dict] = {}
    for rec in record.training(records):
        if rec.get("status") == "ok" and rec.get("nnodes") == 1 and rec.get("bucket_timeline"):
            found[setup_key(rec)] = rec
    return found


def link_of(args: argparse.Namespace) -> Link:
    if args.link_from:
        sweeps = [r for r in record.read(args.link_from)
                  if r.get("mode") == "allreduce" and r.get("status") == "ok"
                  and (r.get("world_size") or 0) > 1]
        if not sweeps:
            raise ConfigError("--link-from", args.link_from, "holds no ok all-reduce record "
                              "over 2 or more ranks: run bench allreduce on the link first")
        return Link.from_allreduce(sweeps[-1])
    return Link.nominal(parse_rate(args.link, "--link"), args.latency)


def report(runs: dict[tuple, dict], link: Link, nodes: list[int],
           measured: dict[tuple, list[float]] | None = None) -> str:
    """The prediction tables; where ``measured`` has the same setup and node count on the
    same link, the measured median and measured / predicted stand beside the prediction."""
    measured = measured or {}
    lines = [f"link: {link.source}, latency {link.latency_s * 1e3:.2f} ms per all-reduce"]
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
                  "hidden | measured samples/s | measured/predicted |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for n in nodes:
            s = scaling(timeline, link, n, per_node)
            p = s.prediction
            seen = measured.get((key, n))
            median = statistics.median(seen) if seen else None
            beside = (f"{median:.1f} (n={len(seen)}) | {median / s.samples_per_s:.2f}"
                      if median else "- | -")
            lines.append(f"| {n} | {p.step_s * 1e3:.1f} | {s.samples_per_s:.1f} | "
                         f"{s.speedup:.2f} | {s.efficiency:.0%} | {p.comm_s * 1e3:.1f} | "
                         f"{p.hidden_share:.0%} | {beside} |")
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


def main(argv: list[str] | None = None, prog: str = "bench predict") -> int:
    p = OneLineErrorParser(prog=prog, description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="+", help="results files with single-node "
                   "training records (taken: nnodes 1, status ok)")
    link = p.add_mutually_exclusive_group(required=True)
    link.add_argument("--link", help="a nominal link rate, e.g. 1gbit, 5gbit, 10gbit")
    link.add_argument("--link-from", type=Path, help="a results file with an all-reduce "
                      "record measured on the link (its latest one is used)")
    p.add_argument("--latency", type=float, default=0.0,
                   help="with --link: seconds of latency per all-reduce (default: 0)")
    p.add_argument("--nodes", default="2,4", help="node counts to predict (default: 2,4)")
    p.add_argument("--where", action="append", default=[], metavar="FIELD=VALUE",
                   help="only matching records (fields as in bench table)")
    args = p.parse_args(argv)
    from bench.table import parse_where, select

    try:
        missing = [str(f) for f in args.results if not f.is_file()]
        if missing:
            raise ConfigError("results", missing[0], "no such file")
        nodes = parse_positive_ints(args.nodes, "--nodes")
        if args.latency < 0:
            raise ConfigError("--latency", args.latency, "must be 0 or more seconds")
        chosen_link = link_of(args)
        records = select([r for f in args.results for r in record.read(f)],
                         parse_where(args.where))
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    runs = single_node_runs(records)
    if not runs:
        print(f"{prog}: error: no ok single-node training record with a bucket timeline in "
              f"{', '.join(map(str, args.results))}: run the trainer on one node first "
              "(e.g. make bench-cpu or --topologies 1x1)", file=sys.stderr)
        return 2
    print(report(runs, chosen_link, nodes, measured_rates(records, chosen_link)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
