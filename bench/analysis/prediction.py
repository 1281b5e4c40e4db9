"""The prediction model: a single-node run's bucket timeline, a link, and N nodes.

Pure arithmetic on records' figures (no I/O, no torch); ``bench.analysis.predict`` is its command
line and report. The model is described in ``bench.analysis.predict``'s docstring.
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import math
import statistics
from collections.abc import Callable

from bench.allreduce_config import bus_factor
from bench.analysis import race
from bench.analysis.table import precision_of
from bench.units import format_rate


@dataclasses.dataclass(frozen=True, slots=True)
class Link:
    """The alpha-beta model of one all-reduce: ``latency_s + shape(bytes) * bus_factor *
    bytes / busbw``, and what it costs a rank's CPUs: ``cpu_latency_s + cpu_s_per_bus_byte
    * bus_factor * bytes`` (gloo copies and sums on the CPU; measured by the all-reduce
    sweep).

    ``busbw`` is the sweep's at its largest message. ``shape`` scales it per message
    size from the sweep's own times (``times``: bytes and seconds, ascending), read
    piecewise linearly between the measured sizes: a 16 MiB message can get more or less
    of the link than a 32 MiB one (the shaper's burst, gloo's chunking), and the latency
    is part of the largest message's time already. So the model gives back every time the
    sweep measured, instead of charging latency twice at the largest size and the largest
    size's rate at every other; past the largest size it tends to busbw. A nominal link
    has no times (shape 1).

    ``beside``: the same link measured while a compute thread worked beside each rank's
    all-reduces (``--beside-compute``), a Link of its own whose times are the all-reduces'
    there and whose CPU costs are the compute they took away. Training on CPU, backward
    computes beside the buckets' all-reduces. On two emulated hosts of one CPU a 32 MiB
    all-reduce took 38 and 78 ms from the compute at 1 Gbit/s, against 53 and 34 ms of
    gloo's own CPU time, and at 5 Gbit/s 47 ms against 50 while taking 107-109 ms instead
    of 65 (results/reference/missing-cost/, beside-*.jsonl). The fair share the model
    assumes without it is near that at 5 Gbit/s; the measurement, noisy as it is,
    replaces the assumption. None where the sweep did not measure it.
    """

    busbw_Bps: float      # bytes per second one link carries
    latency_s: float = 0.0
    source: str = ""
    rate_bps: int | None = None   # the link's rate, to find measurements taken on it
    cpu_latency_s: float = 0.0
    cpu_s_per_bus_byte: float = 0.0
    times: tuple[tuple[float, float], ...] = ()   # the sweep's (bytes, seconds)
    beside: Link | None = None
    # The hosts in lockstep (the sweep's ``--lockstep``): (stretch of compute between
    # syncs, seconds the slowest rank kept the mean one waiting at each sync), over
    # ``lockstep_ranks`` ranks. None measured: no wait charged.
    lockstep: tuple[tuple[float, float], ...] = ()
    lockstep_ranks: int = 0
    # The job's own training steps in lockstep (``--lockstep-model``): per workload
    # (``workload_key``), its step and the wait at each sync, over ``lockstep_ranks``.
    workload_lockstep: tuple[tuple[tuple, float, float], ...] = ()
    # Per workload (``workload_key``): how much longer its forward and backward took with
    # the hosts in phase than out of phase (the median over the probe's pairs of blocks;
    # a sweep from before it timed the optimizer apart: its whole steps'). 1 where not
    # measured.
    in_phase: tuple[tuple[tuple, float], ...] = ()
    # And its optimizer's (the probe's ``optimizer_phase_pairs``), which runs just after
    # the sync that lines the hosts up and moves every parameter through memory: its own
    # figure where measured, else the steps'. The comm hook's synchronous part, which streams
    # each gradient after a sync as the optimizer does, takes it too (``Timeline.stretched``).
    in_phase_tail: tuple[tuple[tuple, float], ...] = ()
    # Per message size measured (ascending): the deciles of one call's time beside compute
    # (the sweep's ``time_deciles_s``), how a chain of such calls varies. Empty where the
    # sweep did not time its calls one by one.
    call_deciles: tuple[tuple[float, tuple[float, ...]], ...] = ()

    @classmethod
    def nominal(cls, rate_bps: int, latency_s: float = 0.0) -> Link:
        return cls(rate_bps / 8, latency_s, f"nominal {format_rate(rate_bps)}", rate_bps)

    @classmethod
    def from_allreduce(cls, rec: dict) -> Link:
        """The link a sweep measured: busbw and CPU cost per byte at its largest message;
        latency and CPU cost per call from its latency-bound messages (``_latency_bound``);
        the shape from every size's time. Where every size was also measured beside
        compute, that is ``beside``, read the same way."""
        link = cls._from_sizes(rec, rec["sizes"])
        rows = [row.get("beside_compute") for row in rec["sizes"]]
        if rows and all(isinstance(row, dict) for row in rows):
            factor = bus_factor(rec["world_size"])
            beside = [{"size_bytes": size["size_bytes"], "time_s": row["time_s"],
                       "cpu_time_s": row["compute_lost_s"],
                       "busbw_GBps": factor * size["size_bytes"] / row["time_s"] / 1e9}
                      for size, row in zip(rec["sizes"], rows, strict=True)]
            measured = cls._from_sizes(rec, beside)
            spreads = tuple((size["size_bytes"], tuple(row["time_deciles_s"]))
                            for size, row in zip(rec["sizes"], rows, strict=True)
                            if size["size_bytes"] > 0 and row.get("time_deciles_s"))
            link = dataclasses.replace(link, beside=dataclasses.replace(
                measured, source=f"{measured.source}, beside compute",
                call_deciles=tuple(sorted(spreads))))
        steps = rec.get("lockstep") or ()
        if steps and rec["world_size"] > 1:
            link = dataclasses.replace(
                link, lockstep=tuple(sorted((row["compute_s"], row["wait_s"])
                                            for row in steps)),
                lockstep_ranks=rec["world_size"])
        workload = rec.get("lockstep_workload")
        if workload and rec["world_size"] > 1:
            key = probe_key(workload)
            compute, tail = _phase_ratios(workload.get("phase_pairs") or (),
                                          workload.get("optimizer_phase_pairs") or ())
            link = dataclasses.replace(
                link, workload_lockstep=((key, workload["compute_s"], workload["wait_s"]),),
                lockstep_ranks=rec["world_size"],
                in_phase=((key, compute),) if compute is not None else (),
                in_phase_tail=((key, tail),) if tail is not None else ())
        return link

    @classmethod
    def _from_sizes(cls, rec: dict, sizes: list[dict]) -> Link:
        """The link from one set of rows (bytes, seconds, CPU seconds, busbw): the sweep's
        own, or its rows beside compute."""
        link = (rec.get("env") or {}).get("link") or {}
        on = f" on a {format_rate(link['rate_bps'])} link" if link else ""
        largest = sizes[-1]
        factor = bus_factor(rec["world_size"])
        # Records from before the sweep measured CPU time carry none: no CPU cost then.
        cpu_per_byte = largest.get("cpu_time_s", 0.0) / (factor * largest["size_bytes"])
        busbw = largest["busbw_GBps"] * 1e9
        rows = sorted((row["size_bytes"], row["time_s"], row.get("cpu_time_s", 0.0))
                      for row in sizes if row["size_bytes"] > 0 and row["time_s"] > 0)
        wire = lambda size: factor * size / busbw if busbw > 0 else 0.0  # noqa: E731
        bound = _latency_bound(rows, wire) or [(sizes[0]["size_bytes"], sizes[0]["time_s"],
                                                sizes[0].get("cpu_time_s", 0.0))]
        latency = max(0.0, statistics.mean(seconds - wire(size) for size, seconds, _ in bound))
        cpu_latency = statistics.mean(cpu for _, _, cpu in bound)
        # The latency-bound sizes read as the pooled latency plus their wire time.
        limit = bound[-1][0]
        times = tuple((size, latency + wire(size) if size <= limit else seconds)
                      for size, seconds, _ in rows)
        return cls(busbw, latency,
                   f"measured busbw {largest['busbw_GBps'] * 8:.3f} Gbit/s over "
                   f"{rec['world_size']} ranks{on}", link.get("rate_bps"),
                   cpu_latency, cpu_per_byte, times)

    @property
    def efficiency(self) -> float | None:
        """busbw against the link's rate, where the rate is known."""
        return self.busbw_Bps * 8 / self.rate_bps if self.rate_bps else None

    def allreduce_s(self, size_bytes: float, nodes: int) -> float:
        return self.latency_s + self.shape_at(size_bytes) * bus_factor(nodes) * size_bytes \
            / self.busbw_Bps

    def shape_at(self, size_bytes: float) -> float:
        """The sweep's time beyond the latency at ``size_bytes``, per byte, against the
        largest message's time per byte."""
        times = self.times
        if len(times) < 2 or size_bytes <= 0:
            return 1.0
        largest, largest_s = times[-1]
        if size_bytes <= times[0][0]:
            seconds = times[0][1]
        elif size_bytes >= largest:
            seconds = largest_s + (size_bytes - largest) * largest_s / largest
        else:
            seconds = _between(times, size_bytes)
        return max(0.0, seconds - self.latency_s) / size_bytes / (largest_s / largest)

    def broadcast_s(self, size_bytes: float, nodes: int) -> float:
        """One broadcast from rank 0 (DDP's buffers before each forward), which the forward
        waits for: the sweep's per-call latency over ``nodes`` (which grows with N as a
        tree's levels do; an approximation, one latency, not one per level), and the bytes
        once over each level of a tree of ``nodes``. The buffers are small (kilobytes),
        so the latency is nearly all of it; a nominal link without ``--latency`` charges
        almost nothing."""
        levels = math.ceil(math.log2(nodes)) if nodes > 1 else 0
        return (self.latency_s + levels * size_bytes / self.busbw_Bps) if levels else 0.0

    def sync_wait_s(self, compute_s: float, nodes: int, workload: tuple | None = None
                    ) -> float:
        """How long a sync after ``compute_s`` of compute waits, on ``nodes`` nodes, for the
        slowest one beyond the mean: read from the lockstep probe between its stretches
        (in proportion below the shortest and above the longest), and moved from the
        probe's rank count to ``nodes`` as the expected maximum of that many normal draws
        grows (0.56 of a standard deviation for 2, 1.03 for 4).

        Where the sweep also ran ``workload``'s own steps in lockstep, its wait is that
        workload's, in proportion to the stretch: a network's pace between hosts need not
        be a matmul's (an experiment saw the demo's resnet18 wait 25 ms a step where
        matmuls of that length waited 9-10), and the slowest rank's lead grows with the
        compute since the sync before, so a step cut into several stretches waits as long
        in all as one. The matmuls' curve does not shape it: on two hosts of one CPU its
        short stretches' waits are noise (2.8 ms after 42 ms, 0.8 after 171 in one sweep),
        and scaled by the workload's ratio to it they charged resnet18 at batch 32 with
        PowerSGD, three serialized hand-overs a step, 37 ms of waits where the whole end
        of backward grew by 27 (results/reference/accuracy-grid-18/README.md)."""
        if nodes < 2 or compute_s <= 0 or not self.lockstep_ranks:
            return 0.0
        probe = next(((c, w) for key, c, w in self.workload_lockstep if key == workload), None)
        if probe is None:
            wait = self._matmul_wait_s(compute_s)
        else:
            probe_compute, probe_wait = probe
            wait = probe_wait * compute_s / probe_compute
        return wait * expected_max_normal(nodes) / expected_max_normal(self.lockstep_ranks)

    def call_draws(self, size_bytes: float) -> tuple[float, ...]:
        """How one call of ``size_bytes`` varies around its mean (``race.offsets``): the
        measured size nearest it (by ratio)'s deciles; () where none were measured."""
        if not self.call_deciles or size_bytes <= 0:
            return ()
        _, cuts = min(self.call_deciles,
                      key=lambda row: abs(math.log(row[0] / size_bytes)))
        return race.offsets(cuts)

    def _matmul_wait_s(self, compute_s: float) -> float:
        """The matmul lockstep probe's wait after ``compute_s`` on its own ranks (0 without
        one)."""
        steps = self.lockstep
        if not steps:
            return 0.0
        if compute_s <= steps[0][0]:
            return steps[0][1] * compute_s / steps[0][0]
        if compute_s >= steps[-1][0]:
            return steps[-1][1] * compute_s / steps[-1][0]
        return _between(steps, compute_s)

    def in_phase_factor(self, workload: tuple | None) -> float:
        """How much longer ``workload``'s forward and backward take on N hosts, which run
        each phase of a step at the same moment, than on the one-node cell, whose
        neighbour runs out of step with it: measured by the sweep's phase pairs
        (``--lockstep-model``), 1 where it was not."""
        return next((ratio for key, ratio in self.in_phase if key == workload), 1.0)

    def in_phase_tail_factor(self, workload: tuple | None) -> float:
        """The same for ``workload``'s optimizer (the one-node timeline's tail), and the
        comm hook's synchronous parts: the optimizer's own pairs where the probe timed it
        apart, else ``in_phase_factor``."""
        return next((ratio for key, ratio in self.in_phase_tail if key == workload),
                    self.in_phase_factor(workload))

    def allreduce_cpu_s(self, size_bytes: float, nodes: int) -> float:
        return self.cpu_latency_s + self.cpu_s_per_bus_byte * bus_factor(nodes) * size_bytes

    def faster(self, factor: float) -> Link:
        """The wire ``factor`` times faster; the hosts' CPU cost per byte stays."""
        return dataclasses.replace(self, busbw_Bps=self.busbw_Bps * factor,
                                   source=f"{self.source} x{factor:g}", rate_bps=None,
                                   beside=self.beside and self.beside.faster(factor))

    def at_rate(self, rate_bps: int) -> Link:
        """This measured link's efficiency, latency and CPU cost on a ``rate_bps`` wire: the
        planned upgrade predicted from the link a lab has (a record without a known rate
        is taken at 100% efficiency)."""
        efficiency = self.efficiency or 1.0
        return dataclasses.replace(
            self, busbw_Bps=rate_bps / 8 * efficiency, rate_bps=rate_bps,
            beside=self.beside and self.beside.at_rate(rate_bps),
            source=f"{format_rate(rate_bps)} at the {efficiency:.0%} efficiency, latency and "
                   f"CPU cost of the {self.source}")


def _phase_ratios(steps: list | tuple, optimizer: list | tuple
                  ) -> tuple[float | None, float | None]:
    """(forward and backward's ratio, the optimizer's) in phase over out of phase, each
    the median over the probe's pairs. The forward and backward of a pair are its step
    less its optimizer (medians of the same blocks); a sweep whose probe did not time the
    optimizer apart gives its whole steps' ratio and None. (None, None) without pairs."""
    if not steps:
        return None, None
    whole = statistics.median(together / apart for together, apart in steps)
    if len(optimizer) != len(steps):
        return whole, None
    rest = [(together - opt_together) / (apart - opt_apart)
            for (together, apart), (opt_together, opt_apart) in zip(steps, optimizer,
                                                                      strict=True)
            if apart - opt_apart > _TINY_S and together - opt_together > _TINY_S]
    return (statistics.median(rest) if rest else whole,
            statistics.median(together / apart for together, apart in optimizer))


def _between(table: tuple[tuple[float, float], ...], x: float) -> float:
    """``table`` (ascending x, y) read piecewise linearly at an ``x`` strictly past its first
    x and not past its last."""
    (x_a, y_a), (x_b, y_b) = next((one, two) for one, two in zip(table, table[1:], strict=False)
                                  if x <= two[0])
    return y_a + (x - x_a) / (x_b - x_a) * (y_b - y_a)


def _paced(ready: tuple[float, ...], issued: tuple[float, ...], compute: float,
           hook: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Backward's thread with its compute ``compute`` times as long and each bucket's
    synchronous hook part (``issued - ready``) ``hook`` times as long: it computes up to
    a bucket, runs that bucket's part, and goes on, so each time moves by the compute and
    the parts before it."""
    paced_ready, paced_issued, parts = [], [], 0.0
    for reached, handed in zip(ready, issued, strict=True):
        paced_ready.append((reached - parts) * compute + parts * hook)
        paced_issued.append(paced_ready[-1] + (handed - reached) * hook)
        parts += handed - reached
    return tuple(paced_ready), tuple(paced_issued)


# A wait under a nanosecond is none: a ratio over it would be rounding dust.
_TINY_S = 1e-9


def workload_key(model: str | None, image_size: int | None, batch_size: int | None,
                 mlp_width: int | None, mlp_depth: int | None, precision: str | None) -> tuple:
    """What makes a lockstep probe's steps the job's own: the network and its shape, the
    batch per rank and the precision (the probe runs fp32). The mlp's width and depth
    count only for the mlp."""
    mlp = model == "mlp"
    return (model, image_size, batch_size, mlp_width if mlp else None,
            mlp_depth if mlp else None, precision)


def probe_key(probe: dict) -> tuple:
    """The ``workload_key`` of a sweep's lockstep probe of a workload (its
    ``lockstep_workload``; the probe runs fp32)."""
    return workload_key(probe.get("model"), probe.get("image_size"), probe.get("batch_size"),
                        probe.get("mlp_width"), probe.get("mlp_depth"), "fp32")


def workload_of(rec: dict) -> tuple:
    """A training record's ``workload_key``; its precision as ``table.precision_of``
    reads it (as ran, else, in older records, as asked)."""
    model = (rec.get("config") or {}).get("model")
    model = model if isinstance(model, dict) else {}
    precision = precision_of(rec)
    return workload_key(model.get("model"), model.get("image_size"),
                        rec.get("batch_size_per_device"), model.get("mlp_width"),
                        model.get("mlp_depth"), precision if isinstance(precision, str) else None)


@functools.cache
def expected_max_normal(count: int) -> float:
    """E[max of ``count`` independent standard normal draws] (0 for one), by integrating
    x d(Phi(x)^count) over [-8, 8]."""
    if count < 2:
        return 0.0
    steps, low, high = 4000, -8.0, 8.0
    width = (high - low) / steps
    total = 0.0
    for i in range(steps):
        x = low + (i + 0.5) * width
        phi = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        total += x * count * phi * cdf ** (count - 1) * width
    return total


# A message is latency-bound where its wire time (at the sweep's busbw) is under this
# share of its measured time: what it measures is the per-call cost.
LATENCY_BOUND_SHARE = 0.1


def _latency_bound(rows: list[tuple[float, float, float]], wire
                   ) -> list[tuple[float, float, float]]:
    """The sweep's rows (bytes, seconds, CPU seconds; ascending) from the smallest up to
    the last whose wire time is under LATENCY_BOUND_SHARE of its time.

    Each measures the same per-call latency, and each is one mean over a few all-reduces.
    Where hosts share CPUs that time is heavy-tailed (now and then a rank waits for its
    CPU), so one size's mean is noise: in the emulated reference sweeps
    (results/reference/emulated-accuracy) the 1 KiB message alone read 1.5 to 10.7 ms, and
    neighbouring sizes of one sweep differ by 2x. Their mean is the latency, which
    PowerSGD's small collectives pay three times a bucket. Empty where even the smallest
    message is not latency-bound.
    """
    bound = []
    for row in rows:
        size, seconds, _ = row
        if wire(size) >= LATENCY_BOUND_SHARE * seconds:
            break
        bound.append(row)
    return bound


@dataclasses.dataclass(frozen=True, slots=True)
class Timeline:
    """One synced step of a single-node run: when buckets were ready, what they sent, and
    what the comm hook did with them besides sending.

    Times are seconds into the one-node step. ``ready_s``: backward reached the bucket
    (its hook was called); ``issued_s``: the hook returned, its synchronous part done on
    backward's thread (PowerSGD: error feedback, the P matmul) and its first collective
    under way; ``hook_s``: the rest of the hook's own work, after that collective (PowerSGD:
    orthogonalisation, the Q matmul, decompression; fp16: the cast back), measured on the
    one rank, in CPU seconds on CPU (a full CPU's worth) and seconds on GPUs.
    """

    ready_s: tuple[float, ...]
    sent_bytes: tuple[float, ...]
    step_s: float
    calls_per_bucket: float = 1.0
    # The CPUs a rank computes on, where its all-reduces run on the same CPUs (training on
    # CPU: gloo's thread takes its share from the compute threads); None on GPUs.
    compute_cpus: int | None = None
    issued_s: tuple[float, ...] | None = None
    hook_s: tuple[float, ...] | None = None
    done_last_s: float | None = None   # when the one rank's last bucket was done
    # Backward waits at each bucket until the previous bucket's hook is done (PowerSGD on
    # gloo, whose later collectives would otherwise race the next bucket's first).
    serialized: bool = False
    # The share of its CPUs a node has (emulated hosts sharing CPUs: 0.5 for four on two).
    # The timeline's own times were measured at it; the link's CPU costs, in CPU seconds,
    # take 1 / share as long on such a node.
    cpu_share: float = 1.0
    # DDP's broadcasts of rank 0's buffers before each forward, in bytes; records from
    # before they were recorded have none, and are predicted without them.
    broadcast_bytes: tuple[float, ...] = ()
    # The network, batch and precision it was measured on (``workload_of``): which
    # lockstep probe of the job's own steps, if the sweep ran one, speaks for its syncs.
    workload: tuple | None = None
    # Per bucket, the deciles over the one-node steps of backward's compute from the
    # previous hand-over to it (the record's ``stretch_deciles_s``), at this timeline's
    # pace; () where not recorded, a bucket's None where too few steps had it.
    stretch_deciles: tuple[tuple[float, ...] | None, ...] = ()
    # How many buckets sync at once. On CPU, gloo runs each collective on one of its worker
    # threads, so a bucket's all-reduce starts at its hand-over while the one before is
    # still under way (the record's ``collective_threads``; torch's default where the
    # record does not say). A serialized hook waits for the bucket before itself, and on
    # GPUs NCCL runs them in order on one stream: one at a time.
    in_flight: int = 1

    @classmethod
    def of(cls, rec: dict) -> Timeline:
        timeline = _drawn_to_mean(rec["bucket_timeline"])
        ready = tuple(timeline["ready_s"])
        buckets = len(ready)
        calls = (rec.get("allreduce_calls_per_step") or buckets) / buckets
        on_cpu = (rec.get("config") or {}).get("distributed", {}).get("device") == "cpu"
        threads = (rec.get("env") or {}).get("torch_threads") or 1
        cpus = threads if on_cpu else None
        issued, done = timeline.get("issued_s"), timeline.get("done_s")
        hook_s = done_last = None
        if issued and done and len(issued) == len(done) == buckets:
            # Records from before issued_s have no hook split: the hook's work stays in the
            # gaps between buckets and in the tail, where the one-rank step had it.
            issued = tuple(max(i, r) for i, r in zip(issued, ready, strict=True))
            hook_s = _hook_work(issued, tuple(done), cpus)
            undrawn = _without_hook_draw(issued, tuple(done), cpus)
            ready, issued = tuple(map(undrawn, ready)), tuple(map(undrawn, issued))
            done_last, step_s = undrawn(max(done)), undrawn(timeline["step_s"])
        else:
            issued, step_s = None, timeline["step_s"]
        share = ((rec.get("env") or {}).get("link") or {}).get("cpu_share") or 1.0
        spread = timeline.get("stretch_deciles_s") or ()
        spread = tuple(tuple(cuts) if cuts else None for cuts in spread) \
            if len(spread) == buckets else ()
        serialized = bool(timeline.get("serialized"))
        in_flight = 1 if serialized or not on_cpu else \
            timeline.get("collective_threads") or GLOO_WORKER_THREADS
        return cls(ready, tuple(timeline["sent_bytes"]), step_s, calls, cpus,
                   issued, hook_s, done_last, serialized,
                   min(1.0, max(share, 1e-3)), tuple(timeline.get("broadcast_bytes") or ()),
                   workload_of(rec), spread, in_flight)

    @property
    def handover_s(self) -> tuple[float, ...]:
        """When backward hands each bucket to its collectives."""
        return self.issued_s or self.ready_s

    @property
    def backward_end_s(self) -> float:
        return self.handover_s[-1]

    @property
    def tail_s(self) -> float:
        """After backward and the one rank's last hook: the optimizer step and the rest."""
        return max(0.0, self.step_s - max(self.backward_end_s, self.done_last_s or 0.0))

    def slowest_rank(self, wait) -> tuple[Timeline, float]:
        """The timeline every rank keeps to over N nodes: the slowest one's, and how much
        later its backward ends. Each sync (the last bucket's hand-over; with a serialized
        hook, every bucket's, as backward waits for it) is late by ``wait(stretch)``, the
        stretch being the compute since the sync before: a step's forward and backward
        after the buffer broadcast, or the whole step (the tail before included) without
        one. Each stretch is drawn out evenly by its wait, and what follows it moves.
        ``wait`` is called once per sync, in order, the last for the last hand-over."""
        syncs = self.handover_s if self.serialized else (self.backward_end_s,)
        lead = 0.0 if self.broadcast_bytes else self.tail_s
        marks, shift, previous = [], 0.0, 0.0
        for k, point in enumerate(syncs):
            before = shift
            shift += wait(point - previous + (lead if k == 0 else 0.0))
            marks.append((previous, point, before, shift))
            previous = point

        def moved(t: float) -> float:
            for start, end, before, after in marks:
                if t <= end:
                    share = (t - start) / (end - start) if end > start else 1.0
                    return t + before + max(0.0, share) * (after - before)
            return t + shift

        move = lambda times: tuple(moved(t) for t in times) if times else times  # noqa: E731
        return dataclasses.replace(
            self, ready_s=move(self.ready_s), issued_s=move(self.issued_s),
            done_last_s=None if self.done_last_s is None else moved(self.done_last_s),
            step_s=self.step_s + shift), shift

    def hook_work(self, bucket: int) -> float:
        return self.hook_s[bucket] if self.hook_s else 0.0

    def compressed(self, ratio: float) -> Timeline:
        return dataclasses.replace(self, sent_bytes=tuple(b * ratio for b in self.sent_bytes))

    def accumulated(self, micro_batches: int) -> Timeline:
        """Gradient accumulation: the earlier micro-batches (forward and backward, about
        r_last each) come first; the buckets are sent once, on the last."""
        shift = (micro_batches - 1) * self.ready_s[-1]
        moved = lambda times: tuple(r + shift for r in times) if times else times  # noqa: E731
        # DDP broadcasts the buffers once a step: a forward under no_sync (the earlier
        # micro-batches) leaves the next forward's broadcast out, so broadcast_bytes stay.
        return dataclasses.replace(self, ready_s=moved(self.ready_s),
                                   issued_s=moved(self.issued_s),
                                   done_last_s=self.done_last_s and self.done_last_s + shift,
                                   step_s=self.step_s + shift)

    def stretched(self, factor: float, tail_factor: float | None = None) -> Timeline:
        """The step's compute at another pace: forward and backward, and the comm hook's
        chains beside them (``hook_s``, the one rank's last chain), ``factor`` times as
        long; the optimizer (the tail) and each bucket's synchronous hook part on
        backward's thread (``issued_s - ready_s``: PowerSGD's error feedback and P matmul)
        ``tail_factor`` times as long where given (else ``factor``).

        The synchronous part streams each gradient through memory just after the previous
        bucket's collective lined the hosts up, as the optimizer streams the parameters
        after DDP's last sync. On two emulated hosts of one CPU it grew on two nodes with
        the optimizer on the MLPs (1.00-1.30 against 1.07-1.24), and on resnet18 between
        forward's ratio and the optimizer's (1.07-1.16 against 1.32-1.46: this charges it
        about 3 ms a step too much there). The chains' work did not grow with the
        optimizer on resnet18 (0.56-0.91 against 1.32-1.46), and charged at its ratio it
        read the README's demo 1.16 (results/reference/hook-in-phase/)."""
        tail = factor if tail_factor is None else tail_factor
        if factor == 1.0 and tail == 1.0:
            return self
        scaled = lambda times, by: tuple(t * by for t in times) if times else times  # noqa: E731
        ready, issued = scaled(self.ready_s, factor), None
        if self.issued_s is not None:
            ready, issued = _paced(self.ready_s, self.issued_s, factor, tail)
        done_last = None
        if self.done_last_s is not None:
            # The one rank's last bucket, done after its hand-over: its chain's work.
            done_last = (issued or ready)[-1] + (self.done_last_s - self.handover_s[-1]) * factor
        stretched = dataclasses.replace(self, ready_s=ready, issued_s=issued,
                                        hook_s=scaled(self.hook_s, factor), done_last_s=done_last,
                                        stretch_deciles=self._spread_times(factor))
        return dataclasses.replace(
            stretched, step_s=max(stretched.backward_end_s, done_last or 0.0)
            + self.tail_s * tail)

    def scaled_batch(self, factor: float) -> Timeline:
        """A batch ``factor`` times larger: forward and backward scale with it (assumed
        linear), the optimizer's tail and the hook's work (per parameter) do not."""
        tail = self.tail_s
        scaled = lambda times: tuple(r * factor for r in times) if times else times  # noqa: E731
        ready, issued = scaled(self.ready_s), scaled(self.issued_s)
        end = (issued or ready)[-1]
        done_last = end + (self.done_last_s - self.backward_end_s) \
            if self.done_last_s is not None else None
        return dataclasses.replace(self, ready_s=ready, issued_s=issued, done_last_s=done_last,
                                   step_s=max(end, done_last or 0.0) + tail,
                                   stretch_deciles=self._spread_times(factor))

    def _spread_times(self, factor: float) -> tuple[tuple[float, ...] | None, ...]:
        """The stretches' deciles with backward's compute ``factor`` times as long."""
        return tuple(cuts and tuple(c * factor for c in cuts) for cuts in self.stretch_deciles)

    def race_losses(self, link: Link, events: list[tuple[str, int, float]]
                    ) -> tuple[float, ...]:
        """What backward loses at each bucket's serialized hand-over of a simulated step
        (``events``, ``_simulate``'s trace) to the race between its reaching the bucket
        and the previous bucket's chain ending (``bench.analysis.race``): () where the hook
        is not serialized.

        The chain's calls each vary as the sweep's calls of their size did beside compute
        (its ``time_deciles_s``); backward's stretch as the one-node steps' did (the
        record's ``stretch_deciles_s``). A spread not measured (records from before
        2026-11-30) counts as none, and with neither nothing is charged. Each hand-over's
        loss moves what follows it, so the losses add."""
        if not self.serialized:
            return ()
        reached = {bucket: t for what, bucket, t in events if what == "ready"}
        done = {bucket: t for what, bucket, t in events if what == "done"}
        stretches = self.stretch_deciles or (None,) * len(self.ready_s)
        calls = max(1, round(self.calls_per_bucket))
        losses = [0.0]
        for bucket in range(1, len(self.ready_s)):
            chain = race.sum_of_draws(link.beside.call_draws(
                self.sent_bytes[bucket - 1] / calls), calls) if link.beside else ()
            losses.append(race.expected_race_s(
                reached[bucket], done[bucket - 1], race.offsets(stretches[bucket]), chain)
                if bucket in reached and bucket - 1 in done else 0.0)
        return tuple(losses)


def _drawn_to_mean(timeline: dict) -> dict:
    """The timeline of the probe's median step, every time in it drawn out evenly to the
    probe's mean step (``mean_step_s``), where the record has one.

    The median step is a typical one; a timed window measures the mean, slow steps and all,
    and the prediction is read against such windows (samples/s). On two emulated hosts of
    one CPU the probe's mean step read 0.97-1.06 of its median over 200 and 74 probe steps
    of the MLP 512x8 and smallcnn (results/reference/accuracy-probe-window/, with-mean/):
    small, and so measured rather than assumed away. Records from before the probe kept
    its mean have none, and keep the median."""
    mean, median = timeline.get("mean_step_s"), timeline["step_s"]
    if not (isinstance(mean, (int, float)) and math.isfinite(mean) and mean > 0 and median > 0):
        return timeline
    stretch = mean / median
    drawn = {name: [t * stretch for t in timeline[name]]
             for name in ("ready_s", "issued_s", "done_s") if timeline.get(name)}
    return {**timeline, **drawn, "step_s": mean}


def _hook_stretches(issued: tuple[float, ...],
                    done: tuple[float, ...]) -> list[tuple[float, float, float]]:
    """Each bucket's hook work on the one-rank timeline: (start, end, end beside backward).

    It starts when the bucket was issued, or the previous bucket was done, whichever is
    later, and runs beside backward until backward's last hand-over at most. So the
    stretches are disjoint and in order."""
    stretches, previous = [], 0.0
    for issue, finish in zip(issued, done, strict=True):
        start = max(issue, previous)
        stretches.append((start, finish, max(start, min(finish, issued[-1]))))
        previous = max(previous, finish)
    return stretches


def _hook_work(issued: tuple[float, ...], done: tuple[float, ...],
               cpus: int | None) -> tuple[float, ...]:
    """Each bucket's hook work after its first collective, from the one-rank timeline.

    On one rank the collectives are local and nearly free, so a bucket's elapsed stretch
    (``_hook_stretches``) is its hook's own work. On CPU, while backward still ran beside
    it, the hook's thread had a fair share of the CPUs (cpus / (cpus + 1), as
    ``_comm_pace`` gives it), so that part of the elapsed time counts at that share.
    """
    return tuple(max(0.0, finish - start) - ((beside - start) / (cpus + 1) if cpus else 0.0)
                 for start, finish, beside in _hook_stretches(issued, done))


def _without_hook_draw(issued: tuple[float, ...], done: tuple[float, ...],
                       cpus: int | None) -> Callable[[float], float]:
    """A map from the one-rank timeline's times to those of backward alone.

    On CPU a bucket's hook work that ran beside backward (from its first collective until
    backward's last hand-over; ``_hook_work``) took backward's CPUs: backward ran at
    cpus / (cpus + 1) of its pace meanwhile, and every later time of the one-rank step is
    later by 1 / (cpus + 1) of that stretch. The prediction charges the hook's work again
    where N ranks run it (``_simulate``), so it starts from backward alone: left in, the
    draw was counted twice (PowerSGD on resnet18 with DDP's own buckets, the second
    bucket's chain beside backward: 11% slow on the README's demo, issue 29). On
    GPUs the hook works on its own stream and the times stay."""
    if not cpus:
        return lambda t: t
    # The stretches are disjoint and in order: a time's draw is the whole stretches before
    # it, found by bisection (a record may hold thousands of buckets), and the part of the
    # one it is in.
    stretches = _hook_stretches(issued, done)
    starts = [start for start, _, _ in stretches]
    ends = [beside for _, _, beside in stretches]
    before = [0.0, *itertools.accumulate(beside - start for start, _, beside in stretches)]

    def undrawn(t: float) -> float:
        whole = bisect.bisect_right(ends, t)
        beside = before[whole]
        if whole < len(starts):
            beside += max(0.0, t - starts[whole])
        return t - beside / (cpus + 1)
    return undrawn


@dataclasses.dataclass(frozen=True, slots=True)
class Prediction:
    nodes: int
    step_s: float
    comm_s: float          # the buckets' sync time (collectives and hook work), hidden or not
    exposed_s: float       # what the step waits for beyond its own compute
    stolen_s: float = 0.0  # how much later backward ends: CPU time taken from it, and waits
    buffers_s: float = 0.0  # DDP's buffer broadcasts before the forward pass, waited for
    skew_s: float = 0.0     # the syncs waiting for the slowest rank (the lockstep probe)
    # Of that, the last sync's: every other rank waits it out after its own backward has
    # ended, in the gradient sync (the waits at a serialized bucket fall inside backward,
    # the one at the buffer broadcast before forward). A rank's parts show it there.
    skew_after_backward_s: float = 0.0
    # Of stolen_s, the race at the serialized hand-overs (``Timeline.race_losses``).
    race_s: float = 0.0

    @property
    def hidden_share(self) -> float:
        return 1 - self.exposed_s / self.comm_s if self.comm_s else 1.0


def predict_step(timeline: Timeline, link: Link, nodes: int,
                 trace: list[tuple[str, int, float]] | None = None) -> Prediction:
    """The step time over ``nodes`` nodes (see bench.analysis.predict's docstring).
    ``trace``, where given, gets each bucket's predicted events (``_simulate``'s), in
    seconds from the step's start: after the forward's buffer broadcasts, as a rank's
    bucket timeline stamps them (over two or more nodes; one node's are its timeline's)."""
    if nodes == 1:
        return Prediction(1, timeline.step_s, 0.0, 0.0)
    if timeline.compute_cpus is not None:
        timeline = timeline.stretched(link.in_phase_factor(timeline.workload),
                                      link.in_phase_tail_factor(timeline.workload))
    wait = lambda stretch: link.sync_wait_s(stretch, nodes, timeline.workload)  # noqa: E731
    at_syncs: list[float] = []   # slowest_rank asks for each sync's wait in order

    def waited(stretch: float) -> float:
        at_syncs.append(wait(stretch))
        return at_syncs[-1]
    timeline, late = timeline.slowest_rank(waited)
    calls = timeline.calls_per_bucket
    on_cpu = timeline.compute_cpus is not None
    beside = link.beside if on_cpu else None
    phases: list[tuple[Phase, ...]] = []
    for bucket, sent in enumerate(timeline.sent_bytes):
        wire = calls * link.allreduce_s(sent / calls, nodes)
        cpu = calls * link.allreduce_cpu_s(sent / calls, nodes) / timeline.cpu_share \
            if on_cpu else 0.0
        # Measured beside compute on the hosts as they are: at their share already.
        measured = (calls * beside.allreduce_s(sent / calls, nodes),
                    calls * beside.allreduce_cpu_s(sent / calls, nodes)) if beside else None
        hook = timeline.hook_work(bucket)
        # The hook's own work is CPU work beside backward on CPU, and plain time on GPUs.
        filling = bus_factor(nodes) * sent / link.busbw_Bps
        phases.append((Phase(wire, cpu, measured, filling),
                       Phase(0.0, hook) if on_cpu else Phase(hook, 0.0)))
    events: list[tuple[str, int, float]] = []
    compute_end, comm_end, comm = _simulate(timeline, phases, events)
    # The race at each serialized hand-over ends backward later, and its last sync with it;
    # each bucket's events after backward goes on at it move by the losses up to there.
    losses = timeline.race_losses(link, events) if on_cpu else ()
    raced = sum(losses)
    if losses:
        before = [0.0, *itertools.accumulate(losses)]
        events = [(what, bucket, seconds + before[bucket + (what != "ready")])
                  for what, bucket, seconds in events]
    compute_end, comm_end = compute_end + raced, comm_end + raced
    exposed = max(0.0, comm_end - compute_end)
    # The forward pass waits for each buffer broadcast, over the link, before it starts;
    # on one node it had no peer (its local copy is inside the timeline already).
    buffers = sum(link.broadcast_s(size, nodes) for size in timeline.broadcast_bytes)
    # The broadcast is a sync too: after the optimizer's stretch, the slowest rank's.
    late_to_broadcast = wait(timeline.tail_s) if timeline.broadcast_bytes else 0.0
    if trace is not None and events:
        trace.extend((what, bucket, buffers + late_to_broadcast + seconds)
                     for what, bucket, seconds in events)
    return Prediction(nodes, buffers + late_to_broadcast + max(compute_end, comm_end)
                      + timeline.tail_s, comm, exposed, compute_end - timeline.backward_end_s,
                      buffers, late + late_to_broadcast, at_syncs[-1] if at_syncs else 0.0,
                      raced)


_EPS = 1e-12
# torch's ProcessGroupGloo runs collectives on this many worker threads unless told
# otherwise (``ProcessGroupGloo::Options::threads``), each taking the next one queued: on
# two emulated hosts, resnet18's last 15.9 MB bucket at 1 Gbit/s was done 34 ms after the
# 28.9 MB one before it, where one after the other needs 141 ms
# (results/reference/accuracy-grid-19/). Records from before the timeline kept it ran so.
GLOO_WORKER_THREADS = 2


@dataclasses.dataclass(frozen=True, slots=True)
class Phase:
    """One phase of a bucket's sync: its collectives, or its hook's own work. ``wire_s``
    and ``cpu_s`` alone; ``beside``, where the link was measured beside compute, the
    collectives' (seconds, compute taken in CPU seconds) there."""

    wire_s: float
    cpu_s: float
    beside: tuple[float, float] | None = None
    # Of ``wire_s``, the bytes' time at the link's bus bandwidth: how much of the link the
    # phase fills while it runs, where collectives share it (``_shared``).
    bytes_s: float = 0.0


def _comm_pace(phase: Phase, cpus: int, beside_compute: bool) -> tuple[float, float]:
    """(CPUs a phase of a bucket's sync takes, the share of it done per second).

    Alone it runs at wire speed, or at CPU speed where its CPU work is the longer (a phase
    of pure CPU work, the hook's, has no wire time). Beside backward on the same ``cpus``
    it takes what it was measured to take there, where the link was (``Phase.beside``:
    its time, and the compute it took over that time); otherwise it wants ``cpu_s /
    wire_s`` of a CPU and gets at most a fair share (the scheduler splits the CPUs over
    the compute threads and gloo's).
    """
    wire_s, cpu_s = phase.wire_s, phase.cpu_s
    if beside_compute and phase.beside and phase.beside[0] > _EPS:
        # A faster wire (a lever, an upgrade) shortens the time, not the compute taken:
        # it cannot take more than all the CPUs.
        seconds = max(phase.beside[0], phase.beside[1] / cpus)
        return phase.beside[1] / seconds, 1 / seconds
    if cpu_s <= _EPS:
        return 0.0, 1 / wire_s if wire_s > _EPS else math.inf
    wants = cpu_s / wire_s if wire_s > _EPS else math.inf
    takes = min(wants, cpus / (cpus + 1) if beside_compute else 1.0)
    return takes, takes / cpu_s


def _shared(paces: list[tuple[float, float]], bytes_s: list[float], cpus: int) -> float:
    """How much of its own pace each of the collectives in flight gets, together: all of
    it, unless their bytes together want more of the link than it carries (each phase's
    ``bytes_s`` at its pace) or their CPU work more than the ``cpus`` there are. Calls
    that mostly wait (latency, gloo's per-call work) overlap; calls that fill the link
    share it, so two at once take as long as one after the other."""
    if len(paces) < 2:
        return 1.0
    link = sum(min(1.0, b * pace) for (_, pace), b in zip(paces, bytes_s, strict=True)
               if not math.isinf(pace))
    cpu = sum(taken for taken, _ in paces)
    return min(1.0, 1 / link if link > 1 else 1.0, cpus / cpu if cpu > cpus else 1.0)


def _simulate(timeline: Timeline, phases: list[tuple[Phase, ...]],
              trace: list[tuple[str, int, float]] | None = None
              ) -> tuple[float, float, float]:
    """Backward and the buckets' sync side by side, event by event, until both are done.

    ``work`` is how far backward is, in seconds of the single-node run; bucket i is handed
    over once ``work`` reaches its hand-over time and its sync starts as soon as fewer than
    ``timeline.in_flight`` buckets are syncing (gloo runs each collective on one of its
    worker threads), phase by phase (``Phase``: its collectives, then its hook's work).
    While the phases in flight take ``c`` CPUs of backward's ``k``, backward runs at
    ``(k - c) / k`` of its single-node speed. Where the timeline is serialized, backward
    waits at bucket i's ready time until bucket i-1 is done. Returns (when backward ends,
    when the last bucket's sync ends, the buckets' sync time in all). ``trace``, where
    given, gets each bucket's events in the order they happen, (what, bucket, seconds):
    "ready" (backward reached it), "issued" (backward handed it over, its hook returned)
    and "done" (its sync ended), so that a diagnosis can set the predicted timeline beside
    a measured one; and "sending", when its collectives start.
    """
    k = timeline.compute_cpus or 1

    def passed(trace: list[tuple[str, int, float]], reached: int, handed: int
               ) -> tuple[int, int]:
        """Trace the buckets backward has reached and handed over by now (it is at
        ``work`` at ``t``): how many of each, in all."""
        while reached < len(ready) and ready[reached] <= work + _EPS:
            trace.append(("ready", reached, t))
            reached += 1
        while handed < len(handover) and handover[handed] <= work + _EPS:
            trace.append(("issued", handed, t))
            handed += 1
        return reached, handed

    ready, handover = timeline.ready_s, timeline.handover_s
    end_work = handover[-1]
    points = sorted(set(ready) | set(handover))
    t = work = comm_total = comm_end = 0.0
    compute_end = 0.0 if end_work <= 0 else None
    reached = handed = 0
    if trace is not None:
        reached, handed = passed(trace, reached, handed)
    next_bucket, done = 0, 0
    syncing: list[_Sync] = []
    while True:
        while len(syncing) < timeline.in_flight and next_bucket < len(handover) \
                and handover[next_bucket] <= work + _EPS:
            syncing.append(_Sync(next_bucket, t))
            if trace is not None:
                trace.append(("sending", next_bucket, t))
            next_bucket += 1
        computing = compute_end is None
        barrier = ready[done + 1] if timeline.serialized and done + 1 < len(ready) \
            else math.inf
        running = computing and work < barrier - _EPS
        if not syncing and not running:
            if compute_end is not None:  # backward is done, and nothing is syncing
                return compute_end, comm_end, comm_total
            barrier, running = math.inf, True   # nothing left to wait for
        now = [phases[sync.bucket][sync.phase] for sync in syncing]
        paces = [_comm_pace(phase, k, running) for phase in now]
        share = _shared(paces, [phase.bytes_s for phase in now], k)
        taken = share * sum(cpus for cpus, _ in paces)
        compute_pace = (k - taken) / k if running else 0.0
        # Advance to the next event: a phase done, or backward at its next point.
        dt = min(((1 - sync.progress) / (pace * share) if not math.isinf(pace) else 0.0
                  for sync, (_, pace) in zip(syncing, paces, strict=True) if pace > 0),
                 default=math.inf)
        if running:
            target = min(next((r for r in points if r > work + _EPS), end_work), barrier)
            dt = min(dt, (target - work) / compute_pace) if compute_pace > 0 else dt
        t, work = t + dt, work + compute_pace * dt
        if trace is not None:
            reached, handed = passed(trace, reached, handed)
        for sync, (_, pace) in zip(list(syncing), paces, strict=True):
            sync.progress = 1.0 if math.isinf(pace) else sync.progress + pace * share * dt
            if sync.progress >= 1 - 1e-9:
                sync.phase, sync.progress = sync.phase + 1, 0.0
                if sync.phase == len(phases[sync.bucket]):
                    if trace is not None:
                        trace.append(("done", sync.bucket, t))
                    comm_total, comm_end = comm_total + t - sync.started, t
                    syncing.remove(sync)
                    done += 1
        # Backward is over once its work is done and it is not held at the last barrier.
        held = timeline.serialized and done + 1 < len(ready) and ready[done + 1] <= work + _EPS
        if computing and work >= end_work - _EPS and not held:
            work, compute_end = end_work, t


@dataclasses.dataclass(slots=True)
class _Sync:
    """A bucket whose sync is under way: which phase of it, and how far (0 to 1)."""

    bucket: int
    started: float
    phase: int = 0
    progress: float = 0.0


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


def levers(rec: dict, link: Link, nodes: int, others: dict[str, dict]) -> list[Lever]:
    """Each lever at ``nodes``, the most samples/s first, each against the same configuration
    on one node (its own baseline).

    A lever that changes the work per step (a larger batch, gradient accumulation) does more
    samples per step on one node too: against the plain run its speedup would mix what the
    lever does on one node with what the nodes give, and read superlinear. So its baseline
    is its own timeline on one node (estimated, as the timeline is derived), a comm hook's
    is that hook's own single-node record, and a faster link's is the same single-node run.

    ``others``: single-node records of the same setup with another comm hook, by hook.
    """
    timeline = Timeline.of(rec)
    per_node = rec["global_batch_size"]
    rows = [Lever("as measured", _against_itself(timeline, link, nodes, per_node)),
            Lever("link 10x faster", _against_itself(timeline, link.faster(10), nodes, per_node)),
            Lever("batch 2x larger", _against_itself(timeline.scaled_batch(2), link, nodes,
                                                     2 * per_node), estimated=True),
            Lever("grad-accum 4", _against_itself(timeline.accumulated(4), link, nodes,
                                                  4 * per_node), estimated=True)]
    if rec.get("comm_hook") == "none" and "fp16" not in others:
        rows.append(Lever("comm-hook fp16 (derived: half the bytes)",
                          _against_itself(timeline.compressed(0.5), link, nodes, per_node),
                          estimated=True))
    for hook, other in sorted(others.items()):
        rows.append(Lever(f"comm-hook {hook}", _against_itself(
            Timeline.of(other), link, nodes, other["global_batch_size"])))
    return sorted(rows, key=lambda row: -row.samples_per_s)


# The setup a single-node record stands for; records that differ only in the comm hook are
# the compression lever of one another.


@dataclasses.dataclass(frozen=True, slots=True)
class Lever:
    """One lever at N nodes beside the same configuration on one node: its speedup says
    what the nodes give that configuration, never what the lever itself does on one node."""

    name: str
    scaling: Scaling
    # The 1-node baseline is derived from another run's timeline (a larger batch, gradient
    # accumulation, a derived hook), not measured.
    estimated: bool = False

    @property
    def nodes(self) -> int:
        return self.scaling.prediction.nodes

    @property
    def samples_per_s(self) -> float:
        """At ``nodes``: what a lab gets, and what the levers are ranked by."""
        return self.scaling.samples_per_s

    @property
    def base_samples_per_s(self) -> float:
        """The same configuration on one node."""
        return self.scaling.samples_per_step_node / self.scaling.base_step_s

    @property
    def speedup(self) -> float:
        return self.scaling.speedup


def _against_itself(timeline: Timeline, link: Link, nodes: int,
                    samples_per_step_node: float) -> Scaling:
    """``timeline`` over ``nodes`` against the same timeline on one node, so that no lever
    can be faster per node than on one (a step over N nodes waits for at least the
    one-node step's compute)."""
    return Scaling(predict_step(timeline, link, nodes), samples_per_step_node,
                   predict_step(timeline, link, 1).step_s)
