"""The Kubernetes launcher without a cluster: every rendered manifest against the official
Kubernetes schemas (kubernetes-validate, offline), the node contract as the pods get it,
bad settings refused before anything is rendered, pod status turned into rows (canned
``kubectl get -o json``), the launcher's kubectl calls (a fake kubectl), and the image
entrypoint's mapping of the env Kubernetes sets. tests/test_k8s_e2e.py runs the rendered
pods as containers."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from bench import record
from bench.config import TrainConfig
from bench.host import doctor
from bench.host.failures import describe_failure, failure_record
from bench.host.launchers import k8s
from bench.host.launchers.base import JobSpec
from bench.host.launchers.k8s import launcher as k8s_launcher
from bench.host.launchers.k8s import options as k8s_options
from bench.host.launchers.k8s import preflight as k8s_preflight
from bench.host.launchers.k8s import status as k8s_status
from bench.options import ConfigError, on_head
from bench.topology import Topology
from conftest import EXAMPLE_ENV, REPO

# A valid record: the launcher's outcome takes no other from a pod's log.
VALID_RECORD = json.loads((REPO / "tests" / "fixtures" / "table-fixture.jsonl")
                          .read_text().splitlines()[0])

# The Kubernetes release whose schemas the manifests must satisfy: the newest that
# kubernetes-validate (pinned in requirements-host.txt) ships.
K8S_VERSION = kubernetes_validate.latest_version()
ARGS = ("--steps", "3", "--device", "cpu")


def settings(tmp_path: Path, extra: str = "", name: str = "node.env") -> Path:
    path = tmp_path / name
    path.write_text(EXAMPLE_ENV.read_text() + "\nDATA_MOUNT_OPTIONS=addr=10.0.0.5,nfsvers=4.1,ro"
                    "\nNCCL_SOCKET_IFNAME=eth0\nGLOO_SOCKET_IFNAME=eth0\n" + extra)
    return path


def options(tmp_path: Path, **kw) -> k8s.K8sOptions:
    kw.setdefault("image", "registry.example:5000/lab/bench-trainer:cuda")
    if "env_file" not in kw:
        kw["env_file"] = settings(tmp_path)
    return k8s.K8sOptions(**kw)


def job(tmp_path: Path, nodes: int = 2, procs: int = 1, args=ARGS, deadline: float = 600):
    return JobSpec(job_id="20260101T000000Z-abcd1234-c1r1", module="bench.rank.train",
                   workload_args=tuple(args), topology=Topology(nodes, procs),
                   master_port=29500, rdzv_timeout=60,
                   results=tmp_path / "logs" / "trainer.jsonl", log_dir=tmp_path / "logs",
                   deadline_s=deadline)


def as_pod(template: dict) -> dict:
    """A PyTorchJob's pod template as the Pod the operator makes of it."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", **template["metadata"]},
            "spec": template["spec"]}


def kubelet_value(value: str, defined: dict[str, str] | None = None) -> str:
    """An env value as the kubelet hands it to the container: $$ read as $, $(NAME) as
    NAME's value where an earlier variable defines it (else kept as written), any other $
    as itself (Kubernetes' expansion, third_party/forked/golang/expansion)."""
    out, i = [], 0
    while i < len(value):
        if value.startswith("$$", i):
            out.append("$")
            i += 2
        elif value.startswith("$(", i) and (end := value.find(")", i + 2)) != -1:
            out.append((defined or {}).get(value[i + 2:end], value[i:end + 1]))
            i = end + 1
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def env_of(container: dict) -> dict[str, str]:
    """What the container's environment holds: each value after the kubelet's expansion."""
    return {v["name"]: kubelet_value(v["value"]) for v in container["env"]}


# --- schemas --------------------------------------------------------------------------------

@pytest.mark.parametrize("profile", ["cpu", "gpu"])
@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("kind", ["indexed", "pytorchjob"])
def test_every_rendered_manifest_passes_the_kubernetes_schemas(tmp_path, profile, nodes, kind):
    opts = options(tmp_path, profile=profile, kind=kind)
    text = k8s.K8sLauncher(opts).render(job(tmp_path, nodes, 8 if profile == "gpu" else 2))
    docs = list(yaml.safe_load_all(text))
    assert docs == k8s.manifests(opts, job(tmp_path, nodes, 8 if profile == "gpu" else 2))
    for doc in docs:
        if doc["kind"] == "PyTorchJob":  # a CRD: its pods against the core schema
            for replica in doc["spec"]["pytorchReplicaSpecs"].values():
                kubernetes_validate.validate(as_pod(replica["template"]), K8S_VERSION,
                                             strict=True)
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_validator_catches_what_kubernetes_refuses(tmp_path):
    """The schema check above has teeth: an unknown field, a wrong type."""
    _, batch = k8s.indexed_job(options(tmp_path), job(tmp_path))
    for path, value in ((("spec", "completionMode2"), "Indexed"), (("spec", "parallelism"), "2")):
        bad = json.loads(json.dumps(batch))
        bad[path[0]][path[1]] = value
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_the_pytorchjob_fields_are_the_operators(tmp_path, nodes):
    """The CRD's own fields, checked by hand against kubeflow.org/v1 (training operator
    v1.7+): Master 1 and Worker nodes-1, no retry, the deadline, the container and port
    names the operator looks for."""
    (doc,) = k8s.pytorch_job(options(tmp_path, kind="pytorchjob", profile="gpu"),
                             job(tmp_path, nodes, 4, deadline=599.5))
    assert doc["apiVersion"] == "kubeflow.org/v1" and doc["kind"] == "PyTorchJob"
    spec = doc["spec"]
    assert set(spec) == {"nprocPerNode", "runPolicy", "pytorchReplicaSpecs"}
    assert spec["nprocPerNode"] == "4"  # a string in the API (it also takes auto, gpu, cpu)
    assert spec["runPolicy"] == {"backoffLimit": 0, "activeDeadlineSeconds": 600,
                                 "ttlSecondsAfterFinished": k8s.TTL_AFTER_FINISHED_S,
                                 "cleanPodPolicy": "None"}
    replicas = spec["pytorchReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == \
        ({"Master": 1, "Worker": nodes - 1} if nodes > 1 else {"Master": 1})
    for replica in replicas.values():
        assert set(replica) == {"replicas", "restartPolicy", "template"}
        assert replica["restartPolicy"] == "Never"
        (container,) = replica["template"]["spec"]["containers"]
        assert container["name"] == "pytorch"
        assert container["ports"][0]["name"] == "pytorchjob-port"
        assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}
        env = env_of(container)
        # The operator sets these per pod; ours would clash.
        assert not {"NODE_RANK", "NNODES", "MASTER_ADDR", "MASTER_PORT"} & set(env)
        assert env["NPROC_PER_NODE"] == "4"


# --- the node contract in the Indexed Job ---------------------------------------------------

@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_the_indexed_job_carries_the_node_contract(tmp_path, nodes):
    service, batch = k8s.indexed_job(options(tmp_path, profile="gpu", shm_size="8Gi"),
                                     job(tmp_path, nodes, 8, deadline=1800))
    name = batch["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None" and service["metadata"]["name"] == name
    spec = batch["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"] == nodes
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 1800
    template = spec["template"]
    pod = template["spec"]
    # The Service selects exactly this job's pods, which are its subdomain.
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    assert pod["subdomain"] == service["metadata"]["name"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    env = env_of(container)
    assert "NODE_RANK" not in env, "the completion index is the node rank"
    assert env["MASTER_ADDR"] == f"{name}-0.{name}"
    assert env["NNODES"] == str(nodes) and env["NPROC_PER_NODE"] == "8"
    assert env["MASTER_PORT"] == "29500" == str(service["spec"]["ports"][0]["port"])
    assert shlex.split(env["BENCH_ARGS"]) == list(ARGS)
    assert env["RESULTS_FILE"] == f"/results/{name}/trainer.jsonl"
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "8"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["nfs"] == {"server": "10.0.0.5", "path": "/datasets",
                                      "readOnly": True}
    assert volumes["results"]["persistentVolumeClaim"] == {"claimName": "bench-results"}
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/data"]["readOnly"] is True and mounts["/dev/shm"]["name"] == "shm"


def test_the_pod_runs_unprivileged(tmp_path):
    for doc in [*k8s.indexed_job(options(tmp_path), job(tmp_path))[1:],
                *k8s.pytorch_job(options(tmp_path, kind="pytorchjob"), job(tmp_path))]:
        templates = [doc["spec"]["template"]] if doc["kind"] == "Job" else \
            [r["template"] for r in doc["spec"]["pytorchReplicaSpecs"].values()]
        for template in templates:
            pod = template["spec"]
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["securityContext"]["runAsUser"] > 0
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            assert pod["automountServiceAccountToken"] is False
            assert "hostNetwork" not in pod and "hostIPC" not in pod
            (container,) = pod["containers"]
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert container["securityContext"]["privileged"] is False


def test_the_cpu_profile_asks_for_cores_and_no_gpu(tmp_path):
    _, batch = k8s.indexed_job(options(tmp_path, profile="cpu"), job(tmp_path, 2, 3))
    pod = batch["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"] == {"requests": {"cpu": "3"}}
    assert "tolerations" not in pod


def test_communication_settings_reach_every_pod_and_nothing_else(tmp_path):
    env_file = settings(tmp_path, "NCCL_IB_HCA=mlx5_0:1\nTORCH_NCCL_BLOCKING_WAIT=1\n"
                        "NCCL_DEBUG=WARN\nOTHER_SETTING=x\n")
    _, batch = k8s.indexed_job(options(tmp_path, env_file=env_file), job(tmp_path))
    env = env_of(batch["spec"]["template"]["spec"]["containers"][0])
    assert env["NCCL_IB_HCA"] == "mlx5_0:1" and env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert env["TORCH_NCCL_BLOCKING_WAIT"] == "1" and env["NCCL_DEBUG"] == "WARN"
    assert "OTHER_SETTING" not in env and "NFS_CLIENTS" not in env


def test_results_on_a_host_path_or_a_named_claim(tmp_path):
    _, batch = k8s.indexed_job(options(tmp_path, results_host_path="/srv/bench-results"),
                               job(tmp_path))
    volumes = {v["name"]: v for v in batch["spec"]["template"]["spec"]["volumes"]}
    assert volumes["results"] == {"name": "results", "hostPath": {
        "path": "/srv/bench-results", "type": "DirectoryOrCreate"}}
    _, batch = k8s.indexed_job(options(tmp_path, results_claim="lab-results"), job(tmp_path))
    volumes = {v["name"]: v for v in batch["spec"]["template"]["spec"]["volumes"]}
    assert volumes["results"]["persistentVolumeClaim"] == {"claimName": "lab-results"}


def test_a_bind_mounted_dataset_becomes_a_read_only_host_path(tmp_path):
    env_file = settings(tmp_path, "DATA_MOUNT_TYPE=none\nDATA_MOUNT_OPTIONS=bind\n"
                        "DATA_DEVICE=/srv/datasets\n")
    _, batch = k8s.indexed_job(options(tmp_path, env_file=env_file), job(tmp_path))
    pod = batch["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["hostPath"] == {"path": "/srv/datasets", "type": "Directory"}
    assert {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}["data"]["readOnly"]


def test_object_names_are_dns_labels_that_leave_room_for_the_pods():
    for job_id in ("20260101T000000Z-abcd1234-c12r3", "X" * 80, "a_b.C-1", "---"):
        name = k8s.object_name(job_id)
        assert k8s_options._DNS_LABEL.fullmatch(name) and name[0].isalpha(), name
        assert len(f"{name}-worker-1023") <= 63


def test_yaml_strings_read_back_as_the_same_strings():
    tricky = ["yes", "no", "on", "null", "~", "0", "1.5", "0x1F", "1e3", ": x", "#c", "a: b",
              "- x", "*a", "&a", "!t", "'q'", '"q"', "x\ny", "", " lead", "tail ", "@x", "%x",
              "{}", "[1]", "2026-01-01", "é", "a\\b"]
    doc = {"k": tricky, "n": 3, "b": False, "e": {}, "l": [], "nested": [{"a": 1, "b": [2]}]}
    assert yaml.safe_load(k8s.to_yaml([doc])) == doc


# --- bad settings -----------------------------------------------------------------------------

def render(*args: str, env_file: Path | None = None, output: Path | None = None):
    argv = [sys.executable, "-m", "bench", "k8s", "render", "--image", "bench-trainer:cpu",
            "--env-file", str(env_file or EXAMPLE_ENV), "--topologies", "2x1"]
    if output is not None:
        argv += ["--output", str(output)]
    before, after = (list(args[:args.index("--")]), list(args[args.index("--"):])) \
        if "--" in args else (list(args), ["--", "--steps", "2"])
    return subprocess.run([*argv, *before, *after], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


BAD = [
    (["--results-claim", "Evil;rm -rf /"], None, "--results-claim="),
    (["--results-claim", "../x"], None, "--results-claim="),
    (["--shm-size=-1Gi"], None, "--shm-size=-1Gi"),
    (["--shm-size", "0"], None, "--shm-size=0"),
    (["--namespace", "Kube_System"], None, "--namespace="),
    (["--kube-context=-oevil"], None, "--kube-context=-oevil"),
    (["--results-host-path", "relative/dir"], None, "--results-host-path="),
    (["--results-host-path", "/etc/cron.d"], None, "--results-host-path=/etc/cron.d"),
    (["--results-claim", "a", "--results-host-path", "/srv/r"], None, "--results-host-path="),
    (["--profile", "gpu-ib"], None, "--profile=gpu-ib"),
    (["--topologies", "1+2"], None, "--topologies=1+2"),
    ([], "NODE_RANK=1\nNNODES=2\nMASTER_ADDR=10.0.0.1\n", "NODE_RANK=1"),
    ([], "DATA_MOUNT_OPTIONS=addr=10.0.0.5,port=2050\n", "DATA_MOUNT_OPTIONS=port=2050"),
    ([], "DATA_MOUNT_OPTIONS=addr=-oproxy,ro\n", "DATA_MOUNT_OPTIONS="),
    ([], "DATA_DEVICE=:/data/../etc\n", "DATA_DEVICE=/data/../etc"),
    ([], "DATA_MOUNT_TYPE=cifs\n", "DATA_MOUNT_TYPE=cifs"),
    ([], "NCCL_BAD-NAME=1\n", "NCCL_BAD-NAME="),
]


@pytest.mark.parametrize("args, extra, named", BAD, ids=[b[2] for b in BAD])
def test_a_bad_setting_is_refused_before_anything_is_rendered(tmp_path, args, extra, named):
    env_file = settings(tmp_path, extra) if extra else None
    output = tmp_path / "out" / "job.yaml"
    out = render(*args, env_file=env_file, output=output)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench k8s: error: "), out.stderr
    assert named in lines[0], lines[0]
    assert out.stdout == "" and not output.exists() and not output.parent.exists()
    assert not (REPO / "pwned").exists()


def test_k8s_flags_are_refused_with_other_launchers(tmp_path):
    with pytest.raises(ConfigError, match="--namespace=lab: only with --launcher k8s"):
        from bench.host.matrix import MatrixConfig

        MatrixConfig.from_args(["--namespace", "lab", "--results",
                                str(tmp_path / "r.jsonl")], "bench matrix")


def test_render_writes_the_manifests_whole(tmp_path):
    output = tmp_path / "k8s" / "job.yaml"
    out = render("--k8s-kind", "pytorchjob", output=output)
    assert out.returncode == 0, out.stderr
    (doc,) = yaml.safe_load_all(output.read_text())
    assert doc["kind"] == "PyTorchJob" and out.stdout == ""
    assert [p.name for p in output.parent.iterdir()] == ["job.yaml"]


def test_the_matrix_dry_run_renders_each_job(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bench", "matrix", "--launcher", "k8s",
                          "--image", "bench-trainer:cpu", "--env-file", str(EXAMPLE_ENV),
                          "--topologies", "1x1,2x1", "--dry-run", "--results",
                          str(tmp_path / "r.jsonl"), "--", "--steps", "2"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("kind: Job") == 2 and out.stdout.count("completions: 2") == 1


def test_make_k8s_manifests_writes_both_kinds(tmp_path):
    out = subprocess.run(["make", "--no-print-directory", "k8s-manifests",
                          f"K8S_DIR={tmp_path}/m", "PROFILE=cpu", "NODES_PER_JOB=2",
                          f"NODE_ENV={EXAMPLE_ENV}", "IMAGE=bench-trainer:cpu"],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    job_docs = list(yaml.safe_load_all((tmp_path / "m" / "job.yaml").read_text()))
    (pytorch,) = yaml.safe_load_all((tmp_path / "m" / "pytorchjob.yaml").read_text())
    assert [d["kind"] for d in job_docs] == ["Service", "Job"]
    assert job_docs[1]["spec"]["completions"] == 2
    assert pytorch["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1


# --- pod status into rows -------------------------------------------------------------------

def pod(index: int, *, phase="Running", state=None, last=None, conditions=None,
        reason=None, kind="indexed", node="gpu-node-1") -> dict:
    meta: dict = {"name": f"bench-x-{index}-abcde", "labels": {}, "annotations": {}}
    if kind == "indexed":
        meta["annotations"][k8s.INDEX_ANNOTATION] = str(index)
    else:
        meta["labels"] = {"training.kubeflow.org/replica-type": "master" if index == 0
                          else "worker",
                          "training.kubeflow.org/replica-index": str(max(0, index - 1))}
    status: dict = {"phase": phase, "conditions": conditions or []}
    if reason:
        status["reason"], status["message"] = reason, f"Pod was active too long ({reason})"
    if state is not None:
        status["containerStatuses"] = [{"name": "trainer", "state": state,
                                        "lastState": last or {},
                                        "imageID": "registry.example/bench@sha256:" + "a" * 64}]
    return {"metadata": meta, "spec": {"nodeName": node}, "status": status}


def terminated(code: int, reason: str = "Error") -> dict:
    return {"terminated": {"exitCode": code, "reason": reason}}


WAITING_PULL = {"waiting": {"reason": "ImagePullBackOff",
                            "message": 'Back-off pulling image "registry.example/bench:cuda"'}}
UNSCHEDULABLE = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                  "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]


def condition(kind: str, reason: str = "", message: str = "") -> dict:
    return {"status": {"conditions": [{"type": kind, "status": "True", "reason": reason,
                                       "message": message}]}}


def test_pod_ranks_from_the_index_or_the_replica():
    assert [k8s.pod_rank(pod(i)) for i in range(3)] == [0, 1, 2]
    assert [k8s.pod_rank(pod(i, kind="pytorchjob")) for i in range(3)] == [0, 1, 2]
    assert k8s.pod_rank({"metadata": {"labels": {"replica-type": "worker",
                                                 "replica-index": "0"}}}) == 1


def test_the_verdict_of_each_pod_status():
    running = [pod(0, state={"running": {}}), pod(1, state={"running": {}})]
    assert k8s.verdict({}, running) is None
    assert k8s.verdict(condition("Complete"), running)["state"] == "COMPLETED"
    assert k8s.verdict(condition("Succeeded"), running)["state"] == "COMPLETED"  # PyTorchJob
    oom = k8s.verdict(condition("Failed", "BackoffLimitExceeded"),
                      [pod(0, phase="Failed", state=terminated(137, "OOMKilled")), running[1]])
    assert oom["state"] == "OUT_OF_MEMORY" and oom["reason"].startswith("OOMKilled: pod bench-x-0")
    pull = k8s.verdict({}, [pod(0, phase="Pending", state=WAITING_PULL), running[1]])
    assert pull == {"state": "FAILED", "reason": "ImagePullBackOff: pod bench-x-0-abcde: Back-off "
                    'pulling image "registry.example/bench:cuda"'}
    pending = [pod(0, phase="Pending", conditions=UNSCHEDULABLE)]
    assert k8s.verdict({}, pending, pending_s=10, unschedulable_grace_s=60) is None
    late = k8s.verdict({}, pending, pending_s=61, unschedulable_grace_s=60)
    assert late["state"] == "FAILED" and late["reason"].startswith("Unschedulable: ")
    assert "Insufficient nvidia.com/gpu" in late["reason"]
    deadline = k8s.verdict(condition("Failed", "DeadlineExceeded",
                                     "Job was active longer than specified deadline"),
                           [pod(0, phase="Failed", state=terminated(143)), running[1]])
    assert deadline == {"state": "FAILED", "reason": "DeadlineExceeded: Job was active longer "
                        "than specified deadline"}
    evicted = k8s.verdict({}, [pod(0, phase="Failed", reason="DeadlineExceeded")])
    assert evicted["reason"].startswith("DeadlineExceeded: pod bench-x-0")


def _row(tmp_path, state: dict, pods: list[dict], logs: list[list[str]], timed_out=False):
    spec = job(tmp_path)
    nodes = [k8s_status.NodeOutcome(r, p["metadata"]["name"], k8s.pod_exit(p), lines[-20:], lines)
             for r, (p, lines) in enumerate(zip(pods, logs, strict=True))]
    outcome = k8s.outcome(spec, "bench-x", state, pods, nodes, timed_out, 12.0)
    with on_head():
        cfg = TrainConfig.from_args(list(ARGS))
    records = outcome.records()
    rec = records[0] if records else failure_record(cfg, spec.topology)
    return outcome, describe_failure(rec, outcome, spec.deadline_s) if not outcome.ok else rec


def test_an_oom_killed_pod_is_an_oom_row(tmp_path):
    pods = [pod(0, phase="Failed", state=terminated(137, "OOMKilled")),
            pod(1, phase="Failed", state=terminated(1))]
    state = k8s.verdict(condition("Failed", "BackoffLimitExceeded"), pods)
    _, rec = _row(tmp_path, state, pods, [["step 1"], ["Connection reset by peer"]])
    assert rec["status"] == "oom"
    assert "k8s job bench-x OUT_OF_MEMORY (OOMKilled: pod bench-x-0-abcde" in rec["error"]
    assert rec["failed_node"]["rank"] == 0 and rec["failed_node"]["returncode"] == 137


@pytest.mark.parametrize("pods, job_obj, reason", [
    ([pod(0, phase="Pending", state=WAITING_PULL), pod(1, phase="Pending",
                                                       state=WAITING_PULL)], {},
     "ImagePullBackOff"),
    ([pod(0, phase="Pending", conditions=UNSCHEDULABLE), pod(1, state={"running": {}})], {},
     "Unschedulable"),
    ([pod(0, phase="Failed", state=terminated(143)), pod(1, phase="Failed",
                                                         state=terminated(143))],
     condition("Failed", "DeadlineExceeded", "Job was active longer than specified deadline"),
     "DeadlineExceeded"),
])
def test_a_job_that_cannot_run_is_an_error_row_with_the_reason(tmp_path, pods, job_obj, reason):
    state = k8s.verdict(job_obj, pods, pending_s=999, unschedulable_grace_s=1)
    _, rec = _row(tmp_path, state, pods, [[], []])
    assert rec["status"] == "error"
    assert rec["error"].startswith(f"k8s job bench-x FAILED ({reason}: "), rec["error"]


def test_a_completed_job_gives_pod_zeros_record(tmp_path):
    ok = dict(VALID_RECORD, run_id="r1")
    pods = [pod(0, phase="Succeeded", state=terminated(0, "Completed")),
            pod(1, phase="Succeeded", state=terminated(0, "Completed"))]
    state = k8s.verdict(condition("Complete"), pods)
    outcome, rec = _row(tmp_path, state, pods,
                        [["bench-node: node 0 of 2", record.MARKER, json.dumps(ok)], ["done"]])
    assert outcome.ok and rec == ok
    assert outcome.scheduler["image_id"].endswith("a" * 64)
    assert outcome.scheduler["nodes"] == "gpu-node-1"


# --- the launcher's kubectl calls -----------------------------------------------------------

FAKE_KUBECTL = """#!{python}
import json, os, sys
args = sys.argv[1:]
here = os.environ["FAKE_K8S"]
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps(args) + "\\n")
words = [a for a in args if not a.startswith("--")]
def canned(name):
    path = os.path.join(here, name)
    if os.path.exists(path):
        sys.stdout.write(open(path).read())
        sys.exit(0)
    sys.stderr.write("Error from server (NotFound): " + name + "\\n")
    sys.exit(1)
if words[0] in ("apply", "delete"):
    sys.exit(int(os.environ.get("FAKE_" + words[0].upper() + "_RC", "0")))
if words[0] == "get" and words[1] == "pods":
    canned("pods.json")
if words[0] == "get":
    canned("job.json")
if words[0] == "logs":
    canned("logs-" + words[1])
sys.exit(2)
"""


@pytest.fixture
def fake_kubectl(tmp_path, monkeypatch) -> Path:
    here = tmp_path / "fake"
    (here / "bin").mkdir(parents=True)
    kubectl = here / "bin" / "kubectl"
    kubectl.write_text(FAKE_KUBECTL.format(python=sys.executable))
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{here / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_K8S", str(here))
    return here


def _calls(here: Path) -> list[list[str]]:
    return [json.loads(line) for line in (here / "calls.jsonl").read_text().splitlines()]


def test_launch_applies_waits_collects_and_deletes(tmp_path, fake_kubectl):
    ok = dict(VALID_RECORD, run_id="r1")
    pods = [pod(0, phase="Succeeded", state=terminated(0, "Completed")),
            pod(1, phase="Succeeded", state=terminated(0, "Completed"))]
    (fake_kubectl / "pods.json").write_text(json.dumps({"items": pods}))
    (fake_kubectl / "job.json").write_text(json.dumps(condition("Complete")))
    (fake_kubectl / "logs-bench-x-0-abcde").write_text(f"x\n{record.MARKER}\n{json.dumps(ok)}\n")
    (fake_kubectl / "logs-bench-x-1-abcde").write_text("node 1\n")
    spec = job(tmp_path)
    launcher = k8s.K8sLauncher(options(tmp_path, namespace="lab", context="ctx-a", poll_s=0.01))
    outcome = launcher.launch(spec)
    assert outcome.ok and outcome.records() == [ok]
    calls = _calls(fake_kubectl)
    manifest = str(spec.log_dir / "manifests.yaml")
    assert calls[0] == ["--context=ctx-a", "--namespace=lab", "apply", "-f", manifest]
    assert calls[-1] == ["--context=ctx-a", "--namespace=lab", "delete", "--ignore-not-found",
                         "--wait=false", "-f", manifest]
    name = k8s.object_name(spec.job_id)
    assert ["--context=ctx-a", "--namespace=lab", "get", "pods", "-l",
            f"app.kubernetes.io/instance={name}", "-o", "json"] in calls
    assert (spec.log_dir / "node0.log").read_text().splitlines()[-1] == json.dumps(ok)


@pytest.mark.parametrize("verb", ["apply", "get"])
def test_launch_deletes_the_job_when_interrupted(tmp_path, fake_kubectl, monkeypatch, verb):
    """Ctrl-C once kubectl has run `verb`: while the job is applied (the API server may have
    taken it before kubectl returned) or while it is waited for. The interruption is raised
    at that call, not from time.sleep: subprocess.run sleeps too while it waits for
    kubectl, and an interruption there came before the job was applied under load."""
    (fake_kubectl / "pods.json").write_text(json.dumps({"items": []}))
    (fake_kubectl / "job.json").write_text("{}")
    real = k8s_launcher.kubectl

    def interrupted(options, *args, **kwargs):
        out = real(options, *args, **kwargs)
        if args[0] == verb:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(k8s_launcher, "kubectl", interrupted)
    with pytest.raises(KeyboardInterrupt):
        k8s.K8sLauncher(options(tmp_path)).launch(job(tmp_path))
    calls = [[word for word in call if not word.startswith(("--context=", "--namespace="))]
             for call in _calls(fake_kubectl)]
    assert calls[0][0] == "apply" and calls[-1][:2] == ["delete", "--ignore-not-found"], calls
    assert sum(call[0] == "delete" for call in calls) == 1, calls


def test_a_refused_apply_is_a_row_not_a_crash(tmp_path, fake_kubectl, monkeypatch):
    monkeypatch.setenv("FAKE_APPLY_RC", "1")
    outcome = k8s.K8sLauncher(options(tmp_path)).launch(job(tmp_path))
    assert not outcome.ok and "kubectl apply refused the job" in outcome.culprit.output[0]


# --- preflight (for doctor --k8s) -----------------------------------------------------------

def test_preflight_rows_from_the_cluster(tmp_path, fake_kubectl, monkeypatch):
    nodes = {"items": [{"metadata": {"name": "gpu-a"},
                        "status": {"allocatable": {"nvidia.com/gpu": "8"}}},
                       {"metadata": {"name": "cpu-b"}, "status": {"allocatable": {}}}]}
    (fake_kubectl / "job.json").write_text(json.dumps(nodes))  # any `get` answers this
    monkeypatch.setattr(k8s_preflight.socket, "create_connection",
                        lambda *a, **k: (_ for _ in ()).throw(OSError("refused")))
    rows = {r.check: r for r in k8s.cluster_checks(options(tmp_path, profile="gpu"), timeout=5)}
    assert rows["context"].result == "PASS"
    assert rows["gpus"].result == "PASS" and "gpu-a 8" in rows["gpus"].detail
    assert rows["nfs"].result == "FAIL" and "10.0.0.5:2049" in rows["nfs"].detail


def test_preflight_stops_at_a_context_that_does_not_answer(tmp_path, fake_kubectl):
    rows = k8s.cluster_checks(options(tmp_path), timeout=5)
    assert [(r.check, r.result) for r in rows] == [("context", "FAIL")]
    with pytest.raises(RuntimeError, match="k8s context"):
        k8s.K8sLauncher(options(tmp_path)).preflight([Topology(2, 1)])


def test_preflight_sees_the_nfs_server_answer(tmp_path, fake_kubectl, monkeypatch):
    (fake_kubectl / "job.json").write_text("{}")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        real = socket.create_connection
        monkeypatch.setattr(k8s_preflight.socket, "create_connection",
                            lambda address, timeout: real(("127.0.0.1", port), timeout))
        rows = {r.check: r for r in k8s.cluster_checks(options(tmp_path), timeout=5)}
    assert rows["nfs"].result == "PASS"


def test_doctor_k8s_reports_the_cluster_through_kubectl(tmp_path, fake_kubectl, capsys,
                                                         monkeypatch):
    # Nothing leaves loopback: the settings' NFS server (10.0.0.5) is refused in-process.
    monkeypatch.setattr(k8s_preflight.socket, "create_connection",
                        lambda *a, **k: (_ for _ in ()).throw(OSError("refused")))
    nodes = {"items": [{"metadata": {"name": "gpu-a"},
                        "status": {"allocatable": {"nvidia.com/gpu": "4"}}}]}
    (fake_kubectl / "job.json").write_text(json.dumps(nodes))
    env = settings(tmp_path)
    code = doctor.main(["--k8s", "--profile", "gpu", "--image", "registry.example/b:cuda",
                        "--env-file", str(env), "--kube-context", "lab", "--timeout", "5"])
    out = capsys.readouterr().out
    assert "| context" in out and "| gpus" in out and "gpu-a 4" in out
    assert code == 1 and "10.0.0.5:2049: refused" in out  # a FAIL row: exit 1
    assert ["--context=lab", "get", "--raw", "/version"] in _calls(fake_kubectl)


@pytest.mark.parametrize("flags, setting", [
    (["--namespace", "Not_A-Label"], "--namespace"),
    (["--kube-context", "a b"], "--kube-context"),
    (["--results-claim", "UPPER"], "--results-claim"),
    (["--hosts", "a,b"], "--hosts"),
    (["--slurm"], "--k8s"),
    (["--image=-bad"], "--image"),
])
def test_doctor_k8s_refuses_a_bad_setting_before_kubectl(tmp_path, fake_kubectl, capsys,
                                                          flags, setting):
    code = doctor.main(["--k8s", "--env-file", str(settings(tmp_path)), *flags])
    assert code == 2 and setting in capsys.readouterr().err
    assert not (fake_kubectl / "calls.jsonl").exists()


def test_the_pull_probe_pod_passes_the_schemas(tmp_path):
    kubernetes_validate.validate(k8s.probe_pod(options(tmp_path)), K8S_VERSION, strict=True)


# --- the entrypoint's mapping of what Kubernetes sets -----------------------------------------

# python3 that prints the torchrun agent's argv (python3 -m bench.rank.torchrun ARGV), and
# is the real one for the entrypoint's other use of it (splitting BENCH_ARGS).
FAKE_PYTHON = ('#!/bin/sh\nif [ "$1 $2" = "-m bench.rank.torchrun" ]; then shift 2; '
               'printf \'%s\\n\' "$@"; exit 0; fi\nexec {python} "$@"\n')


def entrypoint(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """The torchrun flags docker/node-entrypoint.sh passes, run by a POSIX sh with a
    torchrun agent that prints its argv."""
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(FAKE_PYTHON.format(python=shlex.quote(str(Path(sys.executable).resolve()))))
    fake.chmod(0o755)
    shell = shutil.which("dash") or "/bin/sh"  # dash: POSIX sh, no bash extension passes
    out = subprocess.run([shell, str(REPO / "docker" / "node-entrypoint.sh")],
                         env={"PATH": f"{fake.parent}:/usr/bin:/bin", **env},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    argv = out.stdout.splitlines()
    return {flag: argv[i + 1] for i, flag in enumerate(argv) if flag in (
        "--nnodes", "--node_rank", "--nproc_per_node", "--master_addr", "--master_port")}


@pytest.mark.parametrize("env, expected", [
    # An Indexed Job pod: the contract from the spec, the index from the Job controller.
    ({"NNODES": "4", "NPROC_PER_NODE": "8", "MASTER_ADDR": "j-0.j", "MASTER_PORT": "29500",
      "JOB_COMPLETION_INDEX": "3"}, ("4", "3", "8", "j-0.j", "29500")),
    # A rank given as the contract's own variable wins (Compose, ssh, Slurm).
    ({"NNODES": "2", "NODE_RANK": "0", "JOB_COMPLETION_INDEX": "1"},
     ("2", "0", "1", "127.0.0.1", "29500")),
    # PyTorchJob, training operator before v1.7: WORLD_SIZE is the pod count.
    ({"NPROC_PER_NODE": "1", "MASTER_ADDR": "p-master-0", "MASTER_PORT": "23456",
      "WORLD_SIZE": "3", "RANK": "2"}, ("3", "2", "1", "p-master-0", "23456")),
    # From v1.7: WORLD_SIZE is pods x processes; PET_NNODES and PET_NODE_RANK come first.
    ({"MASTER_ADDR": "p-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "16", "RANK": "1",
      "PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "8"},
     ("2", "1", "8", "p-master-0", "23456")),
    # Kubeflow Trainer v2: only the PET_* variables.
    ({"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "4",
      "PET_MASTER_ADDR": "t-node-0-0.t", "PET_MASTER_PORT": "29400"},
     ("2", "1", "4", "t-node-0-0.t", "29400")),
    # Nothing set: one node alone, as before.
    ({}, ("1", "0", "1", "127.0.0.1", "29500")),
])
def test_the_entrypoint_maps_what_kubernetes_sets(tmp_path, env, expected):
    flags = entrypoint(tmp_path, env)
    assert tuple(flags[f] for f in ("--nnodes", "--node_rank", "--nproc_per_node",
                                    "--master_addr", "--master_port")) == expected


def test_the_manifest_never_replaces_a_file_bench_did_not_write(tmp_path):
    """--output over a user's file: refused before anything is rendered, the file kept; a
    manifest bench wrote (its mark first) is replaced by the next render."""
    notes = tmp_path / "notes.yaml"
    notes.write_text("mine\n")
    proc = render(output=notes)
    assert proc.returncode == 2 and "--output=" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and notes.read_text() == "mine\n"
    manifest = tmp_path / "k8s" / "job.yaml"
    for _ in range(2):
        proc = render(output=manifest)
        assert proc.returncode == 0, proc.stderr
    assert len(list(yaml.safe_load_all(manifest.read_text()))) >= 2
    assert sorted(p.name for p in manifest.parent.iterdir()) == ["job.yaml"]


def test_every_env_value_reaches_the_container_as_given_dollars_included(tmp_path):
    """The kubelet expands $(NAME) and reads $$ as $: a --data-dir naming $(BENCH_MODULE),
    or holding $$, reaches the pod unchanged."""
    data_dir = "/data/a$$b/$(BENCH_MODULE)/c$d"
    spec = job(tmp_path, args=(*ARGS, "--data", "fashion-mnist", "--data-dir", data_dir))
    for kind in ("indexed", "pytorchjob"):
        docs = k8s.manifests(options(tmp_path, kind=kind), spec)
        containers = [c for doc in docs for c in _containers_of(doc)]
        assert containers
        for container in containers:
            env = env_of(container)
            assert data_dir in shlex.split(env["BENCH_ARGS"]), env["BENCH_ARGS"]
            defined: dict[str, str] = {}
            for variable in container["env"]:      # in order, as the kubelet reads them
                seen = kubelet_value(variable["value"], defined)
                assert seen == env[variable["name"]], variable
                defined[variable["name"]] = seen


def _containers_of(doc: dict) -> list[dict]:
    if doc["kind"] == "PyTorchJob":
        return [c for replica in doc["spec"]["pytorchReplicaSpecs"].values()
                for c in replica["template"]["spec"]["containers"]]
    if doc["kind"] == "Job":
        return doc["spec"]["template"]["spec"]["containers"]
    return []
