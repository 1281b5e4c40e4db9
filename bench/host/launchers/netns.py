"""Launch a job across emulated hosts: one network namespace per node, links shaped by tc.

Each node runs the same torchrun command as the native launcher, inside its namespace and
on its own CPUs, with gloo bound to the lab interface; the lab is built for the job and
removed after it, whatever happens (see ``bench.host.netlab``).

Emulated hosts share this machine's memory bandwidth and caches, so a node computes more
slowly beside a busy neighbour than alone. To keep cells comparable, a job with fewer
nodes than the matrix's largest (``lab_nodes``) runs beside neighbours: on each spare
emulated host, an independent one-node copy of the same job, whose records are kept apart
(``neighbours.jsonl`` in the job's log directory). A neighbour starts its copy again each
time it ends and is stopped when the job is over: a one-node copy ends long before an N-node
job whose step waits on the link, and the job's nodes would then compute on idle CPUs for
the rest of it (two nodes on two CPUs computed twice as fast as the one-node baseline beside
three busy neighbours, and the prediction read 11% low). Every node of every cell then
computes beside the same number of busy hosts, as each node of the largest cell does.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from bench.host import netlab
from bench.host.checks import preflight
from bench.host.launchers import native
from bench.host.launchers.base import JobSpec
from bench.host.launchers.flags import derived, launcher_flag
from bench.host.launchers.nodes import JobOutcome, NodeCommand, failed_to_start, run_nodes
from bench.options import ConfigError, require_range
from bench.shell import words
from bench.topology import Topology
from bench.units import parse_rate


def commands(lab: netlab.Lab, topology: Topology, args: list[str], *, master_port: int,
             job_id: str, results: Path, rdzv_timeout: int, module: str,
             neighbours_results: Path | None = None) -> list[NodeCommand]:
    """The job's nodes on the lab's first hosts, then a neighbour on each spare host."""
    env = lab.env()
    out = []
    for node in lab.nodes:
        job = node.rank < topology.nodes
        # A neighbour is a one-node job of its own, on its own port. The rendezvous
        # listens on its master's lab address only.
        master_addr = lab.master_addr if job else node.address
        argv = native.torchrun_argv(
            topology if job else Topology(1, topology.procs_on(0)), node.rank if job else 0,
            master_addr=master_addr, store_bind=master_addr,
            master_port=master_port if job else master_port + 1 + node.rank,
            rdzv_timeout=rdzv_timeout, job_id=job_id if job else f"{job_id}-n{node.rank}",
            results=str((results if job else neighbours_results or results).resolve()),
            trainer_args=args, module=module)
        # The node's CPUs are shared by its processes; torch would otherwise start a thread
        # per CPU of the machine in each.
        threads = max(1, len(node.cpus) // topology.procs_on(min(node.rank, topology.nodes - 1)))
        env_of_node = {**env, "OMP_NUM_THREADS": str(threads)}
        if job:
            out.append(NodeCommand(node.rank, f"node{node.rank}", node.wrap(argv), env_of_node))
        else:
            out.append(NodeCommand(node.rank, f"neighbour{node.rank}",
                                   [*RESTART, *node.wrap(argv)], env_of_node, background=True))
    return out


# A neighbour's command again each time it ends well, for as long as the job runs; its
# first failure ends the loop with that exit code (argv stays a list: "$@", no parsing).
RESTART = ["sh", "-c", 'while :; do "$@" || exit; done', "neighbour"]


def run(topology: Topology, args: list[str], *, rate_bps: int, cpus_per_node: int | None,
        master_port: int, job_id: str, results: Path, rdzv_timeout: int, module: str,
        deadline_s: float, log_dir: Path | None, lab_nodes: int | None = None) -> JobOutcome:
    hosts = max(topology.nodes, lab_nodes or 0)
    with netlab.terminate_raises(), native.job_temp_dir() as temp_dir, \
            netlab.Lab(hosts, rate_bps, cpus_per_node=cpus_per_node) as lab:
        print(f"[netlab] {lab.describe()}", file=sys.stderr, flush=True)
        nodes = commands(lab, topology, args, master_port=master_port, job_id=job_id,
                         results=results, rdzv_timeout=rdzv_timeout, module=module,
                         neighbours_results=(log_dir or results.parent) / "neighbours.jsonl")
        outcome = run_nodes(native.in_temp_dir(nodes, temp_dir), deadline_s=deadline_s,
                            log_dir=log_dir)
    # The job's own nodes; a neighbour that failed is still the culprit (it stopped the job).
    outcome.nodes = outcome.nodes[:topology.nodes]
    return outcome


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NetnsOptions:
    """--launcher netns: every node in its own namespace behind a shaped link."""

    link_bps: int = launcher_flag(0, "the link rate of every node, e.g. 1gbit, 5gbit",
                                  flag="--link", parse=parse_rate)   # 0: not given
    # CPUs pinned to each emulated host; None: this machine's, shared by the lab's hosts.
    cpus_per_node: int | None = launcher_flag(
        None, "CPUs pinned to each node (default: this machine's CPUs divided by the most "
        "nodes of any cell)")
    lab_nodes: int = derived("most_nodes", 1)   # emulated hosts per job: the most of any cell
    visible_gpus: tuple[str, ...] = derived("visible_gpus", ())

    def __post_init__(self) -> None:
        if not self.link_bps:
            raise ConfigError("--link", "''", "netns needs the link rate, e.g. --link 1gbit")
        require_range(self.cpus_per_node, "cpus_per_node", 1, os.cpu_count() or 1,
                      optional=True)
        if self.cpus_per_node is None:
            object.__setattr__(self, "cpus_per_node",
                               max(1, (os.cpu_count() or 1) // max(1, self.lab_nodes)))


class NetnsLauncher:
    name = "netns"

    def __init__(self, options: NetnsOptions) -> None:
        self.options = options

    def preflight(self, topologies: list[Topology]) -> None:
        preflight.require(preflight.netns())  # no root or no iproute2: before any job

    def render(self, job: JobSpec) -> str:
        options = self.options
        argv = native.torchrun_argv(
            job.topology, "<node rank>", master_addr="<node 0's lab address>",
            store_bind="<node 0's lab address>", master_port=job.master_port,
            rdzv_timeout=job.rdzv_timeout, job_id=job.job_id,
            results=str(job.results), trainer_args=list(job.workload_args),
            module=job.module, nproc="<its processes>")
        return (f"# {options.lab_nodes} emulated host(s), each a network namespace with "
                f"{options.cpus_per_node} CPU(s), joined by {options.link_bps / 1e9:g} Gbit/s "
                "links (tc tbf); nodes beyond the job's run an independent copy as neighbours "
                f"(see bench/netlab.py)\n# in each of the job's {job.topology.nodes} "
                f"namespace(s):\n{words(argv)}")

    def launch(self, job: JobSpec) -> JobOutcome:
        from bench.host import gpus
        options = self.options
        try:
            if gpus.wants_gpus(list(job.workload_args), list(options.visible_gpus)):
                # nodes in namespaces share this host
                raise netlab.LabError("the netns launcher emulates CPU hosts: pass "
                                      "--device cpu after --")
            return run(job.topology, list(job.workload_args), rate_bps=options.link_bps,
                       cpus_per_node=options.cpus_per_node, master_port=job.master_port,
                       job_id=job.job_id, results=job.results, rdzv_timeout=job.rdzv_timeout,
                       module=job.module, deadline_s=job.deadline_s, log_dir=job.log_dir,
                       lab_nodes=options.lab_nodes)
        except netlab.LabError as error:  # this job's lab failed: a row, not a crash
            return failed_to_start("netlab", str(error))
