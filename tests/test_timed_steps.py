"""The accuracy benchmark times each cell long enough: scripts/prediction_accuracy.py picks
the steps from the workload's step as the sweeps' lockstep probe just measured it."""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import record
from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "prediction_accuracy.py"
# Sweeps whose lockstep probe timed smallcnn at batch 64: 58-67 ms a step.
SWEEPS = REPO / "results" / "reference" / "accuracy-grid-3" / "smallcnn-b64-1gbit" \
    / "1gbit-comm.jsonl"


def _script():
    spec = importlib.util.spec_from_file_location("prediction_accuracy", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _flags(**given) -> argparse.Namespace:
    flags = {"model": "smallcnn", "batch_size": 64, "mlp_width": 1024, "mlp_depth": 4,
             "steps": 20, "min_timed_s": 5.0}
    return argparse.Namespace(**{**flags, **given})


def _sweeps(*steps_s: float, **probe) -> list[dict]:
    base = list(record.load(SWEEPS, "sweeps"))[0]
    found = []
    for seconds in steps_s:
        sweep = copy.deepcopy(base)
        sweep["lockstep_workload"] |= {"compute_s": seconds, **probe}
        found.append(sweep)
    return found


def test_a_short_step_is_timed_for_at_least_min_timed_s():
    steps, why = _script().timed_steps(_sweeps(0.030, 0.024, 0.020), _flags())
    assert steps == math.ceil(5.0 / 0.024)            # the median step, not the last
    assert "24.0 ms" in why and "--min-timed-s 5" in why


def test_a_long_step_keeps_steps_as_given():
    steps, why = _script().timed_steps(_sweeps(0.4, 0.6, 0.5), _flags())
    assert steps == 20 and why.startswith("--steps; at 500.0 ms") and "10.0 s" in why


def test_the_measured_sweeps_of_smallcnn_at_batch_64_ask_for_81_steps():
    # 58, 62 and 67 ms a step: 20 of them last 1.2 s; 81 of the median 62.2 ms last 5 s.
    steps, why = _script().timed_steps(list(record.load(SWEEPS, "sweeps")), _flags())
    assert steps == 81 and "62.2 ms" in why and "1.24 s" in why


def test_the_probe_of_another_workload_or_none_leaves_steps_as_given():
    script = _script()
    other = _sweeps(0.001, model="mlp", mlp_width=512, mlp_depth=8)
    assert script.timed_steps(other, _flags(model="mlp"))[0] == 20      # width 1024 wanted
    assert script.timed_steps(other, _flags(model="resnet18"))[0] == 20
    steps, why = script.timed_steps([], _flags())
    assert steps == 20 and "no sweep timed" in why
    assert script.timed_steps(other, _flags(model="mlp", mlp_width=512, mlp_depth=8))[0] \
        == 5000
    assert script.timed_steps(_sweeps(0.001), _flags(min_timed_s=0)) == \
        (20, "--steps (--min-timed-s 0)")


@given(st.lists(st.floats(1e-9, 1e4), min_size=1, max_size=5), st.integers(1, 100_000),
       st.floats(0.001, 3600))
def test_the_steps_are_at_least_steps_and_last_min_timed_s_unless_capped(steps_s, steps,
                                                                        min_timed_s):
    script = _script()
    chosen, why = script.timed_steps(_sweeps(*steps_s), _flags(steps=steps,
                                                               min_timed_s=min_timed_s))
    median = sorted(steps_s)[len(steps_s) // 2] if len(steps_s) % 2 else None
    assert steps <= chosen <= max(steps, script.MAX_STEPS) and why
    if median is not None and chosen < script.MAX_STEPS:
        assert chosen * median >= min_timed_s * (1 - 1e-9)


def test_measure_passes_the_chosen_steps_to_every_cell(tmp_path, monkeypatch):
    script, ran = _script(), []
    sweep = _sweeps(0.010)[0]

    def run(argv):
        ran.append(argv)
        if "allreduce" in argv:    # the sweep writes its record, as bench matrix would
            path = argv[argv.index("--results") + 1]
            with open(path, "a") as out:
                out.write(json.dumps(sweep) + "\n")

    monkeypatch.setattr(script, "_run", run)
    flags = _flags(hooks="none,powersgd", repeats=1, image_size=None, max_size="1MiB")
    script.measure("1gbit", tmp_path, [2], flags)
    training = ran[-1]
    assert "allreduce" not in training
    assert training[training.index("--steps") + 1] == "500"      # 5 s of 10 ms steps


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "3601", "x"])
def test_a_bad_min_timed_s_is_one_line_and_exit_2(tmp_path, value):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--links", "1gbit", "--out", str(out),
                           "--min-timed-s", value], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--min-timed-s" in lines[0], lines
    assert not out.exists()
