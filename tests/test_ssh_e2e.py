"""SSH fan-out over a real sshd on loopback: 127.0.0.2 and 127.0.0.3 stand for two hosts."""
from __future__ import annotations

import pytest

from bench import record
from conftest import (
    EXAMPLE_ENV,
    LOOPBACK_HOSTS,
    assert_breakdown,
    bench_containers,
    run_matrix,
    validate,
)

pytestmark = pytest.mark.e2e
HOSTS = ",".join(LOOPBACK_HOSTS)
WORKLOAD = ["--models", "smallcnn", "--", "--steps", "2", "--warmup-steps", "1",
            "--log-every", "1"]


def check_two_host_record(results):
    (rec,) = list(record.read(results))
    validate(rec)
    assert rec["status"] == "ok" and rec["matrix"]["launcher"] == "ssh"
    assert rec["nnodes"] == 2 and rec["world_size"] == 2
    assert sorted(r["node_rank"] for r in rec["env"]["ranks"]) == [0, 1]
    logs = results.parent / "logs" / rec["matrix"]["logs"].split("/logs/")[1]
    # Each host's output is saved under its name; only rank 0 reports progress.
    assert all((logs / f"{host}.log").is_file() for host in LOOPBACK_HOSTS)
    assert "step 2/2" in (logs / f"{LOOPBACK_HOSTS[0]}.log").read_text()
    return rec


def compose_env(tmp_path, dataset):
    """The example settings, with the staged dataset bound in and gloo on loopback."""
    env_file = tmp_path / "node.env"
    env_file.write_text(EXAMPLE_ENV.read_text() + "\nDATA_MOUNT_TYPE=none\n"
                        f"DATA_MOUNT_OPTIONS=bind\nDATA_DEVICE={dataset}\n"
                        "GLOO_SOCKET_IFNAME=lo\nOMP_NUM_THREADS=1\n")
    return env_file


def test_ssh_native_runs_one_node_per_host(loopback_sshd, tmp_path):
    results = tmp_path / "runs.jsonl"
    proc = run_matrix("--launcher", "ssh", "--hosts", HOSTS, "--runtime", "native",
                      "--ssh-config", str(loopback_sshd / "ssh_config"), "--topologies", "2x1",
                      "--batch-sizes", "8", "--results", str(results), "--verbose", *WORKLOAD)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_two_host_record(results)
    # --verbose: each node's output streamed with its host as prefix
    assert f"[{LOOPBACK_HOSTS[0]}] [bench] step" in proc.stderr, "streamed with a host prefix"


def test_ssh_takes_user_at_host(loopback_sshd, tmp_path):
    # ssh gets root@127.0.0.2 whole (after --); torchrun's MASTER_ADDR is 127.0.0.2.
    hosts = [f"root@{host}" for host in LOOPBACK_HOSTS]
    results = tmp_path / "runs.jsonl"
    proc = run_matrix("--launcher", "ssh", "--hosts", ",".join(hosts), "--runtime", "native",
                      "--ssh-config", str(loopback_sshd / "ssh_config"), "--topologies", "2x1",
                      "--batch-sizes", "8", "--results", str(results), *WORKLOAD)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = list(record.read(results))
    assert rec["status"] == "ok" and rec["nnodes"] == 2 and rec["world_size"] == 2


@pytest.mark.serial   # bench-* containers (tests/conftest.py, PHASES)
def test_ssh_compose_runs_one_container_per_host(loopback_sshd, cpu_image, tmp_path,
                                                 staged_fashion_mnist):
    env_file = compose_env(tmp_path, staged_fashion_mnist)
    results = tmp_path / "runs.jsonl"
    proc = run_matrix("--launcher", "ssh", "--hosts", HOSTS, "--runtime", "compose",
                      "--image", cpu_image, "--env-file", str(env_file), "--profile", "cpu",
                      "--ssh-config", str(loopback_sshd / "ssh_config"), "--topologies", "2x1",
                      "--batch-sizes", "8", "--results", str(results), *WORKLOAD)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = check_two_host_record(results)
    assert rec["env"]["image_id"].startswith("sha256:")
    assert bench_containers() == []


@pytest.mark.serial
def test_the_allreduce_workload_runs_over_ssh_in_containers(loopback_sshd, cpu_image, tmp_path,
                                                            staged_fashion_mnist):
    # The workload reaches each host's container as BENCH_MODULE, through SSH and Compose.
    env_file = compose_env(tmp_path, staged_fashion_mnist)
    results = tmp_path / "comm.jsonl"
    proc = run_matrix("--workload", "allreduce", "--launcher", "ssh", "--hosts", HOSTS,
                      "--runtime", "compose", "--image", cpu_image, "--env-file",
                      str(env_file), "--profile", "cpu", "--ssh-config",
                      str(loopback_sshd / "ssh_config"), "--topologies", "2x1",
                      "--results", str(results), "--", "--max-size", "64KiB", "--iters", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = list(record.read(results))
    validate(rec)
    assert rec["mode"] == "allreduce" and rec["status"] == "ok"
    assert (rec["nnodes"], rec["world_size"]) == (2, 2)
    assert rec["env"]["image_id"].startswith("sha256:")
    assert [row["size_bytes"] for row in rec["sizes"]] == [2**k for k in range(10, 17)]
    assert all(row["wrong"] == 0 and row["busbw_GBps"] > 0 for row in rec["sizes"])
    assert bench_containers() == []


def test_ssh_refuses_an_unknown_host_key_before_starting(loopback_sshd, tmp_path):
    results = tmp_path / "runs.jsonl"
    proc = run_matrix("--launcher", "ssh", "--hosts", HOSTS, "--runtime", "native",
                      "--ssh-config", str(loopback_sshd / "ssh_config_unknown_keys"),
                      "--topologies", "2x1", "--results", str(results), *WORKLOAD,
                      timeout=120)
    assert proc.returncode == 2
    assert "Host key verification failed" in proc.stderr
    assert not results.exists()


def test_uneven_nodes_over_ssh(loopback_sshd, tmp_path):
    """The lab's own cluster shape, 1+2: one process on the first host, two on the second;
    global ranks contiguous per node, and the table counts the devices."""
    results = tmp_path / "runs.jsonl"
    proc = run_matrix("--launcher", "ssh", "--hosts", HOSTS, "--runtime", "native",
                      "--ssh-config", str(loopback_sshd / "ssh_config"), "--topologies", "1+2",
                      "--batch-sizes", "8", "--results", str(results), *WORKLOAD)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = list(record.read(results))
    validate(rec)
    assert rec["status"] == "ok" and rec["world_size"] == 3 and rec["nnodes"] == 2
    assert rec["procs_per_node"] == [1, 2] and rec["matrix"]["topology"] == "1+2"
    assert_breakdown(rec)
    assert [(r["rank"], r["node_rank"]) for r in rec["env"]["ranks"]] == [(0, 0), (1, 1), (2, 1)]
    assert rec["global_batch_size"] == 3 * 8
