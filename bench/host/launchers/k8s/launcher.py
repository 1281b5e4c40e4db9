"""The k8s launcher: apply a job's manifests, wait for its end, collect each pod's log and
exit, delete the job whatever happened."""
from __future__ import annotations

import sys
import time

from bench.host import contract
from bench.host.checks import preflight
from bench.host.launchers.base import JobSpec
from bench.host.launchers.k8s.kubectl import json_of, kubectl, last_line
from bench.host.launchers.k8s.options import (
    DEADLINE_GRACE_S,
    INDEXED_CONTAINER,
    INSTANCE_LABEL,
    PYTORCH_CONTAINER,
    K8sOptions,
    check_topologies,
    object_name,
)
from bench.host.launchers.k8s.preflight import cluster_checks
from bench.host.launchers.k8s.render import manifests
from bench.host.launchers.k8s.status import outcome, pod_exit, pod_problem, pod_rank, verdict
from bench.host.launchers.k8s.yaml_text import to_yaml
from bench.host.launchers.nodes import (
    CONSOLE,
    TAIL_LINES,
    JobOutcome,
    NodeOutcome,
    failed_to_start,
    shielded,
)
from bench.topology import Topology


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
        # this host's view of the NFS server is not the nodes': a FAIL worth a look only
        preflight.require(cluster_checks(self.options), advisory=("nfs",))

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
        job.log_dir.mkdir(parents=True, exist_ok=True)
        path = job.log_dir / "manifests.yaml"
        path.write_text(self.render(job), encoding="utf-8")
        name = object_name(job.job_id)
        started = time.monotonic()
        # From the apply on, whatever happens (Ctrl-C during the apply too: the API server
        # may have taken the job before kubectl returned), the job must not outlive us; a
        # second Ctrl-C cannot cut the delete short.
        try:
            out = kubectl(self.options, "apply", "-f", str(path))
            if out.returncode != 0:
                return failed_to_start("k8s", "kubectl apply refused the job: "
                                       f"{last_line(out)[:300]}")
            if CONSOLE.echo:
                kind = "PyTorchJob" if self.options.kind == "pytorchjob" else "Job"
                print(f"[k8s] job {job.job_id} is {kind} {name} in namespace "
                      f"{self.options.namespace}", file=sys.stderr, flush=True)
            state, pods, timed_out = self._wait(job, name, started)
            nodes = self._collect(job, pods)
        finally:
            with shielded():
                kubectl(self.options, "delete", "--ignore-not-found", "--wait=false", "-f",
                        str(path))
        return outcome(job, name, state, pods, nodes, timed_out, time.monotonic() - started)

    def _wait(self, job: JobSpec, name: str, started: float) -> tuple[dict, list[dict], bool]:
        pending_since: float | None = None
        while True:
            obj = json_of(kubectl(self.options, "get", self.resource, name, "-o", "json"))
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
        listing = json_of(kubectl(self.options, "get", "pods", "-l", f"{INSTANCE_LABEL}={name}",
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
