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
import functools
import os
import subprocess
import sys
from pathlib import Path

from bench.host import contract
from bench.host.checks import preflight
from bench.host.checks.remote import Remote
from bench.host.contract import NodeSpec
from bench.host.launchers import compose, flags
from bench.host.launchers.base import JobSpec, render_commands
from bench.host.launchers.flags import derived, launcher_flag
from bench.host.launchers.nodes import JobOutcome, NodeCommand, run_nodes
from bench.options import ConfigError, check_image
from bench.provenance import COMM_ENV_PREFIXES, COMM_SETTINGS
from bench.shell import assignment, command_line, words
from bench.topology import Topology, host_address, parse_hosts

REPO = Path(__file__).resolve().parents[3]
CONNECT_TIMEOUT_S = 10
# Forwarded to every host: the known communication settings (the one allow-list, which
# records use too) and the thread count. The values travel in the remote command line, which
# a dry run prints and other users of a host may see: nothing outside the list goes.
FORWARDED = COMM_SETTINGS | {"OMP_NUM_THREADS"}
RUNTIMES = ("compose", "native")


def host_tuple(text: str, setting: str) -> tuple[str, ...]:
    """``"h1,h2"`` -> the hosts in node-rank order (``bench.topology.parse_hosts``)."""
    return tuple(parse_hosts(text, setting))


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
    """This host's known communication settings, for every node; an unknown NCCL_, GLOO_ or
    TORCH_NCCL_ variable is named on stderr and left behind (set it in the node's env file
    if it is meant)."""
    unknown = sorted(k for k in os.environ
                     if k.startswith(COMM_ENV_PREFIXES) and k not in FORWARDED)
    if unknown:
        print(f"[ssh] not forwarded (not a known setting): {', '.join(unknown)}",
              file=sys.stderr)
    return {k: v for k, v in os.environ.items() if k in FORWARDED}


def remote_shell(directory: str, env: dict[str, str], argv: list[str]) -> str:
    """One shell line for the remote host: ``cd DIR && exec env K=V ... argv``, every word
    quoted (``bench.shell``), so it splits back to exactly that argv on the host."""
    return command_line(["exec", "env", *(assignment(k, v) for k, v in sorted(env.items())),
                         *argv], cwd=directory)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SshOptions:
    """--launcher ssh: node i on the i-th host, over SSH."""

    hosts: tuple[str, ...] = launcher_flag((), "host1,host2 in node-rank order",
                                           parse=host_tuple)
    runtime: str = launcher_flag("compose", "Compose (default) or torchrun on each host",
                                 choices=RUNTIMES)
    remote_dir: str | None = launcher_flag(None, flags.REMOTE_DIR_HELP,
                                           parse=flags.absolute_remote_dir)
    ssh_config: Path | None = launcher_flag(None, "an ssh_config file (ports, keys, "
                                            "known_hosts) passed to ssh -F")
    image: str | None = launcher_flag(None, "the trainer image (--runtime compose)",
                                      parse=check_image)
    env_file: Path | None = launcher_flag(None, "the node settings (--runtime compose; "
                                          "default: compose/.env there)")
    profile: str = launcher_flag("cpu", "the trainer service (--runtime compose; default: gpu "
                                 "where nvidia-smi lists a GPU here, else cpu)",
                                 choices=compose.PROFILES, context_default="gpu_profile")
    results_root: Path = derived("results_root", Path("results"))   # mounted by Compose
    topologies: tuple[Topology, ...] = derived("topologies", ())   # every host count checked

    def __post_init__(self) -> None:
        parse_hosts(",".join(self.hosts), "--hosts")   # none, or one no host can be: refused
        if self.remote_dir is not None:
            flags.absolute_remote_dir(self.remote_dir, "--remote-dir")
        if self.ssh_config is not None and not self.ssh_config.is_file():
            raise ConfigError("--ssh-config", self.ssh_config, "no such file")
        most = max((t.nodes for t in self.topologies), default=0)
        if most > len(self.hosts):
            raise ConfigError("--topologies", ",".join(map(str, self.topologies)),
                              f"needs {most} nodes but --hosts names {len(self.hosts)}")
        if self.runtime == "pyxis":
            raise ConfigError("--runtime", self.runtime, "pyxis is a Slurm runtime: use "
                              "compose or native with --launcher ssh")
        if self.runtime not in RUNTIMES:
            raise ConfigError("--runtime", self.runtime, f"one of {', '.join(RUNTIMES)}")
        if self.runtime == "compose":
            if not self.image:
                raise ConfigError("--image", "''", "Compose needs the trainer image, e.g. "
                                  "bench-trainer:cpu")
            check_image(self.image, "--image")
        compose.check_profile(self.profile)


class SshLauncher:
    name = "ssh"

    def __init__(self, options: SshOptions) -> None:
        self.options = options
        self.directory = options.remote_dir or str(REPO)
        self.master = host_address(options.hosts[0])  # MASTER_ADDR: without user@
        self.ssh = ssh_base(options.ssh_config)

    def preflight(self, topologies: list[Topology]) -> None:
        """Every host answers over SSH and has the GPUs asked for."""
        remote = Remote(functools.partial(ssh_argv, ssh_base(self.options.ssh_config)))
        preflight.require(preflight.ssh(remote, self.options.hosts, topologies))

    def commands(self, job: JobSpec) -> tuple[list[NodeCommand], list[list[str]]]:
        """Each host's start line and the line that stops what it started: what render
        prints and launch runs."""
        env = forwarded_env()
        commands, cleanups = [], []
        # Node i on the i-th host; hosts beyond the job's nodes stay idle.
        for node, host in zip(job.nodes, self.options.hosts, strict=False):
            line, stop = self.remote_lines(node, env)
            commands.append(NodeCommand(node.rank, host, ssh_argv(self.ssh, host, line)))
            cleanups.append(ssh_argv(self.ssh, host, stop))
        return commands, cleanups

    def remote_lines(self, node: NodeSpec, env: dict[str, str]) -> tuple[str, str]:
        """The shell lines that start the node on its host and stop it there."""
        if self.options.runtime == "native":
            argv = contract.torchrun_argv(node, master_addr=self.master,
                                          master_port=node.master_port,
                                          python=f"{self.directory}/.venv/bin/python")
            # The job's processes, by the job id in their command line.
            return (remote_shell(self.directory, env, argv),
                    words(["pkill", "-TERM", "-f", "--", f"--rdzv-id {node.job_id}"]))
        project = self.compose_node(node, env)
        stop = command_line(["env", *(assignment(k, v) for k, v in sorted(project.env.items())),
                             *project.down], cwd=self.directory)
        return remote_shell(self.directory, project.env, project.up), stop

    def compose_node(self, node: NodeSpec, env: dict[str, str]) -> compose.ComposeNode:
        """The node as a Compose project on its host (``--runtime compose``)."""
        options = self.options
        assert options.image is not None  # checked where the options were parsed
        env_file = options.env_file or Path(self.directory) / "compose" / ".env"
        stack = compose.remote_stack(profile=options.profile, image=options.image,
                                     env_file=str(env_file), results_root=options.results_root)
        return compose.compose_node(node, stack, master_addr=self.master,
                                    master_port=node.master_port, extra_env=env)

    def render(self, job: JobSpec) -> str:
        commands, cleanups = self.commands(job)
        return render_commands(commands) + "\n# afterwards, on every host:\n" + \
            "\n".join(words(argv) for argv in cleanups)

    def launch(self, job: JobSpec) -> JobOutcome:
        commands, cleanups = self.commands(job)

        def cleanup() -> None:
            for argv in cleanups:
                subprocess.run(argv, capture_output=True, timeout=120)

        return run_nodes(commands, deadline_s=job.deadline_s, log_dir=job.log_dir,
                         cleanup=cleanup)

