"""bench.analysis.accuracy: measured against predicted, per setup and node count, from the
sweep over N nodes and from the 2-node sweep carried to N."""
from __future__ import annotations

import pytest

from bench.analysis import accuracy
from bench.analysis.prediction import Link, Timeline, predict_step
from tests.test_predict import _record, _sweep


def _sweep_over(nodes: int, busbw_GBps: float) -> dict:
    rec = _sweep([{"size_bytes": 1024, "time_s": 1e-4, "busbw_GBps": 0.001},
                  {"size_bytes": 64_000_000, "time_s": 1.0, "busbw_GBps": busbw_GBps}])
    rec.update(world_size=nodes, nnodes=nodes)
    return rec


def _predicted(nodes: int, busbw_GBps: float) -> float:
    """samples/s the model gives for _record's timeline (16 samples per node per step), on
    the link of the sweep over ``nodes``."""
    timeline = Timeline((0.1,), (12.5e6,), 0.15)
    link = Link.from_allreduce(_sweep_over(nodes, busbw_GBps))
    return nodes * 16 / predict_step(timeline, link, nodes).step_s


def test_each_measured_node_count_is_set_beside_its_prediction():
    sweeps = [_sweep_over(2, 0.12), _sweep_over(3, 0.10)]
    at_two, at_three = _predicted(2, 0.12), _predicted(3, 0.10)
    records = [_record(1, "none", 12.5e6, 100.0),
               _record(2, "none", 12.5e6, at_two * 0.95),
               _record(3, "none", 12.5e6, at_three * 0.80)]
    for rec in records[1:]:
        rec["env"]["link"]["rate_bps"] = 10**9
    found = {row.nodes: row for row in accuracy.rows(records, accuracy.sweeps_of(sweeps))}
    assert sorted(found) == [2, 3]
    assert found[2].at_n.ratio == pytest.approx(0.95)
    assert found[3].at_n.ratio == pytest.approx(0.80)
    # From the 2-node sweep carried to 3 nodes the prediction is faster (0.12 GB/s): its
    # ratio is lower still.
    assert found[3].from_two.ratio == pytest.approx(at_three * 0.80 / _predicted(3, 0.12))
    assert found[3].from_two.ratio < found[3].at_n.ratio
    text = accuracy.table(list(found.values()))
    assert "| 0.95 |" in text and "0.80 **off**" in text
    assert "1 of 2 rows within 0.90-1.10 (N-node sweep)" in text


def test_a_node_count_without_its_sweep_is_left_out():
    records = [_record(1, "none", 12.5e6, 100.0), _record(3, "none", 12.5e6, 50.0)]
    assert accuracy.rows(records, accuracy.sweeps_of([_sweep_over(2, 0.12)])) == []


def test_the_command_says_what_is_missing(tmp_path, capsys):
    import json

    results = tmp_path / "runs.jsonl"
    results.write_text(json.dumps(_record(1, "none", 12.5e6, 100.0)) + "\n")
    assert accuracy.main([str(results), "--link-from", str(results)]) == 2
    assert "--link-from" in capsys.readouterr().err
