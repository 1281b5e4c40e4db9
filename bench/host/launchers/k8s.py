"""Launch a job on Kubernetes: an Indexed Job behind a headless Service, or a Kubeflow
PyTorchJob. Each repeat is one job; each node is one pod running the image's entrypoint.

The node contract (``bench.host.contract``) reaches each pod as environment variables, as
it reaches a Compose node, with the pod's place in the job filled in by Kubernetes:

- **Indexed Job** (``completionMode: Indexed``, parallelism = completions = nodes): the Job
  controller gives each pod JOB_COMPLETION_INDEX, which the entrypoint takes as NODE_RANK
  (NODE_RANK is left out of the pod on purpose). MASTER_ADDR is pod 0's stable name
  through the headless Service, ``<job>-0.<service>`` (the pods' ``subdomain``).
- **PyTorchJob** (kubeflow.org/v1, Master 1 + Worker nodes-1): the training operator sets
  MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK and, from v1.7, PET_NNODES, PET_NODE_RANK and
  PET_NPROC_PER_NODE; the entrypoint maps those (docker/node-entrypoint.sh).

The dataset is a read-only NFS volume (the settings' DATA_MOUNT_OPTIONS addr= and
DATA_DEVICE :/path), results go to a PersistentVolumeClaim or a hostPath, /dev/shm is a
memory emptyDir, and NCCL_*/GLOO_*/TORCH_NCCL_* come from the settings file. Pods run
unprivileged: non-root, no capabilities, no privilege escalation, RuntimeDefault seccomp,
a read-only root file system.

The launcher drives ``kubectl`` (argv lists only): apply, poll the job and its pods, read
each pod's log (the record follows the marker in pod 0's), delete. Failures are rows from
pod status: OOMKilled becomes ``oom``; ImagePullBackOff, Unschedulable and
DeadlineExceeded become ``error`` with that reason. No torch here, and no cluster is needed
to render.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.host import contract
from bench.host.checks import FAIL, PASS, WARN, Row
from bench.host.launchers.base import JobSpec
from bench.host.launchers.nodes import CONSOLE, TAIL_LINES, JobOutcome, NodeOutcome, root_cause
from bench.host.settings import (
    COMPOSE_DIR,
    NFS_PORT,
    NodeSettings,
    _is_host,
    check_abspath,
    load,
    shown,
)
from bench.options import ConfigError, check_image
from bench.topology import Topology

KINDS = ("indexed", "pytorchjob")
PROFILES = ("cpu", "gpu")
GPU_RESOURCE = "nvidia.com/gpu"
# The pod's user: any non-zero id; the image has no user of its own, so this one has no
# home (HOME points at the writable /tmp) and owns nothing but what fsGroup gives it.
RUN_AS_USER = 1000
# The settings that reach every pod as they are: communication tuning, never the contract.
ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_")
# Kubeflow's training operator finds the rendezvous port by these names
# (kubeflow/training-operator pkg/apis/kubeflow.org/v1: PytorchJobDefaultContainerName,
# PytorchJobDefaultPortName; pkg/controller.v1/pytorch/envvar.go getPortFromPyTorchJob).
PYTORCH_CONTAINER, PYTORCH_PORT_NAME = "pytorch", "pytorchjob-port"
INDEXED_CONTAINER = "trainer"
INSTANCE_LABEL = "app.kubernetes.io/instance"
# Where Kubernetes writes an Indexed Job pod's index (it also sets JOB_COMPLETION_INDEX).
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
# Finished jobs stay a day for `kubectl logs` when applied by hand (the launcher deletes its own).
TTL_AFTER_FINISHED_S = 86400
# Extra seconds the launcher waits past the deadline, so that Kubernetes' own
# activeDeadlineSeconds ends the job first and the row says DeadlineExceeded.
DEADLINE_GRACE_S = 120.0

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}\Z)[a-z0-9]([-a-z0-9]*[a-z0-9])?"
                            r"(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUANTITY = re.compile(r"[1-9][0-9]{0,5}(Ki|Mi|Gi|Ti)")
_CONTEXT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,252}")
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
# Host directories a results hostPath must never be: the node's own system.
_SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/root", "/run",
                "/sbin", "/sys", "/usr", "/var/lib/kubelet", "/var/run")


@dataclasses.dataclass(frozen=True, slots=True)
class PodSettings:
    """What the settings file gives every pod: the dataset volume and the communication env."""

    data_volume: dict                  # a Kubernetes volume source (nfs or hostPath)
    env: tuple[tuple[str, str], ...]   # NCCL_*, GLOO_*, TORCH_NCCL_*, in file order
    nfs_server: str | None = None

    @classmethod
    def parse(cls, values: dict[str, str], profile: str) -> PodSettings:
        settings = NodeSettings.parse(values, profile)
        # The pod's index is its node rank: a node rank in the settings would say otherwise.
        if settings.node_rank != 0:
            raise ConfigError("NODE_RANK", settings.node_rank, "Kubernetes gives each pod its "
                              "node rank (the completion index or the operator's RANK): "
                              "leave NODE_RANK=0 in the settings")
        env = []
        for name, value in values.items():
            if name.startswith(ENV_PREFIXES):
                if not _ENV_NAME.fullmatch(name):
                    raise ConfigError(name, shown(value), "an environment variable name of "
                                      "capitals, digits and '_'")
                env.append((name, value))
        volume, server = _data_volume(settings)
        return cls(data_volume=volume, env=tuple(env), nfs_server=server)


def _data_volume(settings: NodeSettings) -> tuple[dict, str | None]:
    """The dataset as a read-only volume: NFS (server and export path), or, for settings
    that bind a local directory, that directory on each node (hostPath)."""
    if settings.data_mount_type == "nfs":
        server = settings.mount_option("addr") or ""
        if not server or not _is_host(server):
            raise ConfigError("DATA_MOUNT_OPTIONS", shown(settings.data_mount_options),
                              "an NFS mount needs addr=<server>, e.g. addr=192.168.1.10,"
                              "nfsvers=4.1,ro")
        port = settings.mount_option("port")
        # An inline nfs volume has no mount options: the kubelet mounts port 2049.
        if port not in (None, str(NFS_PORT)):
            raise ConfigError("DATA_MOUNT_OPTIONS", f"port={shown(port)}", "a pod's NFS volume "
                              f"always uses port {NFS_PORT}; for another port, create a "
                              "PersistentVolume with mountOptions")
        device = settings.data_device
        if not device.startswith(":"):
            raise ConfigError("DATA_DEVICE", shown(device) or "''", "the NFS export as "
                              ":/path, e.g. :/datasets")
        path = check_abspath("DATA_DEVICE", device[1:])
        return {"nfs": {"server": server, "path": path, "readOnly": True}}, server
    if settings.data_mount_type == "none":
        path = check_abspath("DATA_DEVICE", settings.data_device)
        return {"hostPath": {"path": path, "type": "Directory"}}, None
    raise ConfigError("DATA_MOUNT_TYPE", shown(settings.data_mount_type) or "''",
                      "nfs (a read-only NFS volume), or none (a directory on every node)")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class K8sOptions:
    """--launcher k8s: where the job goes, what each pod mounts, and which API runs it."""

    image: str
    env_file: Path                        # the node settings (compose/.env)
    profile: str = "cpu"                  # cpu: CPU requests; gpu: nvidia.com/gpu requests
    kind: str = "indexed"                 # indexed (Job + Service) or pytorchjob (Kubeflow)
    namespace: str = "default"
    context: str | None = None            # kubectl's --context (default: the current one)
    results_claim: str | None = None      # a PersistentVolumeClaim (default bench-results)
    results_host_path: str | None = None  # or a directory on each node
    shm_size: str = "1Gi"                 # /dev/shm: a memory emptyDir of this size
    poll_s: float = 2.0
    unschedulable_grace_s: float = 120.0  # an autoscaler may still add a node
    settings: PodSettings = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_image(self.image, "--image")
        if self.profile not in PROFILES:
            raise ConfigError("--profile", self.profile, "cpu or gpu on Kubernetes (RDMA "
                              "devices need a cluster's own device plugin: not rendered)")
        if self.kind not in KINDS:
            raise ConfigError("--k8s-kind", shown(self.kind), f"one of {', '.join(KINDS)}")
        if not _DNS_LABEL.fullmatch(self.namespace):
            raise ConfigError("--namespace", shown(self.namespace), "a Kubernetes namespace: "
                              "lower-case letters, digits and inner '-', at most 63")
        if self.context is not None and not _CONTEXT.fullmatch(self.context):
            raise ConfigError("--kube-context", shown(self.context), "a kubeconfig context "
                              "name: letters, digits, '_', '.', ':', '@', '/', '-'")
        if self.results_claim is not None and self.results_host_path is not None:
            raise ConfigError("--results-host-path", self.results_host_path, "give either "
                              "--results-claim or --results-host-path, not both")
        if self.results_claim is not None and not _DNS_SUBDOMAIN.fullmatch(self.results_claim):
            raise ConfigError("--results-claim", shown(self.results_claim), "a "
                              "PersistentVolumeClaim name: lower-case letters, digits, '-' and "
                              "'.', e.g. bench-results")
        if self.results_host_path is not None:
            path = check_abspath("--results-host-path", self.results_host_path)
            if any(path == d or path.startswith(d + "/") for d in _SYSTEM_DIRS):
                raise ConfigError("--results-host-path", path, "is the node's own system: "
                                  "choose a data directory, e.g. /srv/bench-results")
        if not _QUANTITY.fullmatch(self.shm_size):
            raise ConfigError("--shm-size", shown(self.shm_size), "a size such as 512Mi or "
                              "8Gi (a positive number with Ki, Mi, Gi or Ti)")
        if not self.env_file.is_file():
            raise ConfigError("--env-file", self.env_file, "no such file: the node settings, "
                              "e.g. compose/.env")
        object.__setattr__(self, "settings", PodSettings.parse(load(self.env_file),
                                                               self.profile))

    @property
    def claim(self) -> str | None:
        """The results claim: as given, else bench-results unless a hostPath was chosen."""
        if self.results_host_path is not None:
            return None
        return self.results_claim or "bench-results"


def default_env_file() -> Path:
    """The node settings, as make reads them: compose/.env, else the documented defaults."""
    env = COMPOSE_DIR / ".env"
    return env if env.is_file() else COMPOSE_DIR / ".env.example"


def check_topologies(topologies: list[Topology]) -> None:
    """Pods of one job share one template: every node gets the same processes (GPUs)."""
    for topology in topologies:
        if topology.uneven:
            raise ConfigError("--topologies", str(topology), "the pods of a Kubernetes job "
                              "share one template: give NODESxGPUS, e.g. 2x8")


def object_name(job_id: str) -> str:
    """The job's name in Kubernetes: lower-case, a DNS label short enough for the pods'
    hostnames (``<name>-<index>``, ``<name>-worker-<index>``) and the Service."""
    tail = re.sub(r"[^a-z0-9-]+", "-", job_id.lower())[-34:].strip("-")
    return f"bench-{tail}" if tail else "bench"


def master_addr(name: str) -> str:
    """Pod 0's stable DNS name through the headless Service (same namespace)."""
    return f"{name}-0.{name}"


# --- manifests ------------------------------------------------------------------------------

def _contract_env(options: K8sOptions, job: JobSpec, name: str) -> dict[str, str]:
    """The node contract of every pod, less what Kubernetes fills in per pod."""
    env = contract.node_env(
        nnodes=job.topology.nodes, node_rank=0, nproc_per_node=job.topology.procs,
        master_addr=master_addr(name), master_port=job.master_port,
        rdzv_timeout=job.rdzv_timeout, job_id=job.job_id, module=job.module,
        workload_args=list(job.workload_args), results_dir="", results_name="")
    # The pod's index is its node rank: the entrypoint reads JOB_COMPLETION_INDEX.
    del env["NODE_RANK"]
    # No host directory: the claim (or hostPath) is mounted at /results; one file per job.
    del env["RESULTS_DIR"], env["RESULTS_NAME"]
    env["RESULTS_FILE"] = f"{contract.CONTAINER_RESULTS}/{name}/trainer.jsonl"
    digest = options.image.partition("@")[2]
    if digest:  # a pinned image names its digest; its id is the node's to know
        env["BENCH_IMAGE_DIGEST"] = digest
    return env


def _container(options: K8sOptions, job: JobSpec, name: str, env: dict[str, str],
               container: str, port_name: str) -> dict:
    procs = job.topology.procs
    resources: dict = {"requests": {"cpu": str(procs)}}
    if options.profile == "gpu":
        # An extended resource: requests must equal limits.
        resources["requests"][GPU_RESOURCE] = str(procs)
        resources["limits"] = {GPU_RESOURCE: str(procs)}
    # HOME: the user has no home and the root file system is read-only.
    pod_env = {**env, "HOME": "/tmp", **dict(options.settings.env)}
    return {
        "name": container,
        "image": options.image,
        "imagePullPolicy": "IfNotPresent",
        # No command or args: the image's entrypoint (docker/node-entrypoint.sh) runs.
        "env": [{"name": k, "value": v} for k, v in pod_env.items()],
        "ports": [{"name": port_name, "containerPort": job.master_port, "protocol": "TCP"}],
        "resources": resources,
        "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                            "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [
            {"name": "data", "mountPath": "/data", "readOnly": True},
            {"name": "results", "mountPath": contract.CONTAINER_RESULTS},
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "tmp", "mountPath": "/tmp"}],
    }


def _pod_spec(options: K8sOptions, job: JobSpec, name: str, container: dict) -> dict:
    results = ({"persistentVolumeClaim": {"claimName": options.claim}} if options.claim
               else {"hostPath": {"path": options.results_host_path,
                                  "type": "DirectoryOrCreate"}})
    spec: dict = {
        "restartPolicy": "Never",   # a benchmark must not silently retry
        # No API token, and no service links: a Service named like a contract variable
        # (master -> MASTER_PORT=tcp://...) would otherwise overwrite it in the env.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS_USER,
                            "runAsGroup": RUN_AS_USER, "fsGroup": RUN_AS_USER,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        # Each node of the job on its own machine: two pods on one would measure no network.
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {INSTANCE_LABEL: name}},
             "topologyKey": "kubernetes.io/hostname"}]}},
        "containers": [container],
        "volumes": [
            {"name": "data", **options.settings.data_volume},
            {"name": "results", **results},
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": options.shm_size}},
            {"name": "tmp", "emptyDir": {}}],
    }
    if options.profile == "gpu":  # GPU nodes are often tainted so that only GPU pods land
        spec["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists",
                                "effect": "NoSchedule"}]
    return spec


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "bench", INSTANCE_LABEL: name}


def _metadata(options: K8sOptions, name: str) -> dict:
    return {"name": name, "namespace": options.namespace, "labels": _labels(name)}


def active_deadline(job: JobSpec) -> int:
    return max(1, math.ceil(job.deadline_s))


def indexed_job(options: K8sOptions, job: JobSpec) -> list[dict]:
    """The headless Service and the Indexed Job of one job."""
    name, nodes = object_name(job.job_id), job.topology.nodes
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": _metadata(options, name),
        "spec": {"clusterIP": "None",
                 # Pod 0's name resolves before it is ready: the others dial it at start.
                 "publishNotReadyAddresses": True,
                 "selector": {INSTANCE_LABEL: name},
                 "ports": [{"name": "rendezvous", "port": job.master_port,
                            "targetPort": job.master_port, "protocol": "TCP"}]}}
    container = _container(options, job, name, _contract_env(options, job, name),
                           INDEXED_CONTAINER, "rendezvous")
    pod = _pod_spec(options, job, name, container)
    pod["subdomain"] = name  # <name>-<index>.<name>: the pods' stable DNS names
    batch = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": _metadata(options, name),
        "spec": {"completionMode": "Indexed", "completions": nodes, "parallelism": nodes,
                 "backoffLimit": 0, "activeDeadlineSeconds": active_deadline(job),
                 "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
                 "template": {"metadata": {"labels": _labels(name)}, "spec": pod}}}
    return [service, batch]


def pytorch_job(options: K8sOptions, job: JobSpec) -> list[dict]:
    """The Kubeflow PyTorchJob of one job: Master (node 0) and nodes-1 Workers. The
    operator makes the Services and sets the rendezvous env in each pod."""
    name, nodes = object_name(job.job_id), job.topology.nodes
    env = _contract_env(options, job, name)
    # What the operator sets per pod (pkg/controller.v1/pytorch/envvar.go setPodEnv):
    # MASTER_ADDR=<name>-master-0, MASTER_PORT (the pytorchjob-port), WORLD_SIZE, RANK,
    # PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE. Ours would clash with it.
    for variable in ("NNODES", "MASTER_ADDR", "MASTER_PORT"):
        del env[variable]
    container = _container(options, job, name, env, PYTORCH_CONTAINER, PYTORCH_PORT_NAME)

    def replica(count: int) -> dict:
        return {"replicas": count, "restartPolicy": "Never",
                "template": {"metadata": {"labels": _labels(name)},
                             "spec": _pod_spec(options, job, name, container)}}

    replicas = {"Master": replica(1)}
    if nodes > 1:
        replicas["Worker"] = replica(nodes - 1)
    return [{
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": _metadata(options, name),
        "spec": {"nprocPerNode": str(job.topology.procs),
                 "runPolicy": {"backoffLimit": 0, "activeDeadlineSeconds": active_deadline(job),
                               "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
                               "cleanPodPolicy": "None"},
                 "pytorchReplicaSpecs": replicas}}]


def manifests(options: K8sOptions, job: JobSpec) -> list[dict]:
    """Every object of one job, checked first: nothing is rendered from a bad input."""
    check_topologies([job.topology])
    if options.kind == "pytorchjob":
        return pytorch_job(options, job)
    return indexed_job(options, job)


# --- YAML -----------------------------------------------------------------------------------
# A small emitter for the manifests (plain dicts, lists, strings, numbers, booleans): block
# style for people, every string that could read as anything else quoted as JSON, which
# YAML reads back as the same string. pyyaml is a host tool, not a runtime dependency.
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"}


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)


def _yaml(value: object, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{_scalar(key)}:")
                lines += _yaml(item, indent + 2)
            else:
                lines.append(f"{pad}{_scalar(key)}: {_flat(item)}")
    else:
        assert isinstance(value, list)
        for item in value:
            if isinstance(item, (dict, list)) and item:
                nested = _yaml(item, indent + 2)
                lines.append(f"{pad}- {nested[0].lstrip()}")
                lines += nested[1:]
            else:
                lines.append(f"{pad}- {_flat(item)}")
    return lines


def _flat(value: object) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)


def to_yaml(documents: list[dict], header: str = "") -> str:
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + "---\n".join("\n".join(_yaml(doc, 0)) + "\n" for doc in documents)


# --- status ---------------------------------------------------------------------------------
# A pod waiting for one of these will not start by waiting longer.
FATAL_WAITING = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                 "CreateContainerConfigError", "CreateContainerError", "RunContainerError")


def pod_rank(pod: dict) -> int | None:
    """A pod's node rank: an Indexed Job's completion index, or a PyTorchJob replica's
    (Master 0, Worker i -> i + 1, as the operator's RANK)."""
    meta = pod.get("metadata") or {}
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    index = annotations.get(INDEX_ANNOTATION) or labels.get(INDEX_ANNOTATION)
    if index is not None and str(index).isdigit():
        return int(index)
    kind = labels.get("training.kubeflow.org/replica-type") or labels.get("replica-type")
    index = labels.get("training.kubeflow.org/replica-index") or labels.get("replica-index")
    if kind and index is not None and str(index).isdigit():
        return int(index) + (1 if kind.lower() == "worker" else 0)
    return None


def _statuses(pod: dict) -> list[dict]:
    status = pod.get("status") or {}
    return (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])


def pod_exit(pod: dict) -> int | None:
    """The trainer container's exit code, once it ended."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated is not None:
            return int(terminated.get("exitCode", 1))
    return None


def pod_problem(pod: dict) -> tuple[str, str] | None:
    """(scheduler state, reason) when a pod's status says the job cannot succeed:
    OUT_OF_MEMORY for an OOMKilled container; FAILED for an image that cannot be pulled, a
    container that cannot be created, an eviction or a deadline; ("PENDING",
    "Unschedulable: ...") for a pod no node can take yet (the caller gives it a grace)."""
    name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    for container in _statuses(pod):
        for state in (container.get("state") or {}, container.get("lastState") or {}):
            terminated = state.get("terminated") or {}
            if terminated.get("reason") == "OOMKilled":
                return "OUT_OF_MEMORY", (f"OOMKilled: pod {name} container "
                                         f"{container.get('name')} exit "
                                         f"{terminated.get('exitCode', 137)}")
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING:
            return "FAILED", (f"{waiting['reason']}: pod {name}: "
                              f"{(waiting.get('message') or '').strip()[:200]}").rstrip(": ")
    if status.get("reason") in ("DeadlineExceeded", "Evicted"):
        return "FAILED", f"{status['reason']}: pod {name}: {status.get('message', '')}" \
            .rstrip(": ")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" \
                and condition.get("reason") == "Unschedulable":
            return "PENDING", f"Unschedulable: pod {name}: {condition.get('message', '')}" \
                .rstrip(": ")
    return None


def job_condition(obj: dict) -> tuple[str, str] | None:
    """The job's own end: ("COMPLETED", "") or ("FAILED", "<reason>: <message>"), from a
    batch Job's (Complete, Failed) or a PyTorchJob's (Succeeded, Failed) conditions."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") in ("Complete", "Succeeded"):
            return "COMPLETED", ""
        if condition.get("type") == "Failed":
            reason = condition.get("reason") or "Failed"
            message = (condition.get("message") or "").strip()
            return "FAILED", f"{reason}: {message}" if message else reason
    return None


def verdict(obj: dict | None, pods: list[dict], pending_s: float = 0.0,
            unschedulable_grace_s: float = 0.0) -> dict | None:
    """The job's end as the scheduler sees it, or None while it runs: {"state", "reason"}.
    An out-of-memory kill wins over the job's own Failed (which says only that a pod
    failed); a deadline wins over the pods (each was killed by it); a pod that cannot start
    ends the job at once, an unschedulable one after ``unschedulable_grace_s``."""
    problems = [p for p in map(pod_problem, pods) if p]
    oom = next((p for p in problems if p[0] == "OUT_OF_MEMORY"), None)
    if oom:
        return {"state": oom[0], "reason": oom[1]}
    ended = job_condition(obj or {})
    if ended and "DeadlineExceeded" in ended[1]:
        return {"state": "FAILED", "reason": ended[1]}
    failed = next((p for p in problems if p[0] == "FAILED"), None)
    if failed:
        return {"state": "FAILED", "reason": failed[1]}
    if ended:
        return {"state": ended[0], "reason": ended[1]}
    pending = next((p for p in problems if p[0] == "PENDING"), None)
    if pending and pending_s >= unschedulable_grace_s:
        return {"state": "FAILED", "reason": pending[1]}
    return None


# --- kubectl --------------------------------------------------------------------------------

def kubectl(options: K8sOptions, *args: str, timeout: float = 120,
            namespaced: bool = True) -> subprocess.CompletedProcess:
    argv = ["kubectl"]
    if options.context:
        argv.append(f"--context={options.context}")
    if namespaced:
        argv.append(f"--namespace={options.namespace}")
    try:
        return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, "", "kubectl is not installed")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"no answer in {timeout:g} s")


def _json(out: subprocess.CompletedProcess) -> dict | None:
    if out.returncode != 0:
        return None
    try:
        value = json.loads(out.stdout)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _last(out: subprocess.CompletedProcess) -> str:
    return ((out.stderr or out.stdout).strip().splitlines() or [f"exit {out.returncode}"])[-1]


class K8sLauncher:
    name = "k8s"

    def __init__(self, options: K8sOptions) -> None:
        self.options = options

    @property
    def resource(self) -> str:
        return "pytorchjobs.kubeflow.org" if self.options.kind == "pytorchjob" else "jobs"

    def preflight(self, topologies: list[Topology]) -> None:
        """The topologies fit one pod template, and the cluster answers and lets us run
        jobs; a head that cannot reach the NFS server is only warned about."""
        check_topologies(topologies)
        for row in preflight(self.options):
            if row.result == FAIL and row.check != "nfs":
                raise RuntimeError(f"k8s {row.check}: {row.detail}")
            if row.result != PASS:
                print(f"[k8s] warning: {row.check}: {row.detail}", file=sys.stderr)

    def render(self, job: JobSpec) -> str:
        docs = manifests(self.options, job)
        name = object_name(job.job_id)
        how = "Service + Indexed Job" if self.options.kind == "indexed" else "Kubeflow PyTorchJob"
        return to_yaml(docs, f"bench job {job.job_id}: {job.topology.nodes} node(s), "
                       f"{job.topology} ({self.options.profile}), {job.module}; {how}.\n"
                       f"kubectl apply -f THIS_FILE; the record follows the marker in "
                       f"`kubectl logs` of node 0\n(pod {name}-0 or {name}-master-0), and "
                       f"is appended to {contract.CONTAINER_RESULTS}/{name}/trainer.jsonl.")

    def launch(self, job: JobSpec) -> JobOutcome:
        from bench.host.launchers import failed_to_start

        job.log_dir.mkdir(parents=True, exist_ok=True)
        path = job.log_dir / "manifests.yaml"
        path.write_text(self.render(job), encoding="utf-8")
        name = object_name(job.job_id)
        started = time.monotonic()
        out = kubectl(self.options, "apply", "-f", str(path))
        if out.returncode != 0:
            kubectl(self.options, "delete", "--ignore-not-found", "--wait=false", "-f", str(path))
            return failed_to_start("k8s", f"kubectl apply refused the job: {_last(out)[:300]}")
        if CONSOLE.echo:
            kind = "PyTorchJob" if self.options.kind == "pytorchjob" else "Job"
            print(f"[k8s] job {job.job_id} is {kind} {name} in namespace "
                  f"{self.options.namespace}", file=sys.stderr, flush=True)
        try:
            state, pods, timed_out = self._wait(job, name, started)
            nodes = self._collect(job, pods)
        finally:  # whatever happened (Ctrl-C too), the job must not outlive us
            kubectl(self.options, "delete", "--ignore-not-found", "--wait=false", "-f", str(path))
        return outcome(job, name, state, pods, nodes, timed_out, time.monotonic() - started)

    def _wait(self, job: JobSpec, name: str, started: float) -> tuple[dict, list[dict], bool]:
        pending_since: float | None = None
        while True:
            obj = _json(kubectl(self.options, "get", self.resource, name, "-o", "json"))
            pods = self._pods(name)
            unschedulable = any((p := pod_problem(pod)) and p[0] == "PENDING" for pod in pods)
            now = time.monotonic()
            pending_since = (pending_since or now) if unschedulable else None
            state = verdict(obj, pods, now - (pending_since or now),
                            self.options.unschedulable_grace_s)
            if state is not None:
                return state, pods, False
            if now > started + job.deadline_s + DEADLINE_GRACE_S:
                return {"state": "TIMEOUT", "reason": "the launcher's deadline"}, pods, True
            time.sleep(self.options.poll_s)

    def _pods(self, name: str) -> list[dict]:
        listing = _json(kubectl(self.options, "get", "pods", "-l", f"{INSTANCE_LABEL}={name}",
                                "-o", "json"))
        return list((listing or {}).get("items") or [])

    def _collect(self, job: JobSpec, pods: list[dict]) -> list[NodeOutcome]:
        """Each node's log (into the job's log directory too) and exit code."""
        by_rank = {pod_rank(pod): pod for pod in pods}
        container = PYTORCH_CONTAINER if self.options.kind == "pytorchjob" else INDEXED_CONTAINER
        nodes = []
        for rank in range(job.topology.nodes):
            pod = by_rank.get(rank)
            if pod is None:
                nodes.append(NodeOutcome(rank, f"node{rank}", None, [], []))
                continue
            pod_name = pod["metadata"]["name"]
            logs = kubectl(self.options, "logs", pod_name, "-c", container)
            lines = logs.stdout.splitlines() if logs.returncode == 0 else []
            (job.log_dir / f"node{rank}.log").write_text(
                "\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
            nodes.append(NodeOutcome(rank, pod_name, pod_exit(pod), lines[-TAIL_LINES:], lines))
        return nodes


def outcome(job: JobSpec, name: str, state: dict, pods: list[dict], nodes: list[NodeOutcome],
            timed_out: bool, seconds: float) -> JobOutcome:
    """The row's material: the nodes' exits and logs, the first node that failed (or, when
    none said why, the pod status as node 0's words), and the scheduler's view."""
    ended = state["state"]
    machines = sorted({(p.get("spec") or {}).get("nodeName") or "" for p in pods} - {""})
    image_ids = sorted({c.get("imageID") for p in pods for c in
                        (p.get("status") or {}).get("containerStatuses") or []
                        if c.get("imageID")})
    scheduler = {"kind": "k8s", "job_id": name, **state, "nodes": ",".join(machines)}
    if image_ids:
        scheduler["image_id"] = image_ids[0]
    failed = [n for n in nodes if n.returncode not in (0, None)]
    culprit = root_cause(failed, failed[0]) if failed else None
    if culprit is None and ended != "COMPLETED" and not timed_out:
        lines = nodes[0].output or [state.get("reason", "")]
        culprit = NodeOutcome(0, nodes[0].host, 1, lines[-TAIL_LINES:], lines)
    for node in nodes:  # a pod Kubernetes stopped (or never started) reports no exit
        if node.returncode is None:
            node.returncode = 0 if ended == "COMPLETED" else -15
    return JobOutcome(nodes, timed_out and ended != "COMPLETED", seconds, culprit,
                      scheduler=scheduler)


# --- preflight (for bench doctor --k8s) -----------------------------------------------------

def probe_pod(options: K8sOptions, name: str = "bench-pull-probe") -> dict:
    """A pod that only pulls the image and exits: the pull check, with the job's security."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": options.namespace,
                         "labels": {"app.kubernetes.io/name": "bench-probe"}},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS_USER,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{
                         "name": "probe", "image": options.image,
                         "imagePullPolicy": "IfNotPresent", "command": ["true"],
                         "securityContext": {"allowPrivilegeEscalation": False,
                                             "readOnlyRootFilesystem": True,
                                             "capabilities": {"drop": ["ALL"]}}}]}}


def preflight(options: K8sOptions, timeout: float = 30.0, pull_probe: bool = False) -> list[Row]:
    """Doctor rows for a cluster: the context answers, the job may be created, the GPUs
    are allocatable (gpu profile), the results claim exists, the image can be pulled (a
    probe pod with ``pull_probe``, else the right to create pods), the NFS server answers."""
    host = options.context or "k8s"
    rows: list[Row] = []

    def add(check: str, result: str, detail: str) -> None:
        rows.append(Row(host, check, result, detail))

    version = kubectl(options, "get", "--raw", "/version", timeout=timeout, namespaced=False)
    info = _json(version)
    if info is None:
        add("context", FAIL, f"{_last(version)[:200]}: set the context with --kube-context "
            "or `kubectl config use-context`")
        return rows
    add("context", PASS, f"API server {info.get('gitVersion', '?')}")
    resource = "pytorchjobs.kubeflow.org" if options.kind == "pytorchjob" else "jobs.batch"
    can = kubectl(options, "auth", "can-i", "create", resource, timeout=timeout)
    add("permission", PASS if can.stdout.strip() == "yes" else FAIL,
        f"create {resource} in {options.namespace}: {can.stdout.strip() or _last(can)}")
    if options.profile == "gpu":
        rows.append(_gpu_row(options, host, timeout))
    if options.claim:
        claim = _json(kubectl(options, "get", "pvc", options.claim, "-o", "json",
                              timeout=timeout))
        phase = ((claim or {}).get("status") or {}).get("phase")
        add("results", PASS if phase == "Bound" else WARN if phase else FAIL,
            f"claim {options.claim}: {phase or 'not found'}"
            + ("" if phase == "Bound" else ": create a ReadWriteMany PersistentVolumeClaim"))
    rows.append(_image_row(options, host, timeout, pull_probe))
    if options.settings.nfs_server:
        try:
            with socket.create_connection((options.settings.nfs_server, NFS_PORT),
                                          timeout=min(timeout, 10)):
                add("nfs", PASS, f"{options.settings.nfs_server}:{NFS_PORT} answers")
        except OSError as error:
            add("nfs", FAIL, f"{options.settings.nfs_server}:{NFS_PORT}: {error} (from this "
                "host; the nodes mount it): start it with `make nfs-up` there")
    return rows


def _gpu_row(options: K8sOptions, host: str, timeout: float) -> Row:
    listing = _json(kubectl(options, "get", "nodes", "-o", "json", timeout=timeout,
                            namespaced=False))
    if listing is None:
        return Row(host, "gpus", WARN, "cannot list nodes (no cluster-wide read): "
                   f"check `kubectl describe nodes | grep {GPU_RESOURCE}`")
    counts = {}
    for node in listing.get("items") or []:
        value = str(((node.get("status") or {}).get("allocatable") or {})
                    .get(GPU_RESOURCE, "0"))
        if value.isdigit() and int(value) > 0:
            counts[node["metadata"]["name"]] = int(value)
    if not counts:
        return Row(host, "gpus", FAIL, f"no node has allocatable {GPU_RESOURCE}: install "
                   "the NVIDIA device plugin or the GPU operator")
    shown_nodes = ", ".join(f"{n} {c}" for n, c in sorted(counts.items())[:8])
    return Row(host, "gpus", PASS, f"{len(counts)} node(s) with {GPU_RESOURCE}: {shown_nodes}")


def _image_row(options: K8sOptions, host: str, timeout: float, pull_probe: bool) -> Row:
    if not pull_probe:
        can = kubectl(options, "auth", "can-i", "create", "pods", timeout=timeout)
        ok = can.stdout.strip() == "yes"
        return Row(host, "image", PASS if ok else WARN,
                   f"{options.image}: not pulled (--pull-probe pulls it on one node); "
                   f"may create pods: {can.stdout.strip() or _last(can)}")
    pod = probe_pod(options)
    name = pod["metadata"]["name"]
    created = subprocess.run(
        ["kubectl", *([f"--context={options.context}"] if options.context else []),
         "apply", "-f", "-"], input=json.dumps(pod), capture_output=True, text=True,
        timeout=timeout)
    if created.returncode != 0:
        return Row(host, "image", FAIL, f"cannot create the probe pod: {_last(created)[:200]}")
    try:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            status = _json(kubectl(options, "get", "pod", name, "-o", "json", timeout=timeout))
            problem = pod_problem(status or {})
            phase = ((status or {}).get("status") or {}).get("phase")
            if phase in ("Succeeded", "Running") or pod_exit(status or {}) is not None:
                return Row(host, "image", PASS, f"{options.image} pulled and started")
            if problem and problem[0] == "FAILED":
                return Row(host, "image", FAIL, problem[1][:240])
            time.sleep(options.poll_s)
        return Row(host, "image", WARN, f"{options.image}: the probe pod did not start in "
                   f"{timeout:g} s (a large image still pulling?)")
    finally:
        kubectl(options, "delete", "pod", name, "--ignore-not-found", "--wait=false",
                timeout=timeout)
