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

The package, by concern: ``options`` (the launcher's options section, the settings each
pod gets, names), ``render`` (the objects of one job), ``yaml_text`` (their YAML),
``status`` (a job's and its pods' end as a row), ``kubectl`` (the one way to the cluster),
``preflight`` (doctor's rows for a cluster) and ``launcher`` (apply, wait, collect, delete).
"""
from __future__ import annotations

from bench.host.launchers.k8s.launcher import K8sLauncher
from bench.host.launchers.k8s.options import (
    INDEX_ANNOTATION,
    TTL_AFTER_FINISHED_S,
    K8sOptions,
    PodSettings,
    check_topologies,
    default_env_file,
    object_name,
)
from bench.host.launchers.k8s.preflight import cluster_checks, probe_pod
from bench.host.launchers.k8s.render import indexed_job, manifests, pytorch_job
from bench.host.launchers.k8s.status import outcome, pod_exit, pod_problem, pod_rank, verdict
from bench.host.launchers.k8s.yaml_text import to_yaml

__all__ = ["INDEX_ANNOTATION", "TTL_AFTER_FINISHED_S", "K8sLauncher", "K8sOptions",
           "PodSettings", "check_topologies", "default_env_file", "indexed_job", "manifests",
           "object_name", "outcome", "pod_exit", "pod_problem", "pod_rank", "cluster_checks",
           "probe_pod", "pytorch_job", "to_yaml", "verdict"]
