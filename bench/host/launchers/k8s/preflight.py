"""Doctor's rows for a Kubernetes cluster: the context, the right to create jobs, GPUs, the
results claim, the image, NFS. One list for ``bench doctor --k8s`` and the launcher's
preflight (which prints and judges it as every launcher does: bench.host.checks.preflight)."""
from __future__ import annotations

import json
import socket
import subprocess
import time

from bench.host.checks import FAIL, PASS, WARN, Row
from bench.host.launchers.k8s.kubectl import json_of, kubectl, last_line
from bench.host.launchers.k8s.options import GPU_RESOURCE, RUN_AS_USER, K8sOptions
from bench.host.launchers.k8s.status import pod_exit, pod_problem
from bench.host.settings import NFS_PORT


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


def cluster_checks(options: K8sOptions, timeout: float = 30.0,
                   pull_probe: bool = False) -> list[Row]:
    """Doctor rows for a cluster: the context answers, the job may be created, the GPUs
    are allocatable (gpu profile), the results claim exists, the image can be pulled (a
    probe pod with ``pull_probe``, else the right to create pods), the NFS server answers."""
    host = options.context or "k8s"
    rows: list[Row] = []

    def add(check: str, result: str, detail: str) -> None:
        rows.append(Row(host, check, result, detail))

    version = kubectl(options, "get", "--raw", "/version", timeout=timeout, namespaced=False)
    info = json_of(version)
    if info is None:
        add("context", FAIL, f"{last_line(version)[:200]}: set the context with --kube-context "
            "or `kubectl config use-context`")
        return rows
    add("context", PASS, f"API server {info.get('gitVersion', '?')}")
    resource = "pytorchjobs.kubeflow.org" if options.kind == "pytorchjob" else "jobs.batch"
    can = kubectl(options, "auth", "can-i", "create", resource, timeout=timeout)
    add("permission", PASS if can.stdout.strip() == "yes" else FAIL,
        f"create {resource} in {options.namespace}: {can.stdout.strip() or last_line(can)}")
    if options.profile == "gpu":
        rows.append(_gpu_row(options, host, timeout))
    if options.claim:
        claim = json_of(kubectl(options, "get", "pvc", options.claim, "-o", "json",
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
    listing = json_of(kubectl(options, "get", "nodes", "-o", "json", timeout=timeout,
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
                   f"may create pods: {can.stdout.strip() or last_line(can)}")
    pod = probe_pod(options)
    name = pod["metadata"]["name"]
    created = subprocess.run(
        ["kubectl", *([f"--context={options.context}"] if options.context else []),
         "apply", "-f", "-"], input=json.dumps(pod), capture_output=True, text=True,
        timeout=timeout)
    if created.returncode != 0:
        return Row(host, "image", FAIL, f"cannot create the probe pod: {last_line(created)[:200]}")
    try:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            status = json_of(kubectl(options, "get", "pod", name, "-o", "json", timeout=timeout))
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
