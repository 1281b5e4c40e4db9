"""Launch a job over SSH: node i runs on the i-th host, the first host leads.

Every host needs this checkout at the same path (or ``--remote-dir``), e.g. on the NFS
share, and for ``--runtime native`` its venv (``<dir>/.venv``); for ``--runtime compose``
the images. SSH runs non-interactively (BatchMode) with a connect timeout and never
accepts an unknown host key: add hosts to known_hosts first (``ssh-keyscan``), which
``bench doctor`` checks. A job's processes are found again on each host by the job id in
their command line, so a failure, the deadline or Ctrl-C stops every host.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
from pathlib import Path

from bench.host import contract
from bench.host.launchers import compose, native
from bench.host.launchers.base import JobSpec, render_commands
from bench.host.launchers.nodes import JobOutcome, NodeCommand, run_nodes
from bench.provenance import COMM_ENV_PREFIXES
from bench.topology import Topology, host_address

REPO = Path(__file__).resolve().parents[3]
CONNECT_TIMEOUT_S = 10
# Forwarded to every host: the communication settings and the thread count.
FORWARDED_PREFIXES = (*COMM_ENV_PREFIXES, "OMP_NUM_THREADS")


def ssh_base(ssh_config: Path | None = None) -> list[str]:
    """ssh and its options, up to (not including) the ``--`` that ends them: use
    ``ssh_argv`` to add the host and the remote command."""
    options = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
               "-o", "StrictHostKeyChecking=yes", "-o", "ServerAliveInterval=5",
               "-o", "ServerAliveCountMax=3"]
    return ["ssh", *(["-F", str(ssh_config)] if ssh_config else []), *options]


def ssh_argv(base: list[str], host: str, command: str) -> list[str]:
    """``ssh OPTIONS -- HOST COMMAND``: ``--`` ends ssh's options, so no host name can
    become one (``-oProxyCommand=...``), whatever got past ``parse_hosts``."""
    return [*base, "--", host, command]


def forwarded_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_PREFIXES)}


def remote_shell(directory: str, env: dict[str, str], argv: list[str]) -> str:
    """One shell line for the remote host: cd, then exec the command with its env."""
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    return f"cd {shlex.quote(directory)} && exec env {assignments} {shlex.join(argv)}"


def gpu_count(host: str, ssh_config: Path | None) -> int | None:
    """GPUs on a host per nvidia-smi; None where it has no NVIDIA driver (a CPU host)."""
    out = subprocess.run(ssh_argv(ssh_base(ssh_config), host,
                                  "nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true"),
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"ssh {host} failed: {out.stderr.strip() or out.returncode}")
    text = out.stdout.strip() or "0"
    if not text.isdigit():
        raise RuntimeError(f"ssh {host}: unexpected GPU count {text[:40]!r} from nvidia-smi")
    return int(text) or None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SshOptions:
    """--launcher ssh: node i on the i-th host, over SSH."""

    hosts: tuple[str, ...]                  # node-rank order; the first leads
    runtime: str = "compose"                # compose or native on each host
    remote_dir: str | None = None           # this checkout's path there (default: the same)
    ssh_config: Path | None = None
    image: str | None = None                # the trainer image (runtime compose)
    env_file: Path | None = None            # the node settings (runtime compose)
    profile: str = "cpu"                    # the trainer service (runtime compose)
    results_root: Path = Path("results")    # the results directory, mounted by Compose


class SshLauncher:
    name = "ssh"

    def __init__(self, options: SshOptions) -> None:
        self.options = options
        self.directory = options.remote_dir or str(REPO)
        self.master = host_address(options.hosts[0])  # MASTER_ADDR: without user@
        self.ssh = ssh_base(options.ssh_config)

    def preflight(self, topologies: list[Topology]) -> None:
        """Every host answers over SSH and has the GPUs asked for."""
        from bench.options import ConfigError

        for index, host in enumerate(self.options.hosts):
            gpus = gpu_count(host, self.options.ssh_config)
            wanted = max((t.procs_on(index) for t in topologies if t.nodes > index), default=0)
            if gpus is not None and wanted > gpus:
                raise ConfigError("--topologies", f"...x{wanted}",
                                  f"host {host} has {gpus} GPU(s): at most {index + 1}x{gpus} "
                                  "there")

    def commands(self, job: JobSpec) -> tuple[list[NodeCommand], list[list[str]]]:
        """Each host's start line and the line that stops what it started."""
        hosts = self.options.hosts[:job.topology.nodes]
        env = forwarded_env()
        commands, cleanups = [], []
        for rank, host in enumerate(hosts):
            if self.options.runtime == "native":
                argv = native.torchrun_argv(
                    job.topology, rank, master_addr=self.master, master_port=job.master_port,
                    rdzv_timeout=job.rdzv_timeout, job_id=job.job_id, results=str(job.results),
                    trainer_args=list(job.workload_args),
                    python=f"{self.directory}/.venv/bin/python", module=job.module)
                line = remote_shell(self.directory, env, argv)
                stop = f"pkill -TERM -f -- {shlex.quote('--rdzv-id ' + job.job_id)} || true"
            else:
                line, stop = _compose_lines(self.options, job, self.directory, self.master,
                                            rank, env)
            commands.append(NodeCommand(rank, host, ssh_argv(self.ssh, host, line)))
            cleanups.append(ssh_argv(self.ssh, host, stop))
        return commands, cleanups

    def render(self, job: JobSpec) -> str:
        commands, cleanups = self.commands(job)
        return render_commands(commands) + "\n# afterwards, on every host:\n" + \
            "\n".join(shlex.join(argv) for argv in cleanups)

    def launch(self, job: JobSpec) -> JobOutcome:
        commands, cleanups = self.commands(job)

        def cleanup() -> None:
            for argv in cleanups:
                subprocess.run(argv, capture_output=True, timeout=120)

        return run_nodes(commands, deadline_s=job.deadline_s, log_dir=job.log_dir,
                         cleanup=cleanup)


def _compose_lines(options: SshOptions, job: JobSpec, directory: str, master: str, rank: int,
                   env: dict[str, str]) -> tuple[str, str]:
    """The remote `compose up` for one node, and the `compose down` that undoes it."""
    assert options.image is not None  # checked where the options were parsed
    service, image_var = compose.SERVICES[options.profile]
    results_dir = options.results_root.resolve()
    env_file = options.env_file or Path(directory) / "compose" / ".env"
    project = contract.project_name(job.job_id, rank)
    node_env = {**env, **contract.node_env(
        nnodes=job.topology.nodes, node_rank=rank,
        # On Slurm the rank is a shell variable, and so is the node's count.
        nproc_per_node=job.topology.procs_on(rank) if isinstance(rank, int) else "@NPROC@",
        master_addr=master, master_port=job.master_port, rdzv_timeout=job.rdzv_timeout,
        job_id=job.job_id, module=job.module, workload_args=list(job.workload_args),
        results_dir=str(results_dir),
        results_name=str(Path(job.results).resolve().relative_to(results_dir))),
        "BENCH_ENV_FILE": str(env_file), image_var: options.image}
    # Compose v2 where the host has it, else docker-compose: decided on the host.
    base = ["$compose", "-f", "compose/docker-compose.yml", "--env-file", str(env_file),
            "--profile", options.profile, "-p", project]
    pick = contract.COMPOSE_PICK_SHELL
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(node_env.items()))
    # The image id is read on the host itself: each host has its own copy of the image.
    identity = (f"BENCH_IMAGE_ID=$(docker image inspect -f '{{{{.Id}}}}' "
                f"{shlex.quote(options.image)}) && export BENCH_IMAGE_ID BENCH_IMAGE_DIGEST="
                "$BENCH_IMAGE_ID")
    up = (f"cd {shlex.quote(directory)} && {pick} && {identity} && exec env {assignments} "
          f"{' '.join(base)} up --no-log-prefix --exit-code-from {service} {service}")
    down = (f"cd {shlex.quote(directory)} && {pick} && env {assignments} {' '.join(base)} "
            "down -v --remove-orphans -t 5 || true")
    return up, down
