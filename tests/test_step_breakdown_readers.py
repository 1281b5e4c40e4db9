"""Issue 26's step breakdown and straggler where people look: the matrix's line per job,
`bench table`'s slowest-rank column and the report's breakdown section; records without
the fields (older ones) and with null (failed rows) render as before."""
from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from bench import record
from bench.analysis import breakdown, plot, report
from bench.analysis.table import render
from bench.host import matrix
from bench.host.outcome import JobOutcome, NodeOutcome
from tests.conftest import REPO
from tests.helpers.step_breakdown import with_breakdown
from tests.test_hostile_records import HOSTILE_TEXT, TRAINING_VALUES

FIXTURE = REPO / "tests" / "fixtures" / "table-fixture.jsonl"
NULLS = dict.fromkeys(("step_breakdown", "straggler", "straggler_check", "without_slowest",
                       "link_probe"))


def fixture_records() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def rows_of(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_the_synthetic_records_are_valid_against_the_schema():
    base = fixture_records()[0]
    for rec in (with_breakdown(base), with_breakdown(base, slow_rank=None), {**base, **NULLS}):
        assert record.problem_of(rec) is None


# --- the matrix's line per job ---------------------------------------------------------------

def test_the_job_line_names_the_straggler_and_the_prediction():
    rec = with_breakdown(fixture_records()[0])
    assert matrix.straggler_words(rec) == \
        "; straggler rank 3 (node 2): compute +25%, costs 20%"
    assert breakdown.without_slowest_line(rec) == \
        "without node 2: 1.15x predicted, 123 samples/s"


class _FinishedLauncher:
    """Every job ends at once, rank 0 having printed ``rec`` after the marker."""
    name = "native"

    def __init__(self, rec: dict) -> None:
        self.rec = rec

    def launch(self, job) -> JobOutcome:
        node = NodeOutcome(rank=0, host="node0", returncode=0, last_lines=[],
                           output=[record.MARKER, record.dumps(self.rec)])
        return JobOutcome(nodes=[node], timed_out=False, seconds=1.5)


def _job_lines(rec: dict, tmp_path: Path, capsys) -> list[str]:
    cfg = matrix.MatrixConfig.from_args(["--models", "smallcnn", "--results",
                                         str(tmp_path / "runs.jsonl"), "--", "--steps", "2"],
                                        "bench matrix")
    assert matrix.run(cfg, _FinishedLauncher(rec)) == 0
    lines = capsys.readouterr().err.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("[matrix] job 1/1"))
    return lines[first:-1]     # the job's lines, without the matrix's last


def test_the_matrix_prints_the_straggler_on_the_jobs_line(tmp_path: Path, capsys):
    job, prediction = _job_lines(with_breakdown(fixture_records()[0]), tmp_path, capsys)
    assert job.endswith(" ok, 200.0 samples/s in 1.5 s; straggler rank 3 (node 2): "
                        "compute +25%, costs 20%"), job
    assert prediction == "[matrix]   without node 2: 1.15x predicted, 123 samples/s"


def test_the_matrix_line_of_an_old_record_is_unchanged(tmp_path: Path, capsys):
    (job,) = _job_lines(fixture_records()[0], tmp_path, capsys)
    assert job.endswith(" ok, 200.0 samples/s in 1.5 s"), job


def test_the_job_line_of_an_old_a_failed_or_an_even_run_adds_nothing():
    base = fixture_records()[0]
    for rec in (base, {**base, **NULLS}, with_breakdown(base, slow_rank=None)):
        assert matrix.straggler_words(rec) == ""
        assert breakdown.without_slowest_line(rec) == ""


def test_an_unchecked_record_puts_no_text_of_its_own_on_the_terminal():
    """The matrix prints records it has not checked against the schema: a part that is not
    the contract's, a rank that is text, a number too large for a float show as ``?``."""
    rec = {"straggler": {"rank": "\x1b[31m3", "node": 10 ** 400, "part": "\x1b]0;pwned\x07",
                         "excess_share": 10 ** 400, "cost_share": float("nan")},
           "without_slowest": {"node": True, "speedup": 1.5, "samples_per_s": "x"}}
    assert matrix.straggler_words(rec) == "; straggler rank ? (node ?): step ?"
    assert breakdown.without_slowest_line(rec) == "without node ?: 1.50x predicted"


# --- bench table ------------------------------------------------------------------------------

def _batch(records: list[dict], batch: int) -> list[dict]:
    return [r for r in records if r["batch_size_per_device"] == batch]


def test_the_slowest_rank_column_names_the_straggler_or_says_none():
    records = _batch(fixture_records(), 64)
    # 1x1 rows: old records (blank); 1x2 rows: checked, nobody named (none); 2x1: rank 3.
    for rec in records:
        if rec["world_size"] == 2 and rec["nnodes"] == 1:
            rec.update(with_breakdown(rec, slow_rank=None))
        elif rec["nnodes"] == 2:
            rec.update(with_breakdown(rec))
    text = render(records)
    header = [line for line in text.splitlines() if line.startswith("|")][0]
    assert [c.strip() for c in header.strip("|").split("|")][10] == "slowest rank"
    rows = {row[0]: row for row in rows_of(text)}
    named = sum(r["nnodes"] == 2 for r in records)
    assert rows["single GPU"][10] == ""
    assert rows["multi-GPU"][10] == "none"
    assert rows["multi-node"][10] == "r3/n2 compute +25%" + \
        (f" ({named}/{named})" if named > 1 else "")
    csv = render(records, "csv").splitlines()
    assert "slowest rank" in csv[0].split(",")


def test_a_table_of_old_records_keeps_its_columns():
    records = _batch(fixture_records(), 64)
    nulls = [{**r, **NULLS} for r in records]
    for text in (render(records), render(nulls)):
        assert "slowest rank" not in text
        assert all(len(row) == 10 for row in rows_of(text))


def test_only_the_repeats_that_named_a_straggler_are_counted():
    cell = [with_breakdown(r, slow_rank=s)
            for r, s in zip(fixture_records()[:3], (3, None, 2), strict=True)]
    cell[2]["straggler"]["cost_share"] = 0.4   # the repeat whose straggler costs most
    assert breakdown.table_cell(cell) == "r2/n2 compute +25% (2/3)"


# --- the report -------------------------------------------------------------------------------

HOSTILE_HOST = "<script>alert(1)</script>|*n2*"


def _report_records() -> list[dict]:
    records = _batch(fixture_records(), 64)
    for rec in records:
        if rec["nnodes"] == 2:
            rec.update(with_breakdown(rec, host=HOSTILE_HOST))
        elif rec["world_size"] == 2:
            rec.update(with_breakdown(rec, slow_rank=None))
    return records


def test_the_report_shows_the_breakdown_and_the_slowest_run(tmp_path: Path):
    results = tmp_path / "runs.jsonl"
    records = _report_records()
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    md, page = report.write(results)
    charts = sorted(p.name for p in tmp_path.glob("runs-*.png"))
    assert [c for c in charts if c.endswith(plot.BREAKDOWN_SUFFIXES)] == [
        "runs-resnet152-synthetic-steps-fp32-nccl-none-ddp-eager-breakdown.png",
        "runs-slowest-ranks.png"]
    text = md.read_text()
    section = text.split("## Step breakdown")[1].split("\n## ")[0]
    assert "mean over ranks of that part's mean" in section      # the caption says which
    assert "![runs-slowest-ranks](runs-slowest-ranks.png)" in section
    assert "straggler: rank 3 (node 2, &lt;script&gt;" in section
    assert "- prediction: without node 2: 123 samples/s predicted (1.15x)" in section
    # The breakdown's charts are in their section, not again under Plots.
    assert "slowest-ranks" not in text.split("## Plots")[1]
    page_text = page.read_text()
    assert "<script>" not in page_text
    assert html.escape(f"rank 3 (node 2, {HOSTILE_HOST}, cpu)") in page_text
    assert page_text.count("data:image/png;base64,") == len(charts)
    assert "<h2>Step breakdown</h2>" in page_text
    # The HTML scaling tables carry the column too.
    assert re.search(r"<th[^>]*>\s*slowest rank\s*</th>", page_text)


def test_a_report_of_old_records_has_no_breakdown_section(tmp_path: Path):
    results = tmp_path / "runs.jsonl"
    shutil.copy(FIXTURE, results)
    md, page = report.write(results)
    assert "Step breakdown" not in md.read_text() + page.read_text()
    assert not [p for p in tmp_path.glob("runs-*.png")
                if p.name.endswith(plot.BREAKDOWN_SUFFIXES)]


def test_a_breakdown_of_failed_runs_only_says_so():
    failed = [dict(with_breakdown(r, slow_rank=None), status="error", error="x",
                   step_breakdown=None) for r in fixture_records()[:2]]
    results = Path("runs.jsonl")
    assert report.NO_BREAKDOWN in report.markdown(results, failed).split("## Step breakdown")[1]
    assert f"<p>{report.NO_BREAKDOWN}</p>" in report.to_html(results, failed)


def test_the_slowest_run_is_the_one_whose_straggler_costs_most():
    records = _report_records()
    for share, rec in zip((0.1, 0.6, 0.3), [r for r in records if r["nnodes"] == 2],
                          strict=False):
        rec["straggler"]["cost_share"] = share
    slow = breakdown.slowest(records)
    assert slow is not None and slow["straggler"]["cost_share"] == max(
        r["straggler"]["cost_share"] for r in records if r["nnodes"] == 2)
    # Without a named straggler, the largest excess any rank had decides.
    even = [with_breakdown(r, slow_rank=None) for r in fixture_records()[:2]]
    even[1]["straggler_check"]["largest_excess_share"] = 0.04
    assert breakdown.slowest(even) is even[1]
    assert breakdown.slowest(fixture_records()) is None


def test_the_per_rank_bars_stop_at_the_limit_keeping_the_straggler():
    rec = with_breakdown(fixture_records()[0])
    many = rec["step_breakdown"]["ranks"] * 20
    rec["step_breakdown"]["ranks"] = [dict(r, rank=i) for i, r in enumerate(many)]
    # Named, though its step is no longer than most: it is kept, then the 7 longest steps
    # (every fourth rank is slow), in rank order.
    rec["straggler"].update(rank=40, node=0)
    bars = breakdown.rank_bars(rec, 8)
    labels = [b.label for b in bars]
    assert len(bars) == 8 and "r40/n0" in labels
    assert labels == sorted(labels, key=lambda label: int(label[1:].split("/")[0]))
    assert [breakdown.is_straggler(rec, b) for b in bars].count(True) == 1
    assert sum(b.label.endswith("/n2") for b in bars) == 7


# --- any value the schema accepts --------------------------------------------------------------

SECTIONS = ("step_breakdown", "straggler", "straggler_check", "without_slowest", "link_probe")


@st.composite
def accepted_sections(draw) -> dict:
    """A real record with each of issue 26's sections drawn from the schema, or with the
    synthetic ones and single fields inside them drawn from the schema."""
    rec = with_breakdown(fixture_records()[0], slow_rank=draw(st.sampled_from([3, None])))
    for name in SECTIONS:
        if draw(st.booleans()):
            rec[name] = draw(TRAINING_VALUES.values(TRAINING_VALUES.at((name,))))
    for path in draw(st.lists(st.sampled_from(_leaf_paths(rec)), max_size=6)):
        target = rec
        try:
            for step in path[:-1]:
                target = target[step]
            target[path[-1]] = draw(TRAINING_VALUES.values(TRAINING_VALUES.at(path)))
        except (KeyError, IndexError, TypeError):   # an earlier draw replaced its parent
            continue
    # The texts the report writes, often hostile (a leaf drawn above is seldom one of them).
    for path in TEXT_PATHS:
        section = rec.get(path[0])
        if isinstance(section, dict) and draw(st.booleans()):
            accepts = TRAINING_VALUES.check(TRAINING_VALUES.at(path))
            section[path[1]] = draw(st.sampled_from(HOSTILE_TEXT + MARKUP).filter(accepts))
    assert record.problem_of(rec) is None
    return rec


TEXT_PATHS = [("straggler", "summary"), ("straggler", "host"), ("straggler_check", "note"),
              ("without_slowest", "summary")]
MARKUP = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "</li></ul><h2>x",
          "&lt;", "**bold** [link](http://x) ![i](x.png)", "# heading"]


def _leaf_paths(rec: dict) -> list[tuple]:
    synthetic = with_breakdown(fixture_records()[0])
    paths: list[tuple] = []

    def walk(value, prefix: tuple) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, (*prefix, key))
        elif isinstance(value, list) and value:
            walk(value[0], (*prefix, 0))
        paths.append(prefix)

    for name in SECTIONS:
        walk(synthetic[name], (name,))
    return paths


@given(rec=accepted_sections())
def test_any_accepted_breakdown_formats_without_error_and_escaped(rec):
    records = [rec, with_breakdown(fixture_records()[1], slow_rank=None)]
    words = matrix.straggler_words(rec) + breakdown.without_slowest_line(rec)
    assert "\n" not in words and words.isprintable()
    cell = breakdown.table_cell(records)
    table = render(records, "github")
    assert cell.isprintable() and "<" not in table
    bars = breakdown.rank_bars(rec, plot.MAX_RANK_BARS)
    assert len(bars) <= plot.MAX_RANK_BARS
    breakdown.mean_bar(rec, "x")
    title, lines = report.breakdown_text(records)
    results = Path("runs.jsonl")
    page = report.to_html(results, records)
    section = page.split("<h2>Step breakdown</h2>")[1].split("<h2>")[0].split("</body>")[0]
    # What is left once the section's own tags are taken out: text, with no tag of its own.
    assert "<" not in re.sub(r"</?(h3|ul|li)>", "", section), section[:400]
    for line in lines:
        assert report._html_text(line) in section
    markdown = report.markdown(results, records).split("## Step breakdown")[1]
    assert "<" not in markdown.split("\n## ")[0]
