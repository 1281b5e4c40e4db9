"""``python -m bench matrix``: the batch-size x topology matrix, each repeat a fresh job.

  python -m bench matrix --batch-sizes 64,128 --topologies 1x1,1x2,2x1 --repeats 3 \\
      [--launcher native|compose|ssh --hosts h1,h2] -- --steps 20 --model resnet18

Cells are BATCH_SIZES x TOPOLOGIES (x MODELS x PRECISIONS x BACKENDS x COMM_HOOKS x
GRAD_ACCUMS x STRATEGIES when several are given). ``--workload allreduce`` runs the all-reduce sweep
instead (cells: TOPOLOGIES x BACKENDS; flags after -- go to ``bench allreduce``).
``--launcher netns --link 1gbit`` runs every node in its own network namespace behind a
link shaped to that rate (root; see bench/netlab.py).

Each repeat of a cell is one job through the chosen launcher. Records are appended
as jobs finish; a failed, OOM or timed-out job is recorded with its reason (the node that
failed and its last lines) and the matrix goes on. Ctrl-C, SIGTERM or SIGHUP stop every
node and rank, record the running job as interrupted, write the report and exit 130, 143
or 129. Each job leases its port above --master-port (bench/host/ports.py), so two
matrices on one host never share one. ``--resume`` skips repeats that already
have an ok record for the same config hash and topology.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from bench import record
from bench.accept_config import AcceptConfig
from bench.allreduce_config import AllreduceConfig
from bench.allreduce_config import headline as allreduce_headline
from bench.analysis import breakdown, report
from bench.catalog import MODEL_NAMES
from bench.config import (
    BACKENDS,
    COMM_HOOKS,
    MAX_TIMEOUT_S,
    PRECISIONS,
    STRATEGIES,
    OneLineErrorParser,
    TrainConfig,
)
from bench.host import gpus, ports
from bench.host.failures import describe_failure, failure_record, torn_record_error
from bench.host.launchers import JobSpec, Launcher, registry
from bench.host.launchers.compose import ComposeOptions
from bench.host.launchers.flags import LaunchContext
from bench.host.launchers.netns import NetnsOptions
from bench.host.launchers.nodes import CONSOLE, say, shielded
from bench.host.netlab import terminate_raises
from bench.options import (
    MAX_PORT,
    MIN_PORT,
    ConfigError,
    finite_float,
    on_head,
    require_range,
)
from bench.paths import check_output, check_results_beside_reports, path_arg
from bench.topology import (
    Topology,
    parse_choices,
    parse_list,
    parse_positive_ints,
)

LAUNCHERS = registry.LAUNCHERS
PORT_SPAN = 100   # ports above --master-port the jobs of a matrix take in turn
WORKLOADS = {"train": "bench.rank.train", "allreduce": "bench.rank.allreduce",
             "accept": "bench.rank.accept"}
# The workloads other than training: cells are TOPOLOGIES x BACKENDS, flags after -- are theirs.
CONFIGS: dict[str, type[AllreduceConfig] | type[AcceptConfig]] = {
    "allreduce": AllreduceConfig, "accept": AcceptConfig}
WORKLOAD_WORDS = {"allreduce": "all-reduce", "accept": "acceptance"}
# Trainer flags the matrix sets per cell, and the matrix flag that sets them.
DIMENSION_FLAGS = {"--batch-size": "--batch-sizes", "--model": "--models",
                   "--precision": "--precisions", "--backend": "--backends",
                   "--comm-hook": "--comm-hooks", "--grad-accum": "--grad-accums",
                   "--strategy": "--strategies"}
# Trainer flags the matrix sets for every job itself, and why they cannot be given after --.
OWNED_FLAGS = {"--results": "the matrix owns the results path: give --results before --"}
# Launchers whose nodes run on this host: a job's port is probed here before it starts.
LOCAL_LAUNCHERS = ("native", "compose")
# Matrix flags that only mean something for the trainer, with their defaults.
TRAIN_DIMENSIONS = {"batch_sizes": "64", "models": "resnet18", "precisions": "fp32",
                    "comm_hooks": "none", "grad_accums": "1", "strategies": "ddp"}


@dataclasses.dataclass(frozen=True, slots=True)
class Cell:
    """One point of the matrix; its repeats are separate jobs."""

    batch_size: int
    topology: Topology
    model: str
    precision: str
    backend: str
    comm_hook: str = "none"
    grad_accum: int = 1
    workload: str = "train"
    strategy: str = "ddp"

    def trainer_args(self, base: list[str]) -> list[str]:
        if self.workload != "train":
            return [*base, "--backend", self.backend]
        return [*base, "--batch-size", str(self.batch_size), "--model", self.model,
                "--precision", self.precision, "--backend", self.backend,
                "--comm-hook", self.comm_hook, "--grad-accum", str(self.grad_accum),
                "--strategy", self.strategy]

    def label(self) -> str:
        if self.workload != "train":
            return f"{WORKLOAD_WORDS[self.workload]} {self.topology} {self.backend}"
        extra = (f" hook {self.comm_hook}" if self.comm_hook != "none" else "") + \
            (f" accum {self.grad_accum}" if self.grad_accum != 1 else "") + \
            (f" {self.strategy}" if self.strategy != "ddp" else "")
        return (f"batch {self.batch_size} {self.topology} {self.model} {self.precision} "
                f"{self.backend}{extra}")


@dataclasses.dataclass(kw_only=True, slots=True)
class MatrixConfig:
    """What the matrix schedules and records; how jobs start is the launcher's section."""

    # Each cell's validated configuration.
    cells: dict[Cell, TrainConfig | AllreduceConfig | AcceptConfig]
    repeats: int
    results: Path
    resume: bool
    deadline_s: float
    rdzv_timeout: int
    trainer_args: list[str]
    master_port: int
    launcher: str
    launcher_options: object          # the launcher's own options section
    workload: str = "train"
    link_bps: int | None = None       # recorded with each row (netns)
    # Repeat 1 of every cell, then repeat 2...: instead of each cell's repeats back to back.
    interleave: bool = False
    # With interleave: each setup's one-node cells again after its multi-node cells.
    bracket: bool = False
    verbose: bool = False
    dry_run: bool = False

    @property
    def module(self) -> str:
        return WORKLOADS[self.workload]

    @classmethod
    def from_args(cls, argv: list[str], prog: str,
                  environ: Mapping[str, str] | None = None) -> MatrixConfig:
        """The matrix from its command line (and the launcher's ``BENCH_LAUNCHER_*``
        settings in ``environ``, default this process's): every flag, cell and launcher
        option checked before anything starts."""
        own, trainer_args = split_trainer_args(argv)
        a = parser(prog).parse_args(own)
        refuse_dimensions_after_dashes(trainer_args)
        dimensions = Dimensions.of(a)
        check_matrix_settings(a)
        visible = tuple(gpus.visible_gpus())
        context = LaunchContext(visible_gpus=visible, topologies=tuple(dimensions.topologies),
                                results_root=a.results.parent)
        options = registry.options_from(a.launcher, registry.given(a), context, environ)
        cells = dimensions.cells(a.workload)
        configs = cell_configs(a, cells, trainer_args)
        check_gpu_shares(a.launcher, options, cells, trainer_args, visible)
        return cls(cells=configs, repeats=a.repeats, results=a.results, resume=a.resume,
                   deadline_s=a.deadline, rdzv_timeout=a.rdzv_timeout,
                   trainer_args=trainer_args, master_port=a.master_port,
                   launcher=a.launcher, launcher_options=options, workload=a.workload,
                   link_bps=options.link_bps if isinstance(options, NetnsOptions) else None,
                   interleave=a.interleave, bracket=a.bracket, verbose=a.verbose,
                   dry_run=a.dry_run)


def split_trainer_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the matrix's own flags, the trainer flags after ``--``)."""
    if "--" not in argv:
        return argv, []
    end = argv.index("--")
    return argv[:end], argv[end + 1:]


def parser(prog: str) -> OneLineErrorParser:
    """The matrix's own flags, then every launcher's (``registry.add_flags``)."""
    p = OneLineErrorParser(prog=prog, description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", choices=tuple(WORKLOADS), default="train",
                   help="what each job runs: the trainer, the all-reduce sweep, or the "
                   "acceptance measurements (bench accept runs them)")
    p.add_argument("--batch-sizes", help="per-device batch sizes, e.g. 64,128 (default: 64)")
    p.add_argument("--topologies", default="1x1", help="NODESxGPUS list, e.g. 1x1,1x2,2x1")
    p.add_argument("--models", help="comma-separated models (default: resnet18)")
    p.add_argument("--precisions", help="comma-separated: auto (bf16 where every GPU has "
                   "it, else fp16; fp32 on CPU), fp32, tf32, bf16, fp16 (default: fp32)")
    p.add_argument("--backends", default="auto", help="comma-separated: auto, nccl, gloo")
    p.add_argument("--comm-hooks", help="comma-separated gradient hooks: none, fp16, bf16, "
                   "powersgd (default: none)")
    p.add_argument("--grad-accums", help="comma-separated micro-batches per step (default: 1)")
    p.add_argument("--strategies", help="comma-separated data parallelism: ddp, fsdp "
                   "(default: ddp)")
    p.add_argument("--repeats", type=int, default=1, help="jobs per cell (default: 1)")
    p.add_argument("--launcher", choices=LAUNCHERS, default="native",
                   help="native torchrun here, Compose here, SSH fan-out to --hosts, netns: "
                   "emulated hosts on this machine behind a --link, Slurm jobs, or Kubernetes "
                   "jobs (its options below)")
    p.add_argument("--dry-run", action="store_true", help="print each job as its launcher "
                   "would start it (torchrun lines, Compose commands, sbatch script); "
                   "start nothing")
    p.add_argument("--results", type=path_arg, default=Path("results/runs.jsonl"),
                   help="the records file, *.jsonl (the report is written beside it as "
                   ".md and .html); a symbolic link is refused: give the file itself")
    p.add_argument("--resume", action="store_true",
                   help="skip repeats that already have an ok record")
    p.add_argument("--interleave", action="store_true",
                   help="run repeat 1 of every cell, then repeat 2 and so on (default: "
                   "each cell's repeats back to back); on a machine whose speed drifts "
                   "over minutes (a shared VM), cells compared with each other then see "
                   "the same drift instead of the ones measured last seeing the most")
    p.add_argument("--bracket", action="store_true",
                   help="with --interleave: in each round, every setup's one-node cells "
                   "run before its multi-node cells and again after them, so that the "
                   "one-node figure a prediction starts from brackets the moment the "
                   "multi-node cells ran (a steady drift cancels in the two's mean); the "
                   "second is recorded with matrix.bracket \"after\"")
    p.add_argument("--deadline", type=finite_float, default=1800.0,
                   help="seconds a job may run before every node is stopped")
    p.add_argument("--rdzv-timeout", type=int, default=120,
                   help="seconds a node waits for the others at the rendezvous")
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("--verbose", action="store_true", help="echo every node's output "
                   "(default: one line per job; the output is in each job's logs)")
    registry.add_flags(p)
    return p


def refuse_dimensions_after_dashes(trainer_args: list[str]) -> None:
    """A flag the matrix sets per cell (--batch-size) given after -- is refused."""
    for flag, dimension in DIMENSION_FLAGS.items():
        if any(arg == flag or arg.startswith(flag + "=") for arg in trainer_args):
            raise ConfigError(flag, "(after --)", f"is a matrix dimension: give it as "
                              f"{dimension} before --")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Dimensions:
    """The matrix's axes, each parsed and checked."""

    batch_sizes: list[int]
    topologies: list[Topology]
    models: list[str]
    precisions: list[str]
    backends: list[str]
    hooks: list[str]
    accums: list[int]
    strategies: list[str]

    @classmethod
    def of(cls, a: argparse.Namespace) -> Dimensions:
        """The axes from the flags; a trainer axis given with --workload allreduce is
        refused, one not given takes its default."""
        given = {name: getattr(a, name) for name in TRAIN_DIMENSIONS}
        if a.workload != "train":
            for name, value in given.items():
                if value is not None:
                    raise ConfigError("--" + name.replace("_", "-"), value, "is a trainer "
                                      f"dimension: leave it out with --workload {a.workload}")
        text = {name: value if value is not None else TRAIN_DIMENSIONS[name]
                for name, value in given.items()}
        return cls(batch_sizes=parse_positive_ints(text["batch_sizes"], "--batch-sizes"),
                   topologies=parse_list(a.topologies),
                   models=parse_choices(text["models"], MODEL_NAMES, "--models"),
                   precisions=parse_choices(text["precisions"], PRECISIONS, "--precisions"),
                   backends=parse_choices(a.backends, BACKENDS, "--backends"),
                   hooks=parse_choices(text["comm_hooks"], COMM_HOOKS, "--comm-hooks"),
                   accums=parse_positive_ints(text["grad_accums"], "--grad-accums"),
                   strategies=parse_choices(text["strategies"], STRATEGIES, "--strategies"))

    def cells(self, workload: str) -> list[Cell]:
        """Every cell: topologies x backends for the all-reduce sweep, else the product of
        every axis."""
        if workload != "train":
            return [Cell(0, t, "", "", be, workload=workload)
                    for be, t in itertools.product(self.backends, self.topologies)]
        return [Cell(b, t, m, pr, be, h, ga, strategy=st)
                for m, pr, be, h, ga, st, b, t in
                itertools.product(self.models, self.precisions, self.backends, self.hooks,
                                  self.accums, self.strategies, self.batch_sizes,
                                  self.topologies)]


def check_matrix_settings(a: argparse.Namespace) -> None:
    """The matrix's own numbers and paths, each bounded."""
    require_range(a.repeats, "repeats", 1, 1000)
    require_range(a.deadline, "deadline", 0, MAX_TIMEOUT_S, low_open=True)
    require_range(a.rdzv_timeout, "rdzv_timeout", 1, 86400)
    # Each job takes a fresh port above --master-port (see ``run``).
    require_range(a.master_port, "master_port", MIN_PORT, MAX_PORT - PORT_SPAN)
    check_results_beside_reports(a.results, "--results")  # never a report's name
    _check_report_paths(a.results)
    if a.bracket and not a.interleave:
        raise ConfigError("--bracket", "on without --interleave", "it orders the cells of "
                          "each round: add --interleave")
    if a.bracket and a.resume:
        raise ConfigError("--bracket", "on with --resume", "a bracketed round runs a "
                          "one-node cell twice, which --resume cannot count: drop one")


def cell_configs(a: argparse.Namespace, cells: list[Cell],
                 trainer_args: list[str]
                 ) -> dict[Cell, TrainConfig | AllreduceConfig | AcceptConfig]:
    """Every cell's validated configuration, keyed by the cell."""
    parse = CONFIGS[a.workload].from_args if a.workload in CONFIGS else TrainConfig.from_args
    prog = f"bench {a.workload}"
    # Every cell's flags are checked here, before anything starts. Its data directory
    # and devices are checked here too where the nodes run on this host; on other hosts
    # or in containers, the rank checks them. The config as given (parsed "on the head")
    # is the cell's resume key, whatever the nodes resolve "auto" to.
    with on_head():
        configs = {cell: parse(cell.trainer_args(trainer_args), prog) for cell in cells}
        refuse_owned_flags(parse, cells[0].trainer_args(trainer_args), prog, a.results)
    if a.launcher in ("native", "netns"):
        for cell in cells:
            parse(cell.trainer_args(trainer_args), prog)
    return configs


def check_gpu_shares(launcher: str, options: object, cells: list[Cell],
                     trainer_args: list[str], visible: tuple[str, ...]) -> None:
    """Every node of a job here shares this host's GPUs: each needs its own."""
    if launcher not in LOCAL_LAUNCHERS or not visible:
        return
    for cell in cells:
        on_gpus = options.profile.startswith("gpu") if isinstance(options, ComposeOptions) \
            else gpus.wants_gpus(cell.trainer_args(trainer_args), list(visible))
        if on_gpus:
            gpus.assign(cell.topology, list(visible))


def refuse_owned_flags(parse, args: list[str], prog: str, results: Path) -> None:
    """ConfigError when the flags after -- set one the matrix sets itself (--results),
    however it is spelt (``--results=F``, or an abbreviation argparse would take): they are
    parsed once more behind the matrix's own value, and whatever the parser ends with
    there came from the user."""
    owned = results.with_name(results.name + ".owned-by-the-matrix")
    for flag, why in OWNED_FLAGS.items():
        parsed = parse([flag, str(owned), *args], prog)
        given = parsed.output.results if hasattr(parsed, "output") else parsed.results
        if Path(given) != owned:
            raise ConfigError(flag, f"{given} (after --)", why)


def cell_key(config_hash: str, topology: Topology) -> tuple:
    return (config_hash, str(topology))


def finished_repeats(results: Path) -> dict[tuple, int]:
    """Ok records per cell key in an existing results file (for --resume)."""
    counts: dict[tuple, int] = {}
    if results.exists():
        for rec in record.read(results):
            if rec.get("status") == "ok":
                # The key the matrix computed from the config as given; records written
                # before it kept one have only the trainer's own hash.
                given = (rec.get("matrix") or {}).get("config_hash") or rec.get("config_hash")
                if not isinstance(given, str):   # not a cell's record: a steadiness one
                    continue
                key = cell_key(given, Topology.of_record(rec))
                counts[key] = counts.get(key, 0) + 1
    return counts


def launch_overhead(rec: dict, launched: float, recorded: float) -> dict:
    """Seconds from the job's launch to its first step's end, and from its last step's end
    to the record being written (teardown included)."""
    first, last = rec.get("first_step_done"), rec.get("last_step_done")
    return {"startup_s": first - launched if first else None,
            "teardown_s": recorded - last if last else None}


def _headline(rec: dict) -> str:
    if rec.get("mode") == "allreduce":
        return allreduce_headline(rec)
    if rec.get("mode") == "accept":
        return (f"{len(rec['devices'])} device(s), {len(rec['links'])} link pair(s), "
                f"{len(rec['data'])} data path(s) measured")
    return record.training_headline(rec)


def straggler_words(rec: dict) -> str:
    """The end of a job's line when its record names a straggler (issue 26): where the
    user watching the matrix sees which rank held the others up, without opening the
    report; empty otherwise."""
    words = breakdown.console_words(rec)
    return f"; {words}" if words else ""


def _eta(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def preferred_port(cfg: MatrixConfig, number: int) -> int:
    """Job ``number``'s first choice of port: each job a fresh one above --master-port (no
    TIME_WAIT collisions with the job before)."""
    return cfg.master_port + (number % (PORT_SPAN // ports.STEP)) * ports.STEP


def lease_port(cfg: MatrixConfig, number: int):
    """Job ``number``'s port, held for the job: none that another matrix's job on this host
    holds, and for nodes on this host none that is bound here (``bench.host.ports``)."""
    return ports.lease(preferred_port(cfg, number), low=cfg.master_port, span=PORT_SPAN,
                       probe_host="127.0.0.1" if cfg.launcher in LOCAL_LAUNCHERS else None)


def job_name(matrix_id: str, index: int, repeat: int, tag: str = "") -> str:
    """A job's id: its matrix, cell and repeat, and "a" for a bracketed round's second
    run of a one-node cell (``AFTER``)."""
    return f"{matrix_id}-c{index}r{repeat}" + ("a" if tag == AFTER else "")


def _again(tag: str) -> str:
    return ", again after its multi-node cells (--bracket)" if tag == AFTER else ""


def job_log_dir(cfg: MatrixConfig, job_id: str) -> Path:
    return cfg.results.parent / "logs" / job_id


def job_spec(cfg: MatrixConfig, cell: Cell, job_id: str, master_port: int) -> JobSpec:
    """The job of one repeat of a cell: its logs and record under the results' directory,
    on ``master_port``; it makes its nodes' specs once (``JobSpec.nodes``), which the
    launcher renders and launches."""
    log_dir = job_log_dir(cfg, job_id)
    return JobSpec(job_id=job_id, module=cfg.module,
                   workload_args=tuple(cell.trainer_args(cfg.trainer_args)),
                   topology=cell.topology, master_port=master_port,
                   rdzv_timeout=cfg.rdzv_timeout, results=log_dir / "trainer.jsonl",
                   log_dir=log_dir, deadline_s=cfg.deadline_s)


def render(cfg: MatrixConfig, launcher: Launcher) -> str:
    """Every job of the matrix as its launcher would start it (``--dry-run``)."""
    matrix_id = record.new_run_id()
    parts = []
    jobs = [(index, cell, repeat) for index, cell in enumerate(cfg.cells, 1)
            for repeat in range(1, cfg.repeats + 1)]
    for index, cell, repeat, tag in in_order(cfg, jobs):
        job = job_spec(cfg, cell, job_name(matrix_id, index, repeat, tag),
                       preferred_port(cfg, index))
        parts.append(f"### job: cell {index} {cell.label()} repeat {repeat}/{cfg.repeats}"
                     f"{_again(tag)} ({launcher.name})\n{launcher.render(job)}")
    return "\n\n".join(parts)


def in_order(cfg: MatrixConfig, jobs: list[tuple]) -> list[tuple]:
    """Jobs (cell number, cell, repeat, ...) in the order they run: each cell's repeats back
    to back, or with --interleave repeat 1 of every cell first, then repeat 2...; with
    --bracket each setup's one-node jobs again after its multi-node ones (``bracketed``).
    Each job with its tag last: "" for a cell's own run, AFTER for a one-node cell's
    second run of a round."""
    if not cfg.interleave:
        return [(*job, "") for job in jobs]
    ordered = sorted(jobs, key=lambda job: (job[2], job[0]))
    return bracketed(ordered) if cfg.bracket else [(*job, "") for job in ordered]


# The tag of a one-node cell's second run in a bracketed round (--bracket): in its record's
# matrix section; its job id ends in "a".
AFTER = "after"


def _setup(cell: Cell) -> Cell:
    """A cell with its topology left out: what the cells of one setup share."""
    return dataclasses.replace(cell, topology=Topology(1, 1))


def bracketed(ordered: list[tuple]) -> list[tuple]:
    """Interleaved jobs (cell number, cell, repeat, ...) with each setup's jobs of a round
    as: its one-node jobs, its multi-node jobs, then its one-node jobs again (tagged
    AFTER). The one-node figure a prediction starts from is then measured on both sides
    of the multi-node cells it is checked against, about as far before as after: a
    machine whose pace drifts (a shared VM's CPUs, by 10-20% over tens of seconds,
    results/reference/noise-floor/) moves the two alike, and their mean is the pace at the
    multi-node cells' moment where the drift is steady. A setup without both a one-node
    and a multi-node cell runs as it is. Rounds and setups keep their order."""
    groups: dict[tuple, list[tuple]] = {}
    for job in ordered:
        groups.setdefault((job[2], _setup(job[1])), []).append(job)
    out: list[tuple] = []
    for jobs in groups.values():
        ones = [job for job in jobs if job[1].topology.nodes == 1]
        wide = [job for job in jobs if job[1].topology.nodes > 1]
        if ones and wide:
            out += [(*job, "") for job in ones + wide] + [(*job, AFTER) for job in ones]
        else:
            out += [(*job, "") for job in jobs]
    return out


class Interrupted(Exception):
    """The matrix was stopped (Ctrl-C, SIGTERM, SIGHUP) during a job, whose row is written."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum   # what a shell reports for a process the signal ended


STOPPING = (signal.SIGTERM, signal.SIGHUP)   # what ``terminate_raises`` makes SystemExit of


def interruption_signal(stop: BaseException) -> int | None:
    """The signal behind a KeyboardInterrupt (SIGINT) or the SystemExit that
    ``netlab.terminate_raises`` makes of SIGTERM and SIGHUP (128 + the signal); None for
    any other SystemExit."""
    if isinstance(stop, KeyboardInterrupt):
        return signal.SIGINT
    code = stop.code if isinstance(stop, SystemExit) else None
    return code - 128 if code in [128 + sig for sig in STOPPING] else None


def interrupted_record(train_cfg, cell: Cell, signum: int) -> dict:
    """The row of the job that was running when the matrix was stopped."""
    rec = failure_record(train_cfg, cell.topology)
    rec["error"] = (f"interrupted: bench matrix received {signal.Signals(signum).name} during "
                    "this job, and stopped every node and rank")
    return rec


def run(cfg: MatrixConfig, launcher: Launcher) -> int:
    """Run every job through ``launcher``; one row per job, whatever happens to it. Raises
    Interrupted, after the running job's row, when the matrix is stopped."""
    matrix_id = record.new_run_id()
    done = finished_repeats(cfg.results) if cfg.resume else {}
    jobs = []
    for index, (cell, train_cfg) in enumerate(cfg.cells.items(), 1):
        key = cell_key(train_cfg.hash(), cell.topology)
        for repeat in range(1, cfg.repeats + 1):
            if repeat <= done.get(key, 0):
                print(f"[matrix] cell {index}/{len(cfg.cells)} {cell.label()} repeat {repeat}: "
                      "already recorded, skipped (--resume)", file=sys.stderr)
                continue
            jobs.append((index, cell, repeat, train_cfg))
    runs = in_order(cfg, jobs)
    failures: list[tuple[int, Cell, str, dict]] = []
    unwritten = 0
    durations: list[float] = []
    for number, (index, cell, repeat, train_cfg, tag) in enumerate(runs, 1):
        eta = _eta(sum(durations) / len(durations) * (len(runs) - number + 1)) if durations \
            else "unknown"
        # One line per job: its cell now, its outcome when it ends (node output goes to
        # the job's logs, or to the console too with --verbose).
        print(f"[matrix] job {number}/{len(runs)} (ETA {eta}): cell {index} {cell.label()} "
              f"repeat {repeat}/{cfg.repeats}{_again(tag)}", end="\n" if cfg.verbose
              else " ...", file=sys.stderr, flush=True)
        job_id = job_name(matrix_id, index, repeat, tag)
        launched = time.time()
        try:
            with lease_port(cfg, number) as port:
                job = job_spec(cfg, cell, job_id, port)
                outcome = launcher.launch(job)
        except (KeyboardInterrupt, SystemExit) as stop:
            # The launcher stopped every node on its way out; this job still gets its row.
            signum = interruption_signal(stop)
            if signum is None:
                raise
            with shielded():
                rec = interrupted_record(train_cfg, cell, signum)
                _write_row(cfg, rec, _matrix_section(cfg, matrix_id, index, repeat, cell,
                                                     train_cfg, job_id, launched, tag=tag))
                say(f"\n[matrix] interrupted by {signal.Signals(signum).name}: every node "
                     f"was stopped; job {number}/{len(runs)} recorded as {rec['status']} in "
                     f"{cfg.results}")
            raise Interrupted(signum) from None
        durations.append(outcome.seconds)
        records = outcome.records(job.results, job_id)
        rec = records[0] if records else dict(failure_record(train_cfg, cell.topology),
                                               job_id=job_id)
        if not records and (torn := outcome.torn()):
            # A record printed and cut in transit, its copy not on this host: say so.
            rec["error"] = torn_record_error(torn[0], job.results)
        if not outcome.ok:
            rec = describe_failure(rec, outcome, cfg.deadline_s)
        section = _matrix_section(cfg, matrix_id, index, repeat, cell, train_cfg, job_id,
                                  launched, outcome.scheduler, tag=tag)
        lost_logs = {n.host: n.log_error for n in outcome.nodes if n.log_error}
        if lost_logs:
            section["log_errors"] = lost_logs
        if not _write_row(cfg, rec, section):
            unwritten += 1
        status = rec["status"]
        print((f"[matrix] cell {index} repeat {repeat}:" if cfg.verbose else "")
              + f" {status}" + (f" ({rec['error']}; logs: {job.log_dir})" if status != "ok"
                                else f", {_headline(rec)}")
              + (f" (but {rec['record_error']})" if rec.get("record_error") else "")
              + f" in {outcome.seconds:.1f} s" + straggler_words(rec), file=sys.stderr,
              flush=True)
        if breakdown.without_slowest_line(rec):
            print(f"[matrix]   {breakdown.without_slowest_line(rec)}", file=sys.stderr,
                  flush=True)
        if status != "ok":
            failures.append((index, cell, f"{repeat}{_again(tag)}", rec))
    print(f"[matrix] {len(runs) - len(failures)}/{len(runs)} jobs ok; records in {cfg.results}",
          file=sys.stderr)
    if unwritten:
        print(f"[matrix] {unwritten} row(s) could not be appended to {cfg.results}: they were "
              "printed on stdout after the marker", file=sys.stderr)
    if failures:
        print("[matrix] failed cells:", file=sys.stderr)
        for index, cell, which, rec in failures:
            print(f"  cell {index} ({cell.label()}) repeat {which}: {rec['status']}: "
                  f"{rec['error']}", file=sys.stderr)
        return 1
    return 1 if unwritten else 0


def _matrix_section(cfg: MatrixConfig, matrix_id: str, index: int, repeat: int, cell: Cell,
                    train_cfg, job_id: str, launched: float,
                    scheduler: dict | None = None, tag: str = "") -> dict:
    return {"id": matrix_id, "cell": index, "repeat": repeat,
            **({"bracket": tag} if tag else {}),
            "config_hash": train_cfg.hash(), "launcher": cfg.launcher,
            "topology": str(cell.topology), "link_bps": cfg.link_bps,
            **({"scheduler": scheduler} if scheduler else {}),
            "logs": str(job_log_dir(cfg, job_id)), "launched_at": launched}


def _write_row(cfg: MatrixConfig, rec: dict, section: dict) -> bool:
    """Append the job's row with its matrix section; on a full disk, print it on stdout
    instead and return False."""
    recorded = time.time()
    rec["matrix"] = {**section, "recorded_at": recorded,
                     **launch_overhead(rec, section["launched_at"], recorded)}
    try:
        record.append(cfg.results, rec)
    except OSError as error:  # a full disk: keep the row where it can be recovered
        say(f"\n[matrix] could not append to {cfg.results} ({error}); the record:")
        with contextlib.suppress(OSError, ValueError):   # stdout gone too: nothing left
            record.emit(rec)
        return False
    return True


def main(argv: list[str] | None = None, prog: str = "bench matrix") -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = MatrixConfig.from_args(argv, prog)
        launcher = registry.build(cfg.launcher, cfg.launcher_options)
        if cfg.dry_run:
            print(render(cfg, launcher))
            return 0
        launcher.preflight([cell.topology for cell in cfg.cells])
    except (ConfigError, RuntimeError) as error:  # bad input, or a host that cannot start
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    CONSOLE.echo = cfg.verbose
    started = time.monotonic()
    # SIGTERM and SIGHUP (Slurm, Kubernetes, a closed terminal) end the matrix as Ctrl-C
    # does: every node stopped, the running job's row and the report written.
    with terminate_raises():
        try:
            code = run(cfg, launcher)
        except Interrupted as stop:
            code = stop.exit_code
        except ports.NoFreePort as error:
            print(f"\n{prog}: error: {error}", file=sys.stderr)
            code = 2
        with shielded(), contextlib.suppress(OSError):  # a closed terminal (SIGHUP) says nothing
            say(f"[matrix] finished in {_eta(time.monotonic() - started)}")
            _report(cfg.results)
    return code


def _check_report_paths(results: Path) -> None:
    """Before anything runs: the report's pages beside ``results`` can be written (not a
    link, not a file bench did not make), so a user's file there is named now, not after
    the measurement."""
    for page in report.pages(results):
        check_output(page, "--results", (results,), report.FIX)


def _report(results: Path) -> None:
    """The page beside the results; a report that cannot be made costs no measurement."""
    try:
        md, page = report.write(results)
    except (ConfigError, OSError, ValueError) as error:
        say(f"[matrix] no report: {error}")
        return
    say(f"[matrix] report: {md} and {page}")


if __name__ == "__main__":
    sys.exit(main())
