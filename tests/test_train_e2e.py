"""The trainer as users run it: torchrun with 2 gloo processes, real data, real failures."""
from __future__ import annotations

import json
import time

import pytest
import torch
import torchvision

from bench import manifest
from bench.analysis import straggler
from bench.rank import train
from bench.rank.loop import Trainer
from conftest import dump, free_port, launch, validate

pytestmark = pytest.mark.e2e

SYNTHETIC = ["--steps", "4", "--warmup-steps", "1", "--model", "resnet18", "--image-size", "32",
             "--batch-size", "8", "--log-every", "2"]


def test_synthetic_steps_two_processes(tmp_path):
    result = launch(SYNTHETIC, tmp_path / "runs.jsonl", nproc=2)
    assert result.returncode == 0, dump(result)
    assert len(result.records) == 1, "only rank 0 writes"
    rec = result.records[0]
    assert result.printed == [rec], "the record is printed after the marker too"
    validate(rec)
    assert rec["status"] == "ok" and rec["mode"] == "steps"
    assert rec["world_size"] == 2 and rec["nproc_per_node"] == 2 and rec["nnodes"] == 1
    assert [r["rank"] for r in rec["env"]["ranks"]] == [0, 1]
    assert rec["global_batch_size"] == rec["batch_size_per_device"] * 2 == 16
    assert rec["samples_per_s"] == pytest.approx(rec["samples_per_s_per_device"] * 2)
    assert rec["samples_per_s"] == pytest.approx(
        rec["timed_steps"] * rec["global_batch_size"] / rec["train_time_s"])
    # fp32 gradients of every parameter, once per step, as DDP sent them.
    assert rec["grad_bytes_per_step"] == rec["param_count"] * 4
    # Timed with DDP's built-in all-reduce; bytes and timeline from the observed probe.
    assert rec["gradient_sync"] == "ddp_builtin"
    assert rec["bucket_timeline"]["steps"] == max(
        train.TRAFFIC_PROBE_STEPS, rec["config"]["schedule"]["comm_probe_steps"])
    assert rec["bucket_timeline"]["stamped_by"] == "host_clock"
    # DDP broadcasts resnet18's BatchNorm buffers before each forward: one call per dtype.
    buffers = list(torchvision.models.resnet18().buffers())
    assert sorted(rec["bucket_timeline"]["broadcast_bytes"]) == sorted(
        sum(b.numel() * b.element_size() for b in buffers if b.dtype == dtype)
        for dtype in (torch.float32, torch.int64))
    # No GPU: the telemetry is null with the reason, never a made-up value.
    assert rec["telemetry"] == {"source": None,
                                "reason": "not a GPU run: NVML telemetry samples CUDA devices"}
    steps = rec["step_time_s"]
    assert 0 < steps["p50"] <= steps["p90"] <= steps["max"]
    assert rec["timed_steps"] == 4 and len(rec["first_losses"]) == 5  # warm-up + timed
    assert rec["flops_per_sample"] > 0 and rec["mfu"] is None  # no peak for a CPU
    assert rec["peak_memory_kind"] == "max_rss" and rec["peak_memory_bytes"] > 0
    assert rec["env"]["malloc"]["policy"] == "keep"   # bench.rank.allocator, every rank
    assert 0 <= rec["data_wait_share"] < 0.5
    assert rec["env"]["comm_env"]["GLOO_SOCKET_IFNAME"] == "lo"
    assert all(k.startswith(("NCCL_", "GLOO_", "TORCH_NCCL_")) for k in rec["env"]["comm_env"])
    assert "step 2/4" in result.stderr, "progress is shown"


def test_fashion_mnist_epochs_two_processes_learns(tmp_path, staged_fashion_mnist):
    data_dir = staged_fashion_mnist / "fashion-mnist"   # staged: checked against its manifest
    args = ["--epochs", "2", "--data", "fashion-mnist", "--data-dir", str(data_dir),
            "--model", "smallcnn", "--batch-size", "32", "--lr", "0.05",
            "--max-train-samples", "4000", "--max-eval-samples", "1000", "--workers", "1",
            "--target-accuracy", "0.5"]
    result = launch(args, tmp_path / "runs.jsonl", nproc=2)
    assert result.returncode == 0, dump(result)
    rec = result.records[0]
    validate(rec)
    assert rec["mode"] == "epochs" and len(rec["epochs"]) == 2
    assert rec["dataset_manifest_sha256"] == manifest.sha256_file(
        data_dir / manifest.MANIFEST_NAME)
    assert rec["eval_accuracy"] > 0.5, "clearly above chance (10%)"
    assert rec["eval_accuracy"] == rec["epochs"][-1]["eval_accuracy"]
    assert rec["time_to_target_s"] is not None
    assert rec["time_to_target_s"] <= rec["total_time_s"]
    assert rec["total_time_s"] >= sum(e["train_s"] + e["eval_s"] for e in rec["epochs"]) * 0.99
    # 4000 samples / (32 x 2) = 62 full steps per epoch.
    assert rec["timed_steps"] == 2 * 62
    assert rec["env"]["comm_env"]["GLOO_SOCKET_IFNAME"] == "lo"  # torchrun adds TORCH_NCCL_*


def test_same_seed_same_first_losses(tmp_path):
    args = ["--steps", "3", "--warmup-steps", "0", "--model", "smallcnn", "--batch-size", "16",
            "--seed", "7"]
    first = launch(args, tmp_path / "a.jsonl", nproc=2)
    second = launch(args, tmp_path / "b.jsonl", nproc=2)
    other = launch(args[:-1] + ["8"], tmp_path / "c.jsonl", nproc=2)
    for result in (first, second, other):
        assert result.returncode == 0, dump(result)
    losses = [r.records[0]["first_losses"] for r in (first, second, other)]
    assert len(losses[0]) == 3
    assert losses[0] == losses[1]
    assert losses[0] != losses[2]


def test_oom_inside_a_step_writes_an_oom_record(tmp_path, monkeypatch, capsys):
    calls = {"n": 0}
    real_step = Trainer.step

    def step_then_oom(self, batches, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real_step(self, batches, **kwargs)

    monkeypatch.setattr(Trainer, "step", step_then_oom)
    results = tmp_path / "runs.jsonl"
    code = train.main(["--steps", "5", "--warmup-steps", "1", "--model", "smallcnn",
                       "--batch-size", "4", "--results", str(results)])
    assert code == 1
    err = capsys.readouterr().err
    assert "FAILED (oom)" in err and "out of memory" in err
    (rec,) = [json.loads(line) for line in results.read_text().splitlines()]
    validate(rec)
    assert rec["status"] == "oom" and "Tried to allocate" in rec["error"]
    assert rec["config"]["data"]["batch_size"] == 4 and rec["env"]["torch"]


def test_missing_peer_times_out_with_a_record(tmp_path):
    # Rank 0 of a 2-process job whose peer never comes: rendezvous must give up at --timeout.
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    started = time.monotonic()
    result = launch(["--steps", "2", "--model", "smallcnn", "--timeout", "5"],
                    tmp_path / "runs.jsonl", env=env, torchrun=False, timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode == 1, dump(result)
    rec = result.records[0]
    validate(rec)
    assert rec["status"] == "timeout", rec["error"]
    assert "FAILED (timeout)" in result.stderr
    assert elapsed < 60, f"took {elapsed:.0f}s: the timeout was not applied"


def test_grad_accum_syncs_once_per_optimizer_step(tmp_path):
    args = ["--steps", "3", "--warmup-steps", "1", "--model", "smallcnn", "--batch-size", "8",
            "--grad-accum", "3"]
    result = launch(args, tmp_path / "runs.jsonl", nproc=2)
    assert result.returncode == 0, dump(result)
    rec = result.records[0]
    assert rec["global_batch_size"] == 8 * 2 * 3
    # no_sync on two of three micro-batches: the gradients cross once per optimizer step.
    assert rec["grad_bytes_per_step"] == rec["param_count"] * 4
    # One all-reduce per bucket per optimizer step (DDP's 1 MiB first bucket and the rest:
    # two on smallcnn), not one per micro-batch.
    assert rec["allreduce_calls_per_step"] == len(rec["bucket_timeline"]["ready_s"]) == 2


def test_imagefolder_trains_and_evaluates(tmp_path):
    from PIL import Image

    root = tmp_path / "images"
    for split, count in (("train", 12), ("val", 4)):
        for label, colour in (("dark", 20), ("light", 230)):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                Image.new("RGB", (40, 30), (colour, colour - i, colour)).save(folder / f"{i}.png")
    manifest.write(root)
    results = tmp_path / "runs.jsonl"
    code = train.main(["--epochs", "2", "--data", "imagefolder", "--data-dir", str(root),
                       "--model", "smallcnn", "--image-size", "28", "--batch-size", "4",
                       "--workers", "1", "--lr", "0.05", "--results", str(results)])
    assert code == 0
    (rec,) = [json.loads(line) for line in results.read_text().splitlines()]
    validate(rec)
    assert rec["num_classes"] == 2 and rec["timed_steps"] == 2 * 6
    assert rec["eval_accuracy"] is not None and 0 <= rec["eval_accuracy"] <= 1


def test_one_process_trains_bare_and_still_counts_what_a_job_would_send(tmp_path,
                                                                       monkeypatch):
    """The 1-device row is every speedup's denominator: its timed steps run the bare model
    (no DDP), and a probe under one-rank DDP afterwards gives the bytes and timeline."""
    from torch.nn.parallel import DistributedDataParallel

    timed_models = []
    real_run_steps = train.run_steps

    def spying_run_steps(trainer, *args, **kwargs):
        timed_models.append(trainer.model)
        return real_run_steps(trainer, *args, **kwargs)

    monkeypatch.setattr(train, "run_steps", spying_run_steps)
    results = tmp_path / "runs.jsonl"
    code = train.main(["--steps", "3", "--warmup-steps", "1", "--model", "smallcnn",
                       "--batch-size", "8", "--comm-probe-steps", "4", "--log-every", "0",
                       "--results", str(results)])
    assert code == 0
    (rec,) = [json.loads(line) for line in results.read_text().splitlines()]
    validate(rec)
    assert len(timed_models) == 1 and not isinstance(timed_models[0], DistributedDataParallel)
    # Without a hook DDP all-reduces every fp32 gradient once per step.
    assert rec["grad_bytes_per_step"] == 4 * rec["param_count"]
    assert rec["bucket_timeline"]["steps"] == train.TRAFFIC_PROBE_STEPS
    assert rec["comm_share"] is None, "one process has no communication to expose"


def test_ctrl_c_records_the_interruption_and_exits_130(tmp_path):
    import signal
    import subprocess
    import sys

    from conftest import REPO, popen_taking_ctrl_c

    results = tmp_path / "runs.jsonl"
    proc = popen_taking_ctrl_c(
        [sys.executable, "-m", "bench", "train", "--device", "cpu", "--model", "mlp",
         "--mlp-width", "64", "--mlp-depth", "2", "--steps", "1000000", "--warmup-steps", "1",
         "--log-every", "20", "--results", str(results)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:   # into the timed steps
            if line.startswith("[bench] step"):
                break
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    (rec,) = [json.loads(line) for line in results.read_text().splitlines()]
    validate(rec)
    assert (rec["status"], rec["error"]) == ("error", "interrupted (Ctrl-C)")


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_every_rank_step_breakdown_adds_up(tmp_path, strategy):
    """Issue 26: each rank's parts explain its step to within 5%, the sync is split into
    wire and waiting (FSDP: its all-gathers and reduce-scatters), and two ranks that do
    the same work on one machine are not called stragglers without cause."""
    args = ["--steps", "12", "--warmup-steps", "2", "--model", "mlp", "--mlp-width", "512",
            "--mlp-depth", "4", "--batch-size", "16", "--log-every", "0",
            "--strategy", strategy]
    result = launch(args, tmp_path / "runs.jsonl", nproc=2)
    assert result.returncode == 0, dump(result)
    rec = result.records[0]
    validate(rec)
    found = rec["step_breakdown"]
    comm = ["all_gather", "reduce_scatter", "sync_wait"] if strategy == "fsdp" \
        else ["sync_wire", "sync_wait"]
    assert found["parts"] == ["data", "h2d", "forward", "backward", "optimizer", *comm]
    assert found["stamped_by"] == "host_clock" and found["strategy"] == strategy
    assert [row["rank"] for row in found["ranks"]] == [0, 1]
    for row in found["ranks"]:
        assert row["steps"] == 12 and row["node"] == 0 and row["host"]
        assert row["remainder_share"] <= 1e-6, row   # the step ends at its last part's end
        assert row["parts"]["forward"]["mean"] > 0 and row["parts"]["backward"]["mean"] > 0
        assert sum(p["mean"] for p in row["parts"].values()) == pytest.approx(
            row["parts_sum_s"])
    assert found["ranks"][0]["step_s"]["p50"] == pytest.approx(rec["step_time_s"]["p50"])
    assert rec["straggler_check"]["threshold_share"] == straggler.THRESHOLD_SHARE
    if rec["straggler"] is None:
        assert rec["straggler_check"]["note"].startswith("ranks agree")
    assert rec["link_probe"] is None and rec["without_slowest"] is None   # one node
