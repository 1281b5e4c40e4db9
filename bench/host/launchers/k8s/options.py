"""The k8s launcher's options section, what the settings file gives every pod, and the
names of a job's objects. Everything here is checked where it is built."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from bench.host.launchers.flags import derived, launcher_flag
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


def default_env_file() -> Path:
    """The node settings, as make reads them: compose/.env, else the documented defaults."""
    env = COMPOSE_DIR / ".env"
    return env if env.is_file() else COMPOSE_DIR / ".env.example"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class K8sOptions:
    """--launcher k8s: where the job goes, what each pod mounts, and which API runs it."""

    image: str = launcher_flag("", "the trainer image's registry name, which each node pulls",
                               parse=check_image)
    # The node settings: compose/.env, else the documented defaults.
    env_file: Path = launcher_flag(help="the node settings file (default: compose/.env, else "
                                   "compose/.env.example)", default_factory=default_env_file)
    # cpu: CPU requests; gpu: nvidia.com/gpu requests.
    profile: str = launcher_flag("cpu", "cpu requests or gpu (nvidia.com/gpu) requests "
                                 "(default: cpu)", choices=PROFILES)
    kind: str = launcher_flag("indexed", "an Indexed Job behind a headless Service (default), "
                              "or a Kubeflow PyTorchJob", flag="--k8s-kind", choices=KINDS)
    namespace: str = launcher_flag("default", "the namespace of the jobs (default: default)")
    context: str | None = launcher_flag(None, "kubectl's context (default: the current)",
                                        flag="--kube-context")
    results_claim: str | None = launcher_flag(None, "the PersistentVolumeClaim mounted at "
                                              "/results (default: bench-results)")
    results_host_path: str | None = launcher_flag(None, "a directory on each node mounted at "
                                                  "/results instead of a claim")
    shm_size: str = launcher_flag("1Gi", "each pod's /dev/shm, e.g. 8Gi (default: 1Gi)")
    poll_s: float = 2.0
    unschedulable_grace_s: float = 120.0  # an autoscaler may still add a node
    # Every cell's: the pods of a job share one template (``check_topologies``).
    topologies: tuple[Topology, ...] = derived("topologies", ())
    settings: PodSettings = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.image:
            raise ConfigError("--image", "''", "Kubernetes pulls the trainer image: give its "
                              "registry name, e.g. registry.example:5000/bench:cuda")
        check_image(self.image, "--image")
        check_topologies(list(self.topologies))
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
