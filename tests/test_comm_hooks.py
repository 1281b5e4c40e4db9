"""Gradient communication hooks: the bytes a step sends must reflect the compression.

The model is a small MLP whose gradient shapes are known, so every expected byte count is
computed here by hand from the layer sizes, not taken from the code under test.
"""
from __future__ import annotations

import pytest

from tests.conftest import launch, validate

# --model mlp --mlp-width 64 --mlp-depth 2 on 28x28 one-channel input, 10 classes:
# Linear(784, 64), Linear(64, 64), Linear(64, 10): weights (out, in) and biases (out).
WEIGHTS = [(64, 784), (64, 64), (10, 64)]
BIASES = [64, 64, 10]
PARAMS = sum(n * m for n, m in WEIGHTS) + sum(BIASES)          # 55,050 parameters
FP32_BYTES = 4 * PARAMS                                         # 220,200 bytes
MLP = ["--model", "mlp", "--mlp-width", "64", "--mlp-depth", "2", "--image-size", "28",
       "--num-classes", "10", "--batch-size", "8", "--steps", "3", "--warmup-steps", "3",
       "--comm-probe-steps", "2", "--device", "cpu"]


def powersgd_bytes(rank: int) -> int:
    """PowerSGD sends P (n x rank) and Q (m x rank) in fp32 for each n x m weight that
    compresses at least 2x ((n + m) * rank * 2 < n * m), and every other tensor whole."""
    sent = 4 * sum(BIASES)
    for n, m in WEIGHTS:
        sent += 4 * ((n + m) * rank if (n + m) * rank * 2 < n * m else n * m)
    return sent


def test_hand_computed_sizes():
    assert PARAMS == 55_050 and FP32_BYTES == 220_200
    assert powersgd_bytes(1) == 4 * (138 + 848 + 128 + 74)       # 4752 bytes
    # At rank 16 only the first weight compresses: (64 + 64) * 16 * 2 = 4096 is not below
    # 64 * 64, nor 74 * 16 * 2 below 640; those two go whole.
    assert powersgd_bytes(16) == 4 * (138 + 848 * 16 + 64 * 64 + 10 * 64)   # 73768 bytes


@pytest.mark.parametrize("hook, extra, expected", [
    ("none", [], FP32_BYTES),
    ("fp16", [], FP32_BYTES // 2),
    ("bf16", [], FP32_BYTES // 2),
    ("powersgd", ["--powersgd-rank", "1", "--powersgd-warmup", "2"], powersgd_bytes(1)),
    ("powersgd", ["--powersgd-rank", "16", "--powersgd-warmup", "2"], powersgd_bytes(16)),
])
def test_bytes_per_step_reflect_the_hook(tmp_path, hook, extra, expected):
    run = launch([*MLP, "--comm-hook", hook, *extra], tmp_path / "r.jsonl", nproc=2)
    assert run.returncode == 0, run.stderr
    (rec,) = run.records
    validate(rec)
    assert rec["param_count"] == PARAMS
    assert rec["comm_hook"] == hook
    assert rec["grad_bytes_per_step"] == expected
    timeline = rec["bucket_timeline"]
    assert sum(timeline["buffer_bytes"]) == FP32_BYTES      # DDP's buckets are always fp32
    assert sum(timeline["sent_bytes"]) == pytest.approx(expected)
    # Each bucket's all-reduce ends after it was handed over, and before the step does.
    assert len(timeline["done_s"]) == len(timeline["ready_s"])
    assert all(ready <= done <= timeline["step_s"]
               for ready, done in zip(timeline["ready_s"], timeline["done_s"], strict=True))
    # Each hook returned after its bucket was handed to it; PowerSGD on gloo is serialized.
    assert all(ready <= issued <= timeline["step_s"] for ready, issued
               in zip(timeline["ready_s"], timeline["issued_s"], strict=True))
    assert timeline["serialized"] is (hook == "powersgd")
    assert timeline["broadcast_bytes"] == [], "the MLP has no buffers to broadcast"
    assert rec["comm_probe_steps"] == 2 and rec["step_time_nosync_s"] > 0


def test_powersgd_warmup_must_be_covered_by_the_untimed_steps(tmp_path):
    run = launch([*MLP, "--comm-hook", "powersgd", "--powersgd-warmup", "5"],
                 tmp_path / "r.jsonl", torchrun=False)
    assert run.returncode == 2
    assert "--warmup-steps=3" in run.stderr and "--powersgd-warmup" in run.stderr
