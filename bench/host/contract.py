"""The node contract, declared once: what a launcher hands one node, and how a node starts.

Every launcher (native, Compose, SSH, netns, Slurm, Kubernetes) reduces a job to nodes, one
``NodeSpec`` each, and every node runs the same torchrun argv (``torchrun_argv``). Where a
node starts inside the image, the launcher passes the values below as environment
variables (``node_env``); Compose
interpolates them into the trainer service and ``docker/node-entrypoint.sh`` turns them
into that same argv. tests/test_contract.py holds this module against
compose/docker-compose.yml, the entrypoint and compose/.env.example, so none can drift.
No torch here: the host side uses it.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

# What a launcher sets for one node, and what each means. Compose interpolates every one
# into the trainer service (the shell wins over the env file for these).
NODE_VARIABLES = {
    "NNODES": "nodes in the job",
    "NODE_RANK": "this node's rank; 0 leads the rendezvous",
    "NPROC_PER_NODE": "processes (GPUs) on this node",
    "MASTER_ADDR": "node 0's address",
    "MASTER_PORT": "the rendezvous port on node 0",
    "RDZV_TIMEOUT": "seconds a node waits for the others at the rendezvous",
    "BENCH_JOB_ID": "the job's id: torchrun's --rdzv-id, to find the job's processes again",
    "BENCH_MODULE": "the workload: bench.rank.train, bench.rank.allreduce or bench.rank.accept",
    "BENCH_ARGS": "the workload's flags, one shell-quoted string",
    "RESULTS_DIR": "the host directory mounted at /results",
    "RESULTS_NAME": "the record file inside it",
    "BENCH_GPUS": "this node's GPUs when nodes share one host (CUDA_VISIBLE_DEVICES)",
    "BENCH_IMAGE_ID": "the image's id, which the image cannot know itself",
    "BENCH_IMAGE_DIGEST": "the image's registry digest (its id for a local build)",
}
# Where the record goes inside the container (RESULTS_DIR is mounted at /results).
CONTAINER_RESULTS = "/results"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NodeSpec:
    """One node of a job, whoever starts it: its place in the job (the values of
    NODE_VARIABLES), where it starts and which of its host's GPUs it may use. Built once per
    job (``bench.host.launchers.base.JobSpec.nodes``); each launcher renders it in its own
    form (a torchrun line, a Compose project, an ssh line, an srun task, a pod)."""

    rank: int                          # 0 leads the rendezvous
    nnodes: int
    nproc: int                         # processes (GPUs) on this node
    master_port: int                   # node 0's rendezvous port, as the job chose it
    rdzv_timeout: int                  # seconds the node waits for the others to join
    job_id: str                        # torchrun's --rdzv-id: finds the job's processes
    module: str                        # the workload: bench.rank.train, .allreduce or .accept
    workload_args: tuple[str, ...]     # its flags (without --results)
    results: Path                      # the file rank 0 appends the record to
    workdir: Path                      # the stack's checkout, where the node starts
    # This node's GPUs where the job's nodes share one host (CUDA_VISIBLE_DEVICES, in
    # nvidia-smi's order); None: every GPU its host has.
    devices: str | None = None


def torchrun_argv(node: NodeSpec, *, master_addr: str | None, master_port: int | None,
                  results: str | None = None, python: str = sys.executable,
                  store_bind: str | None = None) -> list[str]:
    """The node's command. ``master_addr`` and ``master_port``: node 0's rendezvous as the
    launcher knows it; None leaves the flag out, and torchrun reads it from the node's
    environment (PET_MASTER_ADDR, PET_MASTER_PORT), where only the node knows it (a Slurm
    task). ``results``: the record file as the node sees it (default: the spec's).
    ``--rdzv-id`` carries the job id so that a launcher can find (and stop) this job's
    processes on a host by their command line. ``store_bind``: the one address node 0's
    rendezvous store listens on (``bench.rank.torchrun``, torchrun itself listens on every
    interface), for launchers that know where every node is."""
    # bench.rank.torchrun is torchrun that leaves as soon as the job is over.
    launcher = ["bench.rank.torchrun", *(["--store-bind", store_bind] if store_bind else [])]
    endpoint = ([] if master_addr is None else ["--master_addr", master_addr]) + \
        ([] if master_port is None else ["--master_port", str(master_port)])
    return [python, "-m", *launcher, "--nnodes", str(node.nnodes),
            "--node_rank", str(node.rank), "--nproc_per_node", str(node.nproc), *endpoint,
            "--rdzv-id", node.job_id, "--rdzv-conf", f"timeout={node.rdzv_timeout}",
            "-m", node.module, "--results", str(node.results) if results is None else results,
            *node.workload_args]


def node_env(node: NodeSpec, *, master_addr: str | None, master_port: int | None,
             results_dir: str, results_name: str, image_id: str | None = None,
             image_digest: str | None = None) -> dict[str, str]:
    """The NODE_VARIABLES of one node started through the image. ``master_addr`` or
    ``master_port`` None: left out, so that the shell's value (a Slurm task's) or the
    settings file's applies."""
    env = {"NNODES": str(node.nnodes), "NODE_RANK": str(node.rank),
           "NPROC_PER_NODE": str(node.nproc)}
    if master_addr is not None:
        env["MASTER_ADDR"] = master_addr
    if master_port is not None:
        env["MASTER_PORT"] = str(master_port)
    env |= {"RDZV_TIMEOUT": str(node.rdzv_timeout), "BENCH_JOB_ID": node.job_id,
            "BENCH_MODULE": node.module, "BENCH_ARGS": shlex.join(node.workload_args),
            "RESULTS_DIR": results_dir, "RESULTS_NAME": results_name}
    if node.devices is not None:
        env["BENCH_GPUS"] = node.devices
    if image_id is not None:
        env["BENCH_IMAGE_ID"] = image_id
        env["BENCH_IMAGE_DIGEST"] = image_digest or image_id
    assert set(env) <= set(NODE_VARIABLES)  # the contract is the whole vocabulary
    return env


def project_name(job_id: str, rank: int | str) -> str:
    """A node's Compose project: found again (and taken down) by this name on its host.
    Compose wants lower-case names."""
    return f"bench-{job_id}-node{rank}".lower()


def compose_command() -> list[str]:
    """$COMPOSE if set, else `docker compose` (v2) where present, else docker-compose."""
    if os.environ.get("COMPOSE"):
        return shlex.split(os.environ["COMPOSE"])
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
    if probe.returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise RuntimeError("neither `docker compose` nor docker-compose is installed: "
                       "run scripts/install-host.sh docker")
