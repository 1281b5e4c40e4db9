"""The Kubernetes objects of one job: a headless Service and an Indexed Job, or a Kubeflow
PyTorchJob; the node contract reaches each pod as environment variables."""
from __future__ import annotations

import math

from bench.host import contract
from bench.host.launchers.base import JobSpec
from bench.host.launchers.k8s.options import (
    GPU_RESOURCE,
    INDEXED_CONTAINER,
    INSTANCE_LABEL,
    PYTORCH_CONTAINER,
    PYTORCH_PORT_NAME,
    RUN_AS_USER,
    TTL_AFTER_FINISHED_S,
    K8sOptions,
    check_topologies,
    master_addr,
    object_name,
)


def _contract_env(options: K8sOptions, job: JobSpec, name: str) -> dict[str, str]:
    """The node contract of every pod, less what Kubernetes fills in per pod: node 0's
    spec stands for each (a job's pods are alike: ``check_topologies`` refuses uneven
    nodes), its rank left to the pod."""
    env = contract.node_env(job.nodes[0], master_addr=master_addr(name),
                            master_port=job.master_port, results_dir="", results_name="")
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
        # The kubelet expands $(NAME) in a value and reads $$ as $: every $ written as $$
        # reaches the container as given (a --data-dir holding $(BENCH_MODULE) included).
        "env": [{"name": k, "value": v.replace("$", "$$")} for k, v in pod_env.items()],
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
