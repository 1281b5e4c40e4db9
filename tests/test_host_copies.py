"""The one-node baseline on emulated hosts: each round's cell and its neighbours' copies,
and the slowest of N of them that an N-node prediction starts from (host_copies)."""
from __future__ import annotations

import itertools
import json
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.analysis import host_copies, predict
from bench.analysis.host_copies import COPY_OF, expected_slowest, paced_by_slowest
from tests.test_accuracy import _copy, _one_node_cell, _sweep_over
from tests.test_predict import _record

steps = st.lists(st.floats(min_value=1e-4, max_value=10.0, allow_nan=False), min_size=1,
                 max_size=7)


@given(steps, st.integers(min_value=1, max_value=9))
def test_the_expected_slowest_is_the_mean_longest_over_every_draw(found, nodes):
    k = min(nodes, len(found))
    draws = [max(draw) for draw in itertools.combinations(found, k)]
    assert expected_slowest(found, nodes) == pytest.approx(statistics.fmean(draws))
    # Within the steps drawn (to rounding: a mean of equal steps may round below them).
    assert min(found) * (1 - 1e-12) <= expected_slowest(found, nodes) <= max(found) * (1 + 1e-12)


def test_the_expected_slowest_of_as_many_as_there_are_is_the_slowest():
    assert expected_slowest([0.2, 0.3, 0.1], 3) == pytest.approx(0.3)
    assert expected_slowest([0.2, 0.3, 0.1], 8) == pytest.approx(0.3)
    assert expected_slowest([0.2, 0.3, 0.1], 1) == pytest.approx(0.2)   # any one: the mean
    with pytest.raises(ValueError):
        expected_slowest([], 2)


def _host(run_id: str, step_s: float, cell: str | None = None) -> dict:
    rec = {"run_id": run_id, "bucket_timeline": {"step_s": step_s}}
    if cell is not None:
        rec["matrix"] = {COPY_OF: cell, "id": "M", "repeat": 1}
    return rec


def _step(rec: dict) -> float:
    return rec["bucket_timeline"]["step_s"]


def test_each_cell_with_its_copies_becomes_the_host_nearest_their_expected_slowest():
    rounds = [_host("a", 0.15), _host("a1", 0.20, "a"), _host("a2", 0.12, "a"),
              _host("lone", 0.30),                         # no copies: stays as it is
              _host("b1", 0.11, "b"), _host("b", 0.10)]   # a copy before its cell
    on_two = paced_by_slowest(rounds, 2, _step)
    # Round a: (0.15 + 2 x 0.20) / 3 = 0.183, nearest 0.20; round b: 0.11 of the two.
    assert [r["run_id"] for r in on_two] == ["a1", "lone", "b1"]
    assert [r["run_id"] for r in paced_by_slowest(rounds, 3, _step)] == ["a1", "lone", "b1"]
    # One node: any one host, the mean of the round (0.157), nearest 0.15.
    assert [r["run_id"] for r in paced_by_slowest(rounds, 1, _step)] == ["a", "lone", "b1"]
    # Records with no copies at all are untouched, even where they share a run_id.
    same = [_host("x", 0.1), _host("x", 0.2)]
    assert paced_by_slowest(same, 2, _step) == same


def test_a_neighbour_hosts_first_copy_only_is_a_sample_of_its_round(tmp_path):
    cell = _one_node_cell(tmp_path, 100.0, [_copy("M-c1r1-n1", 0.20), _copy("M-c1r1-n2", 0.12),
                                            _copy("M-c1r1-n1", 0.30)])
    copies = host_copies.baseline_copies([cell], tmp_path / "runs.jsonl", predict.setup_key)
    assert [c["bucket_timeline"]["step_s"] for c in copies] == [0.20, 0.12]
    assert all(c["matrix"][COPY_OF] == cell["run_id"] for c in copies)


def test_bench_predict_starts_from_the_slowest_host_unless_told_not_to(tmp_path, capsys):
    cell = _one_node_cell(tmp_path, 100.0, [_copy("M-c1r1-n1", 0.20)])
    results, sweeps = tmp_path / "runs.jsonl", tmp_path / "comm.jsonl"
    results.write_text(json.dumps(cell) + "\n")
    sweeps.write_text(json.dumps(_sweep_over(2, 0.12)) + "\n")
    argv = [str(results), "--link-from", str(sweeps), "--nodes", "2"]
    assert predict.main(argv) == 0
    out = capsys.readouterr().out
    assert "1 of these repeats are neighbours' copies" in out, out
    assert "median step 200.0 ms at 2 nodes" in out, out     # the slower host, the copy
    (row,) = [line for line in out.splitlines() if line.startswith("| 2 |")]
    assert predict.main([*argv, "--no-neighbours"]) == 0
    out = capsys.readouterr().out
    assert "neighbours' copies" not in out
    (alone,) = [line for line in out.splitlines() if line.startswith("| 2 |")]
    # The slower start predicts fewer samples/s.
    rate = lambda line: float(line.split("|")[3].split()[0])  # noqa: E731
    assert rate(row) < rate(alone)
    assert _record(1, "none", 1.0, 1.0)["bucket_timeline"]["step_s"] == 0.15
