"""Launch a job through Compose: one Compose project per node.

On a cluster each node runs its own ``docker compose up`` with its NODE_RANK; here the
nodes of a job can also be simulated on one host as separate Compose projects (the CPU
profile in CI). Every project is torn down afterwards, whatever happened.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from bench import record

REPO = Path(__file__).resolve().parent.parent.parent
COMPOSE_FILE = REPO / "compose" / "docker-compose.yml"
SERVICES = {"cpu": ("trainer-cpu", "CPU_IMAGE"), "gpu": ("trainer", "IMAGE")}


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


def image_identity(image: str) -> tuple[str, str]:
    """(id, digest) of a local image. A locally built image has no registry digest; its id
    is itself the SHA-256 digest of the image's configuration, so it stands in."""
    out = subprocess.run(["docker", "image", "inspect", "-f",
                          "{{.Id}} {{range .RepoDigests}}{{.}} {{end}}", image],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"image {image} not found: build it with `make build`")
    image_id, *digests = out.stdout.split()
    return image_id, digests[0] if digests else image_id


@dataclasses.dataclass(frozen=True, slots=True)
class ComposeJob:
    """A job of ``nnodes`` nodes started through Compose on this host."""

    profile: str                 # cpu or gpu
    env_file: Path
    nnodes: int
    nproc_per_node: int
    trainer_args: list[str]
    results_dir: Path
    results_name: str
    image: str
    master_port: int = 29500
    deadline_s: float = 1800.0
    # None: every node of the job as a Compose project on this host (a simulated cluster);
    # a rank: only that node, which joins a job whose other nodes run elsewhere.
    only_rank: int | None = None


@dataclasses.dataclass(slots=True)
class NodeOutcome:
    node_rank: int
    returncode: int | None
    last_lines: list[str]


def _stream(proc: subprocess.Popen, prefix: str, tail: list[str]) -> None:
    for line in proc.stdout:  # type: ignore[union-attr]
        sys.stderr.write(f"{prefix} {line}")
        tail.append(line.rstrip("\n"))
        del tail[:-20]


def run(job: ComposeJob) -> tuple[list[NodeOutcome], list[dict]]:
    """Start every node, wait, tear down; returns each node's outcome and the new records."""
    service, image_var = SERVICES[job.profile]
    compose = compose_command() + ["-f", str(COMPOSE_FILE), "--env-file", str(job.env_file),
                                   "--profile", job.profile]
    image_id, image_digest = image_identity(job.image)
    results = job.results_dir / job.results_name
    before = sum(1 for _ in record.read(results)) if results.exists() else 0
    job_id = uuid.uuid4().hex[:8]
    base_env = {**os.environ, "BENCH_ENV_FILE": str(job.env_file.resolve()),
                "NNODES": str(job.nnodes), "NPROC_PER_NODE": str(job.nproc_per_node),
                "MASTER_PORT": str(job.master_port), "RESULTS_DIR": str(job.results_dir.resolve()),
                "RESULTS_NAME": job.results_name, image_var: job.image,
                "BENCH_ARGS": shlex.join(job.trainer_args),
                "BENCH_IMAGE_ID": image_id, "BENCH_IMAGE_DIGEST": image_digest}
    ranks = range(job.nnodes) if job.only_rank is None else [job.only_rank]
    projects = [f"bench-{job_id}-node{rank}" for rank in ranks]
    procs, tails, threads = [], [], []
    try:
        for rank, project in zip(ranks, projects, strict=True):
            env = {**base_env, "NODE_RANK": str(rank)}
            proc = subprocess.Popen(
                compose + ["-p", project, "up", "--no-log-prefix", "--exit-code-from", service,
                           service], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, cwd=REPO)
            tail: list[str] = []
            thread = threading.Thread(target=_stream, args=(proc, f"[node {rank}]", tail),
                                      daemon=True)
            thread.start()
            procs.append(proc)
            tails.append(tail)
            threads.append(thread)
        _wait(procs, job.deadline_s)
    finally:
        _down(compose, projects, base_env)
        for thread in threads:
            thread.join(timeout=10)
    outcomes = [NodeOutcome(rank, proc.returncode, tail)
                for rank, proc, tail in zip(ranks, procs, tails, strict=True)]
    records = list(record.read(results))[before:] if results.exists() else []
    return outcomes, records


def _wait(procs: list[subprocess.Popen], deadline_s: float) -> None:
    """Wait for every node; once one fails or the deadline passes, the rest are stopped."""
    end = time.monotonic() + deadline_s
    while any(p.poll() is None for p in procs):
        failed = any(p.returncode not in (None, 0) for p in procs)
        if failed or time.monotonic() > end:
            for p in procs:
                if p.poll() is None:
                    p.terminate()  # compose up stops its containers on SIGTERM
            for p in procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
            return
        time.sleep(0.5)


def _down(compose: list[str], projects: list[str], env: dict) -> None:
    for project in projects:
        subprocess.run(compose + ["-p", project, "down", "-v", "--remove-orphans", "-t", "5"],
                       env=env, capture_output=True, cwd=REPO, timeout=120)


def main(argv: list[str] | None = None, prog: str = "bench compose") -> int:
    from bench.config import OneLineErrorParser
    from bench.options import ConfigError
    from bench.settings import NodeSettings, check_data_volume, load

    argv = sys.argv[1:] if argv is None else argv
    trainer_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    parser = OneLineErrorParser(
        prog=prog, description="Run one job through Compose, one Compose project per node "
        "on this host; trainer flags follow `--`.")
    parser.add_argument("--profile", choices=sorted(SERVICES), default="cpu")
    parser.add_argument("--env-file", type=Path, required=True)
    parser.add_argument("--nnodes", type=int, help="default: NNODES of the settings")
    parser.add_argument("--nproc-per-node", type=int,
                        help="default: NPROC_PER_NODE of the settings")
    parser.add_argument("--master-port", type=int, help="default: MASTER_PORT of the settings")
    parser.add_argument("--only-this-node", action="store_true",
                        help="start only this node (NODE_RANK of the settings) of a job whose "
                        "other nodes start elsewhere; default: every node on this host")
    parser.add_argument("--image", required=True)
    parser.add_argument("--results", type=Path, default=Path("results/runs.jsonl"))
    parser.add_argument("--deadline", type=float, default=1800.0,
                        help="seconds before every node is stopped (default: %(default)s)")
    args = parser.parse_args(own)
    if not args.env_file.is_file():
        print(f"{prog}: error: --env-file={args.env_file}: no such file", file=sys.stderr)
        return 2
    values = load(args.env_file)
    overrides = {"NNODES": args.nnodes, "NPROC_PER_NODE": args.nproc_per_node,
                 "MASTER_PORT": args.master_port}
    values.update({k: str(v) for k, v in overrides.items() if v is not None})
    if not args.only_this_node:
        values["NODE_RANK"] = "0"  # every rank runs here; rank 0's view is checked
    try:
        node = NodeSettings.parse(values, args.profile)
        check_data_volume(node, timeout=5)
        job = ComposeJob(profile=args.profile, env_file=args.env_file, nnodes=node.nnodes,
                         nproc_per_node=node.nproc_per_node, trainer_args=trainer_args,
                         results_dir=args.results.parent, results_name=args.results.name,
                         image=args.image, master_port=node.master_port,
                         deadline_s=args.deadline,
                         only_rank=node.node_rank if args.only_this_node else None)
        outcomes, records = run(job)
    except (ConfigError, RuntimeError) as error:  # bad settings, missing image or Compose
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    failed = [o for o in outcomes if o.returncode != 0]
    for outcome in failed:
        print(f"{prog}: node {outcome.node_rank} exited {outcome.returncode}; last lines:\n  "
              + "\n  ".join(outcome.last_lines[-5:]), file=sys.stderr)
    for rec in records:
        print(f"{prog}: record {rec['run_id']} status {rec['status']} in {args.results}",
              file=sys.stderr)
    return 1 if failed or not records else 0


if __name__ == "__main__":
    sys.exit(main())
