"""A Kubernetes job's end, read from the job's and its pods' status into the schedulers' one
vocabulary (``bench.host.launchers.scheduler``): an OOMKilled container is OUT_OF_MEMORY; an
image that cannot be pulled, a pod that cannot be scheduled, an eviction or a deadline is
FAILED with that reason."""
from __future__ import annotations

from bench.host.launchers.base import JobSpec
from bench.host.launchers.k8s.options import INDEX_ANNOTATION
from bench.host.launchers.scheduler import SchedulerEnd, scheduler_outcome
from bench.host.outcome import JobOutcome, NodeOutcome

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


def outcome(job: JobSpec, name: str, state: dict, pods: list[dict], nodes: list[NodeOutcome],
            timed_out: bool, seconds: float) -> JobOutcome:
    """The row's material: the nodes' exits and logs, the first node that failed (or, when
    none said why, node 0's log, else the pod status, as node 0's words), and the
    scheduler's view."""
    end = scheduler_end(name, state, pods)
    return scheduler_outcome(end, nodes, timed_out=timed_out, seconds=seconds,
                             fallback_lines=nodes[0].output or [end.reason or ""])


def scheduler_end(name: str, state: dict, pods: list[dict]) -> SchedulerEnd:
    """The job's end (``verdict``'s state and reason) with the machines its pods ran on and
    the image they ran, by digest."""
    machines = sorted({(p.get("spec") or {}).get("nodeName") or "" for p in pods} - {""})
    image_ids = sorted({c.get("imageID") for p in pods for c in
                        (p.get("status") or {}).get("containerStatuses") or []
                        if c.get("imageID")})
    return SchedulerEnd(kind="k8s", job_id=name, state=state["state"],
                        reason=state.get("reason"), nodes=",".join(machines),
                        image_id=image_ids[0] if image_ids else None)
