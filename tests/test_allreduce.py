"""The all-reduce benchmark: size sweep, nccl-tests arithmetic, and the correctness check."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from bench.options import ConfigError
from bench.rank import allreduce, compute_probe
from bench.rank.allreduce import AllreduceConfig, bandwidths, bus_factor, message_sizes
from tests.conftest import REPO, free_port, launch, validate


def test_sizes_double_from_min_to_max():
    sizes = message_sizes(1024, 512 * 2**20)
    assert len(sizes) == 20 and sizes[0] == 1024 and sizes[-1] == 512 * 2**20
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:], strict=False))
    assert message_sizes(1000, 7000) == (1000, 2000, 4000)   # never above the maximum


def test_default_maximum_is_512MiB_on_gpu_and_smaller_on_cpu():
    cfg = AllreduceConfig(device="cpu")
    assert cfg.sizes[0] == 1024 and cfg.sizes[-1] == 64 * 2**20
    assert allreduce.DEFAULT_MAX_SIZE["cuda"] == "512MiB"


def test_busbw_against_hand_computed_values():
    # nccl-tests: busbw = algbw * 2(n-1)/n
    assert bus_factor(2) == 1.0
    assert bus_factor(4) == 1.5
    assert bus_factor(8) == 1.75
    algbw, busbw = bandwidths(1_000_000_000, 2.0, 4)   # 1 GB in 2 s over 4 ranks
    assert (algbw, busbw) == (0.5, 0.75)
    algbw, busbw = bandwidths(64 * 2**20, 0.5, 3)      # 67108864 B / 0.5 s = 0.134217728 GB/s
    assert algbw == pytest.approx(0.134217728)
    assert busbw == pytest.approx(0.134217728 * 4 / 3)


def test_one_rank_has_no_bandwidth():
    """With one rank nothing crosses a link: size / time is a memory copy's rate (10.9 TB/s
    on an H100), so neither figure is given."""
    assert bandwidths(16 * 2**20, 3e-5, 1) == (None, None)
    row = {"size_bytes": 1024, "count": 256, "time_s": 1e-5, "algbw_GBps": None,
           "busbw_GBps": None, "wrong": 0}
    text = allreduce._row_text(row)
    assert text.split()[-4:] == ["n/a", "n/a", "n/a", "0"]
    assert allreduce.summarize([row])["busbw_peak_GBps"] is None
    assert allreduce.headline({"world_size": 1, "busbw_peak_GBps": None}).startswith(
        "one rank: no bandwidth")


def test_a_one_rank_sweep_records_null_bandwidths(tmp_path):
    results = tmp_path / "comm.jsonl"
    run = launch(["--device", "cpu", "--max-size", "4KiB", "--iters", "2",
                  "--warmup-iters", "1"], results, torchrun=False,
                 module="bench.rank.allreduce")
    assert run.returncode == 0, run.stderr
    (rec,) = run.records
    validate(rec)
    assert rec["status"] == "ok" and rec["world_size"] == 1
    assert all(row["algbw_GBps"] is None and row["busbw_GBps"] is None and row["wrong"] == 0
               for row in rec["sizes"])
    assert rec["busbw_peak_GBps"] is None and rec["busbw_largest_GBps"] is None
    assert "n/a" in run.stderr and "one rank: no bandwidth" in run.stderr


def test_expected_sum_by_hand():
    # rank r holds (i + 3r) % 8: element 0 is 0, 3, 6 on three ranks; element 5 is 5, 0, 3.
    total = allreduce.expected_sum(8, 3, torch.float32, torch.device("cpu"))
    assert total[0] == 9 and total[5] == 8
    ranks = [allreduce.pattern(8, r, torch.float32, torch.device("cpu")) for r in range(3)]
    assert torch.equal(sum(ranks), total)


@pytest.mark.parametrize("dtype", list(allreduce.DTYPES))
def test_a_corrupted_element_is_found(dtype):
    expected = allreduce.expected_sum(4096, 32, allreduce.DTYPES[dtype], torch.device("cpu"))
    assert allreduce.find_wrong(expected.clone(), expected) == (0, None)
    corrupted = expected.clone()
    corrupted[1234] += 1
    count, where = allreduce.find_wrong(corrupted, expected)
    assert count == 1 and "index 1234" in where


@pytest.mark.parametrize("argv, flag", [
    (["--min-size", "4KiB", "--max-size", "1KiB"], "--max-size"),
    (["--max-size", "12 parsecs"], "--max-size"),
    (["--iters", "0"], "--iters"),
    (["--min-size", "1", "--dtype", "float32"], "--min-size"),
])
def test_bad_settings_are_one_line_and_exit_2(argv, flag, tmp_path):
    with pytest.raises(ConfigError, match=flag):
        AllreduceConfig.from_args([*argv, "--device", "cpu"])
    proc = subprocess.run([sys.executable, "-m", "bench", "allreduce", *argv,
                           "--results", str(tmp_path / "r.jsonl")], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert flag in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.jsonl").exists()


def test_two_rank_sweep_records_checked_sizes(tmp_path):
    results = tmp_path / "comm.jsonl"
    run = launch(["--max-size", "1MiB", "--iters", "3", "--warmup-iters", "1"], results,
                 nproc=2, module="bench.rank.allreduce")
    assert run.returncode == 0, run.stderr
    (rec,) = run.records
    validate(rec)
    assert rec["mode"] == "allreduce" and rec["status"] == "ok" and rec["world_size"] == 2
    assert [row["size_bytes"] for row in rec["sizes"]] == list(message_sizes(1024, 2**20))
    for row in rec["sizes"]:
        assert row["wrong"] == 0
        assert row["algbw_GBps"] == pytest.approx(row["size_bytes"] / row["time_s"] / 1e9)
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"])   # n = 2: factor 1
    assert "busbw GB/s" in run.stderr


def test_a_corrupted_result_fails_the_command(tmp_path):
    results = tmp_path / "comm.jsonl"
    script = REPO / "tests" / "helpers" / "corrupting_allreduce.py"
    env = {**os.environ, "PYTHONPATH": str(REPO), "GLOO_SOCKET_IFNAME": "lo",
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
         "--log-dir", str(tmp_path / "torchelastic"), str(script), "--max-size", "4KiB",
         "--iters", "2", "--warmup-iters", "0",
         "--results", str(results)], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=120)
    assert proc.returncode != 0
    from bench import record

    (rec,) = list(record.read(results))
    validate(rec)
    assert rec["status"] == "wrong_result"
    assert "rank(s) 1" in rec["error"] and "index 5" in rec["error"], rec["error"]
    assert "expected" in rec["error"]


def test_pieces_done_count_the_one_under_way():
    stamps = [1.0, 2.0, 4.0]          # pieces done at 1, 2 and 4 s
    assert compute_probe.pieces_done_by(stamps, 0.5) == 0
    assert compute_probe.pieces_done_by(stamps, 2.0) == 2
    assert compute_probe.pieces_done_by(stamps, 3.0) == pytest.approx(2.5)   # half the third
    assert compute_probe.pieces_done_by(stamps, 9.0) == 3


def test_a_stretch_is_sized_from_the_typical_piece_not_the_preempted_ones():
    # Pieces of 5 ms, a third of them preempted to 60 ms: a mean would read 23 ms and size
    # every stretch at a fifth of its length.
    timings = iter([0.005, 0.06, 0.005] * compute_probe.CALIBRATION_PIECES)
    asked = []

    def compute(pieces):
        asked.append(pieces)
        return next(timings)

    assert compute_probe.typical_piece_s(compute) == 0.005
    assert asked == [1] * compute_probe.CALIBRATION_PIECES


def test_the_compute_lost_is_the_rate_missing_against_alone():
    # Alone 100 pieces a second; beside, 60 in one second: 40% of 2 threads' second lost.
    assert compute_probe.compute_lost_s(30, 0.3, 60, 1.0, threads=2) == pytest.approx(0.8)
    # Faster beside than alone is noise, not a gain; nothing done is all of it.
    assert compute_probe.compute_lost_s(30, 0.3, 200, 1.0, threads=1) == 0
    assert compute_probe.compute_lost_s(30, 0.3, 0, 0.5, threads=1) == pytest.approx(0.5)
    assert compute_probe.compute_lost_s(0, 0.3, 5, 0.5, threads=1) == 0


@pytest.mark.parametrize("flag", ["--beside-compute", "--lockstep"])
def test_the_compute_probes_are_refused_off_the_cpu(monkeypatch, flag, tmp_path):
    import bench.allreduce_config as config

    monkeypatch.setattr(config, "resolve_device", lambda device, backend: ("cuda", "nccl"))
    with pytest.raises(ConfigError, match=f"{flag}.*--device cpu"):
        AllreduceConfig.from_args([flag, "--results", str(tmp_path / "r.jsonl")])


@pytest.mark.parametrize("flags, words", [
    (["--lockstep-model", "mlp"], "--lockstep-model=mlp: goes with --lockstep"),
    (["--lockstep", "--lockstep-model", "resnet18", "--lockstep-image-size", "16"],
     "--lockstep-image-size=16: resnets downsample 32x"),
    (["--lockstep", "--lockstep-model", "mlp", "--lockstep-mlp-depth", "0"],
     "--lockstep-mlp-depth=0"),
    (["--lockstep", "--lockstep-model", "mlp", "--lockstep-batch-size", "0"],
     "--lockstep-batch-size=0"),
    (["--lockstep", "--lockstep-model", "mlp", "--lockstep-phase-pairs", "65"],
     "--lockstep-phase-pairs=65"),
    (["--lockstep", "--lockstep-model", "mlp", "--lockstep-phase-pairs", "-1"],
     "--lockstep-phase-pairs=-1")])
def test_a_lockstep_workload_is_checked_before_anything_starts(flags, words, tmp_path):
    with pytest.raises(ConfigError) as caught:
        AllreduceConfig.from_args([*flags, "--device", "cpu",
                                   "--results", str(tmp_path / "r.jsonl")])
    assert str(caught.value).startswith(words), caught.value


def test_a_sweep_beside_compute_and_in_lockstep_records_what_compute_meets(tmp_path):
    results = tmp_path / "comm.jsonl"
    run = launch(["--device", "cpu", "--max-size", "4MiB", "--min-size", "1MiB",
                  "--iters", "5", "--warmup-iters", "1", "--beside-compute", "--lockstep",
                  "--lockstep-model", "mlp", "--lockstep-mlp-width", "64",
                  "--lockstep-mlp-depth", "2", "--lockstep-batch-size", "8",
                  "--lockstep-phase-pairs", "2"],
                 results, nproc=2, module="bench.rank.allreduce")
    assert run.returncode == 0, run.stderr
    (rec,) = run.records
    validate(rec)
    assert rec["config"]["beside_compute"] is True and rec["config"]["lockstep"] is True
    # Lockstep: one row per stretch, its wait at least none. How near each stretch's time
    # is to its length depends on what else the CPUs do (the work is counted from a
    # calibration); a stretch with 16 times the work of another takes longer. Preemption
    # only lengthens a stretch, and the calibration's median ignores it: a stretch of 40 ms
    # and more runs at least a sixth of its length (a calibration that shrank every
    # stretch, as a mean over a preempted piece did, read 0.28 of 10 ms in CI).
    steps = rec["lockstep"]
    assert [row["syncs"] for row in steps] == [n for _, n in compute_probe.LOCKSTEP_STRETCHES]
    lengths = [stretch for stretch, _ in compute_probe.LOCKSTEP_STRETCHES]
    assert lengths[2] / lengths[0] == lengths[4] / lengths[1] == 16
    assert 0 < steps[0]["compute_s"] < steps[2]["compute_s"]
    assert steps[1]["compute_s"] < steps[4]["compute_s"]
    for row, length in zip(steps, lengths, strict=True):
        assert row["compute_s"] > (length / 6 if length >= 0.04 else 0) and row["wait_s"] >= 0
        # The last rank's sync: a one-element all-reduce over loopback, under a second.
        assert 0 < row["sync_call_s"] < 1
    # The workload's own steps in lockstep: the mlp as the trainer shapes it (28 px).
    workload = rec["lockstep_workload"]
    assert {k: workload[k] for k in ("model", "image_size", "batch_size", "mlp_width",
                                     "mlp_depth", "syncs")} == \
        {"model": "mlp", "image_size": 28, "batch_size": 8, "mlp_width": 64, "mlp_depth": 2,
         "syncs": compute_probe.WORKLOAD_STEPS}
    assert 0 < workload["compute_s"] < 1 and workload["wait_s"] >= 0
    assert 0 < workload["sync_call_s"] < 1
    # Two pairs of blocks, each [in phase, out of phase]: median steps, each a step's time
    # (not a bound against compute_s: a mean over 25 steps takes in any preemption whole).
    assert len(workload["phase_pairs"]) == 2
    for pair in workload["phase_pairs"]:
        assert len(pair) == 2 and all(0 < s < 1 for s in pair)
    # And the same blocks' optimizer part, a share of each step's.
    assert len(workload["optimizer_phase_pairs"]) == 2
    for pair, step in zip(workload["optimizer_phase_pairs"], workload["phase_pairs"],
                          strict=True):
        assert len(pair) == 2 and all(0 < s < whole for s, whole in zip(pair, step,
                                                                         strict=True))
    for row in rec["sizes"]:
        beside = row["beside_compute"]
        # At most every thread's whole time lost (the launcher gives each rank 1 thread).
        assert beside["time_s"] > 0 and 0 <= beside["compute_lost_s"] <= beside["time_s"]
        # Each of the five calls timed, the slowest rank's: the top decile of five is at
        # least their mean, and no call took longer than a rank's five together.
        cuts = beside["time_deciles_s"]
        assert len(cuts) == 9 and cuts == sorted(cuts)
        assert 0 < cuts[0] and beside["time_s"] <= cuts[-1] * (1 + 1e-9)
        assert cuts[-1] <= 5 * beside["time_s"] * (1 + 1e-9)
    # Two ranks on this machine's CPUs, each with a compute thread: gloo's work takes some.
    assert sum(row["beside_compute"]["compute_lost_s"] for row in rec["sizes"]) > 0
    # Without the flag the rows have none, as before.
    run = launch(["--device", "cpu", "--max-size", "1KiB", "--iters", "1",
                  "--warmup-iters", "0"], results, nproc=2, module="bench.rank.allreduce")
    assert run.returncode == 0 and "beside_compute" not in run.records[-1]["sizes"][0]
    assert "lockstep" not in run.records[-1] and "lockstep_workload" not in run.records[-1]


def test_in_lockstep_reads_each_sync_from_the_rank_that_came_last(monkeypatch):
    """Per sync, the rank whose stretch was the longest came last and found its peers
    waiting: its all-reduce is the call's own cost; a waiting peer's holds the wait."""
    ranks = [[(0.010, 0.0050), (0.030, 0.0004)],   # rank 0: fast then slow
             [(0.012, 0.0007), (0.020, 0.0110)]]   # rank 1: slow then fast
    monkeypatch.setattr(compute_probe.distributed, "all_gather_objects",
                        lambda ctx, obj: ranks)
    row = compute_probe.in_lockstep(None, [], [])
    assert row["sync_call_s"] == pytest.approx((0.0007 + 0.0004) / 2)
    assert row["wait_s"] == pytest.approx((0.001 + 0.005) / 2)
    assert row["compute_s"] == pytest.approx(0.018)
