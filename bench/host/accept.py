"""``python -m bench accept``: does this cluster work? One verdict per device, link and data path.

  python -m bench accept --launcher netns --link 1gbit --nodes 4 --out results/accept-TAG
  python -m bench accept --launcher ssh --hosts h1,h2,h3 --gpus 2 --nominal-link 10gbit \\
      --data-dir /data/fashion-mnist --data-samples 70000 --out results/accept-TAG

Stages, each a set of rows PASS, WARN or FAIL with the expected figure, the measured one and
the reason (``bench.analysis.acceptance`` judges them):

  preflight  the launcher's own checks (doctor's, for ssh): can a job start at all
  device     every device at once: matrix multiply per precision, memory bandwidth, pinned
             host-to-device copies (GPUs), a reference workload's training throughput; each
             against the same model on the other nodes and the reference table
  link       each pair of nodes all-reduces at the bucket size, pairs in rounds; against
             the nominal rate and the other pairs; a node whose every pair is slow is named.
             On GPUs, a transport row per node: the network NCCL chose (its own INFO
             lines) against --expect-net (or BENCH_EXPECT_NET): a fall-back to sockets
             where InfiniBand is expected fails, naming the node; with nothing expected,
             sockets between nodes warn
  data       each node reads the dataset through its mount, against what its devices train
  job        an all-reduce sweep over the nodes, then training on 1 node and on N nodes,
             interleaved, repeated, the 1-node run again after the N-node one in each
             round (bracketed, so a machine's drift between the two moments cancels): the
             N-node throughput against the prediction from the 1-node runs and the
             measured link, inside its band; with the straggler line

The device, link and data stages are one job (``bench matrix --workload accept``, through
any launcher: its flags are the matrix's), so a node that dies still leaves its row; the job
stage's runs are matrices too (``OUT/job-link.jsonl``, ``OUT/job.jsonl``). Exit 0
only when nothing failed; 1 on a FAIL; 2 on a bad setting. The verdict goes to the console
as one table and to ``OUT/accept.json``; the job's figures stay in
``OUT/accept-figures.jsonl``.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from tabulate import tabulate

from bench import nccl_log, record
from bench.accept_config import STAGES, parse_stages
from bench.analysis import acceptance, report
from bench.analysis.acceptance import FAIL, PASS, Row
from bench.config import OneLineErrorParser
from bench.host import accept_export, gpus, matrix
from bench.host.launchers import registry
from bench.host.launchers.netns import NetnsOptions
from bench.host.netlab import terminate_raises
from bench.options import ConfigError, require_range
from bench.paths import check_output, owned_json, path_arg, write_output
from bench.topology import Topology
from bench.units import parse_rate

REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference" / "devices.json"
FIX = "choose another --out directory, or remove what is there"
FIGURES = "accept-figures.jsonl"
ALL_STAGES = ("preflight", *STAGES, "job")


def parser(prog: str) -> OneLineErrorParser:
    p = OneLineErrorParser(prog=prog, description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=path_arg, required=True,
                   help="directory for accept.json and the figures (created)")
    p.add_argument("--nodes", type=int, default=2, help="nodes in the job (default: 2)")
    p.add_argument("--gpus", type=int, default=1,
                   help="processes per node: its GPUs, or 1 on CPUs (default: 1)")
    p.add_argument("--stages", default="preflight,device,link,job",
                   help="of preflight, device, link, data, job (default: all but data, "
                   "which needs the rank side's --data-dir)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="the nodes' devices (auto: cuda where this host sees a GPU)")
    p.add_argument("--job-repeats", type=int, default=3,
                   help="job stage: repeats of the 1-node and the N-node run (default: 3)")
    # 100, not 30: 30 steps of the CPU workload time about one second, which one scheduler
    # hiccup moves by a fifth (a CI run's clean 2-node repeats read 428.7, 302.3 and 570.1
    # samples/s, and the job row failed a clean cluster).
    p.add_argument("--job-steps", type=int, default=100,
                   help="job stage: timed steps per run (default: 100)")
    p.add_argument("--nominal-link", help="each node's link rate, e.g. 10gbit (default: "
                   "--link for the netns launcher; else links are judged against each "
                   "other only)")
    p.add_argument("--expect-net", help="the network NCCL must choose between nodes: IB "
                   "(InfiniBand or RoCE) or Socket (default: BENCH_EXPECT_NET here, else what "
                   "the nodes were told, as the gpu-ib profile tells them IB; with none, "
                   "sockets between nodes only warn)")
    p.add_argument("--reference", type=path_arg, default=REFERENCE,
                   help="the device reference table (JSON: model -> check -> figure)")
    p.add_argument("--baseline", type=path_arg,
                   help="an earlier accept.json of this cluster: each figure is also judged "
                   "against it, with a confidence interval")
    p.add_argument("--prometheus-textfile", type=path_arg,
                   help="also write the verdict for node_exporter's textfile collector, "
                   "e.g. /var/lib/node_exporter/bench_accept.prom")
    p.add_argument("--pushgateway", help="also push the verdict to this Pushgateway, e.g. "
                   "http://127.0.0.1:9091")
    p.add_argument("--cluster", default="default",
                   help="the cluster's name: the Pushgateway group (default: default)")
    return p


# The matrix's flags that accept sets itself: the job it runs is one cell, once.
OWNED = ("--workload", "--topologies", "--results", "--resume", "--interleave", "--bracket",
         "--repeats", "--batch-sizes", "--models", "--precisions", "--comm-hooks",
         "--grad-accums", "--strategies")


def refuse_owned(launcher_args: list[str]) -> None:
    """A matrix flag accept sets (however abbreviated) is refused, not silently replaced."""
    for arg in launcher_args:
        flag = arg.split("=", 1)[0]
        owned = [o for o in OWNED if flag.startswith("--") and len(flag) > 3
                 and o.startswith(flag)]
        if owned:
            raise ConfigError(flag, arg, f"is set by bench accept itself ({owned[0]}): "
                              "leave it out; --nodes and --gpus give the topology")


def load_reference(path: Path) -> dict[str, dict[str, float]]:
    """model -> check -> figure; a missing file is an empty table, a bad one an error."""
    if not path.exists():
        return {}
    try:
        table = record.document(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError) as error:
        raise ConfigError("--reference", path, f"cannot be read as JSON ({error})") from None
    models = table.get("models", {}) if isinstance(table, dict) else None
    if not isinstance(models, dict) or \
            not all(isinstance(checks, dict) for checks in models.values()):
        raise ConfigError("--reference", path, 'must be {"models": {MODEL: {CHECK: '
                          'FIGURE}}}')
    return {model: {check: float(value) for check, value in checks.items()
                    if isinstance(value, (int, float)) and not isinstance(value, bool)
                    and 0 < value < 1e12}
            for model, checks in models.items() if isinstance(checks, dict)}


def parse_stages_all(text: str) -> tuple[str, ...]:
    """preflight, the rank job's stages (device, link, data) and job, in that order."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    rank_side = [n for n in names if n not in ("preflight", "job")]
    if not names or len(set(names)) != len(names):
        raise ConfigError("--stages", text, f"must list stages from {','.join(ALL_STAGES)}, "
                          "each once, e.g. preflight,device,link")
    stages = parse_stages(",".join(rank_side), "--stages") if rank_side else ()
    return tuple(s for s in ALL_STAGES if s in names and (s in stages or s not in STAGES))


@dataclasses.dataclass(frozen=True, slots=True)
class Jobs:
    """What accept runs, each a matrix (one launcher, one set of launcher flags), all
    checked before anything starts."""

    measure: matrix.MatrixConfig | None     # the rank side: device, link, data
    sweep: matrix.MatrixConfig | None       # the job stage: the link, as predict reads it
    train: matrix.MatrixConfig | None       # the job stage: 1, N, 1 nodes, interleaved


def job_workload(device: str) -> list[str]:
    """The job stage's training: on GPUs the lab convention (resnet50, mixed precision:
    auto, bf16 where every GPU has it natively, else fp16, so a V100 or T4 cluster is
    judged too rather than refused), on CPUs the workload the prediction was checked on
    (the mlp 1024x4 at batch 16)."""
    if device == "cuda":
        return ["--models", "resnet50", "--batch-sizes", "64", "--precisions", "auto"]
    return ["--models", "mlp", "--batch-sizes", "16"]


def plan(a: argparse.Namespace, stages: tuple[str, ...], launcher_args: list[str],
         rank_args: list[str], prog: str) -> Jobs:
    topology = f"{a.nodes}x{a.gpus}"
    device = ["--device", a.device]
    measure = sweep = train = None
    rank_stages = [s for s in stages if s in STAGES]
    if rank_stages:
        measure = matrix.MatrixConfig.from_args(
            ["--workload", "accept", "--topologies", topology, "--results",
             str(a.out / FIGURES), *launcher_args, "--", "--stages", ",".join(rank_stages),
             *device, *rank_args], prog)
    if "job" in stages:
        if a.nodes < 2:
            raise ConfigError("--nodes", a.nodes, "the job stage compares N nodes with one: "
                              "give --nodes 2 or more, or leave job out of --stages")
        sweep = matrix.MatrixConfig.from_args(
            ["--workload", "allreduce", "--topologies", topology, "--results",
             str(a.out / "job-link.jsonl"), *launcher_args, "--", "--max-size", "64MiB",
             *device], prog)
        train = matrix.MatrixConfig.from_args(
            ["--topologies", f"1x{a.gpus},{topology}", "--repeats", str(a.job_repeats),
             "--interleave", "--bracket", *job_workload(resolved_device(a.device)), "--results",
             str(a.out / "job.jsonl"), *launcher_args, "--", "--steps", str(a.job_steps),
             "--warmup-steps", "5", "--log-every", "0", *device,
             *(["--mlp-width", "1024", "--mlp-depth", "4"]
               if resolved_device(a.device) != "cuda" else [])], prog)
    return Jobs(measure, sweep, train)


def resolved_device(device: str) -> str:
    """auto: cuda where this host sees a GPU (the nodes resolve it themselves too)."""
    if device != "auto":
        return device
    return "cuda" if gpus.visible_gpus() else "cpu"


def verdict_table(rows: list[Row]) -> str:
    return tabulate(report.verdict_cells(rows), headers=report.VERDICT_HEADERS,
                    tablefmt="pipe", disable_numparse=True)


def main(argv: list[str] | None = None, prog: str = "bench accept") -> int:
    argv = sys.argv[1:] if argv is None else argv
    own_and_launcher, rank_args = matrix.split_trainer_args(argv)
    try:
        # Accept's own flags first; the rest are the matrix's launcher flags, which the
        # matrix checks before anything starts.
        a, launcher_args = parser(prog).parse_known_args(own_and_launcher)
        refuse_owned(launcher_args)
        require_range(a.nodes, "nodes", 1, 4096)
        require_range(a.gpus, "gpus", 1, 1024)
        require_range(a.job_repeats, "job_repeats", 2, 100)
        require_range(a.job_steps, "job_steps", 5, 100_000)
        stages = parse_stages_all(a.stages)
        accept_export.check_cluster(a.cluster)
        if a.pushgateway:
            a.pushgateway = accept_export.check_gateway(a.pushgateway)
        if a.prometheus_textfile:
            accept_export.check_textfile(a.prometheus_textfile)
        expect = expected_net(a.expect_net, os.environ)
        reference = load_reference(a.reference)
        baseline = acceptance.read_verdict(a.baseline) if a.baseline else None
        verdict_path = a.out / "accept.json"
        check_output(verdict_path, "--out", (), FIX)
        jobs = plan(a, stages, launcher_args, rank_args, prog)
        first = jobs.measure or jobs.train or matrix.MatrixConfig.from_args(
            ["--results", str(a.out / FIGURES), *launcher_args], prog)
        nominal_bps = parse_rate(a.nominal_link, "--nominal-link") if a.nominal_link else \
            (first.launcher_options.link_bps
             if isinstance(first.launcher_options, NetnsOptions) else None)
        launcher = registry.build(first.launcher, first.launcher_options)
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    if first.dry_run:
        # --dry-run: every job as its launcher would start it (Kubernetes: its manifests).
        print("\n\n".join(matrix.render(cfg, launcher)
                           for cfg in (jobs.measure, jobs.sweep, jobs.train) if cfg))
        return 0
    rows: list[Row] = []
    if "preflight" in stages:
        topologies = [Topology.parse(f"{a.nodes}x{a.gpus}")]
        try:
            launcher.preflight(topologies)
            rows.append(Row("preflight", first.launcher, "launcher checks", "", None, None,
                            PASS, "every check passed (the table above)"))
        except RuntimeError as error:
            rows.append(Row("preflight", first.launcher, "launcher checks", "", None, None,
                            FAIL, str(error)))
            return finish(prog, rows, verdict_path, a)
    a.out.mkdir(parents=True, exist_ok=True)
    with terminate_raises():
        try:
            if jobs.measure:
                matrix.run(jobs.measure, launcher)
                measured = measured_rows(a.out / FIGURES, reference, nominal_bps, expect)
                rows += measured
                if baseline:
                    rows += acceptance.against_baseline(measured, *baseline)
            if jobs.sweep and jobs.train:
                matrix.run(jobs.sweep, launcher)
                matrix.run(jobs.train, launcher)
                rows.append(acceptance.job_row(
                    list(record.read(jobs.sweep.results)),
                    list(record.read(jobs.train.results)), a.nodes))
        except matrix.Interrupted as stop:
            rows.append(Row("job", "job", "acceptance", "", None, None, FAIL,
                            f"interrupted by {stop}: every node was stopped"))
            finish(prog, rows, verdict_path, a)
            return stop.exit_code
    return finish(prog, rows, verdict_path, a)


def expected_net(flag: str | None,
                 environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(the network NCCL must choose, how the verdict names where that came from):
    --expect-net, else BENCH_EXPECT_NET here; (None, None) leaves it to the nodes'."""
    if flag is not None:
        name = nccl_log.net_name(flag, "--expect-net")
        return name, f"--expect-net {name}" if name else None
    name = nccl_log.expected_net(environ)
    return name, f"{nccl_log.EXPECT_SETTING}={name}" if name else None


def measured_rows(figures: Path, reference: dict, nominal_bps: int | None,
                  expect: tuple[str | None, str | None] = (None, None)) -> list[Row]:
    """The job's record judged; a failed job is one FAIL row with its cause."""
    records = [r for r in record.read(figures) if r.get("mode") == "accept"] \
        if figures.exists() else []
    if not records:
        return [Row("device", "job", "acceptance measurements", "", None, None, FAIL,
                    f"no record in {figures}")]
    rec = records[-1]
    if rec["status"] != "ok":
        return [Row("device", "job", "acceptance measurements", "", None, None, FAIL,
                    f"{rec['status']}: {rec.get('error')}")]
    return acceptance.judge_record(rec, reference,
                                   nominal_bps / 8 / 1e9 if nominal_bps else None, *expect)


def finish(prog: str, rows: list[Row], verdict_path: Path, a: argparse.Namespace) -> int:
    code = acceptance.exit_code(rows)
    now = time.time()
    print(verdict_table(rows))
    failed = sum(r.status == FAIL for r in rows)
    warned = sum(r.status == "WARN" for r in rows)
    verdict = {"utc_time": record.utc_now(), "exit_code": code, "failed": failed,
               "warned": warned, "rows": [r.as_dict() for r in rows]}
    try:
        verdict_path.parent.mkdir(parents=True, exist_ok=True)
        write_output(verdict_path, owned_json(verdict), setting="--out", fix=FIX)
    except (OSError, ConfigError) as error:
        print(f"{prog}: could not write {verdict_path} ({error})", file=sys.stderr)
        return 1
    print(f"[accept] {'FAIL' if failed else 'PASS'}: {failed} failed, {warned} warned, "
          f"{len(rows) - failed - warned} passed; verdict in {verdict_path}", file=sys.stderr)
    try:
        # The verdict as the first section of the job's report (or the figures' page).
        for base in (a.out / "job.jsonl", a.out / FIGURES):
            if base.exists():
                _, page = report.write(base, verdict=rows)
                print(f"[accept] report: {page}", file=sys.stderr)
                break
        if a.prometheus_textfile:
            accept_export.write_textfile(a.prometheus_textfile, rows, code, now)
            print(f"[accept] for node_exporter: {a.prometheus_textfile}", file=sys.stderr)
        if a.pushgateway:
            accept_export.push(a.pushgateway, a.cluster, rows, code, now)
            print(f"[accept] pushed to {a.pushgateway} (job {accept_export.JOB}, cluster "
                  f"{a.cluster})", file=sys.stderr)
    except (OSError, ConfigError) as error:   # URLError is an OSError
        print(f"{prog}: the verdict stands, but its export failed: {error}", file=sys.stderr)
        return 1
    return code
