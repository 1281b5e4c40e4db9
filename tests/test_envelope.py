"""``bench predict`` says when a run lies outside what the prediction was checked on (issue
29): the reference accuracy run's own records are inside; a run unlike them names each
difference beside its figures."""
from __future__ import annotations

import copy
import inspect
import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import record
from bench.analysis import envelope
from tests.conftest import REPO

ACCURACY = REPO / "results" / "reference" / "emulated-accuracy"


def _reference_run() -> dict:
    return next(r for r in record.load(ACCURACY / "1gbit.jsonl") if r["nnodes"] == 1)


@pytest.mark.parametrize("rate", [1e9, 5e9])
def test_the_reference_runs_are_inside(rate):
    for rec in record.load(ACCURACY / f"{int(rate / 1e9)}gbit.jsonl"):
        assert envelope.outside(rec, rate, [2, 3, 4]) == []
        assert envelope.line(rec, rate, [2, 3, 4]) is None


def _changed(**changes) -> dict:
    rec = copy.deepcopy(_reference_run())
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = rec
        for name in parents:
            node = node[name]
        node[leaf] = value
    return rec


@pytest.mark.parametrize("changes, words", [
    ({"config__model__model": "resnet18"}, "model resnet18"),
    ({"config__model__mlp_width": 512}, "the MLP 512x4"),
    ({"batch_size_per_device": 64}, "batch 64"),
    ({"env__link__cpu_share": 1.0}, "1 CPU per host"),
    ({"env__link__cpu_share": None}, "hosts whose CPU share the record does not say"),
    ({"env__link__kind": "measured"}, "a real network"),
    ({"env__driver": "580.95"}, "GPUs"),
    ({"config__distributed__bucket_cap_mb": None},
     "DDP's own buckets (a 1 MiB first bucket; the check had none)"),
    ({"config__distributed__bucket_cap_mb": 4.0}, "buckets of 4 MiB"),
    ({"config__distributed__bucket_cap_mb": "x"}, "buckets the record does not say"),
])
def test_each_difference_is_named(changes, words):
    found = envelope.outside(_changed(**changes), 1e9, [2])
    assert found == [words]
    text = envelope.line(_changed(**changes), 1e9, [2])
    assert words in text and "not as checked ones" in text and envelope.WHERE in text


def test_a_link_or_node_count_past_the_checked_ones_is_named():
    rec = _reference_run()
    assert envelope.outside(rec, 10e9, [2, 8]) == ["a 10 Gbit/s link", "8 nodes"]
    assert envelope.outside(rec, None, [3]) == []   # a measured link of unknown rate


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12))
def test_any_record_shape_gives_words_not_an_error(junk):
    rec = junk if isinstance(junk, dict) else {"config": junk, "env": junk}
    found = envelope.outside(rec, 1e9, [2])
    assert all(isinstance(word, str) for word in found)


def test_the_cli_prints_the_caveat_beside_an_unchecked_setup(tmp_path):
    one = _changed(**{"config__model__model": "resnet18", "env__link__cpu_share": 1.0})
    results = tmp_path / "runs.jsonl"
    results.write_text(json.dumps(one) + "\n")
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(results), "--link",
                           "1gbit", "--nodes", "2"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (caveat,) = [li for li in proc.stdout.splitlines() if li.startswith("outside what")]
    assert "model resnet18, 1 CPU per host" in caveat
    inside = tmp_path / "inside.jsonl"
    inside.write_text(json.dumps(_reference_run()) + "\n")
    proc = subprocess.run([sys.executable, "-m", "bench", "predict", str(inside), "--link",
                           "1gbit", "--nodes", "2"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "outside what" not in proc.stdout


def test_the_caveat_says_what_the_grid_measured_and_agrees_with_its_tables():
    """The caveat's range and counts are those of the grid's own table (grid.md, which
    prediction_accuracy.py --grid writes from the records), so the text cannot drift from
    the records it cites; the run-to-run figure is that of part three's README, which set two
    runs of one model side by side."""
    import re

    grids = r"results/reference/(accuracy-grid-(?:nodes-)?\d+)"
    cited = re.findall(grids, envelope.BEYOND)
    # Each grid's figures stand between its citation and the next one.
    said = re.split(grids, envelope.BEYOND)[2::2]
    graded = [(name, text) for name, text in zip(cited, said, strict=True)
              if name != "accuracy-grid-3"]
    assert graded, "the caveat names the grid run it quotes"
    runs = REPO / "results" / "reference" / "accuracy-grid-3"     # two runs of one model
    assert "accuracy-grid-3" in cited
    for index, (name, text) in enumerate(graded):
        grid = REPO / "results" / "reference" / name
        # One grid.md, or one per run (a directory of several runs: run-1/, run-2/).
        tables = sorted(grid.rglob("grid.md"))
        assert (grid / "README.md").is_file() and tables, name
        rows = [line.split(" | ") for table in tables for line in table.read_text().splitlines()
                if re.match(r"\| .* \| (dev|held out) \| ", line)]
        ratios = [float(row[8].split()[0]) for row in rows]
        if index == 0:
            assert len(ratios) == 18, "the first grid quoted is the whole grid"
        assert f"read {min(ratios):.2f}-{max(ratios):.2f}" in text
        # The table's own verdict, not the rounded figure: 0.899 prints as 0.90 and is off.
        off = [float(row[8].split()[0]) for row in rows if "**off**" in row[8]]
        assert f"outside 0.90-1.10 in {len(off)} of {len(ratios)} cells" in text
        assert f"({sum(r < 1.0 for r in off)} optimistic" in text
    moved = re.search(r"moves by up to (\d\.\d\d) between two runs",
                      (runs / "README.md").read_text().replace("\n", " "))
    assert moved and f"moved by up to {moved.group(1)} between two runs" in envelope.BEYOND


@pytest.mark.parametrize("hook, device, driver, said", [
    ("powersgd", "cpu", None, True), ("none", "cpu", None, False), ("fp16", "cpu", None, False),
    ("powersgd", "cuda", "580.95", False), ("powersgd", "cuda", None, False),
    ("powersgd", None, None, True), ("powersgd", None, "580.95", False)])
def test_a_powersgd_setup_on_cpu_is_told_the_hook_read_optimistic(hook, device, driver, said):
    rec = _changed(**{"config__model__model": "resnet18", "config__distributed__comm_hook": hook,
                      "config__distributed__device": device, "env__driver": driver})
    text = envelope.line(rec, 1e9, [2])
    assert text is not None and (envelope.POWERSGD in text) == said
    inside = _changed(**{"config__distributed__comm_hook": hook})
    assert envelope.line(inside, 1e9, [2]) is None, "inside what was checked: no caveat"


def test_the_powersgd_caveat_agrees_with_the_grids_it_cites():
    """Its range and counts are the PowerSGD rows of the tables of the grids it names; the
    other hooks' rows there are the within-band claim its comment makes."""
    import re

    rows = []
    for name in envelope.POWERSGD_GRIDS:
        assert name in envelope.POWERSGD, name
        table = REPO / "results" / "reference" / name / "grid.md"
        rows += [line.split(" | ") for line in table.read_text().splitlines()
                 if re.match(r"\| .* \| (dev|held out) \| ", line)]
    powersgd = [row for row in rows if row[3].startswith("powersgd")]
    ratios = [float(row[8].split()[0]) for row in powersgd]
    off = [row for row in powersgd if "**off**" in row[8]]
    assert f"read {min(ratios):.2f}-{max(ratios):.2f}" in envelope.POWERSGD
    assert f"outside 0.90-1.10 in {len(off)} of {len(ratios)} cells" in envelope.POWERSGD
    below = sum(r < 1.0 for r in ratios)
    assert f"{below} of {len(ratios)} below 1" in envelope.POWERSGD
    assert f"up to {round((1 - min(ratios)) * 100)}% fewer samples/s" in envelope.POWERSGD
    # What the comment beside it says of the other hooks there: 14 of 14 within, 0.92-1.09.
    others = [float(row[8].split()[0]) for row in rows if not row[3].startswith("powersgd")]
    assert f"({min(others):.2f}-{max(others):.2f}, {len(others)} of {len(others)})" in \
        inspect.getsource(envelope)
    assert 0.90 <= min(others) and max(others) <= 1.10
    cited = re.search(r"results/reference/([\w-]+)/\)", envelope.POWERSGD)
    assert cited and (REPO / "results" / "reference" / cited.group(1) / "README.md").is_file()
