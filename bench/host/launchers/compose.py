"""Launch a job through Compose: one Compose project per node.

On a cluster each node runs its own ``docker compose up`` with its NODE_RANK; here the
nodes of a job can also be simulated on one host as separate Compose projects (the CPU
profile in CI). Every project is torn down afterwards, whatever happened. A node's project
is written once (``compose_node``), for this host and for the ssh and Slurm launchers'
hosts alike; ``bench compose`` (``bench.host.compose_command``) runs its job through
``ComposeLauncher``.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from bench.host import contract
from bench.host.checks import preflight
from bench.host.contract import NodeSpec
from bench.host.launchers.base import JobSpec, on_shared_gpus, render_commands
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


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Stack:
    """The stack as the shell that starts a node sees it: how it calls Compose, the files
    Compose reads there, the trainer service's profile and image, where records go."""

    up: tuple[str, ...]          # runs `up` with the project's arguments after it
    down: tuple[str, ...]        # runs `down` likewise
    compose_file: str
    env_file: str                # the node settings, as Compose there finds them
    env_file_var: str            # BENCH_ENV_FILE: the same file, for the service's env_file
    profile: str                 # cpu, gpu or gpu-ib: the trainer service
    image: str
    results_root: Path           # the directory mounted at /results; the record is under it
    # The image's (id, digest) where this host reads them; None: the node's host reads them
    # itself (REMOTE_UP).
    identity: tuple[str, str] | None = None


def local_stack(options: ComposeOptions, job: JobSpec, program: list[str],
                identity: tuple[str, str]) -> Stack:
    """The stack on this host: Compose is ``program``, the record's directory is mounted."""
    assert options.env_file is not None  # ComposeOptions refuses a missing settings file
    return Stack(up=tuple(program), down=tuple(program), compose_file=str(COMPOSE_FILE),
                 env_file=str(options.env_file), env_file_var=str(options.env_file.resolve()),
                 profile=options.profile, image=options.image,
                 results_root=job.results.parent, identity=identity)


def remote_stack(*, profile: str, image: str, env_file: str, results_root: Path) -> Stack:
    """The stack on another host (ssh, a Slurm task), run from its checkout: the host
    reads the image's id and picks its own Compose."""
    return Stack(up=("sh", "-c", REMOTE_UP, "bench-node", image),
                 down=("sh", "-c", REMOTE_DOWN, "bench-node"),
                 compose_file="compose/docker-compose.yml", env_file=env_file,
                 env_file_var=env_file, profile=profile, image=image,
                 results_root=results_root)


@dataclasses.dataclass(frozen=True, slots=True)
class ComposeNode:
    """One node's Compose project as argvs: its env (the node contract), the ``up`` that
    runs it and the ``down`` that removes it. Callers render them with ``bench.shell``; a
    value here is only ever one word."""

    env: dict[str, str]
    up: list[str]
    down: list[str]


def compose_node(node: NodeSpec, stack: Stack, *, master_addr: str | None,
                 master_port: int | None,
                 extra_env: dict[str, str] | None = None) -> ComposeNode:
    """Node ``node`` as a Compose project: the one Compose line of a node, on this host
    (the Compose launcher, ``bench compose``) or on another (ssh, Slurm). ``master_addr`` or
    ``master_port`` None: the shell's value, else the settings file's
    (``contract.node_env``)."""
    service, image_var = SERVICES[stack.profile]
    results_dir = stack.results_root.resolve()
    image_id, image_digest = stack.identity or (None, None)
    env = {**(extra_env or {}), **contract.node_env(
        node, master_addr=master_addr, master_port=master_port,
        results_dir=str(results_dir),
        results_name=str(node.results.resolve().relative_to(results_dir)),
        image_id=image_id, image_digest=image_digest),
        "BENCH_ENV_FILE": stack.env_file_var, image_var: stack.image}
    project = ["-f", stack.compose_file, "--env-file", stack.env_file,
               "--profile", stack.profile, "-p", contract.project_name(node.job_id, node.rank)]
    return ComposeNode(
        env=env,
        up=[*stack.up, *project, "up", "--no-log-prefix", "--exit-code-from", service,
            service],
        down=[*stack.down, *project, "down", "-v", "--remove-orphans", "-t", "5"])


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


# What a dry run shows for Compose and the image's identity, which only a launch reads.
RENDERED_PROGRAM = ["docker", "compose"]


class ComposeLauncher:
    name = "compose"

    def __init__(self, options: ComposeOptions) -> None:
        self.options = options

    def preflight(self, topologies: list[Topology]) -> None:
        # a missing image: one line now, not a failed job
        preflight.require(preflight.compose(self.options.image))

    def nodes(self, job: JobSpec) -> tuple[NodeSpec, ...]:
        """The job's nodes, each on its own GPUs of this host for the GPU profiles."""
        visible = self.options.visible_gpus
        if self.options.profile.startswith("gpu") and visible:
            return on_shared_gpus(job, visible)
        return job.nodes

    def projects(self, job: JobSpec, nodes: Sequence[NodeSpec], program: list[str],
                 identity: tuple[str, str]) -> list[tuple[NodeCommand, NodeCommand]]:
        """Each node's ``up`` and its ``down``, run from the checkout. MASTER_ADDR is the
        settings file's."""
        stack = local_stack(self.options, job, program, identity)
        out = []
        for node in nodes:
            project = compose_node(node, stack, master_addr=None, master_port=node.master_port)
            out.append((NodeCommand(node.rank, f"node{node.rank}", project.up, project.env),
                        NodeCommand(node.rank, f"node{node.rank}", project.down, project.env)))
        return out

    def render(self, job: JobSpec) -> str:
        shown = f"<id of {self.options.image}>"
        projects = self.projects(job, self.nodes(job), RENDERED_PROGRAM, (shown, shown))
        return render_commands([up for up, _ in projects], REPO) + "\n# afterwards, per " \
            "node: the same command with `down -v --remove-orphans -t 5` for `up ...`"

    def launch(self, job: JobSpec) -> JobOutcome:
        return self.run(job, self.nodes(job), log_dir=job.log_dir)

    def run(self, job: JobSpec, nodes: Sequence[NodeSpec],
            log_dir: Path | None) -> JobOutcome:
        """Start ``nodes`` (the job's, or the one node of this host), wait, and always tear
        every project down."""
        projects = self.projects(job, nodes, contract.compose_command(),
                                 image_identity(self.options.image))

        def down() -> None:
            # Every node's project at once: each `down` mostly waits on the daemon.
            downs = [subprocess.Popen(command.argv, env={**os.environ, **(command.env or {})},
                                      cwd=REPO, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL) for _, command in projects]
            for process in downs:
                try:
                    process.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    process.kill()

        return run_nodes([up for up, _ in projects], deadline_s=job.deadline_s,
                         log_dir=log_dir, cleanup=down, cwd=REPO)
