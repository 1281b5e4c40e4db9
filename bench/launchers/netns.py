"""Launch a job across emulated hosts: one network namespace per node, links shaped by tc.

Each node runs the same torchrun command as the native launcher, inside its namespace and
on its own CPUs, with gloo bound to the lab interface; the lab is built for the job and
removed after it, whatever happens (see ``bench.netlab``).
"""
from __future__ import annotations

import sys
from pathlib import Path

from bench import netlab
from bench.launchers import native
from bench.launchers.nodes import JobOutcome, NodeCommand, run_nodes
from bench.topology import Topology


def commands(lab: netlab.Lab, topology: Topology, args: list[str], *, master_port: int,
             job_id: str, results: Path, rdzv_timeout: int, module: str) -> list[NodeCommand]:
    env = lab.env()
    out = []
    for node in lab.nodes:
        argv = native.torchrun_argv(
            topology, node.rank, master_addr=lab.master_addr, master_port=master_port,
            rdzv_timeout=rdzv_timeout, job_id=job_id, results=str(results.resolve()),
            trainer_args=args, module=module)
        # The node's CPUs are shared by its processes; torch would otherwise start a thread
        # per CPU of the machine in each.
        threads = max(1, len(node.cpus) // topology.procs)
        out.append(NodeCommand(node.rank, f"node{node.rank}", node.wrap(argv),
                               {**env, "OMP_NUM_THREADS": str(threads)}))
    return out


def run(topology: Topology, args: list[str], *, rate_bps: int, cpus_per_node: int | None,
        master_port: int, job_id: str, results: Path, rdzv_timeout: int, module: str,
        deadline_s: float, log_dir: Path | None) -> JobOutcome:
    with netlab.terminate_raises(), \
            netlab.Lab(topology.nodes, rate_bps, cpus_per_node=cpus_per_node) as lab:
        print(f"[netlab] {lab.describe()}", file=sys.stderr, flush=True)
        nodes = commands(lab, topology, args, master_port=master_port, job_id=job_id,
                         results=results, rdzv_timeout=rdzv_timeout, module=module)
        return run_nodes(nodes, deadline_s=deadline_s, log_dir=log_dir)
