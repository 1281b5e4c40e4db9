"""Does the cluster work? Each measurement of ``bench accept`` judged: PASS, WARN or FAIL.

Pure Python, records in and rows out: the measurements come from the acceptance run (each
device, each link, each node's data path, the whole job), and every row says what was
expected, what was measured, and why it passed or not.

What a figure is expected to be, in order of trust:

- **its peers**: the same check on the other devices of the same model in this cluster.
  Same hardware, same software, same moment: a device that falls short of them is at fault.
  Judged with the noise of both sides (every figure is measured several times): a shortfall
  counts only when the 95% confidence interval of the difference excludes zero, so one
  unlucky repeat does not fail a device;
- **the reference table**: the figure this project measured on the same device model
  (``results/reference/devices.json``). Another machine, another driver, another cooling: a
  wider margin (``REFERENCE_WARN``, ``REFERENCE_FAIL``);
- **nothing**: a device model alone in the cluster and absent from the table is recorded,
  not judged, and its row says so (WARN: nobody has checked it).

A CPU device computes only while its rank holds a CPU: on a host where other load or a
quota takes part of that time, every figure is slower with nothing wrong in the silicon.
Its rank records the CPU time it got in each repeat; a figure then falls short of its peers
only when it does so both in time and per CPU of time each rank got, and a ``CPU time``
row per rank judges the time itself: short of what it asked and of what its peers got,
the row names the host.

Links are judged against their nominal rate and against the other pairs; a node whose
every pair is slow while other pairs are not is named (its NIC, cable or port), a single
slow pair is named as that pair. On GPUs each node's ``transport`` row holds the network
NCCL chose against the one expected (``bench.analysis.transport``). The data path is judged
against what training needs: the samples per second the node's ranks trained at, with
headroom. The job is judged against the prediction from the device and link stages: inside
its band, or why not.
"""
from __future__ import annotations

import dataclasses
import math
import re
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench import record
from bench.analysis import breakdown, predict, transport
from bench.analysis.compare import difference_interval
from bench.analysis.predict import LinkRange
from bench.analysis.verdict import FAIL, PASS, SEVERITY, WARN, Row, worst
from bench.options import ConfigError

DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
STAGES = ("preflight", "device", "link", "data", "job")

# Against peers of the same model, beyond noise: 10% short is a warning, 20% a failure. A
# clean cluster of identical machines varies by a few percent (clocks, placement).
WARN_SHORTFALL = 0.10
FAIL_SHORTFALL = 0.20
# Against the reference table: another machine, driver and cooling; wider.
REFERENCE_WARN = 0.25
REFERENCE_FAIL = 0.50
# A link against its nominal rate: TCP over Ethernet reaches about 94% of the line rate, an
# all-reduce's bus bandwidth somewhat less.
LINK_WARN = 0.30
LINK_FAIL = 0.50
# The data path must read this many times what training takes: training reads while the
# other nodes read too, and a mount's rate varies.
DATA_HEADROOM = 1.5


@dataclasses.dataclass(frozen=True, slots=True)
class Figure:
    """One subject's repeated measurement of one check (higher is better)."""

    subject: str
    node: int
    model: str             # the device model ("" where there is none)
    check: str
    unit: str
    values: tuple[float, ...]
    note: str = ""         # what telemetry said meanwhile: clocks, throttling, temperature
    # A CPU device's: the CPUs' worth of time its rank got in each repeat, and the threads
    # that asked for it (empty, None: not recorded, as on GPUs).
    cpus: tuple[float, ...] = ()
    threads: int | None = None

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    def per_cpu(self) -> tuple[float, ...] | None:
        """Each repeat's figure per CPU of time the rank got (at most its threads count):
        what the device does with the time it was given, apart from how much it was given.
        None where the record holds no CPU time for every repeat."""
        if not self.threads or len(self.cpus) != len(self.values):
            return None
        return tuple(v / min(c, self.threads) for v, c in zip(self.values, self.cpus,
                                                              strict=True))


def exit_code(rows: Sequence[Row]) -> int:
    """0 only when nothing failed."""
    return 1 if any(row.status == FAIL for row in rows) else 0


def shortfall(values: Sequence[float], expected: Sequence[float]) -> tuple[float, float, float]:
    """How far ``values`` fall short of ``expected`` (a share of expected's mean: 0.2 is 20%
    slower), with its 95% interval (Welch's t) where each side has two or more figures; with
    fewer, the interval is the point."""
    base = statistics.fmean(expected)
    point = 1 - statistics.fmean(values) / base
    if len(values) >= 2 and len(expected) >= 2:
        low_diff, high_diff = difference_interval(list(expected), list(values))
        # mean(values) - mean(expected) in [low, high]: the shortfall is its negative.
        return point, -high_diff / base, -low_diff / base
    return point, point, point


def against_median_peer(values: Sequence[float], peers: Sequence[Figure],
                        expected: float) -> tuple[float, float, float]:
    """The shortfall against ``expected`` (the peers' median), with the interval of the
    comparison with the median peer: one outlier among the peers (the faulty device, when
    this one is healthy) moves neither."""
    median_peer = sorted(peers, key=lambda peer: peer.mean)[(len(peers) - 1) // 2]
    point = 1 - statistics.fmean(values) / expected
    _, low, high = shortfall(values, median_peer.values)
    scale = median_peer.mean / expected      # the median peer's interval, on expected's scale
    return point, 1 - (1 - low) * scale, 1 - (1 - high) * scale


def status_of(point: float, low: float, warn: float, fail: float) -> str:
    """FAIL when the shortfall is at least ``fail`` and surely at least ``warn``; WARN when
    it is at least ``warn`` and surely above zero; else PASS."""
    if point >= fail and low >= warn:
        return FAIL
    if point >= warn and low > 0:
        return WARN
    return PASS


def _percent(share: float) -> str:
    return f"{share:.0%}"


def _interval(point: float, low: float, high: float) -> str:
    if low == point == high:
        return "one figure a side: no interval"
    return f"CI {_percent(low)} to {_percent(high)}"


def judge_figures(figures: Sequence[Figure], stage: str,
                  reference: Mapping[str, Mapping[str, float]]) -> list[Row]:
    """Each figure against its peers (same model and check, other subjects) and against the
    reference table's figure for its model; the row takes the worse verdict."""
    rows = []
    for figure in figures:
        peers = [f for f in figures if f.check == figure.check and f.model == figure.model
                 and f.subject != figure.subject]
        reference_value = reference.get(figure.model, {}).get(figure.check)
        reasons, statuses, expected = [], [], None
        if peers:
            expected = statistics.median(peer.mean for peer in peers)
            point, low, high = against_median_peer(figure.values, peers, expected)
            status = status_of(point, low, WARN_SHORTFALL, FAIL_SHORTFALL)
            side = "below" if point > 0 else "above"
            reasons.append(f"{_percent(abs(point))} {side} its {len(peers)} peer(s) of the "
                           f"same model ({_interval(point, low, high)})")
            per_cpu = _per_cpu_against_peers(figure, peers)
            if per_cpu is not None:
                # Short of its peers in time and per CPU of time alike, or not at all: the
                # time alone can be a blip of other load, and per CPU alone is noisier
                # than either where hosts share memory under quotas (issue 27's link-fault
                # run, every host's CPU clean: up to 17% below per CPU, within 12% in time).
                per_cpu_status, words = per_cpu
                reasons.append(words)
                if SEVERITY[per_cpu_status] < SEVERITY[status]:
                    reasons.append("so it is short of time, not of speed: the time it did not "
                                   "get is judged in its CPU time row")
                status = min(status, per_cpu_status, key=SEVERITY.__getitem__)
            statuses.append(status)
        if reference_value is not None and reference_value > 0:
            point = 1 - figure.mean / reference_value
            status = status_of(point, point, REFERENCE_WARN, REFERENCE_FAIL)
            statuses.append(status)
            expected = reference_value if expected is None else expected
            side = "below" if point > 0 else "above"
            reasons.append(f"{_percent(abs(point))} {side} the reference {reference_value:.4g}"
                           f" {figure.unit} for {figure.model or 'this device'}")
        elif peers:
            reasons.append(f"no reference figure for {figure.model or 'this device'}: judged "
                           "against its peers only")
        if not statuses:
            statuses.append(WARN)
            reasons.append(f"no peer of the same model ({figure.model or 'unknown'}) and no "
                           "reference figure: measured, not judged")
        status = worst(statuses)
        if figure.note and status != PASS:
            reasons.append(figure.note)
        rows.append(Row(stage, figure.subject, figure.check, figure.unit, expected,
                        figure.mean, status, "; ".join(reasons), figure.values))
    return rows


def _per_cpu_against_peers(figure: Figure, peers: Sequence[Figure]) -> tuple[str, str] | None:
    """On CPU devices, the verdict against the peers per CPU of time each rank got: a rank
    that other load or a quota kept off its CPU in some repeats is not a slow device, and
    its ``CPU time`` row (``judge_cpu_time``) judges the time it did not get. (status,
    words), or None where this figure or a peer lacks the CPU time of its repeats."""
    mine = figure.per_cpu()
    theirs = [peer.per_cpu() for peer in peers]
    if mine is None or any(values is None for values in theirs):
        return None
    scaled = [dataclasses.replace(peer, values=values)
              for peer, values in zip(peers, theirs, strict=True) if values is not None]
    expected = statistics.median(peer.mean for peer in scaled)
    point, low, high = against_median_peer(mine, scaled, expected)
    side = "below" if point > 0 else "above"
    return (status_of(point, low, WARN_SHORTFALL, FAIL_SHORTFALL),
            f"per CPU of time each rank got, {_percent(abs(point))} {side} them "
            f"({_interval(point, low, high)})")


def judge_cpu_time(figures: Sequence[Figure]) -> list[Row]:
    """Each CPU rank's ``CPU time``: the share of its threads' time it got in its repeats,
    against what it asked (all of it) and against what its peers got (any model: the time
    is the host's to give, not the silicon's). It falls short only when short of both: a
    rank with all it asked is fine whatever its peers got, and ranks that all got the
    same part (one quota for every node, as an emulated lab sets) are not each other's
    fault. Short of both, something on its host took the rest: a CPU quota or other load,
    which the figures' rows, judged per CPU of time (``Figure.per_cpu``), do not blame on
    the device."""
    timed = [(f, f.threads) for f in figures if f.threads]
    shares = {f.subject: [min(c, threads) / threads for c in f.cpus] for f, threads in timed}
    rows = []
    for figure, threads in timed:
        mine = shares[figure.subject]
        peers = [values for subject, values in shares.items() if subject != figure.subject]
        targets = [1.0] + ([statistics.median(statistics.fmean(v) for v in peers)]
                           if peers else [])
        # The least demanding target: the better of the two verdicts.
        target = min(targets)
        point, low, high = shortfall(mine, [target, target])
        status = status_of(point, low, WARN_SHORTFALL, FAIL_SHORTFALL)
        got = statistics.fmean(min(c, threads) for c in figure.cpus)
        against = (f"the share its {len(peers)} peer(s) got ({target:.3g} of their "
                   "threads' time)" if target < 1 else "the time it asked (its threads')")
        reasons = [f"got {got:.3g} CPUs' worth of time for {threads} thread(s) "
                   f"while it measured, {_percent(abs(point))} "
                   f"{'below' if point > 0 else 'above'} {against} "
                   f"({_interval(point, low, high)})"]
        if status != PASS:
            reasons.append("something else on its host took the rest: a CPU quota or other "
                           "load (the figures' rows are judged per CPU of time it got)")
            if figure.note:
                reasons.append(figure.note)
        rows.append(Row("device", figure.subject, "CPU time", "CPUs",
                        threads * target, got, status, "; ".join(reasons),
                        tuple(figure.cpus)))
    return rows


@dataclasses.dataclass(frozen=True, slots=True)
class PairFigure:
    """One pair of nodes' all-reduce bus bandwidth, repeated (GB/s)."""

    nodes: tuple[int, int]
    values: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)


def pair_name(nodes: tuple[int, int]) -> str:
    return f"node {nodes[0]} - node {nodes[1]}"


def judge_links(pairs: Sequence[PairFigure], nominal_GBps: float | None,
                check: str) -> list[Row]:
    """Each pair against the nominal rate and against the other pairs; then, where every
    pair of one node is slow and some pair without it is not, a row naming that node."""
    rows, slow = [], set()
    for pair in pairs:
        others = [p for p in pairs if p is not pair]
        reasons, statuses = [], []
        expected = nominal_GBps
        if nominal_GBps:
            point = 1 - pair.mean / nominal_GBps
            statuses.append(status_of(point, point, LINK_WARN, LINK_FAIL))
            reasons.append(f"{pair.mean / nominal_GBps:.0%} of the nominal "
                           f"{nominal_GBps:.4g} GB/s")
        if others:
            pooled = [v for p in others for v in p.values]
            point, low, high = shortfall(pair.values, pooled)
            statuses.append(status_of(point, low, WARN_SHORTFALL, FAIL_SHORTFALL))
            side = "below" if point > 0 else "above"
            reasons.append(f"{_percent(abs(point))} {side} the other {len(others)} pair(s) "
                           f"({_interval(point, low, high)})")
            expected = expected or statistics.median(p.mean for p in others)
        if not statuses:
            statuses.append(WARN)
            reasons.append("no nominal rate and no other pair: measured, not judged")
        status = worst(statuses)
        if status != PASS and (nominal_GBps or others):    # judged slow, not unjudged
            slow.add(pair.nodes)
        rows.append(Row("link", pair_name(pair.nodes), check, "GB/s", expected, pair.mean,
                        status, "; ".join(reasons), pair.values))
    rows.extend(_blame_nodes(pairs, slow))
    return rows


def _blame_nodes(pairs: Sequence[PairFigure], slow: set[tuple[int, int]]) -> list[Row]:
    """A node in every slow pair, every one of its pairs slow, and a pair without it that
    is not: its own link (NIC, cable, switch port) is the fault."""
    if not slow:
        return []
    nodes = sorted({n for pair in pairs for n in pair.nodes})
    rows = []
    for node in nodes:
        own = [p for p in pairs if node in p.nodes]
        if all(p.nodes in slow for p in own) and all(node in p for p in slow) \
                and any(node not in p.nodes for p in pairs):
            fine = [p.mean for p in pairs if node not in p.nodes]
            own_rate = statistics.median(p.mean for p in own)
            rows.append(Row("link", f"node {node}", "its link", "GB/s",
                            statistics.median(fine), own_rate, FAIL,
                            f"every pair with node {node} is slow ({own_rate:.3g} GB/s, "
                            f"median of {len(own)}), the pairs without it are not "
                            f"({statistics.median(fine):.3g} GB/s): node {node}'s NIC, cable "
                            "or switch port", tuple(p.mean for p in own)))
    if len(nodes) == 2 and len(pairs) == 1 and slow:
        (pair,) = pairs
        rows.append(Row("link", pair_name(pair.nodes), "which end", "GB/s", None, pair.mean,
                        WARN, "two nodes share one link: either end may be at fault; a "
                        "third node would tell them apart", ()))
    return rows


@dataclasses.dataclass(frozen=True, slots=True)
class DataFigure:
    """One node's read of the dataset through its mount."""

    node: int
    mb_per_s: tuple[float, ...]
    files_per_s: tuple[float, ...]
    need_mb_per_s: float | None      # what its ranks' training reads at stage 2's rate


def judge_data(figures: Sequence[DataFigure]) -> list[Row]:
    rows = []
    for figure in figures:
        if not figure.mb_per_s or not figure.files_per_s:
            rows.append(Row("data", f"node {figure.node}", "dataset read", "MB/s",
                            figure.need_mb_per_s, None, FAIL, "nothing was read: the "
                            "directory holds no file this node can see"))
            continue
        measured = statistics.fmean(figure.mb_per_s)
        files = statistics.fmean(figure.files_per_s)
        need = figure.need_mb_per_s
        if not need:
            status, reason = WARN, "training's need unknown (no device figure): not judged"
        elif measured < need:
            status = FAIL
            reason = (f"reads {measured:.4g} MB/s ({files:.4g} files/s), training needs "
                      f"{need:.4g} MB/s: the data path would hold the job back "
                      f"{1 - measured / need:.0%}")
        elif measured < need * DATA_HEADROOM:
            status = WARN
            reason = (f"reads {measured / need:.2g}x what training needs, under the "
                      f"{DATA_HEADROOM:g}x headroom")
        else:
            status = PASS
            reason = f"reads {measured / need:.3g}x what training needs ({files:.4g} files/s)"
        rows.append(Row("data", f"node {figure.node}", "dataset read", "MB/s", need,
                        measured, status, reason, figure.mb_per_s))
    return _blame_server(rows)


def _blame_server(rows: list[Row]) -> list[Row]:
    """Every node reads too slowly: what they share (the server, its disk or its link) is
    the cause, not each node. One node alone: its mount, NIC or link."""
    short = [row for row in rows if row.status == FAIL and row.measured is not None]
    if len(rows) < 2 or len(short) != len(rows):
        return rows
    total = sum(row.measured or 0.0 for row in rows)
    return [dataclasses.replace(row, reason=row.reason + (
        f"; every node reads too slowly ({total:.4g} MB/s together): the cause is what they "
        "share, the data server, its disk or its link, not this node")) for row in rows]


def judge_job(values: Sequence[float], predicted: float, band: tuple[float, float],
              unit: str, straggler: str = "") -> Row:
    """The whole job against the prediction from stages 2-3: inside its band passes; below
    it by up to FAIL_SHORTFALL warns; further below fails; above warns (the model is
    pessimistic, nothing in the cluster is at fault). A FAIL must mean the cluster is at
    fault, and the model is not that sure: without compression it has been optimistic by
    up to 21% (the README's demo), with compression hooks by up to 26%
    (results/reference/accuracy-heldout). A job 10% below its band, where a clean two-node
    Slurm cluster on this project's test machine has come, is a warning, not a verdict."""
    measured = statistics.median(values)
    low, high = band
    if low <= measured <= high:
        status, reason = PASS, f"inside the predicted band {low:.4g}-{high:.4g}"
    elif measured > high:
        status, reason = WARN, (f"above the predicted band {low:.4g}-{high:.4g}: the "
                                "prediction is pessimistic here")
    else:
        short = 1 - measured / low
        status = FAIL if short > FAIL_SHORTFALL else WARN
        reason = f"{short:.0%} below the predicted band {low:.4g}-{high:.4g}"
    if straggler:
        reason += f"; {straggler}"
    return Row("job", "job", "training throughput", unit, predicted, measured, status,
               reason, tuple(values))


def against_baseline(rows: Sequence[Row], baseline: Sequence[Row], date: str) -> list[Row]:
    """Each row with repeats that the baseline also has: slower or faster than then, with
    the confidence interval ``bench compare`` uses, or within noise."""
    before = {(r.stage, r.subject, r.check): r for r in baseline if r.values}
    out = []
    for row in rows:
        then = before.get((row.stage, row.subject, row.check))
        if then is None or not row.values:
            continue
        point, low, high = shortfall(row.values, then.values)
        status = status_of(point, low, WARN_SHORTFALL, FAIL_SHORTFALL)
        if low == high == point:
            words = f"{_percent(abs(point))} {'slower' if point > 0 else 'faster'} than on " \
                    f"{date} (one figure a side: no interval)"
        elif low <= 0 <= high:
            words = f"within noise of {date} ({_interval(point, low, high)})"
        else:
            words = (f"{_percent(abs(point))} {'slower' if point > 0 else 'faster'} than on "
                     f"{date}, {_interval(point, low, high)}")
        out.append(Row(row.stage, row.subject, f"{row.check} vs baseline", row.unit,
                       then.measured, row.measured, status, f"{row.subject}: {words}",
                       row.values))
    return out


def _bounded_text(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 4096 and "\0" not in value


def finite_row(row: Mapping) -> bool:
    """A row read back from a verdict file that can be compared: the fields of ``Row``
    with finite figures. Anything else is skipped by the reader, with a warning."""
    try:
        values = row["values"]
        return (all(_bounded_text(row[k]) for k in ("stage", "subject", "check", "unit",
                                                    "status", "reason"))
                and len(values) <= 1000
                and row["status"] in SEVERITY and isinstance(values, list)
                and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                        and math.isfinite(v) for v in values)
                and all(row[k] is None or (isinstance(row[k], (int, float))
                                           and not isinstance(row[k], bool)
                                           and math.isfinite(row[k]))
                        for k in ("expected", "measured")))
    except (KeyError, TypeError):
        return False


def row_from(row: Mapping) -> Row:
    return Row(**{k: row[k] for k in ("stage", "subject", "check", "unit", "expected",
                                      "measured", "status", "reason")},
               values=tuple(float(v) for v in row["values"]))


# --- from the acceptance record (mode accept) to figures ----------------------------------

def device_figures(rec: Mapping) -> list[Figure]:
    """Every device's figures in an accept record, one Figure per device and check."""
    out = []
    for device in rec.get("devices") or []:
        subject = f"node {device['node_rank']} {device.get('hostname', '')} rank " \
                  f"{device['rank']}".replace("  ", " ")
        for check, figure in sorted(device["figures"].items()):
            label = check if check != "training" else \
                f"training {figure.get('workload', '')}".strip()
            out.append(Figure(subject, device["node_rank"], device["device"], label,
                              figure["unit"], tuple(figure["values"]), device.get("note", ""),
                              tuple(figure.get("cpus") or ()), device.get("threads")))
    return out


def cpu_time_figures(figures: Sequence[Figure]) -> list[Figure]:
    """Each CPU rank's CPU time over all its repeats, one Figure per device (``values``:
    the CPUs' worth of each repeat), from figures that recorded it."""
    by_subject: dict[str, list[Figure]] = {}
    for figure in figures:
        if figure.threads and len(figure.cpus) == len(figure.values):
            by_subject.setdefault(figure.subject, []).append(figure)
    return [Figure(subject, own[0].node, own[0].model, "CPU time", "CPUs",
                   tuple(c for f in own for c in f.cpus), own[0].note,
                   tuple(c for f in own for c in f.cpus), own[0].threads)
            for subject, own in by_subject.items()]


def pair_figures(rec: Mapping) -> list[PairFigure]:
    return [PairFigure((link["nodes"][0], link["nodes"][1]), tuple(link["values"]))
            for link in rec.get("links") or []]


def data_figures(rec: Mapping) -> list[DataFigure]:
    """Each node's read; what its training needs is its devices' median training rate
    times the bytes per sample the dataset holds on disk (unknown without a sample count)."""
    trained: dict[int, float] = {}
    for device in rec.get("devices") or []:
        figure = device["figures"].get("training")
        if figure:
            node = device["node_rank"]
            trained[node] = trained.get(node, 0.0) + statistics.median(figure["values"])
    out = []
    for read in rec.get("data") or []:
        need = None
        if read.get("samples") and read["bytes"] and read["node"] in trained:
            need = trained[read["node"]] * read["bytes"] / read["samples"] / 1e6
        out.append(DataFigure(read["node"], tuple(read["MBps"]), tuple(read["files_per_s"]),
                              need))
    return out


def _or_its_cpu(row: Row, failed_nodes: set[int]) -> Row:
    """gloo sums and copies on the CPU: a node whose device failed its checks slows every
    pair it is in, whatever its link. Its link row says so instead of blaming the cable."""
    if row.check != "its link" or int(row.subject.split()[-1]) not in failed_nodes:
        return row
    node = row.subject.split()[-1]
    return dataclasses.replace(row, reason=row.reason.split(": node ")[0] + (
        f": node {node}'s device failed its checks too, and gloo's all-reduce runs on the "
        f"CPU: the cause may be its CPU, not its link (see its device rows)"))


def judge_record(rec: Mapping, reference: Mapping[str, Mapping[str, float]],
                 nominal_GBps: float | None, expect_net: str | None = None,
                 expect_source: str | None = None) -> list[Row]:
    """The device, link and data rows of one accept record. On GPUs (an nccl job) the link
    stage has a ``transport`` row per node: the network NCCL chose against ``expect_net``
    (named as ``expect_source`` in its reasons; without it, what the nodes were told)."""
    figures = device_figures(rec)
    rows = judge_figures(figures, "device", reference)
    cpu_time = cpu_time_figures(figures)
    rows += judge_cpu_time(cpu_time)
    figures += cpu_time
    pairs = pair_figures(rec)
    if pairs:
        size = rec["links"][0]["bytes"]
        links = judge_links(pairs, nominal_GBps, f"all-reduce {size / 2**20:g} MiB")
        if rec.get("backend") == "gloo":
            failed = {f.node for f, row in zip(figures, rows, strict=True) if row.status == FAIL}
            links = [_or_its_cpu(row, failed) for row in links]
        rows += links
    rows += transport.judge(rec.get("nccl_transport"), rec.get("nnodes"), expect_net,
                            expect_source)
    reads = data_figures(rec)
    rows += [row for row in judge_data(reads) if reads]
    return rows


def read_verdict(path: Path, setting: str = "--baseline") -> tuple[list[Row], str]:
    """An earlier ``accept.json``: its rows (each that cannot be compared skipped with a
    warning naming the file and the row) and its date."""
    try:
        # Non-finite figures are read: the row holding one is skipped below, not the file.
        document = record.document(path.read_text(encoding="utf-8", errors="replace"),
                                   finite=False)
    except (OSError, ValueError) as error:
        raise ConfigError(setting, path, f"cannot be read as JSON ({error}): give an "
                          "accept.json that bench accept wrote") from None
    rows_in = document.get("rows") if isinstance(document, dict) else None
    if not isinstance(rows_in, list):
        raise ConfigError(setting, path, 'holds no "rows" list: give an accept.json that '
                          "bench accept wrote")
    rows = []
    for index, row in enumerate(rows_in, 1):
        if isinstance(row, dict) and finite_row(row):
            rows.append(row_from(row))
        else:
            print(f"{path}: row {index}: skipped: not a verdict row with finite figures",
                  file=sys.stderr)
    when = document.get("utc_time")
    date = when[:10] if isinstance(when, str) and DATE.fullmatch(when[:10]) else "the baseline"
    return rows, date


def job_row(sweeps: list[dict], records: list[dict], nodes: int) -> Row:
    """The whole job against the prediction: the link as the job stage's all-reduce sweep
    measured it, the one-node runs' bucket timelines, and the N-node runs measured on the
    same link. A record that names a straggler adds its words to the reason."""
    ok_sweeps = record.link_sweeps(sweeps)
    many = [r for r in records if r.get("status") == "ok" and r.get("nnodes") == nodes]
    failed = [r for r in records if r.get("status") != "ok"]
    if failed:
        return Row("job", "job", "training throughput", "samples/s", None, None, FAIL,
                   f"{len(failed)} training job(s) failed: {failed[0]['status']}: "
                   f"{failed[0].get('error')}")
    repeats = predict.single_node_repeats(records)
    if not ok_sweeps or not repeats or not many:
        return Row("job", "job", "training throughput", "samples/s", None, None, FAIL,
                   "nothing to compare: the job stage needs an ok all-reduce sweep, one-node "
                   f"runs with a bucket timeline and {nodes}-node runs")
    links = LinkRange.of_sweeps(ok_sweeps)
    # measured_rates matches records by the link's rate, which only emulated links record;
    # here every record is this cluster's, on its own link.
    measured: dict[tuple, list[float]] = {(predict.setup_key(r), nodes): [] for r in many}
    for rec in many:
        measured[(predict.setup_key(rec), nodes)].append(rec["samples_per_s"])
    (predicted, *_) = predict.predictions(repeats, links, [nodes], measured)
    band = predicted.samples_per_s
    words = "; ".join(filter(None, (breakdown.console_words(r) for r in many)))
    return judge_job([r["samples_per_s"] for r in many], band.point, (band.low, band.high),
                     "samples/s", straggler=words)


# --- the reference table: per device model, what this project measured on it -------------

def reference_table(records: Sequence[Mapping], sources: Sequence[str]) -> dict:
    """``results/reference/devices.json`` from accept records (mode accept, status ok): for
    each device model and check, the median over its devices of their mean figure. The
    table names the records it came from, with their commit, driver and software, so a
    figure can be traced to its run."""
    by_check: dict[str, dict[str, list[float]]] = {}
    for rec in records:
        for figure in device_figures(rec):
            if figure.model:
                by_check.setdefault(figure.model, {}).setdefault(figure.check, []).append(
                    figure.mean)
    env = [rec.get("env") or {} for rec in records]
    return {
        "about": "Device figures this project measured with `bench accept --stages device`; "
                 "bench accept judges a device of the same model against them (25% short "
                 "warns, 50% fails: another machine, driver and cooling). Rebuild with "
                 "scripts/device_reference.py.",
        "models": {model: {check: round(statistics.median(values), 4)
                           for check, values in sorted(checks.items())}
                   for model, checks in sorted(by_check.items())},
        "sources": [{"file": source, "utc_time": rec.get("utc_time"),
                     "git_commit": e.get("git_commit"), "driver": e.get("driver"),
                     "torch": e.get("torch"), "cuda": e.get("cuda")}
                    for source, rec, e in zip(sources, records, env, strict=True)],
    }
