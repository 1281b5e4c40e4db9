"""Launch a job through Compose: one Compose project per node.

On a cluster each node runs its own ``docker compose up`` with its NODE_RANK; here the
nodes of a job can also be simulated on one host as separate Compose projects (the CPU
profile in CI). Every project is torn down afterwards, whatever happened.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid
from pathlib import Path

from bench.host import contract
from bench.host.checks import preflight
from bench.host.launchers.base import JobSpec, render_commands
from bench.host.launchers.flags import derived, launcher_flag
from bench.host.launchers.nodes import JobOutcome, NodeCommand, run_nodes
from bench.options import ConfigError, check_image
from bench.topology import Topology

REPO = Path(__file__).resolve().parents[3]
COMPOSE_FILE = REPO / "compose" / "docker-compose.yml"
SERVICES = {"cpu": ("trainer-cpu", "CPU_IMAGE"), "gpu": ("trainer", "IMAGE"),
            "gpu-ib": ("trainer-ib", "IMAGE")}
# A node started by a shell on another host (ssh, a Slurm task). Fixed text, no value in
# it: every value arrives as an argument ("$1", "$@") and is never parsed as shell. The
# image's id is read on that host (each host has its own copy of the image), then Compose
# v2 runs where the host has it, else docker-compose.
_PICK_COMPOSE = ('if docker compose version >/dev/null 2>&1; then exec docker compose "$@"; '
                 'fi; exec docker-compose "$@"')
REMOTE_UP = ('BENCH_IMAGE_ID=$(docker image inspect -f "{{.Id}}" "$1") || exit; shift; '
             'export BENCH_IMAGE_ID BENCH_IMAGE_DIGEST="$BENCH_IMAGE_ID"; ' + _PICK_COMPOSE)
REMOTE_DOWN = _PICK_COMPOSE
PROFILES = tuple(SERVICES)
IMAGE_HELP = "the trainer image"
PROFILE_HELP = ("the trainer service (default: gpu where nvidia-smi lists a GPU, else cpu; "
                "gpu-ib: with InfiniBand/RoCE devices)")


def check_profile(profile: str) -> str:
    """``profile`` if it names a trainer service, else ConfigError."""
    if profile not in SERVICES:
        raise ConfigError("--profile", profile, f"one of {', '.join(SERVICES)}")
    return profile


def image_identity(image: str) -> tuple[str, str]:
    """(id, digest) of a local image. A locally built image has no registry digest; its id
    is itself the SHA-256 digest of the image's configuration, so it stands in."""
    out = subprocess.run(["docker", "image", "inspect", "-f",
                          "{{.Id}} {{range .RepoDigests}}{{.}} {{end}}", image],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"--image={image}: no such image here: build it with `make build` "
                           "(GPU) or `make build-cpu`")
    image_id, *digests = out.stdout.split()
    return image_id, digests[0] if digests else image_id


@dataclasses.dataclass(frozen=True, slots=True)
class ComposeJob:
    """A job of ``nnodes`` nodes started through Compose on this host."""

    profile: str                 # cpu or gpu
    env_file: Path
    nnodes: int
    nproc_per_node: int | tuple[int, ...]   # one count, or one per node (uneven nodes)
    trainer_args: list[str]
    results_dir: Path
    results_name: str
    image: str
    master_port: int = 29500
    deadline_s: float = 1800.0
    # None: every node of the job as a Compose project on this host (a simulated cluster);
    # a rank: only that node, which joins a job whose other nodes run elsewhere.
    only_rank: int | None = None
    module: str = "bench.rank.train"   # the workload: the trainer or bench.rank.allreduce
    rdzv_timeout: int | None = None   # None: the settings file's RDZV_TIMEOUT
    master_addr: str | None = None    # None: the settings file's MASTER_ADDR
    # Each simulated node's GPUs (bench.host.gpus.assign), or None: every GPU to every node.
    gpus_per_node: list[str] | None = None


def _commands(job: ComposeJob, compose: list[str], job_id: str,
              identity: tuple[str, str] | None = None) -> list[NodeCommand]:
    """Each node's `compose up`; ``identity``: the image's (id, digest), read from Docker
    when not given."""
    service, image_var = SERVICES[job.profile]
    image_id, image_digest = identity or image_identity(job.image)
    ranks = range(job.nnodes) if job.only_rank is None else [job.only_rank]
    commands = []
    for rank in ranks:
        env = contract.node_env(
            nnodes=job.nnodes, node_rank=rank,
            nproc_per_node=job.nproc_per_node[rank] if isinstance(job.nproc_per_node, tuple)
            else job.nproc_per_node,
            master_addr=job.master_addr, master_port=job.master_port,
            rdzv_timeout=job.rdzv_timeout, job_id=job_id, module=job.module,
            workload_args=job.trainer_args, results_dir=str(job.results_dir.resolve()),
            results_name=job.results_name,
            gpus=job.gpus_per_node[rank] if job.gpus_per_node else None,
            image_id=image_id, image_digest=image_digest)
        if job.rdzv_timeout is None:  # the settings file's RDZV_TIMEOUT applies
            del env["RDZV_TIMEOUT"]
        if job.master_addr is None:   # the settings file's MASTER_ADDR applies
            del env["MASTER_ADDR"]
        env |= {"BENCH_ENV_FILE": str(job.env_file.resolve()), image_var: job.image}
        commands.append(NodeCommand(rank, f"node{rank}", compose + [
            "-p", contract.project_name(job_id, rank), "up", "--no-log-prefix",
            "--exit-code-from", service, service], env))
    return commands


@dataclasses.dataclass(frozen=True, slots=True)
class RemoteNode:
    """One node's Compose project as argvs for a shell on another host: its env (the node
    contract), the ``up`` that runs it and the ``down`` that removes it. Callers render
    them with ``bench.shell``; a value here is only ever one word."""

    env: dict[str, str]
    up: list[str]
    down: list[str]


def remote_node(job: JobSpec, *, profile: str, image: str, env_file: str, results_root: Path,
                node_rank: int | str, nproc: int | str, master_addr: str,
                master_port: int | str, extra_env: dict[str, str] | None = None) -> RemoteNode:
    """The argv-level node both the ssh launcher and the Slurm task render. ``node_rank``,
    ``nproc``, ``master_addr`` and ``master_port`` may be placeholders that the Slurm task
    fills in per node (``bench.host.launchers.slurm``)."""
    service, image_var = SERVICES[profile]
    results_dir = results_root.resolve()
    env = {**(extra_env or {}), **contract.node_env(
        nnodes=job.topology.nodes, node_rank=node_rank, nproc_per_node=nproc,
        master_addr=master_addr, master_port=master_port, rdzv_timeout=job.rdzv_timeout,
        job_id=job.job_id, module=job.module, workload_args=list(job.workload_args),
        results_dir=str(results_dir),
        results_name=str(Path(job.results).resolve().relative_to(results_dir))),
        "BENCH_ENV_FILE": env_file, image_var: image}
    project = ["-f", "compose/docker-compose.yml", "--env-file", env_file, "--profile", profile,
               "-p", contract.project_name(job.job_id, node_rank)]
    return RemoteNode(
        env=env,
        up=["sh", "-c", REMOTE_UP, "bench-node", image, *project, "up", "--no-log-prefix",
            "--exit-code-from", service, service],
        down=["sh", "-c", REMOTE_DOWN, "bench-node", *project, "down", "-v",
              "--remove-orphans", "-t", "5"])


def _compose(job: ComposeJob, command: list[str] | None = None) -> list[str]:
    return (command or contract.compose_command()) + ["-f", str(COMPOSE_FILE), "--env-file",
                                             str(job.env_file), "--profile", job.profile]


def run(job: ComposeJob, log_dir: Path | None = None, job_id: str | None = None) -> JobOutcome:
    """Start every node as a Compose project, wait, and always tear every project down."""
    compose = _compose(job)
    commands = _commands(job, compose, job_id or uuid.uuid4().hex[:8])

    def down() -> None:
        # Every node's project at once: each `down` mostly waits on the daemon.
        downs = [subprocess.Popen(compose + ["-p", command.argv[command.argv.index("-p") + 1],
                                             "down", "-v", "--remove-orphans", "-t", "5"],
                                  env={**os.environ, **(command.env or {})}, cwd=REPO,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for command in commands]
        for process in downs:
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()

    return run_nodes(commands, deadline_s=job.deadline_s, log_dir=log_dir, cleanup=down,
                     cwd=REPO)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ComposeOptions:
    """--launcher compose: every node a Compose project on this host."""

    image: str = launcher_flag("", IMAGE_HELP, parse=check_image)
    env_file: Path | None = launcher_flag(None, "the node settings file")
    profile: str = launcher_flag("cpu", PROFILE_HELP, choices=PROFILES,
                                 context_default="gpu_profile")
    visible_gpus: tuple[str, ...] = derived("visible_gpus", ())   # gpu profiles share these

    def __post_init__(self) -> None:
        if not self.image:
            raise ConfigError("--image", "''", "Compose needs the trainer image, e.g. "
                              "bench-trainer:cpu")
        check_image(self.image, "--image")
        if self.env_file is None or not self.env_file.is_file():
            raise ConfigError("--env-file", self.env_file, "Compose needs an existing settings "
                              "file, e.g. compose/.env")
        check_profile(self.profile)


class ComposeLauncher:
    name = "compose"

    def __init__(self, options: ComposeOptions) -> None:
        self.options = options

    def preflight(self, topologies: list[Topology]) -> None:
        # a missing image: one line now, not a failed job
        preflight.require(preflight.compose(self.options.image))

    def job(self, job: JobSpec) -> ComposeJob:
        from bench.host import gpus

        options = self.options
        results_dir = job.results.parent
        return ComposeJob(
            profile=options.profile, env_file=options.env_file, nnodes=job.topology.nodes,
            nproc_per_node=job.topology.counts, trainer_args=list(job.workload_args),
            results_dir=results_dir, results_name=job.results.name, image=options.image,
            master_port=job.master_port, deadline_s=job.deadline_s, module=job.module,
            rdzv_timeout=job.rdzv_timeout,
            gpus_per_node=gpus.assign(job.topology, list(options.visible_gpus))
            if options.profile.startswith("gpu") and options.visible_gpus else None)

    def render(self, job: JobSpec) -> str:
        compose_job = self.job(job)
        compose = _compose(compose_job, ["docker", "compose"])
        identity = ("<id of " + self.options.image + ">",) * 2
        ups = _commands(compose_job, compose, job.job_id, identity)
        return render_commands(ups, REPO) + "\n# afterwards, per node: the same command " \
            "with `down -v --remove-orphans -t 5` for `up ...`"

    def launch(self, job: JobSpec) -> JobOutcome:
        return run(self.job(job), log_dir=job.log_dir, job_id=job.job_id)


def main(argv: list[str] | None = None, prog: str = "bench compose") -> int:
    from bench import record
    from bench.config import MAX_TIMEOUT_S, OneLineErrorParser, TrainConfig
    from bench.host import gpus
    from bench.host.failures import describe_failure, failure_record
    from bench.host.settings import NodeSettings, check_data_volume, load
    from bench.options import ConfigError, check_image, finite_float, on_head, require_range
    from bench.paths import check_writable_file
    from bench.topology import Topology

    argv = sys.argv[1:] if argv is None else argv
    trainer_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    parser = OneLineErrorParser(
        prog=prog, description="Run one job through Compose, one Compose project per node "
        "on this host; trainer flags follow `--`.")
    parser.add_argument("--profile", choices=sorted(SERVICES), default="cpu")
    parser.add_argument("--env-file", type=Path, required=True)
    parser.add_argument("--nnodes", type=int, help="default: NNODES of the settings")
    parser.add_argument("--nproc-per-node", type=int,
                        help="default: NPROC_PER_NODE of the settings")
    parser.add_argument("--master-port", type=int, help="default: MASTER_PORT of the settings")
    parser.add_argument("--only-this-node", action="store_true",
                        help="start only this node (NODE_RANK of the settings) of a job whose "
                        "other nodes start elsewhere; default: every node on this host")
    parser.add_argument("--image", required=True)
    parser.add_argument("--results", type=Path, default=Path("results/runs.jsonl"))
    parser.add_argument("--deadline", type=finite_float, default=1800.0,
                        help="seconds before every node is stopped (default: %(default)s)")
    args = parser.parse_args(own)
    try:
        if not args.env_file.is_file():
            raise ConfigError("--env-file", args.env_file, "no such file: copy "
                              "compose/.env.example to compose/.env and edit it")
        check_image(args.image, "--image")
        require_range(args.deadline, "deadline", 0, MAX_TIMEOUT_S, low_open=True)
        check_writable_file(args.results, "--results")
        # The trainer's flags, checked here as far as they can be off the node: a typo is
        # one line now, not a failed container later; and the config makes the row below.
        with on_head():
            train_cfg = TrainConfig.from_args(trainer_args, "bench train")
        values = load(args.env_file)
        overrides = {"NNODES": args.nnodes, "NPROC_PER_NODE": args.nproc_per_node,
                     "MASTER_PORT": args.master_port}
        values.update({k: str(v) for k, v in overrides.items() if v is not None})
        if not args.only_this_node:
            values["NODE_RANK"] = "0"  # every rank runs here; rank 0's view is checked
        node = NodeSettings.parse(values, args.profile)
        check_data_volume(node, timeout=5)
        visible = gpus.visible_gpus()
        on_gpus = args.profile.startswith("gpu") and bool(visible)
        simulated = None if args.only_this_node or not on_gpus \
            else gpus.assign(Topology(node.nnodes, node.nproc_per_node), visible)
        job = ComposeJob(profile=args.profile, env_file=args.env_file, nnodes=node.nnodes,
                         nproc_per_node=node.nproc_per_node, trainer_args=trainer_args,
                         results_dir=args.results.parent, results_name=args.results.name,
                         image=args.image, master_port=node.master_port,
                         deadline_s=args.deadline,
                         only_rank=node.node_rank if args.only_this_node else None,
                         gpus_per_node=simulated)
        outcome = run(job)
    except (ConfigError, RuntimeError) as error:  # bad settings, missing image or Compose
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    records = outcome.records()
    # Rank 0 writes the job's one row; when it could not (a node died first, rank 0 hung
    # or never started), the row is written here. A node other than 0 started on its own
    # leaves the row to node 0's host.
    if not records and job.only_rank in (None, 0):
        rec = failure_record(train_cfg, Topology(node.nnodes, node.nproc_per_node))
        if not outcome.ok:
            rec = describe_failure(rec, outcome, args.deadline)
        record.append(args.results, rec)
        records = [rec]
    if outcome.timed_out:
        print(f"{prog}: the job passed its --deadline of {args.deadline:.0f} s and was stopped",
              file=sys.stderr)
    if outcome.culprit:
        print(f"{prog}: {outcome.culprit.host} exited {outcome.culprit.returncode}; last lines:"
              "\n  " + "\n  ".join(outcome.culprit.last_lines[-5:]), file=sys.stderr)
    for rec in records:
        print(f"{prog}: record {rec['run_id']} status {rec['status']}"
              + (f" ({rec['error']})" if rec.get("error") else "") + f" in {args.results}",
              file=sys.stderr)
    return 0 if outcome.ok and records else 1


if __name__ == "__main__":
    sys.exit(main())
