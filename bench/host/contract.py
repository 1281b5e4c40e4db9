"""The node contract, declared once: what a launcher hands one node, and how a node starts.

Every launcher (native, Compose, SSH, netns, Slurm) reduces a job to nodes, and every node
runs the same torchrun argv (``torchrun_argv``). Where a node starts inside the image, the
launcher passes the values below as environment variables (``node_env``); Compose
interpolates them into the trainer service and ``docker/node-entrypoint.sh`` turns them
into that same argv. tests/test_contract.py holds this module against
compose/docker-compose.yml, the entrypoint and compose/.env.example, so none can drift.
No torch here: the host side uses it.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

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
    "BENCH_MODULE": "the workload: bench.rank.train or bench.rank.allreduce",
    "BENCH_ARGS": "the workload's flags, one shell-quoted string",
    "RESULTS_DIR": "the host directory mounted at /results",
    "RESULTS_NAME": "the record file inside it",
    "BENCH_GPUS": "this node's GPUs when nodes share one host (CUDA_VISIBLE_DEVICES)",
    "BENCH_IMAGE_ID": "the image's id, which the image cannot know itself",
    "BENCH_IMAGE_DIGEST": "the image's registry digest (its id for a local build)",
}
# Where the record goes inside the container (RESULTS_DIR is mounted at /results).
CONTAINER_RESULTS = "/results"


def torchrun_argv(*, nnodes: int, node_rank: int | str, nproc_per_node: int,
                  master_addr: str, master_port: int | str, rdzv_timeout: int | str,
                  job_id: str, module: str, results: str, workload_args: list[str],
                  python: str = sys.executable, store_bind: str | None = None) -> list[str]:
    """One node's command. ``--rdzv-id`` carries the job id so that a launcher can find
    (and stop) this job's processes on a host by their command line. ``store_bind``: the
    one address node 0's rendezvous store listens on (``bench.rank.torchrun``, torchrun
    itself listens on every interface), for launchers that know where every node is."""
    launcher = (["bench.rank.torchrun", "--store-bind", store_bind] if store_bind
                else ["torch.distributed.run"])
    return [python, "-m", *launcher, "--nnodes", str(nnodes),
            "--node_rank", str(node_rank), "--nproc_per_node", str(nproc_per_node),
            "--master_addr", master_addr, "--master_port", str(master_port),
            "--rdzv-id", job_id, "--rdzv-conf", f"timeout={rdzv_timeout}",
            "-m", module, "--results", results, *workload_args]


def node_env(*, nnodes: int, node_rank: int | str, nproc_per_node: int, master_addr: str,
             master_port: int | str, rdzv_timeout: int, job_id: str, module: str,
             workload_args: list[str], results_dir: str, results_name: str,
             gpus: str | None = None, image_id: str | None = None,
             image_digest: str | None = None) -> dict[str, str]:
    """The NODE_VARIABLES of one node started through the image."""
    env = {"NNODES": str(nnodes), "NODE_RANK": str(node_rank),
           "NPROC_PER_NODE": str(nproc_per_node), "MASTER_ADDR": master_addr,
           "MASTER_PORT": str(master_port), "RDZV_TIMEOUT": str(rdzv_timeout),
           "BENCH_JOB_ID": job_id, "BENCH_MODULE": module,
           "BENCH_ARGS": shlex.join(workload_args), "RESULTS_DIR": results_dir,
           "RESULTS_NAME": results_name}
    if gpus is not None:
        env["BENCH_GPUS"] = gpus
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
