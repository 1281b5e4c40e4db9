"""How precisely the repeats check measured / predicted: the ratio round by round
(bench.analysis.rounds, predict.ratios_by_round), under bench accuracy's and bench
predict's tables."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import record
from bench.analysis import accuracy, predict, rounds
from tests.test_accuracy import _one_node_cell, _predicted, _sweep_over
from tests.test_predict import _record


def test_the_rounds_spread_gives_the_precision_and_the_rounds_that_would_do():
    # Mean 1.0, sample sd (0.02 / 3) ** 0.5 = 0.0816; two standard errors over 4 rounds.
    four = rounds.Rounds((0.9, 1.0, 1.1, 1.0))
    assert four.half_width == pytest.approx(0.081650, abs=1e-6)
    assert not four.loose()
    assert four.rounds_for(0.10) == 4          # never fewer than ran
    assert four.rounds_for(0.05) == 11         # 4 x (0.0816 / 0.05) ** 2 = 10.7
    assert four.text() == "4 rounds read 0.90-1.10: checked to 8% either way"
    # Mean 0.9667, sd 0.1528: 2 x 0.1528 / 3 ** 0.5 / 0.9667 = 0.1825; 3 x 1.825 ** 2 = 9.99.
    three = rounds.Rounds((0.8, 1.0, 1.1))
    assert three.half_width == pytest.approx(0.18246, abs=1e-4)
    assert three.loose() and three.rounds_for(0.10) == 10
    assert three.text() == ("3 rounds read 0.80-1.10: checked to 18% either way; about 10 "
                            "rounds (--repeats, REPEATS) would check it to 10%")
    alike = rounds.Rounds((1.0, 1.0, 1.0))
    assert alike.half_width == 0 and not alike.loose()
    for few in (rounds.Rounds(), rounds.Rounds((0.95,)), rounds.Rounds((0.9, 1.1))):
        assert few.half_width is None and few.rounds_for(0.1) is None and few.loose()
    assert rounds.Rounds((0.9, 1.1)).text() == (
        "2 rounds read 0.90-1.10, too few to tell how far the ratio could move; run 3 "
        "rounds or more (--repeats, REPEATS) to tell")
    assert rounds.Rounds().text() == "no round held both cells"


@given(st.lists(st.floats(0.05, 20), min_size=3, max_size=40), st.floats(0.01, 0.5))
def test_a_tighter_goal_asks_for_more_rounds_never_fewer_than_ran(ratios, goal):
    found = rounds.Rounds(tuple(ratios))
    width = found.half_width
    assert width is not None and math.isfinite(width) and width >= 0
    need = found.rounds_for(goal)
    assert need is not None and need >= len(ratios)
    assert (found.rounds_for(goal / 2) or 0) >= need
    assert found.loose(goal) == (width > goal)
    # At the rounds asked for, the same spread checks the ratio to the goal.
    assert width * math.sqrt(len(ratios) / need) <= goal * (1 + 1e-9)
    assert found.text(goal).startswith(f"{len(ratios)} rounds read ")


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                     lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
                     max_leaves=8)


@given(_json, _json)
def test_a_record_of_any_shape_has_a_round_or_none(matrix, repeat):
    for rec in ({"matrix": matrix}, {"matrix": {"id": matrix, "repeat": repeat}},
                {"matrix": {"id": "M", "repeat": repeat}}):
        found = rounds.round_of(rec)
        assert found is None or (type(found[0]) is str and type(found[1]) is int)
    assert rounds.round_of({"matrix": {"id": "M", "repeat": 2}}) == ("M", 2)
    assert rounds.round_of({"matrix": {"id": "M", "repeat": True}}) is None
    assert rounds.round_of({}) is None


def _in_round(rec: dict, repeat: int, run: str = "M") -> dict:
    rec["matrix"].update(id=run, repeat=repeat, topology=f"{rec['nnodes']}x1")
    return rec


def _rounds_of(shares: tuple[float, ...], hook: str = "none") -> list[dict]:
    """One round per share: a one-node cell, and a two-node cell measuring that share of
    what the model predicts from it."""
    at_two = _predicted(2, 0.12)
    records = []
    for repeat, share in enumerate(shares, 1):
        records += [_in_round(_record(1, hook, 12.5e6, 100.0), repeat),
                    _in_round(_record(2, hook, 12.5e6, at_two * share), repeat)]
    return records


def test_each_round_is_predicted_from_its_own_one_node_cell():
    records = _rounds_of((0.8, 1.0, 1.1))
    # Not a round's ratio: a round without its two-node cell, another hook's cells, and a
    # two-node record no matrix wrote (it still counts in the pooled median).
    records += [_in_round(_record(1, "none", 12.5e6, 100.0), 4), *_rounds_of((3.0,), "fp16"),
                _record(2, "none", 12.5e6, _predicted(2, 0.12) * 2.0)]
    del records[-1]["matrix"]
    found = {row.hook: row for row in accuracy.rows(records, accuracy.sweeps_of(
        [_sweep_over(2, 0.12)]))}
    row = found["none"]
    assert row.by_round.ratios == pytest.approx((0.8, 1.0, 1.1))
    assert row.at_n.ratio == pytest.approx(1.05)    # the median of 0.8, 1.0, 1.1 and 2.0
    (alone,) = found["fp16"].by_round.ratios
    assert alone == pytest.approx(found["fp16"].at_n.ratio)    # one round: the pooled ratio
    lines = accuracy.table([row]).splitlines()
    assert "how precisely the rounds check each ratio: 18% either way (two standard " \
        "errors of the mean of measured / predicted round by round)" in lines
    assert "- 1 Gbit/s, none, 2 nodes (1.05): 3 rounds read 0.80-1.10: checked to 18% " \
        "either way; about 10 rounds (--repeats, REPEATS) would check it to 10%" in lines
    grid = accuracy.grid_table([accuracy.Measured("w", "a workload", False,
                                                  tuple(found.values()))])
    assert "how precisely the rounds check each ratio: 18% either way" in grid
    assert f"- w: 1 Gbit/s, fp16, 2 nodes ({alone:.2f}): 1 round read {alone:.2f}, too few " \
        "to tell" in grid


def test_rounds_that_agree_say_so_and_name_no_row():
    (row,) = accuracy.rows(_rounds_of((0.97, 1.0, 1.02, 0.99)),
                           accuracy.sweeps_of([_sweep_over(2, 0.12)]))
    text = accuracy.table([row])
    assert "how precisely the rounds check each ratio: 2% either way" in text
    assert "more loosely" not in text


def test_records_not_written_in_rounds_say_nothing_of_them():
    records = _rounds_of((0.8, 1.0, 1.1))
    for rec in records:
        del rec["matrix"]
    (row,) = accuracy.rows(records, accuracy.sweeps_of([_sweep_over(2, 0.12)]))
    assert row.by_round.ratios == ()
    assert "round" not in accuracy.table([row])


def test_a_neighbours_copy_is_in_its_cells_round(tmp_path):
    copy = _record(1, "none", 12.5e6, 90.0)
    del copy["matrix"]
    cell = _one_node_cell(tmp_path, 100.0, [copy])
    cell["matrix"]["repeat"] = 7
    (found,) = accuracy.baseline_copies([cell], tmp_path / "runs.jsonl")
    assert rounds.round_of(found) == ("M", 7) and found["samples_per_s"] == 90.0
    assert found["matrix"]["copy_of"] == cell["run_id"]     # and it ran beside this cell
    # A cell written by no matrix repeat gives its copies none; they still name the cell.
    cell["matrix"]["repeat"] = "seven"
    (found,) = accuracy.baseline_copies([cell], tmp_path / "runs.jsonl")
    assert rounds.round_of(found) is None and found["matrix"] == {"copy_of": cell["run_id"]}


def test_bench_predict_says_how_precisely_its_rounds_check_each_ratio(tmp_path, capsys):
    results, sweeps = tmp_path / "runs.jsonl", tmp_path / "comm.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in _rounds_of((0.8, 1.0, 1.1))))
    sweeps.write_text(json.dumps(_sweep_over(2, 0.12)) + "\n")
    assert predict.main([str(results), "--link-from", str(sweeps), "--nodes", "2"]) == 0
    assert "measured / predicted at 2 nodes, round by round: 3 rounds read 0.80-1.10: " \
        "checked to 18% either way; about 10 rounds (--repeats, REPEATS) would check it " \
        "to 10% (two standard errors of their mean)" in capsys.readouterr().out
    # Records no matrix wrote: no such line.
    results.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "matrix"})
                               + "\n" for r in _rounds_of((0.8, 1.0, 1.1))))
    assert predict.main([str(results), "--link-from", str(sweeps), "--nodes", "2"]) == 0
    assert "round by round" not in capsys.readouterr().out


def _one_node(step_s: float, ready_s: float, repeat: int, after: bool) -> dict:
    rec = _in_round(_record(1, "none", 12.5e6, 100.0), repeat)
    rec["bucket_timeline"].update(step_s=step_s, ready_s=[ready_s])
    if after:
        rec["matrix"]["bracket"] = "after"
    return rec


def test_a_bracketed_round_is_predicted_from_its_one_node_cells_on_both_sides():
    """bench matrix --bracket: a round's one-node cell before its two-node cell ran at a
    0.12 s step, again after it at 0.18 s, the machine slowing meanwhile. The round starts
    from their mean, 0.15 s (ready at 0.10 s), the pace at the two-node cell's moment:
    the two-node cell that measured just what the model gives from it reads 1.00, where
    either one-node cell alone would read above or below it."""
    two = _in_round(_record(2, "none", 12.5e6, _predicted(2, 0.12)), 1)
    before, after = _one_node(0.12, 0.08, 1, False), _one_node(0.18, 0.12, 1, True)
    assert record.problem_of(after) is None
    links = predict.LinkRange.fixed(predict.Link.from_allreduce(_sweep_over(2, 0.12)))
    setup = predict.setup_key(before)
    both = predict.ratios_by_round([before, two, after], setup, 2, links)
    assert both.ratios == pytest.approx((1.0,))
    (early,) = predict.ratios_by_round([before, two], setup, 2, links).ratios
    (late,) = predict.ratios_by_round([two, after], setup, 2, links).ratios
    assert early < 1.0 < late
