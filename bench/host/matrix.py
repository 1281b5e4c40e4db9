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
import os
import signal
import sys
import time
from pathlib import Path

from bench import record
from bench.allreduce_config import AllreduceConfig
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
from bench.host.failures import describe_failure, failure_record
from bench.host.launchers import LAUNCHERS, JobSpec, Launcher
from bench.host.launchers.nodes import CONSOLE, say, shielded
from bench.host.netlab import terminate_raises
from bench.options import (
    MAX_PORT,
    MIN_PORT,
    ConfigError,
    check_image,
    finite_float,
    on_head,
    require_range,
)
from bench.paths import check_results_beside_reports
from bench.topology import (
    Topology,
    parse_choices,
    parse_hosts,
    parse_list,
    parse_positive_ints,
)
from bench.units import parse_rate

PORT_SPAN = 100   # ports above --master-port the jobs of a matrix take in turn
WORKLOADS = {"train": "bench.rank.train", "allreduce": "bench.rank.allreduce"}
# Trainer flags the matrix sets per cell, and the matrix flag that sets them.
DIMENSION_FLAGS = {"--batch-size": "--batch-sizes", "--model": "--models",
                   "--precision": "--precisions", "--backend": "--backends",
                   "--comm-hook": "--comm-hooks", "--grad-accum": "--grad-accums",
                   "--strategy": "--strategies"}
# Trainer flags the matrix sets for every job itself, and why they cannot be given after --.
OWNED_FLAGS = {"--results": "the matrix owns the results path: give --results before --"}
# Launchers whose nodes run on this host: a job's port is probed here before it starts.
LOCAL_LAUNCHERS = ("native", "compose")
# Matrix flags that only mean something on Kubernetes.
K8S_FLAGS = ("k8s_kind", "namespace", "kube_context", "results_claim", "results_host_path",
             "shm_size")
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
        if self.workload == "allreduce":
            return [*base, "--backend", self.backend]
        return [*base, "--batch-size", str(self.batch_size), "--model", self.model,
                "--precision", self.precision, "--backend", self.backend,
                "--comm-hook", self.comm_hook, "--grad-accum", str(self.grad_accum),
                "--strategy", self.strategy]

    def label(self) -> str:
        if self.workload == "allreduce":
            return f"all-reduce {self.topology} {self.backend}"
        extra = (f" hook {self.comm_hook}" if self.comm_hook != "none" else "") + \
            (f" accum {self.grad_accum}" if self.grad_accum != 1 else "") + \
            (f" {self.strategy}" if self.strategy != "ddp" else "")
        return (f"batch {self.batch_size} {self.topology} {self.model} {self.precision} "
                f"{self.backend}{extra}")


@dataclasses.dataclass(kw_only=True, slots=True)
class MatrixConfig:
    """What the matrix schedules and records; how jobs start is the launcher's section."""

    cells: dict[Cell, TrainConfig | AllreduceConfig]   # each cell's validated configuration
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
    verbose: bool = False
    dry_run: bool = False

    @property
    def module(self) -> str:
        return WORKLOADS[self.workload]

    @classmethod
    def from_args(cls, argv: list[str], prog: str) -> MatrixConfig:
        own, trainer_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) \
            if "--" in argv else (argv, [])
        p = OneLineErrorParser(prog=prog, description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--workload", choices=tuple(WORKLOADS), default="train",
                       help="what each job runs: the trainer or the all-reduce sweep")
        p.add_argument("--batch-sizes", help="per-device batch sizes, e.g. 64,128 (default: 64)")
        p.add_argument("--topologies", default="1x1", help="NODESxGPUS list, e.g. 1x1,1x2,2x1")
        p.add_argument("--models", help="comma-separated models (default: resnet18)")
        p.add_argument("--precisions", help="comma-separated precisions (default: fp32)")
        p.add_argument("--backends", default="auto", help="comma-separated: auto, nccl, gloo")
        p.add_argument("--comm-hooks", help="comma-separated gradient hooks: none, fp16, bf16, "
                       "powersgd (default: none)")
        p.add_argument("--grad-accums", help="comma-separated micro-batches per step "
                       "(default: 1)")
        p.add_argument("--strategies", help="comma-separated data parallelism: ddp, fsdp "
                       "(default: ddp)")
        p.add_argument("--repeats", type=int, default=1, help="jobs per cell (default: 1)")
        p.add_argument("--launcher", choices=LAUNCHERS, default="native",
                       help="native torchrun here, Compose here, SSH fan-out to --hosts, or "
                       "netns: emulated hosts on this machine behind a --link")
        p.add_argument("--link", help="netns: the link rate of every node, e.g. 1gbit, 5gbit")
        p.add_argument("--cpus-per-node", type=int, help="netns: CPUs pinned to each node "
                       "(default: this machine's CPUs divided by the most nodes of any cell)")
        p.add_argument("--hosts", default="", help="ssh: host1,host2 in node-rank order")
        p.add_argument("--runtime", choices=("compose", "native", "pyxis"),
                       help="ssh: Compose (default) or torchrun on each host; slurm: native "
                       "(default: the checkout and venv on shared storage), compose, or pyxis "
                       "(srun --container-image)")
        p.add_argument("--partition", help="slurm: the partition (default: the cluster's)")
        p.add_argument("--account", help="slurm: the account to charge")
        p.add_argument("--time-limit", help="slurm: each job's --time (default: --deadline "
                       "rounded up, plus a minute)")
        p.add_argument("--gpus-per-node", type=int, default=0,
                       help="slurm: GPUs each node asks for (default: 0, a CPU job)")
        p.add_argument("--k8s-kind", choices=("indexed", "pytorchjob"),
                       help="k8s: an Indexed Job behind a headless Service (default), or a "
                       "Kubeflow PyTorchJob")
        p.add_argument("--namespace", help="k8s: the namespace of the jobs (default: default)")
        p.add_argument("--kube-context", help="k8s: kubectl's context (default: the current)")
        p.add_argument("--results-claim", help="k8s: the PersistentVolumeClaim mounted at "
                       "/results (default: bench-results)")
        p.add_argument("--results-host-path", help="k8s: a directory on each node mounted at "
                       "/results instead of a claim")
        p.add_argument("--shm-size", help="k8s: each pod's /dev/shm, e.g. 8Gi (default: 1Gi)")
        p.add_argument("--dry-run", action="store_true", help="print each job as its launcher "
                       "would start it (torchrun lines, Compose commands, sbatch script); "
                       "start nothing")
        p.add_argument("--remote-dir", help="ssh, slurm: this checkout's path on the hosts "
                       "(default: the same path as here)")
        p.add_argument("--ssh-config", type=Path, help="ssh: an ssh_config file (ports, keys, "
                       "known_hosts) passed to ssh -F")
        p.add_argument("--results", type=Path, default=Path("results/runs.jsonl"),
                       help="the records file, *.jsonl (the report is written beside it as "
                       ".md and .html); a symbolic link is refused: give the file itself")
        p.add_argument("--resume", action="store_true",
                       help="skip repeats that already have an ok record")
        p.add_argument("--interleave", action="store_true",
                       help="run repeat 1 of every cell, then repeat 2 and so on (default: "
                       "each cell's repeats back to back); on a machine whose speed drifts "
                       "over minutes (a shared VM), cells compared with each other then see "
                       "the same drift instead of the ones measured last seeing the most")
        p.add_argument("--deadline", type=finite_float, default=1800.0,
                       help="seconds a job may run before every node is stopped")
        p.add_argument("--rdzv-timeout", type=int, default=120,
                       help="seconds a node waits for the others at the rendezvous")
        p.add_argument("--master-port", type=int, default=29500)
        p.add_argument("--image", help="compose/ssh+compose: the trainer image")
        p.add_argument("--env-file", type=Path, help="compose: the node settings file")
        p.add_argument("--verbose", action="store_true", help="echo every node's output "
                       "(default: one line per job; the output is in each job's logs)")
        p.add_argument("--profile", choices=("cpu", "gpu", "gpu-ib"), help="compose: the "
                       "trainer service (default: gpu where nvidia-smi lists a GPU, else cpu; "
                       "gpu-ib: with InfiniBand/RoCE devices)")
        a = p.parse_args(own)
        for flag, dimension in DIMENSION_FLAGS.items():
            if any(arg == flag or arg.startswith(flag + "=") for arg in trainer_args):
                raise ConfigError(flag, "(after --)", f"is a matrix dimension: give it as "
                                  f"{dimension} before --")
        if a.workload != "train":
            for name in TRAIN_DIMENSIONS:
                if getattr(a, name) is not None:
                    flag = "--" + name.replace("_", "-")
                    raise ConfigError(flag, getattr(a, name), "is a trainer dimension: leave it "
                                      "out with --workload allreduce")
        for name, default in TRAIN_DIMENSIONS.items():
            if getattr(a, name) is None:
                setattr(a, name, default)
        batch_sizes = parse_positive_ints(a.batch_sizes, "--batch-sizes")
        topologies = parse_list(a.topologies)
        models = parse_choices(a.models, MODEL_NAMES, "--models")
        precisions = parse_choices(a.precisions, PRECISIONS, "--precisions")
        backends = parse_choices(a.backends, BACKENDS, "--backends")
        hooks = parse_choices(a.comm_hooks, COMM_HOOKS, "--comm-hooks")
        accums = parse_positive_ints(a.grad_accums, "--grad-accums")
        strategies = parse_choices(a.strategies, STRATEGIES, "--strategies")
        link_bps = parse_rate(a.link, "--link") if a.link else None
        if a.launcher == "netns" and link_bps is None:
            raise ConfigError("--link", "''", "netns needs the link rate, e.g. --link 1gbit")
        if a.launcher != "netns" and (a.link or a.cpus_per_node):
            raise ConfigError("--link" if a.link else "--cpus-per-node",
                              a.link or a.cpus_per_node, "only with --launcher netns")
        require_range(a.cpus_per_node, "cpus_per_node", 1, os.cpu_count() or 1, optional=True)
        require_range(a.repeats, "repeats", 1, 1000)
        require_range(a.deadline, "deadline", 0, MAX_TIMEOUT_S, low_open=True)
        require_range(a.rdzv_timeout, "rdzv_timeout", 1, 86400)
        # Each job takes a fresh port above --master-port (see ``run``).
        require_range(a.master_port, "master_port", MIN_PORT, MAX_PORT - PORT_SPAN)
        check_results_beside_reports(a.results, "--results")  # never a report's name
        _check_report_paths(a.results)
        if a.image is not None:
            check_image(a.image, "--image")
        if a.remote_dir is not None and not a.remote_dir.startswith("/"):
            raise ConfigError("--remote-dir", a.remote_dir, "must be an absolute path on the "
                              "hosts, e.g. /srv/bench")
        if a.ssh_config is not None and not a.ssh_config.is_file():
            raise ConfigError("--ssh-config", a.ssh_config, "no such file")
        hosts = parse_hosts(a.hosts, "--hosts") if a.launcher == "ssh" else []
        if hosts:
            most = max(t.nodes for t in topologies)
            if most > len(hosts):
                raise ConfigError("--topologies", a.topologies,
                                  f"needs {most} nodes but --hosts names {len(hosts)}")
        elif a.hosts:
            raise ConfigError("--hosts", a.hosts, "only with --launcher ssh")
        if a.runtime is not None and a.launcher not in ("ssh", "slurm"):
            raise ConfigError("--runtime", a.runtime, "only with --launcher ssh or slurm")
        if a.launcher != "slurm":
            for flag in ("partition", "account", "time_limit"):
                if getattr(a, flag) is not None:
                    raise ConfigError("--" + flag.replace("_", "-"), getattr(a, flag),
                                      "only with --launcher slurm")
        if a.launcher != "k8s":
            for flag in K8S_FLAGS:
                if getattr(a, flag) is not None:
                    raise ConfigError("--" + flag.replace("_", "-"), getattr(a, flag),
                                      "only with --launcher k8s")
        else:
            from bench.host.launchers import k8s

            if not a.image:
                raise ConfigError("--image", "''", "Kubernetes pulls the trainer image: give "
                                  "its registry name, e.g. registry.example:5000/bench:cuda")
            k8s.check_topologies(topologies)
        runtime = a.runtime or ("native" if a.launcher == "slurm" else "compose")
        if a.launcher == "ssh" and runtime == "pyxis":
            raise ConfigError("--runtime", runtime, "pyxis is a Slurm runtime: use compose or "
                              "native with --launcher ssh")
        uses_compose = a.launcher == "compose" or (a.launcher in ("ssh", "slurm")
                                                   and runtime == "compose")
        if uses_compose and not a.image:
            raise ConfigError("--image", "''", "Compose needs the trainer image, e.g. "
                              "bench-trainer:cpu")
        if a.launcher == "compose" and (a.env_file is None or not a.env_file.is_file()):
            raise ConfigError("--env-file", a.env_file, "Compose needs an existing settings "
                              "file, e.g. compose/.env")
        if a.workload == "allreduce":
            cells = [Cell(0, t, "", "", be, workload="allreduce")
                     for be, t in itertools.product(backends, topologies)]
        else:
            cells = [Cell(b, t, m, pr, be, h, ga, strategy=st)
                     for m, pr, be, h, ga, st, b, t in
                     itertools.product(models, precisions, backends, hooks, accums, strategies,
                                       batch_sizes, topologies)]
        # Every cell's flags are validated before anything starts.
        parse = AllreduceConfig.from_args if a.workload == "allreduce" else TrainConfig.from_args
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
        profile = a.profile or ("gpu" if gpus.visible_gpus() else "cpu")
        visible = tuple(gpus.visible_gpus()) if a.launcher in ("native", "compose", "netns") \
            else ()
        if a.launcher in ("native", "compose"):
            # Every node of a job here shares this host's GPUs: each needs its own.
            for cell in cells:
                on_gpus = profile.startswith("gpu") if a.launcher == "compose" \
                    else gpus.wants_gpus(cell.trainer_args(trainer_args), list(visible))
                if on_gpus and visible:
                    gpus.assign(cell.topology, list(visible))
        options = launcher_options(a, runtime=runtime, profile=profile, hosts=hosts,
                                   link_bps=link_bps, visible=visible,
                                   most_nodes=max(c.topology.nodes for c in cells))
        return cls(cells=configs, repeats=a.repeats, results=a.results, resume=a.resume,
                   deadline_s=a.deadline, rdzv_timeout=a.rdzv_timeout,
                   trainer_args=trainer_args, master_port=a.master_port,
                   launcher=a.launcher, launcher_options=options, workload=a.workload,
                   link_bps=link_bps, interleave=a.interleave, verbose=a.verbose,
                   dry_run=a.dry_run)


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


def launcher_options(a: argparse.Namespace, *, runtime: str, profile: str, hosts: list[str],
                     link_bps: int | None, visible: tuple[str, ...], most_nodes: int):
    """The chosen launcher's own options section, from the flags that belong to it."""
    from bench.host.launchers import compose, k8s, native, netns, slurm, ssh

    results_root = a.results.parent
    if a.launcher == "k8s":
        return k8s.K8sOptions(image=a.image, env_file=a.env_file or k8s.default_env_file(),
                              profile=a.profile or "cpu", kind=a.k8s_kind or "indexed",
                              namespace=a.namespace or "default", context=a.kube_context,
                              results_claim=a.results_claim,
                              results_host_path=a.results_host_path,
                              shm_size=a.shm_size or "1Gi")
    if a.launcher == "native":
        return native.NativeOptions(visible_gpus=visible)
    if a.launcher == "compose":
        return compose.ComposeOptions(image=a.image, env_file=a.env_file, profile=profile,
                                      visible_gpus=visible)
    if a.launcher == "netns":
        assert link_bps is not None  # checked above
        return netns.NetnsOptions(
            link_bps=link_bps, lab_nodes=most_nodes, visible_gpus=visible,
            cpus_per_node=a.cpus_per_node or max(1, (os.cpu_count() or 1) // most_nodes))
    if a.launcher == "ssh":
        return ssh.SshOptions(hosts=tuple(hosts), runtime=runtime, remote_dir=a.remote_dir,
                              ssh_config=a.ssh_config, image=a.image, env_file=a.env_file,
                              profile=profile, results_root=results_root)
    return slurm.SlurmOptions(partition=a.partition, account=a.account,
                              time_limit=a.time_limit, gpus_per_node=a.gpus_per_node,
                              runtime=runtime, remote_dir=a.remote_dir, image=a.image,
                              env_file=a.env_file,
                              profile="gpu" if a.gpus_per_node else (a.profile or "cpu"),
                              results_root=results_root)


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
                given = (rec.get("matrix") or {}).get("config_hash") or rec["config_hash"]
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
        return f"busbw up to {rec['busbw_peak_GBps']:.3f} GB/s"
    return f"{rec['samples_per_s']:.1f} samples/s"


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
    for index, cell, repeat in in_order(cfg, jobs):
        job = job_spec(cfg, cell, f"{matrix_id}-c{index}r{repeat}", preferred_port(cfg, index))
        parts.append(f"### job: cell {index} {cell.label()} repeat {repeat}/{cfg.repeats} "
                     f"({launcher.name})\n{launcher.render(job)}")
    return "\n\n".join(parts)


def in_order(cfg: MatrixConfig, jobs: list[tuple]) -> list[tuple]:
    """Jobs (cell number, cell, repeat, ...) in the order they run: each cell's repeats back
    to back, or with --interleave repeat 1 of every cell first, then repeat 2..."""
    return sorted(jobs, key=lambda job: (job[2], job[0])) if cfg.interleave else jobs


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
    jobs = in_order(cfg, jobs)
    failures, durations, unwritten = [], [], 0
    for number, (index, cell, repeat, train_cfg) in enumerate(jobs, 1):
        eta = _eta(sum(durations) / len(durations) * (len(jobs) - number + 1)) if durations \
            else "unknown"
        # One line per job: its cell now, its outcome when it ends (node output goes to
        # the job's logs, or to the console too with --verbose).
        print(f"[matrix] job {number}/{len(jobs)} (ETA {eta}): cell {index} {cell.label()} "
              f"repeat {repeat}/{cfg.repeats}", end="\n" if cfg.verbose else " ...",
              file=sys.stderr, flush=True)
        job_id = f"{matrix_id}-c{index}r{repeat}"
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
                                                     train_cfg, job_id, launched))
                say(f"\n[matrix] interrupted by {signal.Signals(signum).name}: every node "
                     f"was stopped; job {number}/{len(jobs)} recorded as {rec['status']} in "
                     f"{cfg.results}")
            raise Interrupted(signum) from None
        durations.append(outcome.seconds)
        records = outcome.records()
        rec = records[0] if records else failure_record(train_cfg, cell.topology)
        if not outcome.ok:
            rec = describe_failure(rec, outcome, cfg.deadline_s)
        section = _matrix_section(cfg, matrix_id, index, repeat, cell, train_cfg, job_id,
                                  launched, outcome.scheduler)
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
              + f" in {outcome.seconds:.1f} s", file=sys.stderr, flush=True)
        if status != "ok":
            failures.append((index, cell, repeat, rec))
    print(f"[matrix] {len(jobs) - len(failures)}/{len(jobs)} jobs ok; records in {cfg.results}",
          file=sys.stderr)
    if unwritten:
        print(f"[matrix] {unwritten} row(s) could not be appended to {cfg.results}: they were "
              "printed on stdout after the marker", file=sys.stderr)
    if failures:
        print("[matrix] failed cells:", file=sys.stderr)
        for index, cell, repeat, rec in failures:
            print(f"  cell {index} ({cell.label()}) repeat {repeat}: {rec['status']}: "
                  f"{rec['error']}", file=sys.stderr)
        return 1
    return 1 if unwritten else 0


def _matrix_section(cfg: MatrixConfig, matrix_id: str, index: int, repeat: int, cell: Cell,
                    train_cfg, job_id: str, launched: float,
                    scheduler: dict | None = None) -> dict:
    return {"id": matrix_id, "cell": index, "repeat": repeat,
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
    from bench.host.launchers import build

    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = MatrixConfig.from_args(argv, prog)
        launcher = build(cfg.launcher, cfg.launcher_options)
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
    from bench.analysis import report
    from bench.paths import check_output

    for page in report.pages(results):
        check_output(page, "--results", (results,), report.FIX)


def _report(results: Path) -> None:
    """The page beside the results; a report that cannot be made costs no measurement."""
    from bench.analysis import report

    try:
        md, page = report.write(results)
    except (ConfigError, OSError, ValueError) as error:
        say(f"[matrix] no report: {error}")
        return
    say(f"[matrix] report: {md} and {page}")


if __name__ == "__main__":
    sys.exit(main())
