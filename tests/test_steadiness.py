"""``bench steadiness`` (how far the CPUs drift by themselves) and what reads it back:
the analysis of its records and ``bench predict --steadiness``."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import record
from bench.analysis import steadiness
from bench.host import steadiness as host_steadiness
from tests.conftest import REPO

DEMO = REPO / "results" / "reference" / "demo-20261130-intel"
DEMO_RESULTS = DEMO / "emulated-5gbit-20261130T071605Z.jsonl"
DEMO_SWEEPS = DEMO / "emulated-5gbit-20261130T071605Z-comm.jsonl"


def row(cpu: int, rates: list[float], *, window_s: float = 5.0, status: str = "ok") -> dict:
    """A steadiness record as bench steadiness writes one (the env block left empty: the
    analysis reads none of it; the files below carry a real one)."""
    return {"schema_version": 1, "run_id": "r", "utc_time": "2026-11-30T09:00:00Z",
            "mode": "steadiness", "status": status, "error": None if status == "ok" else "x",
            "cpu": cpu, "seconds": window_s * max(len(rates), 2), "window_s": window_s,
            "rates": rates, "env": {}}


# --- the analysis ------------------------------------------------------------------------

def test_each_cpus_windows_are_pooled_over_runs_and_read_against_their_median():
    before, after = row(0, [100.0, 110.0, 90.0]), row(0, [64.0, 100.0])
    other = row(1, [100.0, 101.0, 99.0])
    found = steadiness.drifts([before, after, other])
    assert [(d.cpu, d.windows) for d in found] == [(0, 5), (1, 3)]
    cpu0 = found[0]
    assert (cpu0.low, cpu0.high) == (0.64, 1.1) and cpu0.beyond == pytest.approx(0.36)
    assert "CPU 0 0.64-1.10 of its median over 5-s windows" in steadiness.describe(found)
    note = steadiness.caveat(found)
    assert note and "CPU 0 ran 0.64-1.10" in note and "0.90-1.10" in note


def test_failed_runs_other_records_and_single_windows_are_left_out():
    found = steadiness.drifts([row(0, [1.0, 2.0], status="error"), row(1, [5.0]),
                               {"mode": "allreduce", "status": "ok"}])
    assert found == []
    assert steadiness.caveat(found) is None


def test_cpus_within_the_checked_band_need_no_caveat():
    found = steadiness.drifts([row(0, [100.0, 105.0, 96.0]), row(1, [50.0, 54.0, 47.0])])
    assert steadiness.caveat(found) is None


@given(st.lists(st.floats(min_value=1e-9, max_value=1e12), min_size=2, max_size=60))
def test_any_accepted_rates_give_a_range_around_one_and_a_caveat_only_beyond_the_band(rates):
    (drift,) = steadiness.drifts([row(3, rates)])
    assert drift.low <= 1.0 <= drift.high and drift.sd >= 0 and drift.windows == len(rates)
    assert (steadiness.caveat([drift]) is not None) == (drift.beyond > 0.1)
    assert "CPU 3 " in steadiness.describe([drift])


# --- the command: values checked before anything runs ------------------------------------

@pytest.mark.parametrize("flags, setting", [
    (["--seconds", "nan"], "--seconds"), (["--seconds", "-1"], "--seconds"),
    (["--seconds", "1e9"], "--seconds"), (["--window", "0"], "--window"),
    (["--seconds", "10", "--window", "6"], "--seconds=10.0: must be in 12-"),
    (["--seconds", "5"], "--seconds=5.0: must be in 10-"), (["--window", "1e9"], "--window"),
    (["--cpus", "0,0"], "cpus"),
    (["--cpus", "-1"], "cpus"), (["--cpus", "0,x"], "cpus"), (["--cpus", "4096"], "cpus"),
    (["--cpus", ""], "cpus"), (["--cpus", "٣"], "cpus")])
def test_a_wrong_value_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, flags,
                                                              setting):
    out = tmp_path / "s.jsonl"
    assert _main(["--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and setting in err, err
    assert not out.exists()


def _main(argv: list[str]) -> int:
    """The command's exit code, whether it returns it or argparse exits with it."""
    try:
        return host_steadiness.main(argv)
    except SystemExit as exit:
        return int(exit.code or 0)


@pytest.mark.parametrize("name", ["s.txt", "dir/"])
def test_an_output_that_is_no_results_file_is_refused(tmp_path, capsys, name):
    (tmp_path / "dir").mkdir()
    assert host_steadiness.main(["--out", str(tmp_path / name), "--check-only"]) == 2
    assert "out=" in capsys.readouterr().err


@given(st.sets(st.integers(min_value=0, max_value=4095), min_size=1, max_size=300))
def test_by_default_every_cpu_or_eight_spread_from_first_to_last(allowed):
    """Each copy is a torch process: a large host is sampled, not filled."""
    cpus = host_steadiness.default_cpus(allowed)
    assert cpus == sorted(set(cpus)) and set(cpus) <= allowed
    if len(allowed) <= 8:
        assert cpus == sorted(allowed)
    else:
        assert len(cpus) == 8 and cpus[0] == min(allowed) and cpus[-1] == max(allowed)


def test_check_only_runs_and_writes_nothing(tmp_path):
    out = tmp_path / "s.jsonl"
    assert host_steadiness.main(["--out", str(out), "--seconds", "30", "--check-only"]) == 0
    assert not out.exists()


def test_a_copy_that_fails_is_a_row_with_its_error_and_the_exit_is_1(tmp_path, monkeypatch,
                                                                     capsys):
    def failing(cpu, seconds, window_s):
        return ["sh", "-c", "echo 'no BLAS here' >&2; exit 3"]

    monkeypatch.setattr(host_steadiness, "command", failing)
    out = tmp_path / "s.jsonl"
    assert host_steadiness.main(["--out", str(out), "--seconds", "1", "--window", "0.5",
                                 "--cpus", "0"]) == 1
    (rec,) = record.load(out)
    assert rec["status"] == "error" and rec["rates"] == []
    assert rec["error"] == "the loop exited 3: no BLAS here"
    assert "CPU 0: the loop exited 3" in capsys.readouterr().err


def test_a_copy_that_prints_no_rates_is_a_row_saying_so(tmp_path, monkeypatch):
    monkeypatch.setattr(host_steadiness, "command",
                        lambda cpu, s, w: ["sh", "-c", "echo '{\"window_s\": 1}'"])
    out = tmp_path / "s.jsonl"
    assert host_steadiness.main(["--out", str(out), "--seconds", "1", "--window", "0.5",
                                 "--cpus", "0"]) == 1
    (rec,) = record.load(out)
    assert rec["status"] == "error" and "printed no rates" in rec["error"]


def test_the_real_loop_on_each_cpu_writes_a_record_each(tmp_path):
    """The rank-side loop, pinned by taskset, one copy per CPU at once."""
    out = tmp_path / "s.jsonl"
    proc = subprocess.run([sys.executable, "-m", "bench", "steadiness", "--out", str(out),
                           "--seconds", "1", "--window", "0.5"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = record.load(out)
    assert [r["cpu"] for r in recs] == host_steadiness.default_cpus(os.sched_getaffinity(0))
    for rec in recs:
        assert rec["status"] == "ok" and len(rec["rates"]) == 2 and min(rec["rates"]) > 0
        assert rec["env"]["cpu_model"] and rec["env"]["git_commit"]
    assert "this machine's own drift" in proc.stdout
    assert f"{len(recs)} record(s) appended to {out}" in proc.stderr


# --- read back beside the prediction -----------------------------------------------------

def test_predict_sets_the_drift_beside_measured_over_predicted_and_skips_a_torn_line(
        tmp_path):
    path = tmp_path / "s.jsonl"
    lines = [json.dumps(row(0, [100.0, 64.0, 110.0]) | {"env": _env()}),
             '{"mode": "steadiness", "rates": [1,',
             json.dumps(row(1, [100.0, 98.0]) | {"env": _env()})]
    path.write_text("\n".join(lines) + "\n")
    proc = _predict("--steadiness", str(path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "CPU 0 0.64-1.10 of its median" in proc.stdout
    assert "this machine's CPUs drift further by themselves (CPU 0" in proc.stdout
    assert f"{path}:2: skipped" in proc.stderr


def test_predict_refuses_a_file_with_no_steadiness_record_in_one_line():
    proc = _predict("--steadiness", str(DEMO_SWEEPS))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--steadiness=" in proc.stderr


def _predict(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", "predict", str(DEMO_RESULTS),
                           "--link-from", str(DEMO_SWEEPS), "--nodes", "2", *flags],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def _env() -> dict:
    from bench import provenance
    return provenance.collect_head()
