"""Writers never clobber or follow (issue 24): every report, page and plot goes through
``paths.write_output``, which refuses an input, a symbolic link or a file bench did not
make, and writes atomically; and record text reaches Markdown only through
``table.markdown_text``, so it adds no row, column, line, tag or link."""
from __future__ import annotations

import copy
import html
import json
import os
import re
import stat
import unicodedata
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from markdown_it import MarkdownIt  # with import-linter (pinned), through rich

from bench import paths
from bench.analysis import plot, report
from bench.analysis.table import MARKDOWN_LIMIT, markdown_text, render
from bench.host import matrix
from bench.options import ConfigError
from conftest import REPO

FIXTURE = REPO / "tests" / "fixtures" / "table-fixture.jsonl"


def fixture_records() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def snapshot(directory) -> dict[str, bytes | str]:
    """Every entry of ``directory``: a file's bytes, a link's target."""
    return {p.name: (f"-> {os.readlink(p)}" if p.is_symlink() else p.read_bytes())
            for p in sorted(directory.iterdir())}


@pytest.fixture
def results(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_bytes(FIXTURE.read_bytes())
    return path


# --- bench report -------------------------------------------------------------------------

def test_a_report_over_its_own_input_is_refused_and_the_input_unchanged(tmp_path, capsys):
    records = tmp_path / "runs.md"     # records in a file with a report's name
    records.write_bytes(FIXTURE.read_bytes())
    before = snapshot(tmp_path)
    assert report.main([str(records)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is the input" in err and str(records) in err
    assert snapshot(tmp_path) == before, "nothing written: no page, no chart, no temp file"


def test_a_report_over_its_prediction_file_is_refused(results, capsys):
    prediction = results.with_suffix(".html")
    prediction.write_text("2 nodes: 1.62x predicted\n")
    before = snapshot(results.parent)
    assert report.main([str(results), "--prediction", str(prediction)]) == 2
    assert "is the input" in capsys.readouterr().err
    assert snapshot(results.parent) == before


def test_a_hard_link_to_the_input_at_the_report_path_is_refused(results, capsys):
    os.link(results, results.with_suffix(".md"))
    before = snapshot(results.parent)
    assert report.main([str(results)]) == 2
    assert "is the input" in capsys.readouterr().err
    assert snapshot(results.parent) == before


def test_notes_beside_their_records_survive(tmp_path, capsys):
    records, notes = tmp_path / "notes.jsonl", tmp_path / "notes.md"
    records.write_bytes(FIXTURE.read_bytes())
    notes.write_text("# my notes on these runs\n")
    before = snapshot(tmp_path)
    assert report.main([str(records)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(notes) in err
    assert "not written by bench" in err and "move it away" in err
    assert snapshot(tmp_path) == before, "not even the charts or the .html are written"


@pytest.mark.parametrize("page", [".md", ".html"])
def test_a_planted_link_at_a_report_path_is_refused_and_its_target_unchanged(results, page,
                                                                            tmp_path, capsys):
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    target = outside / "authorized_keys"
    target.write_text("ssh-ed25519 AAAA... user\n")
    results.with_suffix(page).symlink_to(target)
    before = snapshot(results.parent)
    assert report.main([str(results)]) == 2
    assert "is a symbolic link" in capsys.readouterr().err
    assert target.read_text() == "ssh-ed25519 AAAA... user\n"
    assert snapshot(results.parent) == before


def test_a_dangling_link_at_a_report_path_creates_nothing(results, tmp_path, capsys):
    target = tmp_path.parent / f"{tmp_path.name}-created-by-the-report"
    results.with_suffix(".md").symlink_to(target)
    assert report.main([str(results)]) == 2
    assert "is a symbolic link" in capsys.readouterr().err
    assert not target.exists()


def test_a_stack_made_report_is_replaced_atomically(results, capsys):
    assert report.main([str(results)]) == 0
    md, page = report.pages(results)
    first = {p: p.stat().st_ino for p in results.parent.iterdir() if p != results}
    assert len(first) >= 3 and all(p.read_bytes()[:4096].find(b"bench") >= 0 for p in first)
    assert report.main([str(results)]) == 0, capsys.readouterr().err
    second = {p: p.stat().st_ino for p in results.parent.iterdir() if p != results}
    assert second.keys() == first.keys(), "no temporary file left behind"
    # A rename onto the old name: a new inode each time, never the old file rewritten.
    assert all(second[p] != first[p] for p in first)
    assert md.read_text().startswith(paths.MARK_COMMENT)
    assert page.read_text().startswith(paths.MARK_COMMENT + "\n<!doctype html>")
    assert stat.S_IMODE(md.stat().st_mode) == 0o666 & ~paths._umask()


# --- bench plot ---------------------------------------------------------------------------

def test_a_plot_path_that_is_a_link_is_refused_and_no_chart_written(results, tmp_path,
                                                                     capsys):
    made = [path for path, _ in plot.charts(results)]
    target = tmp_path.parent / f"{tmp_path.name}-target.png"
    target.write_bytes(b"not yours")
    made[-1].symlink_to(target)
    before = snapshot(results.parent)
    assert plot.main([str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is a symbolic link" in err and "--out-dir" in err
    assert target.read_bytes() == b"not yours"
    assert snapshot(results.parent) == before


def test_a_chart_bench_made_is_replaced_and_a_users_png_is_not(results, capsys):
    assert plot.main([str(results)]) == 0
    made = [path for path, _ in plot.charts(results)]
    assert plot.main([str(results)]) == 0, capsys.readouterr().err
    made[0].write_bytes(made[0].read_bytes().replace(paths.OWNED_MARK.encode(),
                                                     b"x" * len(paths.OWNED_MARK)))
    users = made[0].read_bytes()
    assert plot.main([str(results)]) == 2
    assert "not written by bench" in capsys.readouterr().err
    assert made[0].read_bytes() == users


# --- the writer itself ----------------------------------------------------------------------

def test_output_without_the_mark_is_a_programming_error(tmp_path):
    with pytest.raises(ValueError):
        paths.write_output(tmp_path / "x.md", "# no mark\n", setting="output")
    assert not list(tmp_path.iterdir())


def test_a_failed_write_removes_its_temporary_file_and_keeps_the_old(tmp_path, monkeypatch):
    out = tmp_path / "runs.md"
    paths.write_output(out, paths.MARK_COMMENT + "\nold\n", setting="output")

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError):
        paths.write_output(out, paths.MARK_COMMENT + "\nnew\n", setting="output")
    assert [p.name for p in tmp_path.iterdir()] == ["runs.md"]
    assert out.read_text() == paths.MARK_COMMENT + "\nold\n"


def test_a_fifo_or_a_directory_at_the_path_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "fifo.md")
    (tmp_path / "dir.md").mkdir()
    for name in ("fifo.md", "dir.md"):
        with pytest.raises(ConfigError, match="not a regular file"):
            paths.write_output(tmp_path / name, paths.MARK_COMMENT, setting="output")


# --- bench matrix --results ------------------------------------------------------------------

def dry_run(results, capsys) -> tuple[int, str]:
    code = matrix.main(["--dry-run", "--results", str(results), "--topologies", "1x1",
                        "--", "--steps", "1"])
    return code, capsys.readouterr().err.strip()


def test_matrix_takes_a_jsonl_results_file_beside_its_own_report(results, capsys):
    report.write(results)
    assert dry_run(results, capsys)[0] == 0


@pytest.mark.parametrize("name", ["runs.md", "runs.html", "runs", "runs.json"])
def test_matrix_results_with_a_report_name_are_refused_before_anything_runs(tmp_path, name,
                                                                           capsys):
    results = tmp_path / name
    results.write_bytes(FIXTURE.read_bytes())
    code, err = dry_run(results, capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert "--results" in err and "must end in .jsonl" in err
    assert results.read_bytes() == FIXTURE.read_bytes()


def test_matrix_results_that_are_a_link_are_refused(results, tmp_path, capsys):
    link = tmp_path / "latest.jsonl"
    link.symlink_to(results)
    code, err = dry_run(link, capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert "is a symbolic link" in err and str(results) in err, "names the file to give"


def test_matrix_refuses_up_front_a_users_file_where_its_report_goes(results, capsys):
    results.with_suffix(".html").write_text("<p>my page</p>\n")
    code, err = dry_run(results, capsys)
    assert code == 2 and "not written by bench" in err
    assert results.with_suffix(".html").read_text() == "<p>my page</p>\n"


def test_matrix_report_replaces_its_own_report(results, capsys):
    matrix._report(results)
    matrix._report(results)
    err = capsys.readouterr().err
    assert "no report" not in err and err.count("[matrix] report:") == 2


# --- Markdown from hostile records -----------------------------------------------------------

SNIPPETS = ["|", "\\|", "\\", "\n", "\r\n", "\r", "\u2028", "\u2029", "\x85", "\x0b", "\x0c",
            "\x1c", "\x1e", "\x00", "\x1b[31m", "\t", "<script>alert(1)</script>",
            "<img src=x onerror=alert(1)>", "&lt;", "&amp;", "&#60;", "`", "```", "~~~",
            "$x$", "$$", "*", "**", "_", "~~", "[a](http://x)", "![i](x)", "[r]: /u",
            "<http://x>", "# ", "###### ", "- ", "+ ", "1. ", "2) ", "> ", "===", "---",
            "    ", "<!--", "-->", "\u202e", "\u200b", "\ufeff", "\ud800", " ", "é", "💥",
            "$(touch x)", "'", '"', "0"]
HOSTILE = st.one_of(
    st.lists(st.one_of(st.sampled_from(SNIPPETS), st.text(max_size=8)), max_size=40)
    .map("".join),
    st.text(max_size=200),
    # 4 KiB and beyond: a short hostile text repeated.
    st.builds(lambda text, times: text * times,
              st.lists(st.sampled_from(SNIPPETS), min_size=1, max_size=6).map("".join),
              st.integers(300, 1200)),
)


def _set(rec: dict, keys: tuple[str, ...], value) -> None:
    for key in keys[:-1]:
        rec = rec.setdefault(key, {})
    rec[keys[-1]] = value


# Every string of a record that a table or the report shows.
SHOWN = {
    "model": ("config", "model", "model"),
    "data": ("config", "data", "data"),
    "precision": ("config", "precision", "precision"),
    "backend": ("config", "distributed", "backend"),
    "comm_hook": ("comm_hook",),
    "strategy": ("strategy",),
    "error": ("error",),
    "cpu_model": ("env", "cpu_model"),
    "torch": ("env", "torch"),
    "cuda": ("env", "cuda"),
    "nccl": ("env", "nccl"),
    "image": ("env", "image_digest"),
    "git": ("env", "git_commit"),
    "link": ("env", "link", "rate"),
    "launcher": ("matrix", "launcher"),
}


def hostile_records(values: dict[str, str], host: str, device: str) -> list[dict]:
    records = copy.deepcopy(FIXTURE_RECORDS)
    for rec in records:
        for name, keys in SHOWN.items():
            if name != "error" or rec["status"] != "ok":
                _set(rec, keys, values[name])
        rec["env"]["hostnames"] = [host]
        for rank in rec["env"]["ranks"]:
            rank["device"], rank["hostname"] = device, host
    return records


FIXTURE_RECORDS = fixture_records()
BENIGN = hostile_records(dict.fromkeys(SHOWN, "x"), "x", "x")
RECORDS = st.builds(hostile_records, st.fixed_dictionaries(dict.fromkeys(SHOWN, HOSTILE)),
                    HOSTILE, HOSTILE)
PARSER = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def unescaped_pipes(line: str) -> int:
    """``|`` not escaped by a backslash (one preceded by an even run of backslashes)."""
    return len(re.findall(r"(?<!\\)(?:\\\\)*\|", line))


def tables_of(text: str) -> list[list[str]]:
    """The lines of each table (runs of lines starting with ``|``)."""
    tables, current = [], []
    for line in text.split("\n") + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables


def shape(text: str) -> list[list[int]]:
    """What a CommonMark (+ tables) renderer makes of ``text``: cells per row, per table."""
    tables = re.findall(r"<table>.*?</table>", PARSER.render(text), flags=re.S)
    return [[len(re.findall(r"<t[hd][ >]", row)) for row in re.findall(r"<tr>.*?</tr>",
                                                                       table, flags=re.S)]
            for table in tables]


def lines(text: str) -> list[str]:
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def assert_same_structure(hostile: str, benign: str) -> None:
    assert hostile.splitlines() == lines(hostile), "no line break but the renderer's own"
    assert len(hostile.split("\n")) == len(benign.split("\n")), "a record added a line"
    for table in tables_of(hostile):
        assert len({unescaped_pipes(line) for line in table}) == 1, table
    assert [len(t) for t in tables_of(hostile)] == [len(t) for t in tables_of(benign)]
    assert shape(hostile) == shape(benign), "rows and columns as a renderer sees them"
    without_mark = hostile.replace(paths.MARK_COMMENT, "")
    assert "<" not in without_mark and ">" not in without_mark


@given(RECORDS)
def test_table_markdown_keeps_its_rows_and_columns_whatever_the_records_hold(records):
    for fmt in ("markdown", "github"):
        assert_same_structure(render(records, fmt), render(BENIGN, fmt))


@given(RECORDS, HOSTILE)
def test_report_markdown_keeps_its_structure_whatever_the_records_hold(records, name):
    # A file name as the file system gives it: any bytes but / and NUL, undecodable ones
    # as surrogates.
    raw = name.encode("utf-8", "surrogatepass").replace(b"/", b"_").replace(b"\0", b"_")
    stem = os.fsdecode(raw[:100]) or "x"
    results = Path("/r") / f"{stem}.jsonl"
    charts = [(results.with_name(f"{stem}-a-metric.png"), b"")]
    text = report.markdown(results, records, None, charts)
    benign = report.markdown(Path("/r/x.jsonl"), BENIGN, None, [(Path("/r/x-a.png"), b"")])
    assert text.startswith(paths.MARK_COMMENT + "\n")
    assert_same_structure(text, benign)
    page = PARSER.render(text)
    assert page.count("<img") == 1 and "<a " not in page, "one image, the chart's; no link"
    assert page.count("<h1>") == 1 and page.count("<li>") == benign.count("\n- ")


class _Tags(HTMLParser):
    def __init__(self, page: str):
        super().__init__()
        self.tags: Counter = Counter()
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.tags[tag] += 1


@given(RECORDS, HOSTILE)
def test_the_html_page_keeps_its_elements_whatever_the_records_hold(records, name):
    charts = [(Path("/r/x-a-metric.png"), b"\x89PNG")]
    page = report.to_html(Path("/r") / f"{name}.jsonl", records, f"p{name}", charts)
    benign = report.to_html(Path("/r/x.jsonl"), BENIGN, "x", charts)
    assert _Tags(page).tags == _Tags(benign).tags, "no element from a record"


def shown_text(value: str) -> str:
    """What ``markdown_text`` promises to show of ``value``."""
    text = "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") else c
                   for c in value)
    text = text[:MARKDOWN_LIMIT - 1] + "\u2026" if len(text) > MARKDOWN_LIMIT else text
    return text.strip(" ")


@given(HOSTILE)
def test_markdown_text_renders_as_exactly_its_characters_in_one_paragraph(value):
    escaped = markdown_text(value)
    rendered = PARSER.render(escaped)
    shown = shown_text(value)
    if not shown:
        assert rendered == ""
        return
    assert rendered.startswith("<p>") and rendered.endswith("</p>\n")
    inner = rendered[3:-5]
    assert "<" not in inner, "no tag: no emphasis, code, link, image or HTML"
    assert html.unescape(inner) == shown
    assert "\n" not in escaped and len(escaped) <= 6 * MARKDOWN_LIMIT
