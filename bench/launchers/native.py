"""Launch a job natively: one torchrun per node, all on this host (nodes on loopback)."""
from __future__ import annotations

import sys
from pathlib import Path

from bench.launchers.nodes import NodeCommand
from bench.topology import Topology


def torchrun_argv(topology: Topology, node_rank: int, *, master_addr: str, master_port: int,
                  rdzv_timeout: int, job_id: str, results: str, trainer_args: list[str],
                  python: str = sys.executable, module: str = "bench.train") -> list[str]:
    """One node's torchrun command. ``--rdzv-id`` carries the job id so that a launcher can
    find (and stop) this job's processes on a host by their command line. ``module`` is the
    workload: the trainer, or the all-reduce benchmark (``bench.allreduce``)."""
    return [python, "-m", "torch.distributed.run", "--nnodes", str(topology.nodes),
            "--node_rank", str(node_rank), "--nproc_per_node", str(topology.procs),
            "--master_addr", master_addr, "--master_port", str(master_port),
            "--rdzv-id", job_id, "--rdzv-conf", f"timeout={rdzv_timeout}",
            "-m", module, "--results", results, *trainer_args]


def commands(topology: Topology, trainer_args: list[str], *, master_port: int, job_id: str,
             results: Path, rdzv_timeout: int, module: str = "bench.train") -> list[NodeCommand]:
    return [NodeCommand(rank, f"node{rank}", torchrun_argv(
                topology, rank, master_addr="127.0.0.1", master_port=master_port,
                rdzv_timeout=rdzv_timeout, job_id=job_id, results=str(results),
                trainer_args=trainer_args, module=module))
            for rank in range(topology.nodes)]
