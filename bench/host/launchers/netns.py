"""Launch a job across emulated hosts: one network namespace per node, links shaped by tc.

Each node runs the same torchrun command as the native launcher, inside its namespace and
on its own CPUs, with gloo bound to the lab interface; the lab is built for the job and
removed after it, whatever happens (see ``bench.host.netlab``).

Emulated hosts share this machine's memory bandwidth and caches, so a node computes more
slowly beside a busy neighbour than alone. To keep cells comparable, a job with fewer
nodes than the matrix's largest (``lab_nodes``) runs beside neighbours: on each spare
emulated host, an independent one-node copy of the same job, whose records are kept apart
(``neighbours.jsonl`` in the job's log directory). A neighbour starts its copy again each
time it ends and is stopped when the job is over and its first copy has ended (so that
every host's pace of that moment is kept, the slower ones' too): a one-node copy ends long
before an N-node job whose step waits on the link, and the job's nodes would then compute
on idle CPUs for the rest of it (two nodes on two CPUs computed twice as fast as the
one-node baseline beside three busy neighbours, and the prediction read 11% low). Every
node of every cell then computes beside the same number of busy hosts, as each node of the
largest cell does.

A host can be made slow on purpose, a straggler to detect: ``--host-cpu-quota`` caps each
host's CPU time (a cgroup per host), ``--host-links`` gives hosts their own link rates.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from bench import record
from bench.host import cgroups, contract, gpus, lab_nfs, netlab
from bench.host.checks import preflight
from bench.host.contract import NodeSpec
from bench.host.launchers import native
from bench.host.launchers.base import JobSpec, render_commands
from bench.host.launchers.flags import derived, launcher_flag
from bench.host.launchers.nodes import JobOutcome, NodeCommand, failed_to_start, run_nodes
from bench.options import ConfigError, require_range
from bench.topology import Topology
from bench.units import format_rate, parse_rate

QUOTA_EXAMPLE = "e.g. 0.5 for every host, or one per host: 0.5,0.5,0.5,0.4"
CPUS_EXAMPLE = ("e.g. 0/0/1/1 (hosts 0 and 1 on CPU 0, hosts 2 and 3 on CPU 1), 0-1/2-3 or "
                "0,2/1,3: one CPU list per host, hosts apart by /")
_CPU_ITEM = re.compile(r"(\d{1,4})(?:-(\d{1,4}))?", re.ASCII)
LINKS_EXAMPLE = ("e.g. 1gbit,1gbit,1gbit,100mbit, one per host (an empty one: --link's "
                 "rate, as in ,,,100mbit)")


def commands(lab: netlab.Lab, job: JobSpec, neighbours_results: Path) -> list[NodeCommand]:
    """The job's nodes on the lab's first hosts, then a neighbour on each spare host."""
    out = []
    for host in lab.nodes:
        in_job = host.rank < job.topology.nodes
        node = job.nodes[host.rank] if in_job else neighbour(job, host.rank, neighbours_results)
        # The rendezvous listens on its master's lab address only (a neighbour's own).
        master_addr = lab.master_addr if in_job else host.address
        argv = contract.torchrun_argv(node, master_addr=master_addr, store_bind=master_addr,
                                      master_port=node.master_port,
                                      results=str(node.results.resolve()))
        # The node's CPUs are shared by its processes; torch would otherwise start a thread
        # per CPU of the machine in each. A quota is the CPUs the node may use: threads
        # beyond it would only take turns, each burst cut short by the quota.
        procs = job.topology.procs_on(min(host.rank, job.topology.nodes - 1))
        usable = len(host.cpus) if host.cpu_quota is None \
            else min(len(host.cpus), max(1, int(host.cpu_quota)))
        env_of_node = {**lab.env(host), "OMP_NUM_THREADS": str(max(1, usable // procs))}
        if in_job:
            out.append(NodeCommand(host.rank, f"node{host.rank}", host.wrap(argv), env_of_node))
        else:
            out.append(NodeCommand(host.rank, f"neighbour{host.rank}",
                                   [*RESTART, *host.wrap(argv)], env_of_node, background=True))
    return out


def neighbour(job: JobSpec, rank: int, results: Path) -> NodeSpec:
    """The spare host ``rank``'s node: a one-node copy of the job's node 0, a job of its
    own on its own port, whose record goes to ``results``."""
    return dataclasses.replace(job.nodes[0], rank=0, nnodes=1,
                               master_port=job.master_port + 1 + rank,
                               job_id=f"{job.job_id}-n{rank}", results=results)


# A neighbour's command again each time it ends well, for as long as the job runs; its
# first failure ends the loop with that exit code (argv stays a list: "$@", no parsing).
RESTART = ["sh", "-c", 'while :; do "$@" || exit; done', "neighbour"]


def neighbours_results(job: JobSpec) -> Path:
    """Where the neighbours' records go, apart from the job's."""
    return job.log_dir / "neighbours.jsonl"


def first_copies_done(lab: netlab.Lab, job: JobSpec) -> Callable[[], bool] | None:
    """Whether every spare host's first copy has written its record (None: no spare host).

    The job waits for them before stopping its neighbours: each copy started with the job,
    and a copy stopped when the job ended would leave a record only where it ran faster
    than the job's node, so the records kept would say the hosts are faster than they are
    (70% of 157 kept copies had read faster than their cell, before this wait). With every
    host's record, a round has each host's pace at the same moment, and the N-node
    prediction starts from the slowest (bench/analysis/host_copies.py)."""
    wanted = {neighbour(job, host.rank, Path()).job_id for host in lab.nodes
              if host.rank >= job.topology.nodes}
    if not wanted:
        return None
    path = neighbours_results(job)

    def done() -> bool:
        try:
            text = path.read_text(errors="replace")
        except OSError:      # not written yet
            return False
        # Polled while the copies append: a line not whole yet is read again next time,
        # and any other bad line is for the results' own reader to warn about
        # (host_copies reads this file with bench.record.read once the copies are done).
        found = set()
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                rec = record.document(line)
                if isinstance(rec, dict):
                    found.add(rec.get("job_id"))
        return wanted <= found
    return done


def parse_quotas(text: str, setting: str) -> tuple[float, ...]:
    """``"0.5"`` or ``"0.5,0.5,0.5,0.4"``: CPUs per host, each a finite number > 0. How many
    and how large the node count and pinned CPUs allow is NetnsOptions' check."""
    quotas = []
    for word in str(text).split(","):
        try:
            quota = float(word)
        except ValueError:
            raise ConfigError(setting, text or "''", f"a fraction of one CPU per host, "
                              f"{QUOTA_EXAMPLE}") from None
        if not math.isfinite(quota) or quota <= 0:
            raise ConfigError(setting, text, f"each quota must be a finite number of CPUs "
                              f"above 0, {QUOTA_EXAMPLE}")
        quotas.append(quota)
    return tuple(quotas)


def parse_host_cpus(text: str, setting: str) -> tuple[tuple[int, ...], ...]:
    """``"0/0/1/1"`` or ``"0-1/2,3"``: the CPUs of each host, hosts apart by ``/``, each a
    list of CPUs and ranges as taskset takes them. Each CPU is one of this machine's; how
    many hosts is NetnsOptions' check."""
    total = os.cpu_count() or 1
    hosts = []
    for part in str(text).split("/"):
        cpus: set[int] = set()
        for item in part.split(","):
            match = _CPU_ITEM.fullmatch(item.strip())
            if match is None:
                raise ConfigError(setting, text or "''", f"a CPU list per host, {CPUS_EXAMPLE}")
            first = int(match[1])
            last = int(match[2]) if match[2] is not None else first
            if first > last or last >= total:
                raise ConfigError(setting, text, f"CPU {item.strip()!r}: each CPU must be one "
                                  f"of this machine's 0-{total - 1}, a range low-high, "
                                  f"{CPUS_EXAMPLE}")
            cpus.update(range(first, last + 1))
        hosts.append(tuple(sorted(cpus)))
    return tuple(hosts)


def parse_host_links(text: str, setting: str) -> tuple[int | None, ...]:
    """``"1gbit,,,100mbit"``: a link rate per host in bits per second, None where empty
    (the host keeps --link's rate)."""
    words = [word.strip() for word in str(text).split(",")]
    if not any(words):
        raise ConfigError(setting, text or "''", f"a link rate per host, {LINKS_EXAMPLE}")
    return tuple(parse_rate(word, setting) if word else None for word in words)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NetnsOptions:
    """--launcher netns: every node in its own namespace behind a shaped link."""

    link_bps: int = launcher_flag(0, "the link rate of every node, e.g. 1gbit, 5gbit",
                                  flag="--link", parse=parse_rate)   # 0: not given
    # CPUs pinned to each emulated host; None: this machine's, shared by the lab's hosts.
    cpus_per_node: int | None = launcher_flag(
        None, "CPUs pinned to each node (default: this machine's CPUs divided by the most "
        "nodes of any cell)")
    # The CPUs of each host, instead of --cpus-per-node's even deal; one set: every host.
    host_cpus: tuple[tuple[int, ...], ...] = launcher_flag(
        (), "the CPUs of each emulated host, instead of --cpus-per-node: one list for "
        "every host or one per host, apart by / (0/0/1/1: hosts 0 and 1 share CPU 0); "
        "default: the CPUs dealt round evenly", parse=parse_host_cpus)
    # CPUs each host may use, a fraction of one (a cgroup per host); one value: every host.
    host_cpu_quota: tuple[float, ...] = launcher_flag(
        (), "CPU quota of each emulated host, a fraction of one CPU: one value for every "
        "host (0.5) or one per host (0.5,0.5,0.5,0.4); default: none",
        parse=parse_quotas)
    # A link rate per host (None: --link's); empty: every host at --link.
    host_links: tuple[int | None, ...] = launcher_flag(
        (), "a link rate per emulated host, both ends of its link shaped at it "
        "(1gbit,1gbit,1gbit,100mbit; an empty entry keeps --link); default: --link for all",
        parse=parse_host_links)
    # A directory served to the hosts by an NFS server on its own emulated host.
    nfs_export: Path | None = launcher_flag(
        None, "serve this directory read-only to the emulated hosts from an NFS server "
        "(NFS_IMAGE) on its own host of the lab, at nfs://169.254.100.254/datasets "
        "(bench accept reads it with -- --data-url); default: no server",
        parse=lambda text, flag: lab_nfs.check_export(text, flag))
    nfs_link_bps: int = launcher_flag(0, "the NFS server host's link rate, e.g. 100mbit "
                                      "(default: --link)", flag="--nfs-link",
                                      parse=parse_rate)
    lab_nodes: int = derived("most_nodes", 1)   # emulated hosts per job: the most of any cell
    visible_gpus: tuple[str, ...] = derived("visible_gpus", ())

    def __post_init__(self) -> None:
        if not self.link_bps:
            raise ConfigError("--link", "''", "netns needs the link rate, e.g. --link 1gbit")
        require_range(self.cpus_per_node, "cpus_per_node", 1, os.cpu_count() or 1,
                      optional=True)
        hosts = max(1, self.lab_nodes)
        if self.host_cpus:
            shown_cpus = "/".join(",".join(map(str, cpus)) for cpus in self.host_cpus)
            if self.cpus_per_node is not None:
                raise ConfigError("--host-cpus", shown_cpus, "places each host's CPUs itself: "
                                  "give it or --cpus-per-node, not both")
            if len(self.host_cpus) not in (1, hosts):
                raise ConfigError("--host-cpus", shown_cpus, f"{len(self.host_cpus)} CPU "
                                  f"lists for {hosts} emulated hosts (the most nodes of any "
                                  f"cell): give one for all or one per host, {CPUS_EXAMPLE}")
        elif self.cpus_per_node is None:
            object.__setattr__(self, "cpus_per_node",
                               max(1, (os.cpu_count() or 1) // hosts))
        quotas = self.host_cpu_quota
        shown = ",".join(f"{q:g}" for q in quotas)
        if len(quotas) > 1 and len(quotas) != hosts:
            raise ConfigError("--host-cpu-quota", shown, f"{len(quotas)} quotas for {hosts} "
                              f"emulated hosts (the most nodes of any cell): give one for "
                              f"all or one per host, {QUOTA_EXAMPLE}")
        checked = zip(quotas_per_host(self), cpus_per_host(self), strict=True) if quotas else ()
        for quota, cpus in checked:
            if not cgroups.MIN_QUOTA <= quota <= len(cpus):
                raise ConfigError("--host-cpu-quota", shown, f"each quota must be in "
                                  f"{cgroups.MIN_QUOTA:g}-{len(cpus)} CPUs (the CPUs pinned "
                                  "to its host; --cpus-per-node or --host-cpus sets them)")
        if self.nfs_link_bps and self.nfs_export is None:
            raise ConfigError("--nfs-link", format_rate(self.nfs_link_bps), "shapes the lab's "
                              "NFS server: give the directory it serves, --nfs-export DIR")
        if self.host_links and len(self.host_links) != hosts:
            raise ConfigError("--host-links", ",".join(
                format_rate(r) if r else "" for r in self.host_links),
                f"{len(self.host_links)} rates for {hosts} emulated hosts (the most nodes "
                f"of any cell): give one per host, {LINKS_EXAMPLE}")


def _own_settings(options: NetnsOptions) -> str:
    """The hosts' own rates and CPU quotas, for the rendered header (empty: none)."""
    parts = [f"host {rank} at {format_rate(rate)}"
             for rank, rate in enumerate(options.host_links) if rate]
    parts += [f"host {rank} held to {quota:g} CPU"
              for rank, quota in enumerate(quotas_per_host(options))]
    return f";\n# {', '.join(parts)}" if parts else ""


def _server(options: NetnsOptions) -> str:
    if options.nfs_export is None:
        return ""
    rate = format_rate(options.nfs_link_bps or options.link_bps)
    return (f";\n# an NFS server host serves {options.nfs_export} at {lab_nfs.url()} on a "
            f"{rate} link")


def cpus_per_host(options: NetnsOptions) -> list[list[int]]:
    """Each emulated host's CPUs: --host-cpus' (one list holds every host), else
    --cpus-per-node's even deal."""
    hosts = max(1, options.lab_nodes)
    chosen = options.host_cpus * hosts if len(options.host_cpus) == 1 else options.host_cpus
    return netlab.placed_cpus(hosts, None if chosen else options.cpus_per_node, chosen)


def quotas_per_host(options: NetnsOptions) -> tuple[float, ...]:
    """--host-cpu-quota as one quota per emulated host (one value holds every host)."""
    quotas = options.host_cpu_quota
    return quotas * max(1, options.lab_nodes) if len(quotas) == 1 else quotas


class NetnsLauncher:
    name = "netns"

    def __init__(self, options: NetnsOptions) -> None:
        self.options = options

    def preflight(self, topologies: list[Topology]) -> None:
        preflight.require(preflight.netns())  # no root or no iproute2: before any job

    def lab(self, job: JobSpec) -> netlab.Lab:
        """The job's emulated hosts (built on entering): the matrix's most nodes of any
        cell, so that every node computes beside the same number of busy hosts."""
        options = self.options
        return netlab.Lab(max(job.topology.nodes, options.lab_nodes), options.link_bps,
                          cpus_per_node=None if options.host_cpus else options.cpus_per_node,
                          node_cpus=cpus_per_host(options) if options.host_cpus else (),
                          node_rates=options.host_links, cpu_quotas=quotas_per_host(options))

    def data_server(self, lab: netlab.Lab):
        """The lab's NFS server, where --nfs-export gives it a directory."""
        if self.options.nfs_export is None:
            return contextlib.nullcontext()
        return lab_nfs.served(lab, self.options.nfs_export, self.options.nfs_link_bps or None)

    def render(self, job: JobSpec) -> str:
        """The lab, then the line of every host in it (its namespace's name is the lab's
        own, new for each job)."""
        options = self.options
        placed = cpus_per_host(options)
        cpus = f"{len(placed[0])} CPU(s)" if not options.host_cpus else \
            "its CPUs (" + ", ".join(f"host {rank}: {','.join(map(str, c))}"
                                     for rank, c in enumerate(placed)) + ")"
        return (f"# {options.lab_nodes} emulated host(s), each a network namespace with "
                f"{cpus}, joined by {options.link_bps / 1e9:g} Gbit/s "
                "links (tc tbf)" + _own_settings(options) + _server(options)
                + ";\n# nodes beyond the job's "
                "run an independent copy as neighbours, started again each time it ends "
                "(see bench/netlab.py)\n"
                + render_commands(commands(self.lab(job), job, neighbours_results(job))))

    def launch(self, job: JobSpec) -> JobOutcome:
        options = self.options
        try:
            if gpus.wants_gpus(list(job.workload_args), list(options.visible_gpus)):
                # nodes in namespaces share this host
                raise netlab.LabError("the netns launcher emulates CPU hosts: pass "
                                      "--device cpu after --")
            with netlab.terminate_raises(), native.job_temp_dir() as temp_dir, \
                    self.lab(job) as lab, self.data_server(lab):
                print(f"[netlab] {lab.describe()}", file=sys.stderr, flush=True)
                nodes = commands(lab, job, neighbours_results(job))
                outcome = run_nodes(native.in_temp_dir(nodes, temp_dir),
                                    deadline_s=job.deadline_s, log_dir=job.log_dir,
                                    background_done=first_copies_done(lab, job))
        except netlab.LabError as error:  # this job's lab failed: a row, not a crash
            return failed_to_start("netlab", str(error))
        # The job's own nodes; a neighbour that failed is still the culprit (it stopped it).
        outcome.nodes = outcome.nodes[:job.topology.nodes]
        return outcome
