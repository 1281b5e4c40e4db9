"""scripts/straggler_detection.py: the conditions it runs, their order, and the table it
builds from the records' ``straggler`` field (synthetic records: the rank side names
stragglers in issue 26; a record without the field counts as none named)."""
from __future__ import annotations

import copy
import importlib.util
import json
import sys
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import record
from conftest import REPO

_spec = importlib.util.spec_from_file_location("straggler_detection",
                                               REPO / "scripts" / "straggler_detection.py")
assert _spec is not None and _spec.loader is not None
sd = importlib.util.module_from_spec(_spec)
sys.modules["straggler_detection"] = sd
_spec.loader.exec_module(sd)

BASE = next(r for r in record.read(REPO / "tests" / "fixtures" / "table-fixture.jsonl")
            if r["status"] == "ok")
BY_NAME = {c.name: c for c in sd.CONDITIONS}


def _rec(straggler: object = "absent", status: str = "ok") -> dict:
    rec = copy.deepcopy(BASE)
    rec["status"] = status
    if straggler != "absent":
        rec["straggler"] = straggler
    return rec


def _named(node: int, part: str, share: float = 0.2) -> dict:
    return {"rank": node, "node": node, "host": f"n{node}", "device": "cpu", "part": part,
            "excess_s": 0.02, "excess_share": share, "cost_share": 0.1,
            "summary": f"rank {node}: {part}"}


def test_each_slowed_condition_holds_host_2_back_by_its_factor():
    fair = sd.FAIR_QUOTA
    assert BY_NAME["clean"].quotas == (fair,) * 4
    assert BY_NAME["cpu25"].quotas[2] == pytest.approx(fair / 1.25)
    assert BY_NAME["cpu10"].quotas[2] == pytest.approx(fair / 1.1)
    every = ",".join([f"{fair:g}"] * 4)
    assert BY_NAME["link10"].flags(10**9) == ["--host-cpu-quota", every,
                                              "--host-links", ",,100mbit,"]
    assert BY_NAME["cpu25"].flags(10**9) == [
        "--host-cpu-quota", f"{fair:g},{fair:g},{fair / 1.25:.6g},{fair:g}"]


def test_the_matrix_argv_is_the_4_host_job_with_the_conditions_flags(tmp_path):
    a = sd.argparse.Namespace(link="1gbit", model="mlp", batch_size=None, steps=30,
                              warmup_steps=5)
    argv = sd.matrix_argv(BY_NAME["link10"], a, tmp_path)
    assert argv[argv.index("--topologies") + 1] == "4x1"
    assert argv[argv.index("--host-links") + 1] == ",,100mbit,"
    assert argv[argv.index("--results") + 1] == str(tmp_path / "link10.jsonl")
    assert argv[argv.index("--steps") + 1] == "30"


@given(st.integers(0, 30), st.integers(0, 15))
def test_the_schedule_runs_each_condition_its_count_spread_over_the_whole(n_clean, n_slow):
    counts = {"clean": n_clean, "cpu25": n_slow, "cpu10": n_slow, "link10": n_slow}
    order = sd.schedule(counts)
    assert Counter(order) == Counter({k: v for k, v in counts.items() if v})
    # Interleaved: each half of the run holds about half of every condition's runs.
    half = order[:len(order) // 2]
    for name, n in counts.items():
        assert abs(half.count(name) - n / 2) <= 1.5, (name, order)


def test_a_record_is_counted_by_what_it_named():
    cpu = BY_NAME["cpu25"]
    t = sd.tally(cpu, [_rec(_named(2, "compute")), _rec(_named(2, "compute", 0.3)),
                       _rec(_named(2, "communication")), _rec(_named(1, "compute")),
                       _rec(None), _rec(), _rec(_named(2, "compute"), status="failed")])
    assert (t.runs, t.failed, t.correct, t.wrong_part, t.wrong_host, t.none_named) == (
        6, 1, 2, 1, 1, 2)
    row = t.as_dict()
    assert row["correctly_named"] == 2 and row["wrongly_named"] == 2
    assert row["false_alarms"] is None and row["median_excess_share"] == pytest.approx(0.2)
    link = sd.tally(BY_NAME["link10"], [_rec(_named(2, "communication")),
                                        _rec(_named(2, "compute"))])
    assert (link.correct, link.wrong_part) == (1, 1)


def test_in_the_clean_condition_every_name_is_a_false_alarm():
    t = sd.tally(BY_NAME["clean"], [_rec(None), _rec(), _rec(_named(2, "compute")),
                                    _rec(_named(0, "data")), _rec("not an object")])
    row = t.as_dict()
    assert row["false_alarms"] == 2 and row["none_named"] == 3
    assert row["correctly_named"] is None and t.expected is None


@given(st.lists(st.one_of(st.none(), st.just("absent"), st.text(max_size=5),
                          st.builds(_named, st.integers(-1, 5),
                                    st.sampled_from(["compute", "communication", "data"]),
                                    st.floats(0, 2)),
                          st.dictionaries(st.text(max_size=5), st.integers())),
                max_size=12),
       st.sampled_from([c.name for c in sd.CONDITIONS]))
def test_every_ok_record_lands_in_exactly_one_column(stragglers, condition):
    t = sd.tally(BY_NAME[condition], [_rec(s) for s in stragglers])
    assert t.runs == len(stragglers)
    assert t.correct + t.wrong_part + t.wrong_host + t.none_named == t.runs


def test_analyse_only_rereads_the_records_and_writes_the_table(tmp_path, capsys):
    lines = {"clean": [_rec(None), _rec()], "cpu25": [_rec(_named(2, "compute"))],
             "link10": [_rec(_named(2, "communication"))]}
    for name, recs in lines.items():
        with open(tmp_path / f"{name}.jsonl", "w") as f:
            f.write("".join(record.dumps(r) + "\n" for r in recs) + "{torn\n")
    code = sd.main(["--out", str(tmp_path), "--analyse-only"])
    assert code == 0
    err = capsys.readouterr().err
    assert "cpu10.jsonl: no such file" in err and "skipped" in err   # warned, not fatal
    table = json.loads((tmp_path / "straggler.json").read_text())
    rows = {row["condition"]: row for row in table["conditions"]}
    assert (rows["clean"]["runs"], rows["clean"]["false_alarms"]) == (2, 0)
    assert rows["cpu25"]["correctly_named"] == rows["link10"]["correctly_named"] == 1
    assert rows["cpu10"]["runs"] == 0
    markdown = (tmp_path / "straggler.md").read_text()
    assert "| cpu25 | host 2 CPU 25% slower | 1 | 0 | 1 |" in markdown
    # Run again: both outputs are its own and replaced; a stranger's JSON is not.
    assert sd.main(["--out", str(tmp_path), "--analyse-only"]) == 0
    (tmp_path / "straggler.json").write_text("{}")
    before = (tmp_path / "straggler.md").read_bytes()
    (tmp_path / "straggler.md").write_bytes(before + b"\n")
    assert sd.main(["--out", str(tmp_path), "--analyse-only"]) == 2
    assert "lacks the mark of the stack's reports" in capsys.readouterr().err
    # Neither output was written: the stranger's JSON is checked before the table.
    assert (tmp_path / "straggler.json").read_text() == "{}"
    assert (tmp_path / "straggler.md").read_bytes() == before + b"\n"


@pytest.mark.parametrize(("args", "says"), [
    (["--n-clean", "-1"], "--n-clean=-1"), (["--steps", "2"], "--steps=2"),
    (["--link", "5kbit"], "--link=5kbit"), (["--link", "fast"], "--link=fast"),
    (["--n-clean", "0", "--n-slow", "0"], "nothing would run"),
])
def test_bad_settings_are_one_line_before_anything_runs(tmp_path, capsys, args, says):
    assert sd.main([*args, "--out", str(tmp_path / "new")]) == 2
    assert says in capsys.readouterr().err and not (tmp_path / "new").exists()


def test_an_output_it_cannot_write_is_refused_before_any_run(tmp_path, capsys, monkeypatch):
    """--out a file, or a directory holding a stranger's straggler.json: one line, exit 2,
    and no run measured (the check used to come after the whole measurement)."""
    monkeypatch.setattr(sd, "measure", lambda a: pytest.fail("a run started"))
    a_file = tmp_path / "file.txt"
    a_file.write_text("mine\n")
    assert sd.main(["--out", str(a_file)]) == 2
    assert "--out=" in capsys.readouterr().err and a_file.read_text() == "mine\n"
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "straggler.json").write_text("{}")
    assert sd.main(["--out", str(tmp_path / "old")]) == 2
    assert "lacks the mark" in capsys.readouterr().err
