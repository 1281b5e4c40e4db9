"""Each benchmark cell is timed long enough: bench.host.timed_window picks the steps from the
workload's step as the sweeps' lockstep probe just measured it, for the accuracy benchmark
(scripts/prediction_accuracy.py) and make bench-emulated alike."""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import math
import statistics
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import record
from bench.config import ModelConfig
from bench.host import timed_window
from bench.host.timed_window import timed_steps
from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "prediction_accuracy.py"
# Sweeps whose lockstep probe timed smallcnn at batch 64: 58-67 ms a step.
SWEEPS = REPO / "results" / "reference" / "accuracy-grid-3" / "smallcnn-b64-1gbit" \
    / "1gbit-comm.jsonl"
SMALLCNN = timed_window.workload(ModelConfig(model="smallcnn"), 64)   # at its own 28 px


def _sweeps(*steps_s: float, **probe) -> list[dict]:
    base = list(record.load(SWEEPS, "sweeps"))[0]
    found = []
    for seconds in steps_s:
        sweep = copy.deepcopy(base)
        sweep["lockstep_workload"] |= {"compute_s": seconds, **probe}
        found.append(sweep)
    return found


def test_a_short_step_is_timed_for_at_least_min_timed_s():
    steps, why = timed_steps(_sweeps(0.030, 0.024, 0.020), SMALLCNN, 20, 5.0)
    assert steps == math.ceil(5.0 / 0.024)            # the median step, not the last
    assert "24.0 ms" in why and "--min-timed-s 5" in why


def test_an_even_count_of_probes_takes_the_middle_two():
    assert timed_steps(_sweeps(0.010, 0.030), SMALLCNN, 20, 5.0)[0] == 250   # 20 ms


def test_a_long_step_keeps_steps_as_given():
    steps, why = timed_steps(_sweeps(0.4, 0.6, 0.5), SMALLCNN, 20, 5.0)
    assert steps == 20 and why.startswith("--steps; at 500.0 ms") and "10.0 s" in why


def test_the_measured_sweeps_of_smallcnn_at_batch_64_ask_for_81_steps():
    # 58, 62 and 67 ms a step: 20 of them last 1.2 s; 81 of the median 62.2 ms last 5 s.
    steps, why = timed_steps(list(record.load(SWEEPS, "sweeps")), SMALLCNN, 20, 5.0)
    assert steps == 81 and "62.2 ms" in why and "1.24 s" in why


def _mlp(width: int, depth: int) -> tuple:
    return timed_window.workload(ModelConfig(model="mlp", mlp_width=width, mlp_depth=depth), 64)


def test_the_probe_of_another_workload_or_none_leaves_steps_as_given():
    other = _sweeps(0.001, model="mlp", mlp_width=512, mlp_depth=8)
    assert timed_steps(other, _mlp(1024, 8), 20, 5.0)[0] == 20
    assert timed_steps(other, SMALLCNN, 20, 5.0)[0] == 20
    assert timed_steps(other, _mlp(512, 8), 20, 5.0)[0] == 5000
    steps, why = timed_steps([], SMALLCNN, 20, 5.0)
    assert steps == 20 and "no sweep timed" in why
    assert timed_steps(_sweeps(0.001), SMALLCNN, 20, 0) == (20, "--steps (--min-timed-s 0)")


# Steps from 0.1 ms to 10 s, the range where the window, not a bound, decides.
@given(st.lists(st.floats(1e-4, 10), min_size=1, max_size=6), st.integers(1, 1000),
       st.floats(0.001, 3600))
def test_the_steps_are_the_fewest_that_last_min_timed_s_and_at_least_steps(steps_s, steps,
                                                                          min_timed_s):
    chosen, why = timed_steps(_sweeps(*steps_s), SMALLCNN, steps, min_timed_s)
    median = statistics.median(steps_s)
    assert steps <= chosen <= max(steps, timed_window.MAX_STEPS) and why
    if chosen < timed_window.MAX_STEPS:
        assert chosen * median >= min_timed_s * (1 - 1e-9)
    # The fewest: one step less would not last long enough, or --steps asked for as many.
    assert chosen == steps or (chosen - 1) * median < min_timed_s * (1 + 1e-9)


def test_a_window_past_the_most_steps_says_how_long_those_last():
    steps, why = timed_steps(_sweeps(0.001), SMALLCNN, 20, 3600)
    assert steps == timed_window.MAX_STEPS
    assert "100,000 steps a cell may time, which last 100.0 s" in why


def test_the_key_is_the_one_the_probe_carries():
    from bench.analysis.prediction import probe_key

    # The MLP's shape counts for the MLP alone; the image size as the trainer resolves it.
    assert timed_window.workload(ModelConfig(model="smallcnn", mlp_width=512), 64) == SMALLCNN
    sweeps = list(record.load(SWEEPS, "sweeps"))
    assert {probe_key(s["lockstep_workload"]) for s in sweeps} == {SMALLCNN}
    # The probe ran smallcnn at 28 px: another size is another workload.
    at_32 = timed_window.workload(ModelConfig(model="smallcnn", image_size=32), 64)
    assert timed_steps(sweeps, at_32, 20, 5.0)[0] == 20


def _script():
    spec = importlib.util.spec_from_file_location("prediction_accuracy", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_accuracy_benchmark_passes_the_chosen_steps_to_every_cell(tmp_path, monkeypatch):
    script, ran = _script(), []
    sweep = _sweeps(0.010)[0]

    def run(argv):
        ran.append(argv)
        if "allreduce" in argv:    # the sweep writes its record, as bench matrix would
            path = argv[argv.index("--results") + 1]
            with open(path, "a") as out:
                out.write(json.dumps(sweep) + "\n")

    monkeypatch.setattr(script, "_run", run)
    flags = argparse.Namespace(model="smallcnn", batch_size=64, mlp_width=1024, mlp_depth=4,
                               steps=20, min_timed_s=5.0, hooks="none,powersgd", repeats=1,
                               image_size=None, max_size="1MiB", host_cpus=None)
    script.measure("1gbit", tmp_path, [2], flags)
    training = ran[-1]
    assert "allreduce" not in training
    assert training[training.index("--steps") + 1] == "500"      # 5 s of 10 ms steps
    assert training[training.index("--comm-probe-steps") + 1] == "500"   # and the probe


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "3601", "x"])
def test_the_accuracy_benchmark_refuses_a_bad_min_timed_s_in_one_line(tmp_path, value):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--links", "1gbit", "--out", str(out),
                           "--min-timed-s", value], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--min-timed-s" in lines[0], lines
    assert not out.exists()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.host.timed_window", *args],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=60, cwd=REPO)


# The count the measured sweeps ask for at the default --min-timed-s (15 s: 242 of the
# median 62.2 ms step; at 5 s, 81).
DEFAULT_COUNT = timed_steps(list(record.load(SWEEPS, "sweeps")), SMALLCNN, 20,
                            timed_window.DEFAULT_MIN_TIMED_S)[0]


def test_the_command_prints_the_count_alone_and_why_on_stderr():
    assert DEFAULT_COUNT == 242
    proc = _cli(str(SWEEPS), "--model", "smallcnn", "--batch-size", "64")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "242\n" and "timing 242 steps a cell" in proc.stderr
    proc = _cli(str(SWEEPS), "--model", "smallcnn", "--batch-size", "64", "--min-timed-s", "5")
    assert proc.stdout == "81\n"
    proc = _cli(str(SWEEPS), "--model", "smallcnn", "--batch-size", "64", "--steps", "300")
    assert proc.stdout == "300\n"


@pytest.mark.parametrize("args, setting", [
    (["--steps", "0"], "--steps"), (["--steps", "100001"], "--steps"),
    (["--min-timed-s", "nan"], "--min-timed-s"), (["--min-timed-s", "-0.5"], "--min-timed-s"),
    (["--batch-size", "x"], "--batch-size"), (["--batch-size", "0"], "--batch-size"),
    (["--mlp-width", "-3"], "--mlp-width"), (["--model", "vgg99"], "--model"),
    (["--image-size", "4"], "--image-size"), (["--model", "resnet18", "--image-size", "16"],
                                              "--image-size"),
])
def test_the_command_refuses_a_bad_value_in_one_line(args, setting):
    proc = _cli(str(SWEEPS), "--model", "smallcnn", "--batch-size", "64", *args)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and setting in lines[0], lines


def test_the_command_names_a_missing_sweeps_file(tmp_path):
    proc = _cli(str(tmp_path / "none.jsonl"), "--model", "smallcnn", "--batch-size", "64")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "none.jsonl" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_check_only_checks_the_values_without_a_sweeps_file():
    ok = _cli("--check-only", "--model", "resnet18", "--batch-size", "16")
    assert ok.returncode == 0 and ok.stdout == "", ok.stderr
    bad = _cli("--check-only", "--model", "resnet18", "--batch-size", "16", "--min-timed-s",
               "1e9")
    assert bad.returncode == 2 and "--min-timed-s" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    both = _cli("--check-only", str(SWEEPS), "--model", "resnet18", "--batch-size", "16")
    assert both.returncode == 2 and "--check-only reads no sweeps" in both.stderr
    none = _cli("--model", "resnet18", "--batch-size", "16")
    assert none.returncode == 2 and "SWEEPS" in none.stderr and none.stdout == ""


def test_the_command_compares_the_image_size_the_trainer_resolves():
    # smallcnn's own 28 px, given or not; the probe ran at 28.
    for extra in ([], ["--image-size", "28"]):
        assert _cli(str(SWEEPS), "--model", "smallcnn", "--batch-size", "64", *extra).stdout \
            == f"{DEFAULT_COUNT}\n"
    assert _cli(str(SWEEPS), "--model", "smallcnn", "--batch-size", "64", "--image-size",
                "32").stdout == "20\n"
