"""``python -m bench doctor --hosts h1,h2``: is this cluster ready for a multi-node job?

One row per host and check, PASS, WARN or FAIL with the fix; exit status 1 on any FAIL.
The first host leads (MASTER_ADDR), as in the SSH fan-out. Checks, per host:

  ssh        passwordless, non-interactive SSH with a known host key
  docker     the Docker engine answers and Compose is installed
  image      the trainer image is there; its id and torch/CUDA/NCCL versions agree across hosts
  gpu        the driver is at least the flavour's minimum (docker/cuda-flavours.tsv), an
             NVSwitch fabric is trained (nvidia-smi's fabric state Completed, status
             Success: else Fabric Manager is named, the GPU, its state and the fix, as
             scripts/check-gpu.sh says it), and torch inside the image, run with the GPUs
             attached (docker run --gpus all), sees CUDA and at least --gpus-per-node
             devices; a refusal such as 'unsatisfied condition: cuda>=13.0' names the
             driver floor and the build line of a flavour this driver runs, as
             scripts/check-gpu.sh does. WARN on a host without NVIDIA driver; not checked
             with --gpus-per-node 0 (a CPU job)
  rdma       --profile gpu-ib: ibv_devinfo inside the image with /dev/infiniband attached,
             as the gpu-ib trainer runs: the HCAs and their ports' state and link layer,
             or why NCCL would see none and fall back to TCP sockets (no /dev/infiniband,
             no verbs in the image, no active port, an NCCL_IB_HCA that names none)
  mig        each GPU's MIG mode; FAIL where one is in MIG mode (a process gets one MIG
             slice at most: the ranks would run on slices, or fail), with the command that
             turns it off
  interface  the interface routing to MASTER_ADDR exists and matches NCCL/GLOO_SOCKET_IFNAME
  rendezvous MASTER_PORT on the first host is reachable from this host
  shm        /dev/shm is at least 1 GiB (the trainer containers share the host's: ipc host)
  dataset    the dataset volume mounts in the image and matches its manifest
  resolve    every host name resolves on this host
  clock      the clock is within 0.5 s of this machine's (WARN to 5 s, FAIL beyond)
  exposure   WARN where MASTER_ADDR or the address of the NCCL/gloo socket interface is
             public (globally routable): the c10d store and NCCL/gloo have no
             authentication and exchange pickled objects, so anyone who reaches those
             ports can run code on the nodes. A warning, not a failure: a firewall may
             close them.

Every host is a strict host name (``bench.topology.parse_hosts``) and every ssh call ends
ssh's options with ``--`` before the host, so no host can become an ssh option.

``python -m bench doctor --slurm [--partition P]`` checks a Slurm cluster instead: the
controller answers, the partition exists, its nodes' states, munge, and that every node
runs the same venv (or, with --runtime compose, the same image) through srun.

``python -m bench doctor --k8s --image IMAGE [--profile gpu]`` checks a Kubernetes cluster:
the context answers, the job may be created, nodes report allocatable ``nvidia.com/gpu``
(gpu profile), the results claim is bound, the image can be pulled (a probe pod with
--pull-probe), and the NFS server of the settings answers.
"""
from __future__ import annotations

import argparse
import functools
import re
import shutil
import sys
from pathlib import Path

from bench.config import OneLineErrorParser
from bench.host.checks import (
    FAIL,
    WARN,
    Row,
    containers,
    data,
    gpu,
    network,
    rdma,
    slurm,
    ssh,
    table,
    tally,
)
from bench.host.checks.flavours import flavours
from bench.host.checks.remote import Hosts, Remote
from bench.host.launchers import k8s, registry
from bench.host.launchers.ssh import ssh_argv, ssh_base
from bench.host.settings import read_env_file
from bench.options import MAX_PORT, MIN_PORT, ConfigError, check_image, finite_float
from bench.paths import path_arg
from bench.topology import parse_hosts, shown

# This module is the command: its flags and the order of the checks. The checks live in
# bench.host.checks, split by what they check (ssh, containers, gpu, network, data, slurm);
# each launcher's preflight draws from the same functions and prints the same rows
# (bench.host.checks.preflight). The docstring above is `bench doctor --help`.
MAX_CHECK_TIMEOUT_S = 3600
DEFAULT_MASTER_PORT = 29500
# --dataset names one directory under the image's /data: a plain name, nothing more.
_DATASET = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}", re.ASCII)


def check_hosts(job: Hosts) -> list[Row]:
    """Every host check of ``job``, host by host, then those across hosts (the same image,
    the rendezvous port); a host that does not answer over ssh gets its ssh row only."""
    rows: list[Row] = []
    reachable = []
    for host in job.names:
        rows.append(ssh.reach(job.remote, host))
        if rows[-1].result != FAIL:
            reachable.append(host)
    images: dict[str, containers.Found | None] = {}
    for host in reachable:
        rows.append(containers.docker_row(job.remote, host))
        image, found = containers.image_row(job.remote, host, job.image)
        rows.append(image)
        if found:
            gpus, with_gpus = gpu.gpu_row(job, host)
            rows.append(gpus)
            if with_gpus:  # the NCCL version only shows with the GPUs attached
                found = (found[0], with_gpus)
            if job.profile == "gpu-ib":
                rows.append(rdma.rdma_row(job, host))
            mig = gpu.mig_row(job, host)
            rows += [mig] if mig is not None else []
            rows.append(data.dataset_row(job, host))
        images[host] = found
        interfaces, devices = network.interface_rows(job, host)
        rows += interfaces
        rows.append(network.exposure_row(job, host, devices))
        rows.append(data.shm_row(job.remote, host))
        rows.append(ssh.resolve_row(job, host))
        rows.append(ssh.clock_row(job.remote, host))
    rows += containers.same_image_rows(images)
    rows += network.rendezvous_rows(job, reachable)
    return rows


def main(argv: list[str] | None = None, prog: str = "bench doctor") -> int:
    parser = OneLineErrorParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", help="host1,host2[,...]: the first leads")
    parser.add_argument("--slurm", action="store_true", help="check the Slurm cluster "
                        "(controller, partition, nodes, munge, same venv or image) instead")
    parser.add_argument("--k8s", action="store_true", help="check the Kubernetes cluster "
                        "(context, permission, GPUs, results claim, image, NFS) instead")
    parser.add_argument("--profile", choices=("cpu", "gpu", "gpu-ib"), default=None,
                        help="the trainer's profile: gpu-ib also runs ibv_devinfo in the "
                        "image with the HCAs attached; --k8s: gpu checks allocatable "
                        "nvidia.com/gpu (default: cpu)")
    parser.add_argument("--k8s-kind", choices=("indexed", "pytorchjob"), default="indexed",
                        help="--k8s: the object the jobs are (default: indexed)")
    parser.add_argument("--namespace", default="default", help="--k8s: the jobs' namespace")
    parser.add_argument("--kube-context", help="--k8s: kubectl's context (default: current)")
    parser.add_argument("--results-claim", help="--k8s: the results PersistentVolumeClaim "
                        "(default: bench-results)")
    parser.add_argument("--results-host-path", help="--k8s: results on each node instead")
    parser.add_argument("--pull-probe", action="store_true", help="--k8s: start a pod that "
                        "pulls the image (else only the right to create pods is checked)")
    parser.add_argument("--partition", help="--slurm: the partition (default: the cluster's)")
    parser.add_argument("--runtime", choices=("native", "compose"), default="native",
                        help="--slurm: what the jobs run: the venv on shared storage or the "
                        "image")
    parser.add_argument("--remote-dir", help="--slurm: this checkout's path on the nodes")
    parser.add_argument("--torch-flavour", default="default",
                        help="the image's TORCH_FLAVOUR, whose minimum driver the GPU hosts "
                        "need (docker/cuda-flavours.tsv)")
    parser.add_argument("--gpus-per-node", type=int, default=1,
                        help="GPUs torch must see on each GPU host (default: 1; 0: a CPU "
                        "job, the GPUs are not checked)")
    parser.add_argument("--image", default="bench-trainer:cuda", help="the trainer image")
    parser.add_argument("--env-file", type=path_arg, help="node settings (NCCL/GLOO interface, "
                        "dataset volume); default compose/.env, else compose/.env.example")
    parser.add_argument("--dataset", default="fashion-mnist", help="dataset directory to verify")
    parser.add_argument("--ssh-config", type=path_arg, help="an ssh_config file for ssh -F")
    parser.add_argument("--master-port", type=int, help="the rendezvous port to probe "
                        f"(default: MASTER_PORT of the settings, else {DEFAULT_MASTER_PORT})")
    parser.add_argument("--timeout", type=finite_float, default=300.0,
                        help="seconds any one remote check may take (default: %(default)s)")
    args = parser.parse_args(argv)
    compose_dir = Path(__file__).resolve().parents[2] / "compose"
    env_file = args.env_file or next((p for p in (compose_dir / ".env",
                                                  compose_dir / ".env.example") if p.is_file()),
                                     compose_dir / ".env")
    if args.slurm and args.k8s:
        print(f"{prog}: error: --k8s: give --slurm or --k8s, not both", file=sys.stderr)
        return 2
    if args.slurm:
        return _slurm_main(args, prog)
    if args.k8s:
        return _k8s_main(args, env_file, prog)
    try:
        if not args.hosts:
            raise ConfigError("--hosts", "''", "name the hosts (host1,host2), or check a "
                              "Slurm cluster with --slurm")
        hosts = parse_hosts(args.hosts, "--hosts")
        check_image(args.image, "--image")
        if args.torch_flavour not in flavours():
            raise ConfigError("--torch-flavour", shown(args.torch_flavour),
                              f"one of {', '.join(flavours())} (docker/cuda-flavours.tsv)")
        if not 0 <= args.gpus_per_node <= 64:
            raise ConfigError("--gpus-per-node", args.gpus_per_node, "must be 0 to 64")
        if not _DATASET.fullmatch(args.dataset) or args.dataset in (".", ".."):
            raise ConfigError("--dataset", shown(args.dataset), "one plain directory name "
                              "(letters, digits, _ . + -; not starting with . or -), e.g. "
                              "fashion-mnist")
        if not env_file.is_file():
            raise ConfigError("--env-file", shown(env_file), "no such file: copy "
                              "compose/.env.example to compose/.env and edit it")
        if args.ssh_config is not None and not args.ssh_config.is_file():
            raise ConfigError("--ssh-config", shown(args.ssh_config), "no such file")
        if not 0 < args.timeout <= MAX_CHECK_TIMEOUT_S:
            raise ConfigError("--timeout", shown(args.timeout), "must be a number of seconds "
                              f"in (0, {MAX_CHECK_TIMEOUT_S}]")
        settings = read_env_file(env_file)
        master_port = _master_port(args.master_port, settings)
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    remote = Remote(functools.partial(ssh_argv, ssh_base(args.ssh_config)), args.timeout)
    job = Hosts(tuple(hosts), remote, image=args.image, settings=settings,
                dataset=args.dataset, master_port=master_port, flavour=args.torch_flavour,
                gpus_per_node=args.gpus_per_node, profile=args.profile or "gpu")
    return _report(check_hosts(job), prog)


def _slurm_main(args: argparse.Namespace, prog: str) -> int:
    try:
        if args.hosts:
            raise ConfigError("--hosts", shown(args.hosts), "--slurm checks the cluster's own "
                              "nodes: leave --hosts out")
        # The same checks as the launcher's: a partition name or directory no job could use
        # is refused before any command runs.
        registry.options_from("slurm", {
            "--partition": args.partition, "--runtime": args.runtime,
            "--remote-dir": args.remote_dir,
            "--image": args.image if args.runtime == "compose" else None}, environ={})
        if args.runtime == "compose":
            check_image(args.image, "--image")
        if not 0 < args.timeout <= MAX_CHECK_TIMEOUT_S:
            raise ConfigError("--timeout", shown(args.timeout), "must be a number of seconds "
                              f"in (0, {MAX_CHECK_TIMEOUT_S}]")
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    return _report(slurm.check(args.partition, args.runtime, args.image, args.remote_dir,
                               timeout=args.timeout), prog)


def _k8s_main(args: argparse.Namespace, env_file: Path, prog: str) -> int:
    try:
        if args.hosts:
            raise ConfigError("--hosts", shown(args.hosts), "--k8s checks the cluster of "
                              "kubectl's context: leave --hosts out")
        if not 0 < args.timeout <= MAX_CHECK_TIMEOUT_S:
            raise ConfigError("--timeout", shown(args.timeout), "must be a number of seconds "
                              f"in (0, {MAX_CHECK_TIMEOUT_S}]")
        # The launcher's own options section: a setting no job could use is refused here.
        # Built from the launcher table, as the matrix builds it (doctor's flags only; the
        # environment's launcher settings are the matrix's).
        options = registry.options_from("k8s", {
            "--image": args.image, "--env-file": env_file,
            "--profile": args.profile or "cpu",
            "--k8s-kind": args.k8s_kind, "--namespace": args.namespace,
            "--kube-context": args.kube_context, "--results-claim": args.results_claim,
            "--results-host-path": args.results_host_path}, environ={})
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    if shutil.which("kubectl") is None:
        print(f"{prog}: error: --k8s: kubectl not found: install it and set a context "
              "(https://kubernetes.io/docs/tasks/tools/)", file=sys.stderr)
        return 2
    return _report(k8s.cluster_checks(options, timeout=min(args.timeout, 120.0),
                                      pull_probe=args.pull_probe), prog)


def _report(rows: list[Row], prog: str) -> int:
    print(table(rows))
    for row in rows:
        if row.check == "exposure" and row.result == WARN:
            print(f"{prog}: warning: {row.host}: {row.detail}", file=sys.stderr)
    print(f"\n{tally(rows)}", file=sys.stderr)
    return 1 if any(r.result == FAIL for r in rows) else 0


def _master_port(flag: int | None, settings: dict[str, str]) -> int:
    """--master-port, else MASTER_PORT of the settings, else 29500: an unprivileged port."""
    if flag is not None:
        setting, raw = "--master-port", str(flag)
    else:
        setting, raw = "MASTER_PORT", settings.get("MASTER_PORT", str(DEFAULT_MASTER_PORT))
    raw = raw.strip()
    if not (raw.isascii() and raw.isdigit()) or not MIN_PORT <= int(raw) <= MAX_PORT:
        raise ConfigError(setting, shown(raw), f"must be a TCP port in {MIN_PORT}-{MAX_PORT}")
    return int(raw)


if __name__ == "__main__":
    sys.exit(main())
