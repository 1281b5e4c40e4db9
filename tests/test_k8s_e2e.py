"""The rendered Kubernetes pods, run for real as containers on loopback (no cluster exists
here): each container gets exactly the rendered pod's image, env, user, volumes and
security, plus what Kubernetes would add to that pod (an Indexed Job's
JOB_COMPLETION_INDEX; the training operator's env for a PyTorchJob), and the Service's DNS
name resolves to 127.0.0.1. Two pods must make one record with nnodes 2.

What this does not show: the Job controller, the scheduler, the kubelet's NFS mount, DNS
through a real headless Service, GPUs through the device plugin (tests/test_k8s.py says
what is checked without a cluster, README "On Kubernetes" what is not tested at all)."""
from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from bench import record
from bench.host.launchers import k8s
from bench.host.launchers.base import JobSpec
from bench.topology import Topology
from conftest import EXAMPLE_ENV, REPO, assert_breakdown, free_port, validate
from tests.test_k8s import kubelet_value

pytestmark = pytest.mark.e2e
ENTRYPOINT = REPO / "docker" / "node-entrypoint.sh"
TRAINER_ARGS = ("--steps", "3", "--warmup-steps", "1", "--device", "cpu", "--model", "smallcnn",
                "--batch-size", "8", "--comm-probe-steps", "0", "--data", "fashion-mnist",
                "--data-dir", "/data/fashion-mnist", "--image-size", "28",
                "--max-train-samples", "256", "--max-eval-samples", "64", "--workers", "0")


def settings_file(tmp_path: Path) -> Path:
    """The documented settings, with gloo on loopback (the containers share this host's
    network) and the dataset on the NFS export the pods would mount."""
    path = tmp_path / "node.env"
    path.write_text(EXAMPLE_ENV.read_text() + "\nGLOO_SOCKET_IFNAME=lo\nNCCL_SOCKET_IFNAME=lo\n")
    return path


def job(tmp_path: Path, nodes: int = 2) -> JobSpec:
    log_dir = tmp_path / "logs"
    return JobSpec(job_id="e2e-k8s-" + os.urandom(3).hex(), module="bench.rank.train",
                   workload_args=TRAINER_ARGS, topology=Topology(nodes, 1),
                   master_port=free_port(), rdzv_timeout=60,
                   results=log_dir / "trainer.jsonl", log_dir=log_dir, deadline_s=300)


def docker_run(image: str, pod: dict, env: dict[str, str], *, results: Path, data: Path,
               hosts: list[str], name: str) -> list[str]:
    """``docker run`` of one pod as the kubelet would start it, from the rendered spec."""
    (container,) = pod["containers"]
    assert "command" not in container and "args" not in container, "the image's entrypoint"
    security, own = pod["securityContext"], container["securityContext"]
    argv = ["docker", "run", "--rm", "--name", name, "--network", "host",
            "--user", f"{security['runAsUser']}:{security['runAsGroup']}",
            "--group-add", str(security["fsGroup"])]
    assert security["runAsUser"] != 0 and security["runAsNonRoot"] is True
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}  # Docker's default
    if own["readOnlyRootFilesystem"]:
        argv.append("--read-only")
    assert own["capabilities"] == {"drop": ["ALL"]} and own["allowPrivilegeEscalation"] is False
    argv += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    for host in hosts:  # the Service's DNS names
        argv += ["--add-host", f"{host}:127.0.0.1"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "nfs" in volume:  # the NFS export, read-only, as the kubelet would mount it
            assert volume["nfs"]["readOnly"] and mount["readOnly"]
            argv += ["-v", f"{data}:{mount['mountPath']}:ro"]
        elif "persistentVolumeClaim" in volume:
            argv += ["-v", f"{results}:{mount['mountPath']}"]
        elif volume.get("emptyDir", {}).get("medium") == "Memory":
            assert mount["mountPath"] == "/dev/shm"
            argv += ["--shm-size", volume["emptyDir"]["sizeLimit"].replace("Gi", "g")]
        elif "emptyDir" in volume:
            argv += ["--tmpfs", f"{mount['mountPath']}:mode=1777"]
        else:
            raise AssertionError(f"a volume this test cannot stand in for: {volume}")
    for variable in container["env"]:
        argv += ["-e", f"{variable['name']}={kubelet_value(variable['value'])}"]
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    # This checkout's entrypoint, whether or not the image was rebuilt since it changed.
    argv += ["-v", f"{ENTRYPOINT}:/usr/local/bin/bench-node:ro", image]
    return argv


# The pods' containers, named after their pods but not bench-*: bench_containers() is the
# stack's, whose tests check that none is left while these may run on another worker.
POD = "pod-{}"


def run_pods(commands: list[list[str]], names: list[str], timeout: float = 300) -> list[str]:
    """Each pod's log as `kubectl logs` gives it: its stdout and stderr in whole lines. The
    two are read apart here, as the kubelet's log files keep them: `docker run` copies a
    container's two streams separately, and one read through a single pipe has put a
    stderr line inside a line of the record."""
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for argv in commands]
    try:
        streams = [proc.communicate(timeout=timeout) for proc in procs]
    finally:
        for name in names:  # nothing outlives the test
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    outputs = [stdout + stderr for stdout, stderr in streams]
    for proc, output in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, output[-4000:]
    return outputs


@pytest.fixture
def dirs(tmp_path, staged_fashion_mnist) -> tuple[Path, Path]:
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)  # the claim, writable by the pods' group (fsGroup) or anyone
    return results, staged_fashion_mnist


def options(tmp_path: Path, image: str, kind: str) -> k8s.K8sOptions:
    return k8s.K8sOptions(image=image, env_file=settings_file(tmp_path), profile="cpu",
                          kind=kind)


def check_one_record(outputs: list[str], results: Path, name: str) -> None:
    printed = [rec for output in outputs for rec in record.parse_stdout(output)]
    assert len(printed) == 1, outputs[0][-3000:]
    (rec,) = printed
    validate(rec)
    assert rec["status"] == "ok" and rec["nnodes"] == 2 and rec["world_size"] == 2
    assert sorted(r["node_rank"] for r in rec["env"]["ranks"]) == [0, 1]
    assert_breakdown(rec)
    assert record.parse_stdout(outputs[0]), "node 0 prints the record the launcher collects"
    written = list(record.read(results / name / "trainer.jsonl"))
    assert [r["run_id"] for r in written] == [rec["run_id"]]


def test_the_indexed_job_pods_make_one_two_node_record(cpu_image, tmp_path, dirs):
    results, data = dirs
    spec = job(tmp_path)
    _, batch = k8s.indexed_job(options(tmp_path, cpu_image, "indexed"), spec)
    name = batch["metadata"]["name"]
    pod = batch["spec"]["template"]["spec"]
    env = {v["name"]: kubelet_value(v["value"]) for v in pod["containers"][0]["env"]}
    assert "NODE_RANK" not in env and env["MASTER_ADDR"] == f"{name}-0.{name}"
    names = [POD.format(f"{name}-{index}") for index in range(2)]
    # What the Job controller gives each pod: its index.
    commands = [docker_run(cpu_image, pod, {"JOB_COMPLETION_INDEX": str(index)},
                           results=results, data=data, hosts=[env["MASTER_ADDR"]],
                           name=names[index]) for index in range(2)]
    outputs = run_pods(commands, names)
    assert "bench-node: node 1 of 2" in outputs[1]
    check_one_record(outputs, results, name)


def operator_env(job_obj: dict, replica_type: str, index: int) -> dict[str, str]:
    """The env Kubeflow's training operator adds to a PyTorchJob pod, as its setPodEnv does
    (kubeflow/training-operator pkg/controller.v1/pytorch/envvar.go, master.go): the
    Master's Service name and the pytorchjob-port, WORLD_SIZE = replicas x nprocPerNode,
    RANK = the replica's node rank (Worker i -> i + 1), PET_NNODES = replicas."""
    spec = job_obj["spec"]
    replicas = sum(r["replicas"] for r in spec["pytorchReplicaSpecs"].values())
    master = spec["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    port = next(p["containerPort"] for p in master["ports"] if p["name"] == "pytorchjob-port")
    rank = index + (1 if replica_type == "worker" else 0)
    return {"PYTHONUNBUFFERED": "0", "MASTER_PORT": str(port),
            "MASTER_ADDR": f"{job_obj['metadata']['name']}-master-0",
            "WORLD_SIZE": str(replicas * int(spec["nprocPerNode"])), "RANK": str(rank),
            "PET_NPROC_PER_NODE": spec["nprocPerNode"], "PET_NODE_RANK": str(rank),
            "PET_NNODES": str(replicas)}


def test_the_pytorchjob_pods_make_one_two_node_record(cpu_image, tmp_path, dirs):
    results, data = dirs
    (job_obj,) = k8s.pytorch_job(options(tmp_path, cpu_image, "pytorchjob"), job(tmp_path))
    name = job_obj["metadata"]["name"]
    commands, names = [], []
    for replica_type, index in (("master", 0), ("worker", 0)):
        pod = job_obj["spec"]["pytorchReplicaSpecs"][replica_type.capitalize()]["template"]
        env = operator_env(job_obj, replica_type, index)
        names.append(POD.format(f"{name}-{replica_type}-{index}"))
        commands.append(docker_run(cpu_image, pod["spec"], env, results=results, data=data,
                                   hosts=[env["MASTER_ADDR"]], name=names[-1]))
    outputs = run_pods(commands, names)
    assert "bench-node: node 1 of 2" in outputs[1]
    check_one_record(outputs, results, name)


def test_the_rendered_job_is_what_the_pods_ran(tmp_path):
    """The two tests above take the pods from the renderer, not from a copy of it."""
    spec = dataclasses.replace(job(tmp_path), master_port=29999)
    opts = options(tmp_path, "bench-trainer:cpu", "indexed")
    rendered = k8s.K8sLauncher(opts).render(spec)
    import yaml

    assert list(yaml.safe_load_all(rendered)) == k8s.indexed_job(opts, spec)
