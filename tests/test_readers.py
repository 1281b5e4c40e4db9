"""Hostile or malformed results files cannot hurt the readers, and writers never write
invalid JSON.

Every reading verb (table, compare, plot, predict, matrix --resume) reads through
``record.read``/``record.load``: a line that is not UTF-8, not JSON, not an object or not
valid against its mode's schema is skipped with a warning naming ``FILE:LINE``; a file with
no valid record, a missing file or a directory is one line on stderr and exit code 2.
The verbs run as ``python -m bench VERB`` in a subprocess, as a user runs them.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from bench import record
from tests.conftest import REPO

REFERENCE = REPO / "results" / "reference" / "emulated-cpu"


def _reference(name: str, index: int = 0) -> dict:
    """A real record, committed with its provenance (and valid against the schema)."""
    return json.loads((REFERENCE / name).read_text().splitlines()[index])


TRAINING = _reference("1gbit.jsonl")        # single node, ok, with a bucket timeline
SWEEP = _reference("1gbit-comm.jsonl")      # an all-reduce over 2 ranks on 1 Gbit


def _dumps(rec: dict) -> bytes:
    return json.dumps(rec, sort_keys=True).encode()   # allow_nan: NaN stays NaN here


def _without(rec: dict, field: str) -> dict:
    return {k: v for k, v in rec.items() if k != field}


_TORN = _dumps(TRAINING)[: len(_dumps(TRAINING)) // 2]

# (id, the line's bytes, what its warning says): every way a line can be bad.
BAD_LINES = [
    ("array", b"[1,2,3]", "an array, not a record object"),
    ("null", b"null", "null, not a record object"),
    ("string", b'"str"', "a string, not a record object"),
    ("number", b"42", "a number, not a record object"),
    ("empty-object", b"{}", "no mode field"),
    ("wrong-type", _dumps({**TRAINING, "samples_per_s": "fast"}),
     "samples_per_s: 'fast' is not of type"),
    ("missing-field", _dumps(_without(TRAINING, "env")), "'env' is a required property"),
    ("nan", _dumps({**TRAINING, "samples_per_s": math.nan}), "non-finite number NaN"),
    ("infinity", _dumps({**TRAINING, "final_loss": -math.inf}),
     "non-finite number -Infinity"),
    ("overflow", _dumps(TRAINING).replace(b'"samples_per_s": ', b'"samples_per_s": 1e999, '
                                          b'"x": '), "non-finite number 1e999"),
    ("invalid-utf8", b'{"mode": "steps", "run_id": "\xff\xfe"}', "not valid UTF-8"),
    ("torn", _TORN, "not JSON, a torn or corrupt line"),
    ("unknown-mode", _dumps({**TRAINING, "mode": "sprint"}), "mode 'sprint' is none of"),
    ("bad-sweep", _dumps({**SWEEP, "sizes": "many"}), "sizes: 'many' is not of type"),
    ("deep", b"[" * 100_000, "nested too deeply"),
    ("long-integer", b'{"mode": "steps", "seed": ' + b"7" * 5000 + b"}",
     "not a usable JSON value"),
    # json keeps the last of two: a reader would show 5000 where the writer meant either
    ("duplicate-key", _dumps(TRAINING).replace(b'"samples_per_s": ',
                                               b'"samples_per_s": 5000.0, "samples_per_s": '),
     "key 'samples_per_s' given twice"),
]
BLANK_LINES = [b"", b"   \t"]  # not records, not errors: skipped silently


def _mixed(path: Path, valid: dict) -> dict[int, str]:
    """Write every bad line and blank line around one valid record; {line: expected}."""
    half = len(BAD_LINES) // 2
    lines: list[tuple[bytes, str | None]] = [(raw, why) for _, raw, why in BAD_LINES[:half]]
    lines += [(BLANK_LINES[0], None), (_dumps(valid), None)]
    lines += [(raw, why) for _, raw, why in BAD_LINES[half:]] + [(BLANK_LINES[1], None)]
    path.write_bytes(b"".join(raw + b"\n" for raw, _ in lines))
    return {n: why for n, (_, why) in enumerate(lines, 1) if why}


def _only_bad(path: Path) -> Path:
    path.write_bytes(b"".join(raw + b"\n" for _, raw, _ in BAD_LINES) + b"\n")
    return path


def bench(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def _assert_warned(proc: subprocess.CompletedProcess, path: Path, expected: dict[int, str]):
    assert "Traceback" not in proc.stderr, proc.stderr
    for number, why in expected.items():
        line = next((x for x in proc.stderr.splitlines() if f"{path}:{number}: " in x), None)
        assert line is not None, f"no warning for {path}:{number}\n{proc.stderr}"
        assert line.startswith("warning: ") and why in line, line
    blanks = [n for n in range(1, len(path.read_bytes().splitlines()) + 1)
              if n not in expected and f"{path}:{n}: " in proc.stderr]
    assert len(blanks) == 0, f"the valid record or a blank line was warned about: {blanks}"


def _assert_one_line_error(proc: subprocess.CompletedProcess, *needles: object):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "error:" in lines[0] and all(str(n) in lines[0] for n in needles), lines[0]
    assert proc.stdout == ""


# --- record.read, line by line -------------------------------------------------------------

@pytest.mark.parametrize("raw,why", [(raw, why) for _, raw, why in BAD_LINES],
                         ids=[name for name, _, _ in BAD_LINES])
def test_each_bad_line_is_skipped_with_its_reason(raw, why, tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    path.write_bytes(_dumps(TRAINING) + b"\n" + raw + b"\n" + _dumps(SWEEP) + b"\n")
    assert [r["mode"] for r in record.read(path)] == ["steps", "allreduce"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: {path}:2: skipped: ") \
        and why in err[0], err
    assert len(err[0]) < 400  # a hostile value is not echoed whole


def test_the_committed_reference_records_are_all_valid(capsys):
    files = sorted(REFERENCE.glob("*.jsonl"))
    lines = sum(len(f.read_text().splitlines()) for f in files)
    assert files and sum(len(record.load(f)) for f in files) == lines
    assert capsys.readouterr().err == ""


def test_many_bad_lines_are_counted_not_listed(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    path.write_bytes(_dumps(TRAINING) + b"\n" + b"[]\n" * 500)
    assert len(record.load(path)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == record.MAX_WARNINGS + 1
    assert err[-1] == f"warning: {path}: {500 - record.MAX_WARNINGS} more invalid lines " \
                      "skipped (500 in all)"


def test_validation_is_compiled_once_per_schema(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_bytes((_dumps(TRAINING) + b"\n") * 300 + _dumps(SWEEP) + b"\n")
    record._validator.cache_clear()
    assert len(list(record.read(path))) == 301
    info = record._validator.cache_info()
    assert info.misses == 2 and info.hits == 299   # one build for steps, one for allreduce


def test_read_without_validation_keeps_any_object(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b'{"earlier": "record"}\n[1]\n' + _dumps(TRAINING) + b"\n")
    assert list(record.read(path, validate=False)) == [{"earlier": "record"}, TRAINING]
    assert f"{path}:2: skipped: an array" in capsys.readouterr().err
    assert list(record.read(path)) == [TRAINING]


# --- the schema check agrees with jsonschema, and needs it nowhere ---------------------------

def _broken_records() -> list[dict]:
    """Valid and invalid records, each a small change to a real one."""
    ok_sizes = SWEEP["sizes"]
    changes = [
        {}, {"samples_per_s": "fast"}, {"samples_per_s": None}, {"status": "ok", "error": "x"},
        {"status": "error", "error": None}, {"status": "error", "error": "boom"},
        {"status": "done"}, {"config_hash": "ABC"}, {"seed": True}, {"seed": 1.0},
        {"seed": 1.5}, {"batch_size_per_device": 0}, {"data_wait_share": 1.5},
        {"schema_version": 2}, {"schema_version": 1.0}, {"run_id": ""}, {"comm_hook": "zip"},
        {"first_losses": [1.0, None]}, {"step_time_s": {"p50": 1}},
        {"env": {**TRAINING["env"], "comm_env": {"X": 1}}},
        {"env": {**TRAINING["env"], "link": {"rate": "1gbit"}}},
        {"env": {**TRAINING["env"], "ranks": []}},
        {"bucket_timeline": None}, {"bucket_timeline": {**TRAINING["bucket_timeline"],
                                                        "steps": 0}},
        {"dataset_manifest_sha256": "f" * 64}, {"dataset_manifest_sha256": "g" * 64},
        {"dataset_manifest_sha256": "f" * 64 + "\n"},
        # Issue 24: typed sections, bounded numbers and strings, names on one line.
        {"config": {**TRAINING["config"], "model": "resnet18"}},
        {"config": {**TRAINING["config"], "model": {"model": "$x^2$"}}},
        {"config": {**TRAINING["config"], "model": {"model": "m" * 65}}},
        {"config": {**TRAINING["config"], "model": {"model": "resnet18\n"}}},
        {"samples_per_s": 1.7e308}, {"samples_per_s": 1e9}, {"nnodes": 2e8},
        {"nnodes": 65536}, {"telemetry": {"source": "nvml", "reason": None, "power_w": "x"}},
        {"telemetry": {"source": "nvml", "reason": None, "power_w": {"median": 300.0}}},
        {"env": {**TRAINING["env"], "hostnames": ["a\tb"]}},
        {"env": {**TRAINING["env"], "comm_env": {"NCCL DEBUG": "x"}}},
        {"env": {**TRAINING["env"], "comm_env": {f"K{i}": "x" for i in range(257)}}},
        {"traffic_by_kind": {"all_reduce": 1.0, "x" * 129: 1.0}},
        {"error": "x" * 65537, "status": "error"}, {"error": "a\nb|c`$", "status": "error"},
    ]
    records = [{**TRAINING, **change} for change in changes]
    records += [_without(TRAINING, field) for field in ("env", "mfu", "error")]
    records += [{**SWEEP, **change} for change in (
        {}, {"status": "wrong_result"}, {"backend": "mpi"}, {"world_size": 0},
        {"sizes": []}, {"sizes": [{**ok_sizes[0], "time_s": 0}]},
        {"sizes": [_without(ok_sizes[0], "wrong")]}, {"mode": "allreduce", "nnodes": None})]
    return records


def test_the_compiled_schemas_give_jsonschemas_verdicts():
    records = _broken_records()
    records += [json.loads(line) for f in sorted(REFERENCE.glob("*.jsonl"))
                for line in f.read_text().splitlines()]
    verdicts = set()
    for rec in records:
        official = jsonschema.Draft202012Validator(record.schema(rec["mode"]))
        ours = record.problem_of(rec)
        assert (ours is None) == official.is_valid(rec), (ours, rec)
        verdicts.add(ours is None)
    assert verdicts == {True, False}


def test_the_schemas_need_no_keyword_the_compiler_lacks():
    for mode in record.MODES:
        record.compile_schema(record.schema(mode))          # strict: raises on an unknown one
    with pytest.raises(record.UnsupportedSchema, match="patternProperties"):
        record.compile_schema({"type": "object", "patternProperties": {"^x": {}}})
    loose = record.compile_schema({"type": "object", "patternProperties": {}}, strict=False)
    assert loose({}) is None and loose([]) is not None


def test_a_schema_the_compiler_cannot_take_goes_to_jsonschema(monkeypatch):
    def unsupported(root, strict=True):
        raise record.UnsupportedSchema("newKeyword")

    monkeypatch.setattr(record, "compile_schema", unsupported)
    record._validator.cache_clear()
    try:
        check = record._validator("steps")
        assert check(TRAINING) is None
        assert check({**TRAINING, "samples_per_s": "fast"}) == \
            "samples_per_s: 'fast' is not of type 'number', 'null'"
    finally:
        record._validator.cache_clear()


def test_readers_work_where_jsonschema_is_not_installed(tmp_path):
    """The trainer image installs requirements.txt only: no jsonschema there."""
    path = tmp_path / "runs.jsonl"
    expected = _mixed(path, TRAINING)
    script = ("import sys; sys.modules['jsonschema'] = None\n"
              "from bench import record\n"
              f"records = record.load({str(path)!r})\n"
              "assert [r['run_id'] for r in records] == [%r], records\n"
              "assert 'jsonschema' not in sys.modules or sys.modules['jsonschema'] is None\n"
              "assert 'torch' not in sys.modules\n" % TRAINING["run_id"])
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    _assert_warned(proc, path, expected)


# --- every reading verb, run as a user runs it -----------------------------------------------

def test_table_skips_bad_lines_and_tables_the_valid_record(tmp_path):
    path = tmp_path / "runs.jsonl"
    expected = _mixed(path, TRAINING)
    proc = bench("table", path)
    assert proc.returncode == 0, proc.stderr
    _assert_warned(proc, path, expected)
    (row,) = [line for line in proc.stdout.splitlines() if line.startswith("| single")]
    assert f"{TRAINING['samples_per_s']:.1f}" in row and row.rstrip(" |").endswith("ok")


def test_compare_skips_bad_lines_on_both_sides(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    expected_a = _mixed(a, TRAINING)
    expected_b = _mixed(b, {**TRAINING, "samples_per_s": 2 * TRAINING["samples_per_s"]})
    proc = bench("compare", a, b)
    assert proc.returncode == 0, proc.stderr
    _assert_warned(proc, a, expected_a)
    _assert_warned(proc, b, expected_b)
    assert "| 2.000 |" in proc.stdout and "| faster (1 run: threshold) |" in proc.stdout


def test_plot_skips_bad_lines_and_draws_the_valid_records(tmp_path):
    path = tmp_path / "runs.jsonl"
    expected = _mixed(path, TRAINING)
    with path.open("ab") as f:                      # an all-reduce sweep, for its chart
        f.write(_dumps(SWEEP) + b"\n" + b"[]\n")
    expected[len(path.read_bytes().splitlines())] = "an array"
    proc = bench("plot", path)
    assert proc.returncode == 0, proc.stderr
    _assert_warned(proc, path, expected)
    pngs = [Path(p) for p in proc.stdout.split()]
    assert len(pngs) == 4 and any(p.name.endswith("allreduce-busbw.png") for p in pngs)
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_predict_skips_bad_lines_in_results_and_link_from(tmp_path):
    path, comm = tmp_path / "runs.jsonl", tmp_path / "comm.jsonl"
    expected = _mixed(path, TRAINING)
    expected_comm = _mixed(comm, SWEEP)
    proc = bench("predict", path, "--link", "1gbit", "--nodes", "2")
    assert proc.returncode == 0, proc.stderr
    _assert_warned(proc, path, expected)
    assert any(line.startswith("| 2 |") for line in proc.stdout.splitlines())
    proc = bench("predict", path, "--link-from", comm, "--nodes", "2")
    assert proc.returncode == 0, proc.stderr
    _assert_warned(proc, path, expected)
    _assert_warned(proc, comm, expected_comm)
    assert "link: measured busbw" in proc.stdout


def _matrix_args(results: Path) -> list[str]:
    return ["--models", "smallcnn", "--batch-sizes", "8", "--topologies", "1x1",
            "--results", str(results), "--", "--steps", "2", "--warmup-steps", "1"]


def test_matrix_resume_counts_the_valid_record_among_bad_lines(tmp_path):
    from bench.host.matrix import MatrixConfig, cell_key, finished_repeats
    from bench.topology import Topology

    path = tmp_path / "runs.jsonl"
    (train_cfg,) = MatrixConfig.from_args(_matrix_args(path), "bench matrix").cells.values()
    done = {**TRAINING, "config_hash": train_cfg.hash(), "nnodes": 1, "nproc_per_node": 1}
    expected = _mixed(path, done)
    before = path.read_bytes()
    proc = bench("matrix", "--resume", *_matrix_args(path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    _assert_warned(proc, path, expected)
    assert proc.stderr.count("already recorded, skipped (--resume)") == 1
    assert "0/0 jobs ok" in proc.stderr and path.read_bytes() == before   # nothing ran
    # A file of bad lines only: nothing is finished (every line warned about), no error.
    assert finished_repeats(_only_bad(tmp_path / "bad.jsonl")) == {}
    assert finished_repeats(path) == {cell_key(train_cfg.hash(), Topology(1, 1)): 1}


def test_matrix_resume_passes_over_valid_records_that_are_no_cell(tmp_path):
    """A steadiness record (valid, status ok, no config hash) in the results file: --resume
    counts the cell's record and passes over the other."""
    from bench.host.matrix import MatrixConfig, cell_key, finished_repeats
    from bench.topology import Topology

    path = tmp_path / "runs.jsonl"
    (train_cfg,) = MatrixConfig.from_args(_matrix_args(path), "bench matrix").cells.values()
    done = {**TRAINING, "config_hash": train_cfg.hash(), "nnodes": 1, "nproc_per_node": 1}
    (steady, *_) = record.load(REPO / "results" / "reference" / "first-copy" /
                               "steadiness.jsonl")
    assert steady["status"] == "ok" and "config_hash" not in steady
    path.write_bytes(_dumps(steady) + b"\n" + _dumps(done) + b"\n")
    assert finished_repeats(path) == {cell_key(train_cfg.hash(), Topology(1, 1)): 1}


def test_matrix_resume_warns_about_every_line_of_a_file_with_no_valid_record(tmp_path, capsys):
    from bench.host.matrix import finished_repeats

    path = _only_bad(tmp_path / "runs.jsonl")
    assert finished_repeats(path) == {}
    err = capsys.readouterr().err
    assert all(f"{path}:{n}: skipped" in err for n in range(1, len(BAD_LINES) + 1)), err


# --- files that hold nothing usable: one line, exit 2, nothing written ----------------------

def _verbs(path: Path, good: Path, good_comm: Path, out: Path) -> dict[str, list]:
    """Each reading verb (and each file argument of it) run with ``path`` in that place."""
    return {
        "table": ["table", path],
        "table-second-file": ["table", good, path],
        "compare-a": ["compare", path, good],
        "compare-b": ["compare", good, path],
        "plot": ["plot", path, "--out-dir", out],
        "predict": ["predict", path, "--link", "1gbit"],
        "predict-link-from": ["predict", good, "--link-from", path],
        "predict-link-from-and-link": ["predict", good, "--link-from", path, "--link", "5gbit"],
    }


VERB_IDS = list(_verbs(Path(), Path(), Path(), Path()))


@pytest.fixture
def files(tmp_path):
    good, good_comm, out = tmp_path / "good.jsonl", tmp_path / "comm.jsonl", tmp_path / "out"
    good.write_bytes(_dumps(TRAINING) + b"\n")
    good_comm.write_bytes(_dumps(SWEEP) + b"\n")
    out.mkdir()
    return tmp_path, good, good_comm, out


def _setting(verb: str) -> str:
    return {"compare-a": "A=", "compare-b": "B=", "predict": "results=",
            "predict-link-from": "--link-from=",
            "predict-link-from-and-link": "--link-from="}.get(verb, "FILE=")


@pytest.mark.parametrize("verb", VERB_IDS)
def test_a_file_of_bad_lines_only_is_one_line_and_exit_2(verb, files):
    tmp_path, good, good_comm, out = files
    path = _only_bad(tmp_path / "bad.jsonl")
    proc = bench(*_verbs(path, good, good_comm, out)[verb])
    _assert_one_line_error(proc, f"{_setting(verb)}{path}", "holds no valid record",
                           f"{len(BAD_LINES)} lines skipped", "first line 1: an array")
    assert list(out.iterdir()) == [] and list(tmp_path.glob("*.png")) == []


@pytest.mark.parametrize("kind", ["missing", "directory", "empty"])
@pytest.mark.parametrize("verb", VERB_IDS)
def test_a_missing_empty_or_directory_file_is_one_line_and_exit_2(verb, kind, files):
    tmp_path, good, good_comm, out = files
    path = tmp_path / "given"
    if kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"\n\n")
    proc = bench(*_verbs(path, good, good_comm, out)[verb])
    says = {"missing": "no such file", "directory": "is a directory", "empty": "is empty"}
    _assert_one_line_error(proc, f"{_setting(verb)}{path}", says[kind])
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("verb", ["table", "compare", "plot", "predict"])
def test_an_unreadable_file_is_one_line_and_exit_2(verb, files, monkeypatch, capsys):
    """Permission denied (simulated: tests may run as root, who may read anything)."""
    import importlib

    tmp_path, good, _, out = files
    denied = tmp_path / "denied.jsonl"
    denied.write_bytes(_dumps(TRAINING) + b"\n")
    real_open = open

    def guarded_open(path, *args, **kwargs):
        if Path(path) == denied:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(record, "open", guarded_open, raising=False)
    argv = {"table": [denied], "compare": [good, denied], "plot": [denied, "--out-dir", out],
            "predict": [denied, "--link", "1gbit"]}[verb]
    code = importlib.import_module(f"bench.analysis.{verb}").main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"{denied}: cannot be read (Permission denied)" in err[0]
    assert list(out.iterdir()) == []


def test_a_link_from_without_a_sweep_still_says_so(files):
    _, good, _, _ = files
    proc = bench("predict", good, "--link-from", good)
    _assert_one_line_error(proc, f"--link-from={good}", "holds no ok all-reduce record")


# --- writers ---------------------------------------------------------------------------------

def _strict(line: str) -> dict:
    def refuse(constant):
        raise AssertionError(f"invalid JSON constant {constant}")

    return json.loads(line, parse_constant=refuse)


NON_FINITE = {"final_loss": math.nan, "loss": math.inf,
              "nested": {"values": [1.0, -math.inf, (math.nan, 2)]}}
AS_NULL = {"final_loss": None, "loss": None, "nested": {"values": [1.0, None, [None, 2]]}}


def test_append_writes_non_finite_numbers_as_null(tmp_path):
    path = tmp_path / "runs.jsonl"
    record.append(path, {**TRAINING, **NON_FINITE})
    (line,) = path.read_text().splitlines()
    assert "NaN" not in line and "Infinity" not in line
    assert _strict(line) == {**TRAINING, **AS_NULL}
    (back,) = record.read(path)                 # and the row is still a valid record
    assert back["final_loss"] is None and back["run_id"] == TRAINING["run_id"]


def test_emit_writes_non_finite_numbers_as_null(capsys):
    record.emit({**TRAINING, **NON_FINITE})
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert all(record.is_record_line(line) for line in lines)
    text = "".join(line.split(" ", 5)[5] for line in lines)   # MARKER (3 words) TAG K/N PART
    assert _strict(text) == {**TRAINING, **AS_NULL}
    assert record.parse_stdout(out) == [{**TRAINING, **AS_NULL}]


def test_writers_never_lose_a_record_to_a_type(tmp_path):
    import numpy as np

    path = tmp_path / "runs.jsonl"
    record.append(path, {"mode": "steps", "loss": np.float32("nan"), "n": np.int64(3),
                         "rate": np.float64(2.5), "where": tmp_path})
    assert _strict(path.read_text()) == {"mode": "steps", "loss": None, "n": 3, "rate": 2.5,
                                         "where": str(tmp_path)}
    assert record.finite({"a": [math.nan, {"b": math.inf}]}) == {"a": [None, {"b": None}]}


def test_parse_stdout_skips_what_is_not_a_record():
    out = f"{record.MARKER}\n{{\"a\": 1\n{record.MARKER}\n[1]\n{record.MARKER}\n{{\"b\": 2}}\n"
    assert record.parse_stdout(out) == [{"b": 2}]
