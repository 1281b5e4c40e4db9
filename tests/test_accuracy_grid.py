"""The accuracy grid (issue 29): its file, checked before anything runs; the script running
every workload of it, going on past one that fails; one table of every cell."""
from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import accuracy_grid
from bench.analysis import accuracy
from bench.config import COMM_HOOKS
from bench.options import ConfigError
from bench.topology import shown_path
from tests.conftest import REPO

SHIPPED = REPO / "scripts" / "accuracy-grid.tsv"
SCRIPT = REPO / "scripts" / "prediction_accuracy.py"
# Records of one workload of the grid, measured (results/reference/accuracy-grid-2).
MEASURED = REPO / "results" / "reference" / "accuracy-grid-2" / "smallcnn-b64-1gbit"


def test_the_shipped_grid_spans_other_workloads_with_a_held_out_part():
    grid = accuracy_grid.load(SHIPPED)
    names = [w.name for w in grid]
    assert len(set(names)) == len(names)
    assert {w.model for w in grid} >= {"resnet18", "smallcnn", "mlp"}
    assert any(w.held_out for w in grid) and not all(w.held_out for w in grid)
    assert {h for w in grid for h in w.hooks} == set(COMM_HOOKS)
    # Not the reference check's workload (the MLP 1024x4 at batch 16).
    assert not any(w.model == "mlp" and (w.mlp_width, w.mlp_depth, w.batch_size)
                   == (1024, 4, 16) for w in grid)


def test_a_line_becomes_a_workload():
    w = accuracy_grid.parse_line("mlp-a  mlp 8 512x8 1gbit,5gbit none,fp16 held-out # x", 3,
                                 "g.tsv")
    assert w == accuracy_grid.Workload("mlp-a", "mlp", 8, None, 512, 8, ("1gbit", "5gbit"),
                                       ("none", "fp16"), True, 3)
    assert w.label == "mlp 512x8, batch 8"
    r = accuracy_grid.parse_line("r\tresnet18\t16\t32\t5gbit\tpowersgd\tdev", 1, "g.tsv")
    assert (r.image_size, r.mlp_width, r.held_out, r.label) == \
        (32, None, False, "resnet18 32 px, batch 16")
    assert accuracy_grid.parse_line("   # only a comment", 1, "g.tsv") is None


@pytest.mark.parametrize("line, field", [
    ("a mlp 8 512x8 5gbit none", "7 fields"),
    ("a mlp 8 512x8 5gbit none dev extra", "7 fields"),
    ("-a mlp 8 512x8 5gbit none dev", "name"),
    ("../a mlp 8 512x8 5gbit none dev", "name"),
    ("a/b mlp 8 512x8 5gbit none dev", "name"),
    ("a mlp 0 512x8 5gbit none dev", "batch"),
    ("a mlp 1e3 512x8 5gbit none dev", "batch"),
    ("a mlp 9999 512x8 5gbit none dev", "batch"),
    ("a mlp 8 512 5gbit none dev", "shape"),
    ("a resnet18 8 512x8 5gbit none dev", "shape"),
    ("a resnet18 8 16 5gbit none dev", "shape=16: resnets"),   # the trainer's own check
    ("a vit_b_16 8 40 5gbit none dev", "shape=40"),
    ("a mlp 8 9999999x8 5gbit none dev", "shape"),
    ("a resnet9000 8 32 5gbit none dev", "model=resnet9000"),
    ("a mlp 8 512x8 5gbps none dev", "links"),
    ("a mlp 8 512x8 5gbit, none dev", "links"),
    ("a mlp 8 512x8 5gbit,5gbit none dev", "links/hooks"),
    ("a mlp 8 512x8 5gbit int8 dev", "hooks"),
    ("a mlp 8 512x8 5gbit none test", "set"),
])
def test_a_bad_field_is_named_with_its_file_and_line(line, field):
    with pytest.raises(ConfigError) as error:
        accuracy_grid.parse(f"# a grid\n{line}\n", "g.tsv")
    assert str(error.value).startswith("g.tsv:2") and field in str(error.value)


def test_a_name_twice_and_an_empty_grid_are_refused():
    with pytest.raises(ConfigError, match=r"g.tsv:2: name.*line 1"):
        accuracy_grid.parse("a mlp 8 64x2 1gbit none dev\na smallcnn 8 - 1gbit none dev",
                            "g.tsv")
    with pytest.raises(ConfigError, match="no workload"):
        accuracy_grid.parse("# nothing\n\n", "g.tsv")


def test_a_file_that_is_not_a_grid_is_refused(tmp_path):
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe a mlp")
    big = tmp_path / "big"
    big.write_text("#" * (accuracy_grid.MAX_BYTES + 1))
    for path, why in ((binary, "UTF-8"), (big, "bytes"), (tmp_path / "none", "read")):
        with pytest.raises(ConfigError, match=why):
            accuracy_grid.load(path)


def test_workloads_picks_a_part_of_the_grid_in_its_order():
    grid = accuracy_grid.load(SHIPPED)
    picked = accuracy_grid.chosen(grid, f"{grid[2].name},{grid[0].name}")
    assert picked == [grid[0], grid[2]]
    with pytest.raises(ConfigError, match="--workloads"):
        accuracy_grid.chosen(grid, "no-such-workload")


_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
_workloads = st.builds(
    lambda name, mlp, side, batch, links, hooks, held: (
        f"{name} {'mlp' if mlp else 'smallcnn'} {batch} "
        f"{f'{mlp[0]}x{mlp[1]}' if mlp else side} {','.join(links)} {','.join(hooks)} "
        f"{'held-out' if held else 'dev'}"),
    _names, st.none() | st.tuples(st.integers(1, 4096), st.integers(1, 64)),
    st.sampled_from(["-", "28", "64"]), st.integers(1, 4096),
    st.lists(st.sampled_from(["1gbit", "5gbit", "10gbit", "100mbit"]), min_size=1,
             max_size=3, unique=True),
    st.lists(st.sampled_from(COMM_HOOKS), min_size=1, max_size=4, unique=True),
    st.booleans())


@given(st.lists(_workloads, min_size=1, max_size=5, unique_by=lambda line: line.split()[0]))
def test_every_written_workload_reads_back_as_written(lines):
    grid = accuracy_grid.parse("\n".join(lines), "g.tsv")
    assert [w.line for w in grid] == list(range(1, len(lines) + 1))
    for w, line in zip(grid, lines, strict=True):
        name, model, batch, shape, links, hooks, kind = line.split()
        assert (w.name, w.model, w.batch_size, ",".join(w.links), ",".join(w.hooks)) == \
            (name, model, int(batch), links, hooks)
        assert w.held_out is (kind == "held-out")
        assert (f"{w.mlp_width}x{w.mlp_depth}" if model == "mlp"
                else str(w.image_size or "-")) == shape


@given(st.text(max_size=300))
def test_any_text_is_a_grid_or_one_config_error(text):
    try:
        grid = accuracy_grid.parse(text, "g.tsv")
    except ConfigError as error:
        assert str(error).startswith(("g.tsv", "--grid"))
        assert "\n" not in str(error)
        return
    for w in grid:   # whatever is accepted is safe to use: a name is one plain component
        assert accuracy_grid._NAME.fullmatch(w.name) and Path(w.name).name == w.name
        assert 1 <= w.batch_size <= 4096 and w.links and w.hooks


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=60)


@pytest.mark.parametrize("args, setting", [
    (["--grid", str(SHIPPED), "--model", "resnet18"], "--model"),
    (["--grid", str(SHIPPED), "--links", "1gbit"], "--links"),
    (["--grid", str(SHIPPED), "--workloads", "nope"], "--workloads"),
    (["--workloads", "resnet18-b8-5gbit"], "--workloads"),
    (["--grid", "/no/such/grid.tsv"], "--grid"),
    (["--grid", str(SHIPPED), "--nodes", "1"], "--nodes"),
    (["--grid", str(SHIPPED), "--analyse-only"], "--out"),
    (["--grid", str(SHIPPED), "--steady-s", "5"], "--steady-s"),
    (["--grid", str(SHIPPED), "--steady-s", "nan"], "--steady-s"),
    (["--links", "1gbit", "--steady-s", "-1"], "--steady-s"),
])
def test_the_script_refuses_a_bad_grid_run_in_one_line_and_writes_nothing(tmp_path, args,
                                                                           setting):
    out = tmp_path / "grid"
    proc = _run("--out", str(out), *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and setting in lines[0], proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("args", [["--grid", str(SHIPPED)], ["--links", "1gbit"]])
def test_an_out_that_is_a_file_is_one_line_and_left_as_it_was(tmp_path, args):
    out = tmp_path / "out"
    out.write_text("mine\n")
    proc = _run("--out", str(out), *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--out" in lines[0] and "not a directory" in lines[0], lines
    assert out.read_text() == "mine\n"


@pytest.mark.parametrize("depth", [0, 12])
def test_a_bad_line_of_a_grid_file_stops_the_run_before_anything(tmp_path, depth):
    # Deep or not, the error names the file and the line: a long path keeps its end.
    folder = tmp_path.joinpath(*[f"level-{n}" for n in range(depth)])
    folder.mkdir(parents=True, exist_ok=True)
    grid = folder / "grid.tsv"
    grid.write_text("a smallcnn 8 - 1gbit none dev\nb smallcnn 8 - 1gbit none,zip dev\n")
    proc = _run("--grid", str(grid), "--out", str(tmp_path / "out"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "grid.tsv:2: hooks=zip" in lines[0], lines
    named = shown_path(grid)
    assert f"{named}:2: hooks" in lines[0] and len(named) <= 80
    assert (named == str(grid)) is (len(str(grid)) <= 80)
    assert not (tmp_path / "out").exists()


@given(st.text(max_size=300))
def test_a_path_as_an_error_shows_it_keeps_its_end_on_one_printable_line(text):
    named = shown_path(text)
    assert len(named) <= 80 and named.isascii() and named.isprintable()
    if text and text.isascii() and text.isprintable():
        assert named == text if len(text) <= 80 else \
            (named.startswith("...") and text.endswith(named[3:]))


def _script():
    spec = importlib.util.spec_from_file_location("prediction_accuracy", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _measured_copy(target: Path) -> None:
    """The measured workload's records, as the script left them (logs for the neighbours)."""
    target.mkdir(parents=True)
    for name in ("1gbit.jsonl", "1gbit-comm.jsonl"):
        shutil.copy(MEASURED / name, target / name)
    shutil.copytree(MEASURED / "logs", target / "logs")


def test_a_workload_that_fails_is_named_and_the_rest_are_measured(tmp_path, monkeypatch,
                                                                  capsys):
    grid = tmp_path / "grid.tsv"
    grid.write_text("first smallcnn 64 - 1gbit none,powersgd dev\n"
                    "broken mlp 8 64x2 5gbit none held-out\n"
                    "last smallcnn 64 - 1gbit none,powersgd held-out\n"
                    "partial smallcnn 64 - 1gbit none,powersgd held-out\n")
    script, measured = _script(), []

    def measure(link, out, nodes, flags):
        measured.append((out.name, link, flags.model, flags.batch_size, flags.hooks))
        if out.name == "broken":
            raise subprocess.CalledProcessError(1, ["bench", "matrix"])
        _measured_copy(out / "copy")          # what a real run leaves, moved into place
        for item in (out / "copy").iterdir():
            item.rename(out / item.name)
        if out.name == "partial":             # recorded its cells, then failed
            raise subprocess.CalledProcessError(1, ["bench", "matrix"])

    monkeypatch.setattr(script, "measure", measure)
    monkeypatch.setattr(script, "measure_drift",
                        lambda out, seconds: measured.append((out.name, "drift", seconds)))
    monkeypatch.setattr(sys, "argv", ["prediction_accuracy.py", "--grid", str(grid),
                                      "--nodes", "2", "--out", str(tmp_path / "out"),
                                      "--steady-s", "12"])
    assert script.main() == 1                 # a workload failed: not a clean run
    # The machine's own drift just before and after each workload's rounds, in its own
    # directory (one that failed has no reading after).
    drift = [("first", "drift", 12.0), ("broken", "drift", 12.0), ("last", "drift", 12.0),
             ("partial", "drift", 12.0)]
    assert measured == [drift[0], ("first", "1gbit", "smallcnn", 64, "none,powersgd"),
                        drift[0],
                        drift[1], ("broken", "5gbit", "mlp", 8, "none"),
                        drift[2], ("last", "1gbit", "smallcnn", 64, "none,powersgd"), drift[2],
                        drift[3], ("partial", "1gbit", "smallcnn", 64, "none,powersgd")]
    table = (tmp_path / "out" / "grid.md").read_text()
    printed = capsys.readouterr()
    assert table.split("\n", 1)[1].strip() in printed.out     # the table, printed too
    assert "broken failed" in printed.err and "going on" in printed.err
    expected = accuracy.table(script.found_rows(["1gbit"], tmp_path / "out" / "first"))
    cells = [line.split(" | ", 1)[1] for line in expected.splitlines()[2:]
             if line.startswith("| ")]
    ours = [line for line in table.splitlines() if line.startswith("| smallcnn, batch 64")]
    # Each measured workload's every row, under its name and set; the failed one named.
    assert [line.split(" | ", 3)[3] for line in ours] == cells * 3
    assert [line.split(" | ")[1] for line in ours] == ["dev"] * len(cells) \
        + ["held out"] * 2 * len(cells)
    assert any(line.startswith("| mlp 64x2, batch 8 (`broken`) | held out | failed:")
               for line in table.splitlines())
    assert f"development set: {accuracy._tally(list(_rows(script, tmp_path, 'first')))}" \
        in table
    assert "not in the table: broken (see" in table        # partial has its rows
    assert "partial: its measurement failed: Command" in table
    # Each measured workload also has its own table, as a one-workload run writes it.
    assert expected in (tmp_path / "out" / "last" / "accuracy.md").read_text()


def _rows(script, tmp_path: Path, name: str):
    return script.found_rows(["1gbit"], tmp_path / "out" / name)


def test_analyse_only_rebuilds_the_grid_table_and_names_what_was_not_measured(tmp_path):
    out = tmp_path / "out"
    _measured_copy(out / "smallcnn-b64-1gbit")
    proc = _run("--grid", str(SHIPPED), "--out", str(out), "--analyse-only")
    assert proc.returncode == 0, proc.stderr
    table = (out / "grid.md").read_text()
    rows = [line for line in table.splitlines() if "(`smallcnn-b64-1gbit`) | dev | 1 Gbit/s"
            in line]
    assert len(rows) == 2                     # none and PowerSGD at 2 nodes
    for workload in accuracy_grid.load(SHIPPED):
        if workload.name != "smallcnn-b64-1gbit":
            assert f"(`{workload.name}`) | {'held out' if workload.held_out else 'dev'} | " \
                "results=" in table, workload.name
    summary = [line for line in table.splitlines() if line.startswith(("development", "held"))]
    assert summary[0].startswith("development set: ") and " of 2 rows within" in summary[0]
    assert summary[1] == "held out: 0 of 0 rows within 0.90-1.10 (N-node sweep); 0 of 0 " \
        "measured within the band"
    # The same figures as the workload's own table.
    own = (out / "smallcnn-b64-1gbit" / "accuracy.md").read_text()
    for row in rows:
        assert row.split(" | ", 2)[2] in own


def test_the_grid_table_ends_with_the_machines_drift_where_out_holds_it(tmp_path):
    # A grid run before 2026-11-30 measured the drift once for the whole grid, in OUT.
    out = tmp_path / "out"
    _measured_copy(out / "smallcnn-b64-1gbit")
    _steadiness(out / "steadiness.jsonl", [(0, [100.0, 64.0, 110.0]), (1, [100.0, 99.0])])
    proc = _run("--grid", str(SHIPPED), "--out", str(out), "--analyse-only")
    assert proc.returncode == 0, proc.stderr
    tail = (out / "grid.md").read_text().rstrip().splitlines()[-2:]
    assert tail[0].startswith("this machine's own drift") and "CPU 0 0.64-1.10" in tail[0]
    assert "drift further by themselves (CPU 0" in tail[1]


def _steadiness(path: Path, rates_by_cpu) -> None:
    from bench import provenance, record

    for cpu, rates in rates_by_cpu:
        record.append(path, {
            "schema_version": 1, "run_id": "r", "utc_time": "2026-11-30T09:00:00Z",
            "mode": "steadiness", "status": "ok", "error": None, "cpu": cpu, "seconds": 15.0,
            "window_s": 5.0, "rates": rates, "env": provenance.collect_head()})


def test_a_grid_names_the_workloads_that_met_a_drifting_machine(tmp_path):
    """Each workload's readings, just before and after its rounds, are its own: the grid
    table names the one whose machine drifted past the band, pools every reading for the
    run's line, and each workload's own table ends with its drift."""
    out = tmp_path / "out"
    steady, drifting = "smallcnn-b64-1gbit", "mlp2048x2-b8-1gbit"
    for name, rates in ((steady, [100.0, 97.0, 103.0]), (drifting, [100.0, 68.0, 107.0])):
        _measured_copy(out / name)
        _steadiness(out / name / "steadiness.jsonl", [(0, rates), (1, [50.0, 51.0])])
    proc = _run("--grid", str(SHIPPED), "--out", str(out), "--analyse-only")
    assert proc.returncode == 0, proc.stderr
    table = (out / "grid.md").read_text()
    named = table.split("drifted further than 0.90-1.10:\n", 1)[1].strip().splitlines()
    assert named == [f"- {drifting}: CPU 0 ran 0.68-1.07 of its median from one 5-s window "
                     f"to another (sd 17%): its ratios outside 0.90-1.10 by less may be the "
                     "machine's drift"]
    pooled = [line for line in table.splitlines()
              if line.startswith("this machine's own drift")]
    assert len(pooled) == 1 and "CPU 0 0.68-1.07" in pooled[0] and "6 windows" in pooled[0]
    own = (out / steady / "accuracy.md").read_text()
    assert "CPU 0 0.97-1.03 of its median" in own and "drift further" not in own
    assert "drift further by themselves (CPU 0 ran 0.68-1.07" in \
        (out / drifting / "accuracy.md").read_text()


def test_a_grid_with_steady_workloads_names_none(tmp_path):
    out = tmp_path / "out"
    _measured_copy(out / "smallcnn-b64-1gbit")
    _steadiness(out / "smallcnn-b64-1gbit" / "steadiness.jsonl", [(0, [100.0, 95.0])])
    proc = _run("--grid", str(SHIPPED), "--out", str(out), "--analyse-only")
    assert proc.returncode == 0, proc.stderr
    table = (out / "grid.md").read_text()
    assert "this machine's own drift" in table and "drifted further than" not in table


def test_the_drift_runs_bench_steadiness_into_out_and_a_failure_goes_on(tmp_path,
                                                                      monkeypatch, capsys):
    script, calls = _script(), []

    def run(argv):
        calls.append(argv)
        raise subprocess.CalledProcessError(1, argv)
    monkeypatch.setattr(script, "_run", run)
    script.measure_drift(tmp_path, 12.0)
    script.measure_drift(tmp_path, 0.0)           # 0: skipped
    assert calls == [[sys.executable, "-m", "bench", "steadiness", "--out",
                      str(tmp_path / "steadiness.jsonl"), "--seconds", "12.0"]]
    assert "bench steadiness failed" in capsys.readouterr().err


def test_a_workload_directory_that_is_a_link_out_is_not_read(tmp_path):
    out = tmp_path / "out"
    _measured_copy(tmp_path / "elsewhere")
    out.mkdir()
    (out / "smallcnn-b64-1gbit").symlink_to(tmp_path / "elsewhere")
    proc = _run("--grid", str(SHIPPED), "--out", str(out), "--analyse-only",
                "--workloads", "smallcnn-b64-1gbit")
    assert proc.returncode == 0, proc.stderr
    assert "resolves outside" in (out / "grid.md").read_text()
    assert not (tmp_path / "elsewhere" / "accuracy.md").exists()


def test_the_sweeps_and_the_cells_run_in_rounds_each_repeat_of_both_in_turn(tmp_path,
                                                                             monkeypatch):
    """Round r is repeat r of every sweep (one per element type the hooks send), then repeat
    r of every cell: the machine's drift reaches the sweeps as it does the cells. The cells'
    window is sized once, from the first round's sweeps."""
    script, calls, sized = _script(), [], []
    monkeypatch.setattr(script, "_run", calls.append)
    monkeypatch.setattr(script.record, "load", lambda path, what: [])

    def timed_steps(sweeps, probed, steps, min_timed_s):
        sized.append(len(calls))
        return 42, "sized"
    monkeypatch.setattr(script.timed_window, "timed_steps", timed_steps)
    flags = argparse.Namespace(host_cpus=None, image_size=None, model="smallcnn",
                               batch_size=64, mlp_width=1024, mlp_depth=4,
                               hooks="none,fp16,powersgd", repeats=3, max_size="32MiB",
                               steps=20, min_timed_s=5.0)
    script.measure("1gbit", tmp_path, [2, 3], flags)

    def kind(argv):
        after = argv[argv.index("--") + 1:]
        what = "sweep " + after[after.index("--dtype") + 1] if "allreduce" in argv else "cells"
        return what, argv[argv.index("--repeats") + 1]

    one_round = [("sweep float32", "1"), ("sweep float16", "1"), ("cells", "1")]
    assert [kind(argv) for argv in calls] == one_round * 3
    assert sized == [2]                       # after round 1's sweeps, before its cells
    cells = [argv for argv in calls if "allreduce" not in argv]
    assert all(argv[argv.index("--steps") + 1] == "42" for argv in cells)
    assert all(argv[argv.index("--topologies") + 1] == "1x1,2x1,3x1" for argv in cells)


@pytest.mark.parametrize("code, rounds_run", [(1, 3), (2, 1), (130, 1)])
def test_a_failed_cell_lets_the_next_rounds_run_and_a_user_error_or_signal_stops(
        code, rounds_run, tmp_path, monkeypatch):
    """A matrix that recorded a failed cell exits 1: its row is data, and the next rounds
    still run before the failure is raised. A user error (2) or a signal stops at once."""
    script, calls = _script(), []

    def run(argv):
        calls.append(argv)
        if "allreduce" not in argv and len(calls) == 2:     # round 1's cells
            raise subprocess.CalledProcessError(code, argv)
    monkeypatch.setattr(script, "_run", run)
    monkeypatch.setattr(script.record, "load", lambda path, what: [])
    monkeypatch.setattr(script.timed_window, "timed_steps", lambda *args: (20, "sized"))
    flags = argparse.Namespace(host_cpus=None, image_size=None, model="smallcnn",
                               batch_size=64, mlp_width=1024, mlp_depth=4, hooks="none",
                               repeats=3, max_size="32MiB", steps=20, min_timed_s=5.0)
    with pytest.raises(subprocess.CalledProcessError) as raised:
        script.measure("1gbit", tmp_path, [2], flags)
    assert raised.value.returncode == code
    assert len(calls) == 2 * rounds_run
