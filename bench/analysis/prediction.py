"""The prediction model: a single-node run's bucket timeline, a link, and N nodes.

Pure arithmetic on records' figures (no I/O, no torch); ``bench.analysis.predict`` is its command
line and report. The model is described in ``bench.analysis.predict``'s docstring.
"""
from __future__ import annotations

import dataclasses
import math

from bench.allreduce_config import bus_factor
from bench.units import format_rate


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
