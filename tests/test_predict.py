"""The prediction formula against hand-computed cases, and the CLI around it."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.predict import Link, Timeline, levers, predict_step, scaling
from tests.conftest import REPO

GBIT = Link.nominal(1_000_000_000)          # 125e6 bytes/s, no latency


def test_one_bucket_cannot_hide():
    # Ready at 0.1 s, step ends 0.05 s after it; 125 MB at 125 MB/s over 2 nodes = 1 s.
    timeline = Timeline(ready_s=(0.1,), sent_bytes=(125e6,), step_s=0.15)
    p = predict_step(timeline, GBIT, 2)
    assert p.comm_s == pytest.approx(1.0)
    assert p.step_s == pytest.approx(0.1 + 1.0 + 0.05)
    assert p.exposed_s == pytest.approx(1.0) and p.hidden_share == pytest.approx(0.0)
    # 4 nodes: the ring moves 2(4-1)/4 = 1.5x the bytes.
    assert predict_step(timeline, GBIT, 4).step_s == pytest.approx(0.1 + 1.5 + 0.05)
    assert predict_step(timeline, GBIT, 1).step_s == pytest.approx(0.15)


def test_an_early_bucket_hides_behind_backward():
    # Bucket 0 (0.1 s of traffic) is ready at 0.1 s and done at 0.2 s, long before bucket 1
    # is ready at 0.5 s; bucket 1 then takes 0.1 s; the optimizer's 0.1 s follows.
    timeline = Timeline(ready_s=(0.1, 0.5), sent_bytes=(12.5e6, 12.5e6), step_s=0.6)
    p = predict_step(timeline, GBIT, 2)
    assert p.step_s == pytest.approx(0.7)
    assert p.comm_s == pytest.approx(0.2) and p.exposed_s == pytest.approx(0.1)
    assert p.hidden_share == pytest.approx(0.5)


def test_buckets_queue_behind_each_other():
    # Both ready at once: 0.1 s each, one after the other.
    timeline = Timeline(ready_s=(0.5, 0.5), sent_bytes=(12.5e6, 12.5e6), step_s=0.5)
    assert predict_step(timeline, GBIT, 2).step_s == pytest.approx(0.7)


def test_latency_is_paid_per_all_reduce():
    # PowerSGD: 3 all-reduces per bucket of 1 MB each: 3 x (10 ms + 1e6 / 125e6 s) = 54 ms.
    link = Link.nominal(1_000_000_000, latency_s=0.010)
    timeline = Timeline(ready_s=(0.2,), sent_bytes=(3e6,), step_s=0.2, calls_per_bucket=3)
    assert predict_step(timeline, link, 2).step_s == pytest.approx(0.2 + 0.054)


def test_speedup_and_efficiency():
    timeline = Timeline(ready_s=(0.1,), sent_bytes=(125e6,), step_s=0.15)
    s = scaling(timeline, GBIT, 2, samples_per_step_node=16)
    assert s.samples_per_s == pytest.approx(32 / 1.15)
    assert s.speedup == pytest.approx((32 / 1.15) / (16 / 0.15))
    assert s.efficiency == pytest.approx(s.speedup / 2)


def test_lever_timelines():
    timeline = Timeline(ready_s=(0.1, 0.4), sent_bytes=(10.0, 30.0), step_s=0.5)
    accumulated = timeline.accumulated(4)          # 3 more forward+backward of 0.4 s first
    assert accumulated.ready_s == pytest.approx((1.3, 1.6))
    assert accumulated.step_s == pytest.approx(1.7)
    doubled = timeline.scaled_batch(2)              # compute doubles, the 0.1 s tail does not
    assert doubled.ready_s == pytest.approx((0.2, 0.8)) and doubled.step_s == pytest.approx(0.9)
    assert timeline.compressed(0.5).sent_bytes == (5.0, 15.0)


def test_link_from_an_allreduce_record():
    rec = {"world_size": 2, "env": {"link": {"rate_bps": 10**9}},
           "sizes": [{"time_s": 0.002, "busbw_GBps": 0.0005},
                     {"time_s": 0.5, "busbw_GBps": 0.12}]}
    link = Link.from_allreduce(rec)
    assert link.latency_s == 0.002 and link.busbw_Bps == pytest.approx(0.12e9)
    assert link.rate_bps == 10**9


def _record(nnodes: int, hook: str, sent: float, samples_per_s: float) -> dict:
    return {"mode": "steps", "status": "ok", "nnodes": nnodes, "nproc_per_node": 1,
            "comm_hook": hook, "batch_size_per_device": 16, "global_batch_size": 16 * nnodes,
            "samples_per_s": samples_per_s, "allreduce_calls_per_step": 1,
            "env": {"link": {"rate": "1gbit", "rate_bps": 10**9, "kind": "emulated"}
                    if nnodes > 1 else None},
            "config": {"model": {"model": "resnet18", "image_size": 32},
                       "distributed": {"grad_accum": 1}, "precision": {"precision": "fp32"}},
            "bucket_timeline": {"ready_s": [0.1], "sent_bytes": [sent], "buffer_bytes": [1],
                                "step_s": 0.15, "steps": 5}}


def test_levers_name_compression_when_the_link_dominates():
    rec = _record(1, "none", 125e6, 100)
    ranked = levers(rec, GBIT, 2, {"powersgd": _record(1, "powersgd", 0.5e6, 100)})
    assert ranked[0][0] == "comm-hook powersgd"
    assert [name for name, _ in ranked][-1] == "as measured"


def test_cli_puts_the_measurement_beside_the_prediction(tmp_path):
    results = tmp_path / "runs.jsonl"
    # Predicted 2-node rate: 32 / 1.15 = 27.83 samples/s; measured 25.
    lines = [_record(1, "none", 125e6, 106.7), _record(2, "none", 125e6, 25.0)]
    results.write_text("".join(json.dumps(r) + "\n" for r in lines))
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(results),
                           "--link", "1gbit", "--nodes", "2"], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "1150.0" and cells[2] == "27.8"
    assert cells[7] == "25.0 (n=1)" and cells[8] == f"{25.0 / (32 / 1.15):.2f}"
    assert "most help:" in proc.stdout


def test_cli_without_a_single_node_run_is_a_user_error(tmp_path):
    results = tmp_path / "runs.jsonl"
    results.write_text(json.dumps(_record(2, "none", 1.0, 1.0)) + "\n")
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(results),
                           "--link", "1gbit"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "single-node" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(results),
                           "--link", "fast"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "--link=fast" in proc.stderr
