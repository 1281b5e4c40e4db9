"""Nodes simulated on one host each get their own GPUs; too many are refused up front."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.host import gpus
from bench.host.launchers.base import JobSpec
from bench.host.launchers.native import NativeLauncher, NativeOptions
from bench.options import ConfigError
from bench.topology import Topology
from conftest import REPO


@pytest.mark.parametrize("topology,visible,expected", [
    ((1, 1), ["0"], ["0"]),
    ((2, 1), ["0", "1"], ["0", "1"]),
    ((1, 2), ["0", "1"], ["0,1"]),
    ((2, 2), ["0", "1", "2", "3"], ["0,1", "2,3"]),
    ((2, 1), ["2", "3", "5"], ["2", "3"]),              # a CUDA_VISIBLE_DEVICES subset
])
def test_each_node_gets_its_own_block(topology, visible, expected):
    assert gpus.assign(Topology(*topology), visible) == expected


def test_a_topology_needing_more_gpus_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"--topologies=2x1: needs 2 GPUs .* which has 1"):
        gpus.assign(Topology(2, 1), ["0"])


def fake_nvidia_smi(tmp_path, count: int) -> str:
    """A PATH whose nvidia-smi lists ``count`` GPUs."""
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    lines = "\\n".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})" for i in range(count))
    tool.write_text(f"#!/bin/sh\nprintf '{lines}\\n'\n")
    tool.chmod(0o755)
    return f"{tool.parent}:{os.environ['PATH']}"


def test_visible_gpus_follow_cuda_visible_devices_then_nvidia_smi(tmp_path, monkeypatch):
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "1,3"}) == ["1", "3"]
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    monkeypatch.setenv("PATH", fake_nvidia_smi(tmp_path, 2))
    assert gpus.visible_gpus({}) == ["0", "1"]


@pytest.mark.parametrize("args,visible,expected", [
    ([], ["0"], True), ([], [], False), (["--device", "cpu"], ["0"], False),
    (["--device=cuda"], [], True), (["--steps", "1", "--device", "cuda"], ["0"], True),
])
def test_wants_gpus(args, visible, expected):
    assert gpus.wants_gpus(args, visible) is expected


def _job(args: tuple[str, ...], tmp_path) -> JobSpec:
    return JobSpec(job_id="j", module="bench.rank.train", workload_args=args,
                   topology=Topology(2, 2), master_port=29500, rdzv_timeout=60,
                   results=tmp_path / "r.jsonl", log_dir=tmp_path, deadline_s=60)


def test_native_nodes_get_their_own_cuda_visible_devices(tmp_path):
    launcher = NativeLauncher(NativeOptions(visible_gpus=("0", "1", "2", "3")))
    placed = launcher.commands(_job(("--steps", "1"), tmp_path))
    assert [c.env["CUDA_VISIBLE_DEVICES"] for c in placed] == ["0,1", "2,3"]
    assert all(c.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" for c in placed)
    on_cpu = NativeLauncher(NativeOptions(visible_gpus=("0",)))
    assert all(c.env is None for c in on_cpu.commands(_job(("--device", "cpu"), tmp_path)))


def test_the_matrix_refuses_before_starting_a_cell_this_host_cannot_hold(tmp_path):
    env = {**os.environ, "PATH": fake_nvidia_smi(tmp_path, 2), "PYTHONPATH": str(REPO)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "matrix", "--topologies", "1x1,2x2", "--results",
         str(tmp_path / "runs.jsonl"), "--", "--steps", "1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "bench matrix: error: --topologies=2x2: needs 4 GPUs on this host (2 node(s) x 2), "
        "which has 2: use fewer, or run the nodes on their own hosts (--launcher ssh)"]
    assert not (tmp_path / "runs.jsonl").exists()


def test_simulated_nodes_on_one_gpu_host_get_a_host_identity_each(tmp_path, monkeypatch):
    """NCCL groups ranks into nodes by host identity: two nodes simulated on one GPU host
    would be joined over NVLink or shared memory as one node. Each node's ranks take an
    NCCL_HOSTID of their own (the same for every rank of a node); a node that is not
    simulated, and a user's own NCCL_HOSTID, are left alone."""
    from bench.rank import distributed
    launcher = NativeLauncher(NativeOptions(visible_gpus=("0", "1", "2", "3")))
    placed = launcher.commands(_job(("--steps", "1"), tmp_path))
    identities = {}
    for command in placed:
        for local_rank in range(2):
            for name, value in command.env.items():
                monkeypatch.setenv(name, value)
            monkeypatch.setenv("TORCHELASTIC_RUN_ID", "j")
            monkeypatch.setenv("LOCAL_RANK", str(local_rank))
            monkeypatch.delenv("NCCL_HOSTID", raising=False)
            distributed.separate_simulated_nodes(command.rank)
            identities.setdefault(command.rank, set()).add(os.environ["NCCL_HOSTID"])
    assert identities == {0: {"bench-j-node0"}, 1: {"bench-j-node1"}}
    monkeypatch.setenv("NCCL_HOSTID", "lab-own")
    distributed.separate_simulated_nodes(1)
    assert os.environ["NCCL_HOSTID"] == "lab-own"
    monkeypatch.delenv("NCCL_HOSTID")
    monkeypatch.delenv("BENCH_GPUS")   # a node on a host of its own
    distributed.separate_simulated_nodes(1)
    assert "NCCL_HOSTID" not in os.environ
