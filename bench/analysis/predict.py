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
- DDP hands buckets over in order, each as soon as it is ready. NCCL syncs them one at a
  time on one stream, each once the previous one is done; gloo runs each collective on one
  of its worker threads (2 by default: the timeline's ``collective_threads``), so on CPU a
  bucket starts at its hand-over while the one before is still under way. Calls that
  mostly wait (latency, gloo's per-call work) then overlap, and calls that fill the link
  share it (two take as long as one after the other): on two emulated hosts at 1 Gbit/s,
  resnet18's last 15.9 MB bucket was done 34 ms after the 28.9 MB one before it, where one
  after the other needs 141 ms (issue 29). So communication hides behind the rest of
  backward (the overlap) and what is left over delays the step:  T_N = max(end of
  backward, end of the last bucket) + (T - r_last);
- on CPU, gloo's copies and sums run on the CPUs backward computes on: an all-reduce of m
  bytes costs each rank  a_cpu + b_cpu x 2(N-1)/N x m  CPU seconds, which it takes from
  backward while they overlap (at most a fair share of the CPUs), so backward ends later
  than r_last. At 1 Gbit this is small beside the wire time; at 5 Gbit on one CPU per node
  it is most of it. Where the sweep also ran beside compute (``--beside-compute``), a
  bucket's all-reduces beside backward take the time they took there and the compute
  they took away there, measured, instead (``Link.beside``): that holds the kernel's
  network work and the scheduler's share, which gloo's own CPU time does not. On GPUs
  it is not charged;
- each sync waits for the slowest rank: a rank's stretches of compute vary (the
  scheduler, the machine's other work), and every rank waits at a sync for the one that
  took longest. The sweep's ``--lockstep`` probe measures it on the hosts: every rank
  does the same stretch of compute (10 to 640 ms), then a sync, over and over, and the
  wait is the mean of the slowest rank's stretch less the ranks' mean. The model draws
  out each stretch of the one-node timeline that ends at a sync by the wait measured for
  its length (the last bucket's hand-over, after the whole step or, with buffers, after
  forward and backward; every bucket's with a serialized hook; the broadcast, after the
  optimizer), and moves what follows. A probe over 2 ranks is moved to N as the expected
  maximum of N normal draws grows. On two emulated hosts of one CPU it measured 2.6-26
  ms after stretches of 141-611 ms (2-6% of them);
- a model with buffers (BatchNorm's running statistics) waits before a step's forward for
  DDP to broadcast rank 0's buffers: one collective per dtype (the record's
  ``broadcast_bytes``), each charged the link's per-call latency a once plus its bytes
  over log2(N) tree levels (torch keeps two in flight; charged one after the other). On
  one node it had no peer to wait for; on two emulated hosts at 5 Gbit/s it made
  resnet18's forward 14 ms longer (issue 29). The MLP has no buffers.

PowerSGD on gloo: over N ranks its hook's first all-reduce completes on gloo's thread, and
the rest of the hook (two matmuls, the orthogonalisation, two more all-reduces) runs there,
chained to it, beside backward. The one-rank probe completes that first all-reduce on a
thread of its own for the same reason (``bench.rank.traffic``), so the one-node timeline
holds the chain where N ranks run it: after the hand-over, as the hook's own work. Where
that work ran beside backward on the one rank's CPU, it had slowed backward there; the
model takes that draw out of the one-node timeline and charges the work where N ranks run
it, so that an endless link gives back the one-node step. Left in, it was charged twice:
in 17 older runs (resnet18 with one 25 MiB first bucket, two emulated hosts) the stretch
from the first bucket's hand-over to the last bucket's took -18 to +9 ms longer on two
nodes than on one, where the double charge added 14-35 ms; the same 2-node steps reached
that first hand-over 7-42 ms later than their one-node probe (2-33 ms without a hook), a
cost before backward's first bucket that the double charge had offset and that is not
modelled (results/reference/powersgd-double-charge/).

The race at a serialized hand-over: backward's thread goes on at the later of its reaching
a bucket and the previous bucket's chain ending, two times that vary from step to step, so
a step waits the mean of the later one, more than the later of the two typical times the
timeline holds (0.1-2.8 ms a hand-over on two emulated hosts of one CPU,
results/reference/powersgd-wake/). Where both spreads were measured (the one-node run's
``stretch_deciles_s``, the sweep's ``time_deciles_s`` beside compute), each hand-over is
charged that difference, the chain taken as its calls each drawn from the sweep's calls of
their size, independently, and backward's stretch from the one-node steps'
(``bench.analysis.race``, ``Timeline.race_losses``). Records from before 2026-11-30 have neither
spread: nothing is charged for them.

The workload's own pace: with ``--lockstep-model`` the sweep also runs the job's own steps
in lockstep, and that workload's syncs wait what its own steps waited, in proportion to
the compute since the sync before (``Link.sync_wait_s``). An experiment had seen the demo's
steps wait 25 ms a step where the matmul probe charged 9-10
(missing-cost/lockstep-workload/README.md). Until 2026-11-29 the workload's wait scaled the
matmuls' curve instead; that curve's noise at short stretches charged a serialized hook's
hand-overs up to 37 ms a step (results/reference/accuracy-grid-18/README.md).

Hosts computing in phase: N ranks run forward, backward and the optimizer at the same
moments (each sync lines them up); the one-node cell's neighbour job runs out of step with
it. Hosts that share one machine's caches, memory and cores slow each other more in
phase: on two emulated hosts of one CPU the job's own steps took 1.01-1.07 times as long
in phase as half a step apart (nine workloads, 8-12 pairs of blocks each,
results/reference/in-phase/). The sweep's ``--lockstep-model`` probe measures it on the
hosts (``--lockstep-phase-pairs`` pairs of blocks, in phase and out, in turn first), and
on CPU the one-node timeline is stretched by the median of the pairs' ratios
(``Link.in_phase_factor``; the point takes the median over the sweeps, the band's ends the
slowest and fastest sweep's). Hosts on machines of their own read about 1. The probe times
the optimizer apart, and its tail of the timeline takes the optimizer's own ratio
(``Link.in_phase_tail_factor``): DDP's last gradient sync lines the hosts up just before
it, and it moves every parameter, gradient and momentum through memory. On two emulated
hosts of one CPU resnet18's (batch 8, 32 px) took 1.37 times as long in phase, where its
forward and backward took 0.98 and its whole step about 1.04 (issue 29,
results/reference/powersgd-wake/); a sweep from before keeps the whole step's ratio for
both. The comm hook's synchronous part on backward's thread (PowerSGD's error feedback and
P matmul) takes the optimizer's ratio too: it streams each gradient through memory just
after the previous bucket's collective lined the hosts up, as the optimizer streams the
parameters. On the MLPs it grew with the optimizer on two nodes, on resnet18 between
forward's ratio and the optimizer's; the hook's chains keep forward's
(results/reference/hook-in-phase/).

Not modelled, each measured on the README's demo (resnet18 at 32 px, batch 16, two emulated
hosts of one CPU at 5 Gbit/s; results/reference/powersgd-chain/README.md):
- the last bucket's sync after backward took 11-16 ms more than charged, for both hooks,
  in the runs before the workload probe (the 25 ms above, if it recurs);
- the forward's buffer broadcasts on resnet18 at batch 8: the 2-node job reaches its first
  bucket 20-25 ms later than the one-node probe, of which about 8 ms are charged.
So the demo measures 0.94-0.95 (none) and 0.97-1.05 (PowerSGD) of the prediction in two
runs (results/reference/demo-20261126/; 0.84-0.91 before the beside-compute and lockstep
probes and the deferred chain), and with the workload probe 0.99-1.00 and 0.89-1.00 in two
more; with every rank keeping the memory it frees, 0.94 and 0.91 on a fresh clone
(results/reference/demo-20261127-allocator/); with DDP's own buckets and the hook's draw
counted once, 0.98 and 1.03, and 1.01 and 0.98 on a fresh clone
(results/reference/buckets-default/, demo-20261127-buckets/). The grid of other
workloads (scripts/accuracy-grid.tsv), at this model, each cell timed for 5 s or more, the
one-node probe over as many steps, every rank keeping the memory it frees
(bench/rank/allocator.py) and DDP with its own buckets: 14 of 18 cells within 0.90-1.10, 3
of the 6 held out, 0.77-1.03, every miss optimistic (results/reference/accuracy-grid-8/);
with the hosts' pace in phase applied, five of its workloads read 6 of 10 within,
0.81-1.11, the three half-precision cells optimistic (results/reference/accuracy-grid-9/);
the same cell moves by up to 0.22 between two runs on this VM
(results/reference/accuracy-grid-3/). Not modelled: on smallcnn at batch 16 with fp16
forward and backward took longer on two nodes than predicted in every run, 3 ms of it
left once malloc stopped faulting every step's blocks in again
(results/reference/smallcnn-b16-malloc/; neither the CPU idling at the sync nor gloo's
threads before the hand-over, results/reference/one-cpu-per-phase/); the same smallcnn
with PowerSGD, six latency-bound all-reduces a step with DDP's two buckets, took 6 ms
longer to the end of backward and 2-4 ms longer in the last sync than charged (0.77,
part eight); and with PowerSGD a bucket's chain takes longer on two nodes than charged:
13-15 ms on resnet18's last bucket (part five), 10 ms on the MLP 2048x2's first, which
holds backward at the second (part eight); on an AMD EPYC VM, where PowerSGD read 0.80-1.01
in rounds, its two-node step, timed step by step, lost the time at each later hand-over
(backward racing the previous bucket's chain: 0.8-3.2 ms a step, which a timeline of
typical times does not hold; charged since, from the spreads, above), in the step's first
collective (4.9-7.0 ms, about 3.3
charged) and in the chains, while the hook's synchronous part grew only 1.00-1.22 times
(results/reference/powersgd-wake/; ``envelope.POWERSGD`` says so beside such a
prediction). On 2-4
emulated hosts running the MLP every hook came within 0.97-1.04 of its prediction
(results/reference/emulated-accuracy/, 24 of 24 rows, before the probes; with them, at 5
Gbit/s: 0.94-1.06, 6 of 6, results/reference/emulated-accuracy-2/); on an earlier, faster
instance PowerSGD at 1 Gbit/s and 3 nodes measured 0.83 of it, not explained yet (that
directory's README).

Where the results also hold multi-node runs of the same setup measured on the same link
rate (emulated links record theirs), their median stands beside the prediction with the
ratio measured / predicted; where they ran in rounds (each one matrix repeat: ``bench
matrix --interleave``, or a matrix run a round as ``make bench-emulated`` runs them), a line
under the table says how precisely the rounds check that ratio and, where more loosely than
0.90-1.10 needs, how many rounds would do (``ratios_by_round``, bench/analysis/rounds.py).

The link is a nominal rate (``--link 5gbit``: B is the rate, a is ``--latency``, no CPU
cost), an all-reduce record measured on it (``--link-from``: a and a_cpu are the mean time
less wire time, and the mean CPU time, of its latency-bound messages, those whose wire
time is under a tenth of their time; B the busbw and b_cpu the CPU time per byte at the
largest), or both: the measured link moved to the nominal rate, keeping its efficiency
(busbw against its rate), latency and CPU cost; that is a lab's planned upgrade predicted
from the link it has.

Each predicted step time and samples/s carries a band, ``point [low-high]``: the point is
the median 1-node step (each time of its bucket timeline the median over the repeats) on
the link as given, and where the link was swept several times, the median of the
predictions on each sweep (``LinkRange.point_for``); the band is the least and most of the
predictions from every ok 1-node repeat of the setup, each on the slowest and the fastest
of the link's sweeps (the ok all-reduce records in the --link-from file taken on the same
link rate, backend and ranks as the latest: the lowest busbw with the highest latency and
CPU costs, and the other way round). A sweep records one mean time per size, no spread, so
one sweep (or a nominal link) adds no width and the band is the repeats' alone; the report
says which, in one line per setup. The band is how far the measured noise carries, not the
model's own error (see "Not modelled"). Where a measured median stands beside the
prediction, the table says whether it falls within the band. ``predictions()`` returns the
same figures as data (point, low, high, measured median, ratio, within) for scripts such
as a reference table; ``report()`` is text built from it.

On emulated hosts (``--launcher netns``) each one-node cell ran beside its neighbours'
copies of itself, one per spare host, at the same moment; they are read too (``--no-
neighbours``: not). N hosts in lockstep compute at their slowest one's pace, and those
hosts run apart (two here 20-30% for tens of seconds, results/reference/pair-pace/), so
an N-node prediction starts, round by round, from the slowest of N of that round's hosts
(``paced``, bench/analysis/host_copies.py); the report says so under the setup.

The levers say what would help most at the largest N: a faster link, compression, a
larger batch or gradient accumulation. Each lever is set beside the same configuration
on one node, its own baseline: a larger batch or accumulation does more samples per step
on one node too (estimated from the timeline), a comm hook has its own single-node record,
a faster link the same run; so no speedup is superlinear. A lever's N-node samples/s has
the band of the repeats it starts from (this setup's, or the other hook's). "Most help" is
the lever with the most samples/s at N nodes, what a lab gets, not the largest speedup.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path

from bench import record
from bench.analysis import envelope, host_copies, rounds, steadiness
from bench.analysis.prediction import (
    Lever,
    Link,
    Scaling,
    Timeline,
    levers,
    predict_step,
    scaling,
)
from bench.analysis.table import FIELDS, parse_where, select
from bench.config import HOOK_WIRE_DTYPE, OneLineErrorParser
from bench.options import ConfigError
from bench.paths import path_arg
from bench.topology import Topology, parse_positive_ints
from bench.units import parse_rate


def measured_runs(records: list[dict], link: Link) -> dict[tuple, list[dict]]:
    """Ok multi-node records taken on ``link``'s rate, by (setup, nodes). Uneven nodes
    (1+1+2) are left out: the model predicts N nodes like the measured one."""
    found: dict[tuple, list[dict]] = {}
    for rec in record.training(records):
        rate = ((rec.get("env") or {}).get("link") or {}).get("rate_bps")
        if rec.get("status") == "ok" and (rec.get("nnodes") or 1) > 1 \
                and not Topology.of_record(rec).uneven \
                and link.rate_bps is not None and rate == link.rate_bps \
                and (rec.get("samples_per_s") or 0) > 0:
            found.setdefault((setup_key(rec), rec["nnodes"]), []).append(rec)
    return found


def measured_rates(records: list[dict], link: Link) -> dict[tuple, list[float]]:
    """samples/s of ``measured_runs``, by (setup, nodes)."""
    return {key: [rec["samples_per_s"] for rec in recs]
            for key, recs in measured_runs(records, link).items()}


def setup_key(rec: dict) -> tuple:
    """What makes two records one setup: the model and its input size, the batch, gradient
    accumulation, precision, processes per node, strategy, and compiled or eager with its
    memory format (``table.variant``: a compiled run's bucket timeline is not the eager
    run's), then the comm hook last (the compression lever compares setups that differ in
    it alone)."""
    cfg = rec.get("config", {})
    key = (cfg.get("model", {}).get("model"), cfg.get("model", {}).get("image_size"),
           rec.get("batch_size_per_device"), cfg.get("distributed", {}).get("grad_accum"),
           FIELDS["precision"](rec), rec.get("nproc_per_node"),
           FIELDS["strategy"](rec), FIELDS["variant"](rec))
    return (*key, rec.get("comm_hook"))


def single_node_repeats(records: list[dict]) -> dict[tuple, list[dict]]:
    """Per setup, all its ok single-node training records with a bucket timeline, the
    slowest step first: the median is the point estimate, and every one is predicted from
    for the band (how far the repeats' own noise carries into the prediction)."""
    repeats: dict[tuple, list[dict]] = {}
    for rec in record.training(records):
        if rec.get("status") == "ok" and rec.get("nnodes") == 1 and _predictable(rec):
            repeats.setdefault(setup_key(rec), []).append(rec)
    return {key: sorted(recs, key=_timeline_step_s, reverse=True)
            for key, recs in repeats.items()}


def single_node_runs(records: list[dict]) -> dict[tuple, dict]:
    """Per setup, the median of its repeats: the point estimate."""
    return {key: median_repeat(recs) for key, recs in single_node_repeats(records).items()}


def median_repeat(repeats: list[dict]) -> dict:
    """The repeats as one typical run: the median repeat by its timeline's step (the lower
    middle of an even count in samples/s), with each time of its bucket timeline (when
    each bucket was ready, issued and done; the step) the median of that time over every
    repeat.

    Each time on its own, because the parts of a step vary apart: in the interleaved
    reference run the 16 one-node PowerSGD repeats of one cell did the hook's work in
    24-46 ms while their backward took 28-33 ms, so any one repeat brings its own mix (the
    one at the median samples/s, the point before, had a 42.6 ms hook against a median of
    37.7 ms). Every order that holds in each repeat (buckets in turn, issued after ready,
    the step after the last bucket) holds between the medians, so the result is a timeline
    like any.
    Ranked by the step the prediction starts from, not by the run's samples/s: a one-process
    run trains without DDP, so its samples/s leaves the comm hook's work out.
    """
    ordered = sorted(repeats, key=_timeline_step_s, reverse=True)
    middle = ordered[(len(ordered) - 1) // 2]
    timeline = dict(middle["bucket_timeline"])
    for name in ("ready_s", "issued_s", "done_s"):
        series = [(rec["bucket_timeline"].get(name) or ()) for rec in repeats]
        if series[0] and all(len(times) == len(series[0]) for times in series):
            timeline[name] = [statistics.median(times) for times in zip(*series, strict=True)]
    timeline["step_s"] = statistics.median(_timeline_step_s(rec) for rec in repeats)
    # Each repeat's mean step against its median, the median of those: where every repeat
    # has one (records from before the mean have none).
    tails = [rec["bucket_timeline"].get("mean_step_s") for rec in repeats]
    timeline.pop("mean_step_s", None)
    if all(isinstance(tail, (int, float)) for tail in tails):
        timeline["mean_step_s"] = timeline["step_s"] * statistics.median(
            tail / _timeline_step_s(rec) for tail, rec in zip(tails, repeats, strict=True))
    return {**middle, "bucket_timeline": timeline}


def _timeline_step_s(rec: dict) -> float:
    return rec["bucket_timeline"]["step_s"]


def host_stamped_gpu_timeline(rec: dict) -> bool:
    """Whether a GPU record's bucket timeline was stamped by the host clock (records from
    before CUDA events): it shows when the CPU queued each bucket, not when the GPU had it
    ready, so it sees almost no overlap and would predict speedups too low."""
    on_gpu = rec.get("peak_memory_kind") == "cuda_max_allocated"
    stamped_by = (rec.get("bucket_timeline") or {}).get("stamped_by", "host_clock")
    return on_gpu and stamped_by != "cuda_events"


def eager_timeline_of_compiled_run(rec: dict) -> bool:
    """Whether a compiled run's bucket timeline came from an eager program: a single
    process's one-rank DDP probe wraps the bare model (records say ``compiled: false``;
    records from before say nothing, and the gpu-h100 reference's compiled run had a 69.0
    ms eager step against its compiled 45.6 ms). Predicting from it would scale the
    compiled throughput by eager's overlap."""
    compiled = ((rec.get("config") or {}).get("precision") or {}).get("compile")
    return bool(compiled) and not (rec.get("bucket_timeline") or {}).get("compiled")


def _predictable(rec: dict) -> bool:
    """Whether a (schema-valid) record has what the model needs: a bucket timeline with a
    bucket, a positive step time, a throughput and a global batch, all of one program."""
    timeline = rec.get("bucket_timeline") or {}
    ready, sent = timeline.get("ready_s") or [], timeline.get("sent_bytes") or []
    return not host_stamped_gpu_timeline(rec) and not eager_timeline_of_compiled_run(rec) \
        and bool(ready) and len(ready) == len(sent) and timeline.get("step_s", 0) > 0 \
        and (rec.get("samples_per_s") or 0) > 0 and (rec.get("global_batch_size") or 0) > 0


@dataclasses.dataclass(frozen=True, slots=True)
class LinkRange:
    """The link the point prediction uses, and the slowest and fastest it was measured:
    the link's part of the band. A nominal link, or one sweep (a sweep records one mean
    time per message size, no spread), is the same link three times and adds no width.

    Several sweeps of one link are repeated measurements of it: ``each`` keeps them all, and
    a setup's point prediction is the median of its predictions on each (``point_for``).
    One sweep's prediction strays 4.2% (sd) from its run's others on the 2-CPU VM, and a
    point from the latest alone carried all of it into every ratio: the same cell read in
    two runs spread 8.1% (sd), 6.0% from the median of three
    (results/reference/grid-precision/)."""

    point: Link
    slow: Link
    fast: Link
    sweeps: int = 0      # the all-reduce records behind it; 0 for a nominal link
    left_out: int = 0    # ok sweeps in the file on another link, backend, ranks or dtype
    each: tuple[Link, ...] = ()   # every sweep's link, as they ran; () for a nominal link

    @classmethod
    def fixed(cls, link: Link, sweeps: int = 0) -> LinkRange:
        return cls(link, link, link, sweeps)

    @classmethod
    def of_sweeps(cls, sweeps: list[dict], left_out: int = 0) -> LinkRange:
        """The latest sweep is ``point`` (the link's figures a report prints), and every
        sweep is in ``each`` (the point prediction takes their median); the slow end takes
        the lowest busbw with the highest latency and CPU costs any sweep had, the fast end
        the reverse, so the band covers every sweep whichever figure dominates a step."""
        measured = [Link.from_allreduce(sweep) for sweep in sweeps]

        def end(links: list[Link], pick_bw, pick_cost) -> Link:
            # Beside compute, each end the same way, where every sweep measured it there.
            besides = [m.beside for m in links if m.beside]
            beside = end(besides, pick_bw, pick_cost) \
                if besides and len(besides) == len(links) else None
            # The hosts' waits in lockstep: the sweep whose waits add up to the most (or least).
            waits = pick_cost(links, key=lambda m: sum(w for _, w in m.lockstep))
            # And the job's own steps' waits, the same way.
            steps = pick_cost(links, key=lambda m: sum(w for _, _, w in m.workload_lockstep))
            # And the hosts' pace in phase, the sweep that measured it slowest (or fastest),
            # forward and backward with the optimizer.
            phase = pick_cost(links, key=lambda m: sum(r for _, r in m.in_phase)
                              + sum(r for _, r in m.in_phase_tail))
            return dataclasses.replace(
                links[-1], lockstep=waits.lockstep, workload_lockstep=steps.workload_lockstep,
                in_phase=phase.in_phase, in_phase_tail=phase.in_phase_tail,
                lockstep_ranks=waits.lockstep_ranks or steps.lockstep_ranks,
                busbw_Bps=pick_bw(m.busbw_Bps for m in links),
                latency_s=pick_cost(m.latency_s for m in links),
                cpu_latency_s=pick_cost(m.cpu_latency_s for m in links),
                cpu_s_per_bus_byte=pick_cost(m.cpu_s_per_bus_byte for m in links),
                beside=beside)

        # The point's pace in phase: per workload, the median of every sweep's (one sweep's
        # few pairs vary as much as the figure itself: 1.04 and 1.20 in two runs).
        def median_over_sweeps(field: str) -> tuple[tuple[tuple, float], ...]:
            ratios: dict[tuple, list[float]] = {}
            for m in measured:
                for key, ratio in getattr(m, field):
                    ratios.setdefault(key, []).append(ratio)
            return tuple((key, statistics.median_low(found)) for key, found in ratios.items())
        in_phase, tail = median_over_sweeps("in_phase"), median_over_sweeps("in_phase_tail")
        each = tuple(dataclasses.replace(m, in_phase=in_phase, in_phase_tail=tail)
                     for m in measured)
        return cls(each[-1], end(measured, min, max), end(measured, max, min),
                   len(sweeps), left_out, each)

    def at_rate(self, rate_bps: int) -> LinkRange:
        """Each end moved to the planned rate, keeping its own efficiency."""
        return dataclasses.replace(self, point=self.point.at_rate(rate_bps),
                                   slow=self.slow.at_rate(rate_bps),
                                   fast=self.fast.at_rate(rate_bps),
                                   each=tuple(m.at_rate(rate_bps) for m in self.each))

    def point_for(self, timeline: Timeline, nodes: int) -> Link:
        """The link ``timeline``'s point prediction at ``nodes`` takes: of several sweeps,
        the one whose predicted step is the median (of an even count, the slower of the
        middle two); else the one link there is."""
        if len(self.each) < 2:
            return self.point
        ranked = sorted(self.each, key=lambda link: predict_step(timeline, link, nodes).step_s)
        return ranked[len(ranked) // 2]

    @property
    def ends(self) -> tuple[Link, ...]:
        """The links the band is predicted on (the point's too, so the band holds it)."""
        return tuple(dict.fromkeys((self.point, self.slow, self.fast)))

    @property
    def widens(self) -> bool:
        return len(self.ends) > 1


@dataclasses.dataclass(frozen=True, slots=True)
class Band:
    """A predicted figure: the point (the median repeat on the link as given) and the
    least and most that every repeat on either end of the link gives."""

    point: float
    low: float
    high: float

    @classmethod
    def around(cls, point: float, values: Iterable[float]) -> Band:
        every = [point, *values]
        return cls(point, min(every), max(every))

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high

    def text(self, scale: float = 1.0) -> str:
        """``223.6 [210.1-231.0]``: the point, then the band."""
        return f"{self.point * scale:.1f} [{self.low * scale:.1f}-{self.high * scale:.1f}]"


@dataclasses.dataclass(frozen=True, slots=True)
class Predicted:
    """One setup at N nodes as data (a reference table's row): the point prediction with
    its band, and the measured runs of the same setup on the same link beside it."""

    setup: tuple
    scaling: Scaling                   # the point: the median repeat on the link as given
    samples_per_s: Band
    step_s: Band
    repeats: int                       # ok 1-node repeats behind the band
    sweeps: int                        # all-reduce sweeps behind it (0: a nominal link)
    measured: tuple[float, ...] = ()   # samples/s of the measured N-node runs

    @property
    def nodes(self) -> int:
        return self.scaling.prediction.nodes

    @property
    def measured_median(self) -> float | None:
        return statistics.median(self.measured) if self.measured else None

    @property
    def ratio(self) -> float | None:
        """measured / predicted, against the point."""
        median = self.measured_median
        return None if median is None else median / self.samples_per_s.point

    @property
    def within(self) -> bool | None:
        """Whether the measured median falls within the band; None where none was measured."""
        median = self.measured_median
        return None if median is None else self.samples_per_s.holds(median)


def predictions(repeats: dict[tuple, list[dict]], links: LinkRange, nodes: list[int],
                measured: dict[tuple, list[float]] | None = None) -> list[Predicted]:
    """Each setup at each node count. ``repeats``: ``single_node_repeats(records)``;
    ``measured``: ``measured_rates(records, links.point)``."""
    measured = measured or {}
    found = []
    for key, pooled in repeats.items():
        for n in nodes:
            recs = paced(pooled, n)
            median = median_repeat(recs)
            timelines = [(Timeline.of(rec), rec["global_batch_size"]) for rec in recs]
            timeline = Timeline.of(median)
            point = scaling(timeline, links.point_for(timeline, n), n,
                            median["global_batch_size"])
            steps = [(predict_step(timeline, link, n).step_s, per_node)
                     for timeline, per_node in timelines for link in links.ends]
            found.append(Predicted(
                key, point,
                Band.around(point.samples_per_s, (n * per_node / s for s, per_node in steps)),
                Band.around(point.prediction.step_s, (s for s, _ in steps)),
                len(recs), links.sweeps, tuple(measured.get((key, n), ()))))
    return found


def paced(repeats: list[dict], nodes: int) -> list[dict]:
    """A setup's one-node repeats as ``nodes`` hosts in lockstep compute: each round's
    slowest of that many of its hosts where a round holds several (a cell and its emulated
    neighbours' copies, ``host_copies.paced_by_slowest``), the slowest step first."""
    return sorted(host_copies.paced_by_slowest(repeats, nodes, _timeline_step_s),
                  key=_timeline_step_s, reverse=True)


def ratios_by_round(records: list[dict], setup: tuple, nodes: int,
                    links: LinkRange) -> rounds.Rounds:
    """The setup's measured / predicted at ``nodes`` in each round of ``records`` that
    measured it on one node and on ``nodes`` (``rounds.round_of``), each round predicted
    from its own one-node records on ``links``: how precisely the repeats check the ratio."""
    by_round: dict[tuple[str, int], list[dict]] = {}
    for rec in record.training(records):
        key = rounds.round_of(rec)
        if key is not None:
            by_round.setdefault(key, []).append(rec)
    ratios = []
    for recs in by_round.values():
        repeats = {key: found for key, found in single_node_repeats(recs).items()
                   if key == setup}
        for p in predictions(repeats, links, [nodes], measured_rates(recs, links.point)):
            if p.ratio is not None and math.isfinite(p.ratio):
                ratios.append(p.ratio)
    return rounds.Rounds(tuple(ratios))


def _paced_lines(recs: list[dict], nodes: list[int]) -> list[str]:
    """Where the repeats hold emulated neighbours' copies: what each node count starts from
    instead of the median repeat (``paced``)."""
    copies = sum(1 for rec in recs if host_copies.copy_of(rec) is not None)
    if not copies:
        return []
    starts = ", ".join(f"{median_repeat(paced(recs, n))['bucket_timeline']['step_s'] * 1e3:.1f}"
                       f" ms at {n} nodes" for n in nodes)
    return [f"emulated hosts: {copies} of these repeats are neighbours' copies run beside "
            f"a cell; N nodes in lockstep compute at their slowest host's pace, so each N "
            f"starts from every round's slowest of N hosts (--no-neighbours: the cells "
            f"alone): median step {starts}"]


def lever_bands(repeats: dict[tuple, list[dict]], key: tuple, links: LinkRange,
                nodes: int) -> list[tuple[Lever, Band]]:
    """The levers of one setup at ``nodes`` (from its median repeat on the link as given,
    ranked by N-node samples/s), each with the band of its N-node samples/s: over the
    repeats the lever starts from (this setup's; a comm hook's own) on either link end."""
    repeats = {k: paced(recs, nodes) for k, recs in repeats.items()}
    others = {k[-1]: recs for k, recs in repeats.items() if k[:-1] == key[:-1] and k != key}
    median, others_median = median_repeat(repeats[key]), \
        {hook: median_repeat(recs) for hook, recs in others.items()}
    starts = [(rec, others_median) for rec in repeats[key]] + \
        [(median, {**others_median, hook: other})
         for hook, recs in others.items() for other in recs]
    seen: dict[str, list[float]] = {}
    for rec, other in starts:
        for link in links.ends:
            for lever in levers(rec, link, nodes, other):
                seen.setdefault(lever.name, []).append(lever.samples_per_s)
    point = links.point_for(Timeline.of(median), nodes)
    return [(lever, Band.around(lever.samples_per_s, seen[lever.name]))
            for lever in levers(median, point, nodes, others_median)]


def _same_link(sweep: dict) -> tuple:
    """What makes sweeps measurements of one link: its rate, the backend, the ranks over
    how many nodes (latency grows with them), and the element type (gloo's CPU cost per
    byte depends on it)."""
    rate = ((sweep.get("env") or {}).get("link") or {}).get("rate_bps")
    return (rate, sweep.get("backend"), sweep.get("world_size"), sweep.get("nnodes"),
            sweep.get("dtype", "float32"))


def sweeps_for_hook(sweeps: list[dict], hook: str) -> list[dict]:
    """The sweeps in the element type ``hook`` sends (float16 for fp16...), where the file
    has any; otherwise the float32 ones (the gradients' own type), otherwise all."""
    for dtype in (HOOK_WIRE_DTYPE.get(hook, "float32"), "float32"):
        chosen = [s for s in sweeps if s.get("dtype", "float32") == dtype]
        if chosen:
            return chosen
    return sweeps


def link_of(args: argparse.Namespace) -> LinkRange:
    """--link-from: the measured link (every sweep of the same link as the latest: the
    point from their median prediction, the band from their spread); with --link too, that
    measurement moved to the nominal rate (the upgrade a lab plans, from the link it has);
    --link alone: nominal."""
    if args.link_from:
        sweeps = record.link_sweeps(record.load(args.link_from, "--link-from"))
        if not sweeps:
            raise ConfigError("--link-from", args.link_from, "holds no ok all-reduce record "
                              "over 2 or more ranks: run bench allreduce on the link first")
        # One element type: the gradients' own (float32) where the file has it.
        typed = sweeps_for_hook(sweeps, "none")
        same = [s for s in sweeps if _same_link(s) == _same_link(typed[-1])]
        measured = LinkRange.of_sweeps(same, len(sweeps) - len(same))
        return measured.at_rate(parse_rate(args.link, "--link")) if args.link else measured
    if not args.link:
        raise ConfigError("--link", "(not given)", "give a nominal rate (--link 5gbit), an "
                          "all-reduce record measured on the link (--link-from FILE), or both")
    return LinkRange.fixed(Link.nominal(parse_rate(args.link, "--link"), args.latency))


def band_source(repeats: int, links: LinkRange) -> str:
    """Where a setup's band comes from, in one line, and how to widen what it rests on."""
    runs = f"{repeats} ok 1-node repeat{'s' if repeats != 1 else ''}"
    if links.widens:
        return (f"band: min-max over {runs} x the slowest and fastest of {links.sweeps} "
                "all-reduce sweeps (busbw, latency, CPU cost)")
    why = ("a nominal link" if not links.sweeps else
           "one all-reduce sweep, which records no spread per size" if links.sweeps == 1
           else f"{links.sweeps} all-reduce sweeps that agree")
    if repeats > 1:
        return f"band: from the {runs} only (the link adds no width: {why})"
    return (f"band: none, the point alone ({runs}; the link adds no width: {why}): run the "
            "1-node cell again (bench matrix --repeats 3) or sweep the link again into the "
            "--link-from file")


def report(repeats: dict[tuple, list[dict]], links: LinkRange, nodes: list[int],
           measured: dict[tuple, list[float]] | None = None,
           drift: list[steadiness.Drift] | None = None,
           records: list[dict] | None = None) -> str:
    """The prediction tables, built from ``predictions()``: where ``measured`` has the same
    setup and node count on the same link, its median, measured / predicted and whether it
    falls within the band stand beside the prediction, and under the table, from
    ``records``, how precisely their rounds check that ratio (``ratios_by_round``); then
    each setup's levers. ``drift`` (``bench steadiness`` on the hosts that measured): how
    far their CPUs drift by themselves, and whether that is more than measured / predicted
    is checked to."""
    link = links.point
    lines = [f"link: {link.source}, latency {link.latency_s * 1e3:.2f} ms per all-reduce",
             _cpu_cost_line(link, repeats), _lockstep_line(link), *_link_band_lines(links)]
    if drift:
        note = steadiness.caveat(drift)
        lines += [steadiness.describe(drift), *([note] if note else [])]
    by_setup: dict[tuple, list[Predicted]] = {}
    for row in predictions(repeats, links, nodes, measured):
        by_setup.setdefault(row.setup, []).append(row)
    for key, rows in by_setup.items():
        caveat = envelope.line(median_repeat(repeats[key]), link.rate_bps, nodes)
        lines += ["", *_setup_lines(key, repeats[key]), *_paced_lines(repeats[key], nodes),
                  *([caveat] if caveat else []),
                  band_source(rows[0].repeats, links),
                  "", "| nodes | step ms [band] | samples/s [band] | speedup | efficiency | "
                  "all-reduce ms | hidden | compute later ms | measured samples/s | "
                  "measured/predicted | measured vs band |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [_prediction_row(row) for row in rows]
        lines += _round_lines(records or [], key, rows, links)
        lines += ["", *_lever_lines(lever_bands(repeats, key, links, max(nodes)), max(nodes))]
    return "\n".join(lines)


def _round_lines(records: list[dict], key: tuple, rows: list[Predicted],
                 links: LinkRange) -> list[str]:
    """Under a setup's table: for each measured node count whose records came in rounds,
    how precisely they check measured / predicted (``ratios_by_round``)."""
    lines = []
    for row in rows:
        found = ratios_by_round(records, key, row.nodes, links) if row.measured \
            else rounds.Rounds()
        if found.ratios:
            lines.append(f"measured / predicted at {row.nodes} nodes, round by round: "
                         f"{found.text()} (two standard errors of their mean)")
    return lines


def _link_band_lines(links: LinkRange) -> list[str]:
    lines = []
    if len(links.each) > 1:
        lines.append(f"the point: each setup predicted on each of the {len(links.each)} "
                     "sweeps, the median of those (the link above is the latest sweep)")
    if links.widens:
        slow, fast = links.slow, links.fast
        lines.append(f"link band: the slowest and fastest of {links.sweeps} sweeps: busbw "
                     f"{slow.busbw_Bps * 8e-9:.3f}-{fast.busbw_Bps * 8e-9:.3f} Gbit/s, "
                     f"latency {fast.latency_s * 1e3:.2f}-{slow.latency_s * 1e3:.2f} ms")
    if links.left_out:
        lines.append(f"link band: {links.left_out} ok all-reduce sweep(s) in --link-from on "
                     "another link rate, backend, rank count or element type left out; to "
                     "use them, give --link-from a file with one link's sweeps only")
    return lines


def _setup_lines(key: tuple, recs: list[dict]) -> list[str]:
    rec = median_repeat(recs)
    timeline = Timeline.of(rec)
    model, size, batch, accum, precision, procs, strategy, how, hook = key
    rates = [r["samples_per_s"] for r in recs]
    which = (f"the median of {len(recs)} ok repeats, which span "
             f"{min(rates):.1f}-{max(rates):.1f}" if len(recs) > 1 else "one ok repeat")
    # Two figures, which can differ: the runs' own samples/s (the mean over their timed
    # steps; one process trains without DDP), and the step the prediction starts from
    # (the median step of the median repeat's bucket timeline, under DDP, with the comm
    # hook's work).
    return [f"## {model} {size}px, batch {batch}/device x {procs} per node, "
            f"grad-accum {accum}, {precision}, {how}, {strategy}, comm-hook {hook}",
            f"measured on 1 node: {statistics.median(rates):.1f} samples/s ({which}); the "
            f"prediction starts from the median repeat's bucket timeline: median step "
            f"{timeline.step_s * 1e3:.1f} ms ({rec['global_batch_size'] / timeline.step_s:.1f}"
            f" samples/s), {sum(timeline.sent_bytes) / 1e6:.2f} MB sent per step"
            + _broadcast_text(timeline)]


def _broadcast_text(timeline: Timeline) -> str:
    sizes = timeline.broadcast_bytes
    if not sizes:
        return ""
    return (f"; {len(sizes)} buffer broadcast(s) before each forward ("
            f"{sum(sizes) / 1e3:.1f} kB), each waited for at the link's per-call latency on "
            "more nodes (none on a nominal link without --latency)")


def _prediction_row(row: Predicted) -> str:
    s, p = row.scaling, row.scaling.prediction
    beside = "- | - | -"
    if row.measured_median is not None:
        verdict = "within band" if row.within else "outside band (" + (
            "below" if row.measured_median < row.samples_per_s.low else "above") + ")"
        beside = (f"{row.measured_median:.1f} (n={len(row.measured)}) | {row.ratio:.2f} | "
                  f"{verdict}")
    return (f"| {row.nodes} | {row.step_s.text(1e3)} | {row.samples_per_s.text()} | "
            f"{s.speedup:.2f} | {s.efficiency:.0%} | {p.comm_s * 1e3:.1f} | "
            f"{p.hidden_share:.0%} | {p.stolen_s * 1e3:.1f} | {beside} |")


def _lever_lines(ranked: list[tuple[Lever, Band]], nodes: int) -> list[str]:
    """The levers' table: each against the same configuration on one node, so a lever
    that does more work per step is not credited with it as a speedup."""
    lines = [f"levers at {nodes} nodes, each against the same configuration on 1 node "
             "(its own baseline; estimated where derived from this run's timeline):", "",
             f"| lever | 1-node samples/s | {nodes}-node samples/s [band] | "
             "speedup over its own 1 node |", "|---|---|---|---|"]
    for lever, band in ranked:
        base = f"{lever.base_samples_per_s:.1f}" + (" (estimated)" if lever.estimated else "")
        lines.append(f"| {lever.name} | {base} | {band.text()} | {lever.speedup:.2f}x |")
    best = next((lever for lever, _ in ranked if lever.name != "as measured"), ranked[0][0])
    lines.append(f"most help: {best.name} (the most samples/s at {nodes} nodes, what a lab "
                 "gets; not the largest speedup)")
    return lines


def _lockstep_line(link: Link) -> str:
    """What each sync waits for the slowest rank, as the sweep's lockstep probe measured."""
    if not link.lockstep and not link.workload_lockstep:
        return ("waiting for the slowest rank: not charged (the sweep has no lockstep probe: "
                "run it with --lockstep)")
    waits = ", ".join(f"{w * 1e3:.1f} ms after {c * 1e3:.0f} ms" for c, w in link.lockstep)
    line = (f"waiting for the slowest rank at each sync, measured in lockstep over "
            f"{link.lockstep_ranks} ranks: {waits or 'no matmul stretches'} of compute "
            "(more ranks wait longer, as the expected maximum of normal draws grows)")
    for key, compute_s, wait_s in link.workload_lockstep:
        model, image_size, batch = key[:3]
        line += (f"; {model} {image_size} px batch {batch}'s own steps: {wait_s * 1e3:.1f} ms "
                 f"after {compute_s * 1e3:.0f} ms, that workload's wait in proportion to "
                 f"each stretch (--lockstep-model); other workloads: the matmuls'")
    tails = dict(link.in_phase_tail)
    for key, ratio in link.in_phase:
        model, image_size, batch = key[:3]
        tail = tails.get(key)
        line += (f"; {model} {image_size} px batch {batch}'s "
                 + (f"forward and backward took {ratio:.3f} and its optimizer {tail:.3f} "
                    if tail is not None else f"steps took {ratio:.3f} ")
                 + "times as long with the hosts in phase as out of phase, which stretches "
                 "its one-node timeline on CPU")
    return line


def _cpu_cost_line(link: Link, repeats: dict[tuple, list[dict]]) -> str:
    on_cpu = any(Timeline.of(rec).compute_cpus for recs in repeats.values() for rec in recs)
    beside = link.beside
    if on_cpu and beside:
        return (f"all-reduce CPU cost, measured beside compute (taken from backward's CPUs "
                f"while they overlap): {beside.cpu_latency_s * 1e3:.2f} ms per call + "
                f"{beside.cpu_s_per_bus_byte * 1e9:.2f} ns per byte moved of compute lost, "
                f"the all-reduce at busbw {beside.busbw_Bps * 8e-9:.3f} Gbit/s and "
                f"{beside.latency_s * 1e3:.2f} ms per call there; alone "
                f"{link.cpu_latency_s * 1e3:.2f} ms per call + "
                f"{link.cpu_s_per_bus_byte * 1e9:.2f} ns per byte of gloo's CPU time")
    if link.cpu_s_per_bus_byte or link.cpu_latency_s:
        used = "taken from backward's CPUs" if on_cpu else "not charged: training on GPUs"
        return (f"all-reduce CPU cost: {link.cpu_latency_s * 1e3:.2f} ms per call + "
                f"{link.cpu_s_per_bus_byte * 1e9:.2f} ns per byte moved ({used})")
    if on_cpu:
        return ("all-reduce CPU cost: unknown, taken as 0; a CPU job computes beside its "
                "all-reduces, so it will run slower than this: give --link-from an "
                "all-reduce record measured on these hosts")
    return "all-reduce CPU cost: not charged (training on GPUs)"


MAX_LATENCY_S = 10.0


def main(argv: list[str] | None = None, prog: str = "bench predict") -> int:
    p = OneLineErrorParser(prog=prog, description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=path_arg, nargs="+", help="results files with single-node "
                   "training records (taken: nnodes 1, status ok)")
    p.add_argument("--link", help="a nominal link rate, e.g. 1gbit, 5gbit, 10gbit; with "
                   "--link-from: the rate to move the measured link to")
    p.add_argument("--link-from", type=path_arg, help="a results file with all-reduce records "
                   "measured on the link (the point: the median of the predictions on each "
                   "sweep of the latest one's link; the band: their slowest and fastest)")
    p.add_argument("--latency", type=float, default=0.0,
                   help="with --link: seconds of latency per all-reduce (default: 0)")
    p.add_argument("--nodes", default="2,4", help="node counts to predict (default: 2,4)")
    p.add_argument("--where", action="append", default=[], metavar="FIELD=VALUE",
                   help="only matching records (fields as in bench table)")
    p.add_argument("--steadiness", type=path_arg, help="a results file of bench steadiness run "
                   "on the hosts that measured: how far their CPUs drift by themselves is "
                   "printed beside measured / predicted")
    p.add_argument("--no-neighbours", action="store_true", help="emulated hosts: start from "
                   "the one-node cells' own records only, not also from the copies their "
                   "neighbours ran at the same time (by default each round's slowest of N "
                   "hosts is the N-node baseline)")
    args = p.parse_args(argv)
    try:
        nodes = parse_positive_ints(args.nodes, "--nodes")
        # Seconds per all-reduce call: 10 s is no link's latency, only a typo's (ms for s).
        if not math.isfinite(args.latency) or not 0 <= args.latency <= MAX_LATENCY_S:
            raise ConfigError("--latency", args.latency, "must be 0 to "
                              f"{MAX_LATENCY_S:g} seconds per call, e.g. 0.0002")
        if args.latency and args.link_from:
            raise ConfigError("--latency", args.latency, "only sets a nominal link's latency; "
                              "--link-from uses the measured one: drop --latency")
        where = parse_where(args.where)
        # Each file must hold a valid record; invalid lines are skipped with a warning.
        loaded = []
        for path in args.results:
            mine = record.load(path, "results")
            loaded += mine if args.no_neighbours else \
                mine + host_copies.baseline_copies(mine, path, setup_key)
        records = select(loaded, where)
        chosen_link = link_of(args)
        drift = drift_of(args.steadiness) if args.steadiness else None
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    runs = single_node_repeats(records)
    refused = sum(1 for r in record.training(records) if host_stamped_gpu_timeline(r))
    if refused:
        print(f"{prog}: warning: {refused} GPU record(s) skipped: their bucket timeline was "
              "stamped by the host clock (when the CPU queued each bucket, not when the GPU "
              "had it ready), which hides the overlap; rerun them with this version, which "
              "stamps with CUDA events", file=sys.stderr)
    eager = sum(1 for r in record.training(records) if r.get("status") == "ok"
                and r.get("nnodes") == 1 and eager_timeline_of_compiled_run(r))
    if eager:
        print(f"{prog}: warning: {eager} compiled record(s) skipped: their bucket timeline "
              "is an eager program's (a single process's DDP probe runs the model "
              "uncompiled), so it cannot say how the compiled step overlaps; predict from "
              "an eager run (only a compiled job over 2+ processes with a comm hook or FSDP "
              "times its own steps' buckets)", file=sys.stderr)
    if not runs:
        print(f"{prog}: error: no ok single-node training record with a bucket timeline in "
              f"{', '.join(map(str, args.results))}: run the trainer on one node first "
              "(e.g. make bench-cpu or --topologies 1x1)", file=sys.stderr)
        return 2
    print(report(runs, chosen_link, nodes, measured_rates(records, chosen_link.point), drift,
                 records))
    return 0


def drift_of(path: Path) -> list[steadiness.Drift]:
    """The CPUs' drift in a ``bench steadiness`` file, or ConfigError naming the flag."""
    found = steadiness.drifts(record.load(path, "--steadiness"))
    if not found:
        raise ConfigError("--steadiness", path, "holds no ok steadiness record of two "
                          "windows or more: give the file bench steadiness --out wrote")
    return found


if __name__ == "__main__":
    sys.exit(main())
