"""Launch a job over SSH: node i runs on the i-th host, the first host leads.

Every host needs this checkout at the same path (or ``--remote-dir``), e.g. on the NFS
share, and for ``--runtime native`` its venv (``<dir>/.venv``); for ``--runtime compose``
the images. SSH runs non-interactively (BatchMode) with a connect timeout and never
accepts an unknown host key: add hosts to known_hosts first (``ssh-keyscan``), which
``bench doctor`` checks. A job's processes are found again on each host by the job id in
their command line, so a failure, the deadline or Ctrl-C stops every host.
"""
from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from bench.launchers import compose, native
from bench.launchers.nodes import NodeCommand, run_nodes
from bench.provenance import COMM_ENV_PREFIXES
from bench.topology import host_address

REPO = Path(__file__).resolve().parent.parent.parent
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


def preflight(cfg) -> None:
    """Before anything starts: every host answers over SSH and has the GPUs asked for."""
    from bench.options import ConfigError

    for index, host in enumerate(cfg.hosts):
        gpus = gpu_count(host, cfg.ssh_config)
        wanted = max((c.topology.procs for c in cfg.cells if c.topology.nodes > index),
                     default=0)
        if gpus is not None and wanted > gpus:
            raise ConfigError("--topologies", f"...x{wanted}",
                              f"host {host} has {gpus} GPU(s): at most {index + 1}x{gpus} there")


def launcher(cfg):
    """The matrix's launch function for ``--launcher ssh``."""
    preflight(cfg)
    directory = cfg.remote_dir or str(REPO)
    master = host_address(cfg.hosts[0])  # MASTER_ADDR: the first host, without user@
    ssh = ssh_base(cfg.ssh_config)

    def launch(cell, args, job_id, port, trainer_results, log_dir):
        hosts = cfg.hosts[:cell.topology.nodes]
        env = forwarded_env()
        commands, cleanups = [], []
        for rank, host in enumerate(hosts):
            if cfg.runtime == "native":
                argv = native.torchrun_argv(
                    cell.topology, rank, master_addr=master, master_port=port,
                    rdzv_timeout=cfg.rdzv_timeout, job_id=job_id, results=str(trainer_results),
                    trainer_args=args, python=f"{directory}/.venv/bin/python",
                    module=cfg.module)
                line = remote_shell(directory, env, argv)
                stop = f"pkill -TERM -f -- {shlex.quote('--rdzv-id ' + job_id)} || true"
            else:
                line, stop = _compose_lines(cfg, cell, args, job_id, port, trainer_results,
                                            directory, master, rank, env)
            commands.append(NodeCommand(rank, host, ssh_argv(ssh, host, line)))
            cleanups.append(ssh_argv(ssh, host, stop))

        def cleanup() -> None:
            for argv in cleanups:
                subprocess.run(argv, capture_output=True, timeout=120)

        return run_nodes(commands, deadline_s=cfg.deadline_s, log_dir=log_dir, cleanup=cleanup)

    return launch


def _compose_lines(cfg, cell, args, job_id, port, trainer_results, directory, master, rank,
                   env) -> tuple[str, str]:
    """The remote `compose up` for one node, and the `compose down` that undoes it."""
    service, image_var = compose.SERVICES[cfg.profile]
    results_dir = cfg.results.parent.resolve()
    env_file = cfg.env_file or Path(directory) / "compose" / ".env"
    project = f"bench-{job_id}-node{rank}".lower()  # Compose wants lower-case names
    node_env = {**env, "BENCH_ENV_FILE": str(env_file), "NNODES": str(cell.topology.nodes),
                "NODE_RANK": str(rank), "NPROC_PER_NODE": str(cell.topology.procs),
                "MASTER_ADDR": master, "MASTER_PORT": str(port), "RDZV_TIMEOUT":
                str(cfg.rdzv_timeout), "RESULTS_DIR": str(results_dir),
                "RESULTS_NAME": str(Path(trainer_results).relative_to(results_dir)),
                image_var: cfg.image, "BENCH_ARGS": shlex.join(args),
                "BENCH_MODULE": cfg.module}
    # Compose v2 where the host has it, else docker-compose: decided on the host.
    base = ["$compose", "-f", "compose/docker-compose.yml", "--env-file", str(env_file),
            "--profile", cfg.profile, "-p", project]
    pick = ("compose=$(docker compose version >/dev/null 2>&1 && echo 'docker compose' "
            "|| echo docker-compose)")
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(node_env.items()))
    # The image id is read on the host itself: each host has its own copy of the image.
    identity = (f"BENCH_IMAGE_ID=$(docker image inspect -f '{{{{.Id}}}}' "
                f"{shlex.quote(cfg.image)}) && export BENCH_IMAGE_ID BENCH_IMAGE_DIGEST="
                "$BENCH_IMAGE_ID")
    up = (f"cd {shlex.quote(directory)} && {pick} && {identity} && exec env {assignments} "
          f"{' '.join(base)} up --no-log-prefix --exit-code-from {service} {service}")
    down = (f"cd {shlex.quote(directory)} && {pick} && env {assignments} {' '.join(base)} "
            "down -v --remove-orphans -t 5 || true")
    return up, down
