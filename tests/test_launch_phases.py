"""What a cell's fixed seconds are made of: the rank's phase marks (bench.rank.phases), the
exit without the interpreter's unwinding (bench.rank.exiting), and torchvision's version read
without its one-second import."""
from __future__ import annotations

import subprocess
import sys
import time

from hypothesis import given
from hypothesis import strategies as st

from bench.rank import phases

NAMES = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz_"), min_size=1, max_size=20)
TIMES = st.floats(min_value=0, max_value=4e9, allow_nan=False)


@given(st.dictionaries(NAMES, TIMES, max_size=8),
       st.lists(st.text(st.characters(blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85"
                                      "\u2028\u2029")), max_size=5))
def test_marks_read_back_among_any_other_lines(marks, noise):
    """Every mark printed is read back (to its printed precision), whatever else the log
    holds: node prefixes, torchrun's lines, half a mark."""
    lines = [f"[node0] {phases.PREFIX}{name} {at:.3f}" for name, at in marks.items()]
    noise = [line for line in noise if phases.PREFIX not in line]
    parsed = phases.parse(noise + lines + noise + [phases.PREFIX, phases.PREFIX + "x y"])
    assert {k: v for k, v in parsed.items() if k in marks} == \
        {name: float(f"{at:.3f}") for name, at in marks.items()}


def test_marks_only_when_asked_and_only_on_rank_0(monkeypatch, capsys):
    monkeypatch.delenv(phases.ENV, raising=False)
    phases.mark("off")
    monkeypatch.setenv(phases.ENV, "1")
    monkeypatch.setenv("RANK", "1")
    phases.mark("rank1")
    monkeypatch.setenv("RANK", "0")
    phases.mark("on", 12.5)
    assert phases.parse(capsys.readouterr().err.splitlines()) == {"on": 12.5}


def test_a_process_start_is_when_it_started():
    """To /proc's clock tick: this process started before now, a new one after a mark."""
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        deadline = time.time() + 5
        while (started := phases.started_at(child.pid)) is None and time.time() < deadline:
            time.sleep(0.01)
    finally:
        child.kill()
        child.wait()
    assert started is not None and before - 0.05 <= started <= time.time()
    assert phases.started_at() < before
    assert phases.started_at(2 ** 22 + 1) is None   # above Linux's largest pid


LEAVING = """
import atexit, sys, threading, time
from bench.rank import exiting
atexit.register(lambda: print("exit handler ran", flush=True))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished"))).start()
sys.stdout.write("buffered, not flushed\\n")
class Unwound:
    def __del__(self):
        print("unwound")
kept = Unwound()
exiting.leave({code})
"""


def test_leaving_runs_what_an_exit_must_and_skips_the_unwinding():
    """Threads are joined, exit handlers run, buffered output is out, the code is kept;
    objects are not torn down (that is the unwinding skipped)."""
    for code in (0, 3):
        out = subprocess.run([sys.executable, "-c", LEAVING.format(code=code)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == code
        assert out.stdout.splitlines() == ["buffered, not flushed", "thread finished",
                                           "exit handler ran"]


def test_torchvisions_version_is_read_without_importing_it():
    code = ("import sys; from bench.rank import environment; "
            "v = environment.torchvision_version(); assert 'torchvision' not in sys.modules; "
            "import torchvision; assert v == torchvision.__version__, (v, torchvision.__version__);"
            " print(v)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr


def _launch_overhead():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "launch_overhead.py"
    spec = importlib.util.spec_from_file_location("launch_overhead", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_overhead_is_startup_and_teardown_less_the_warm_up_and_the_probes():
    """A cell launched at 0 whose rank marks every phase: its whole is startup + teardown,
    the warm-up step and the probes are measurement, the overhead the rest; a run whose
    rank printed no marks keeps its whole as overhead and says nothing of the phases."""
    lo = _launch_overhead()
    marks = {"launched": 0.0, "agent_start": 0.5, "process_start": 2.5, "imported": 4.5,
             "group_joined": 4.75, "model_built": 5.5, "first_step_done": 6.0,
             "last_step_done": 16.0, "comm_probe_done": 17.0, "record_written": 17.25,
             "group_left": 17.5, "recorded": 18.0}
    summary = lo.summarise([marks], floor=False)
    assert summary["whole"] == 6.0 + 2.0
    assert summary["measurement"] == 0.5 + 1.0
    assert summary["overhead"] == 8.0 - 1.5
    assert summary["rank imports"] == 2.0 and summary["rank+agent exit, stop"] == 0.5
    bare = {k: marks[k] for k in ("launched", "first_step_done", "last_step_done", "recorded")}
    summary = lo.summarise([bare], floor=False)
    assert summary["overhead"] == summary["whole"] == 8.0
    assert summary["measurement"] is None and summary["rank imports"] is None
    floor = {"launched": 0.0, "agent_start": 0.5, "process_start": 2.5, "imported": 4.5,
             "group_joined": 4.75, "group_left": 5.0, "recorded": 6.0}
    summary = lo.summarise([floor], floor=True)
    assert summary["overhead"] == 6.0 and summary["rank+agent exit, stop"] == 1.0


def test_the_overhead_script_reads_its_rows_through_the_shared_reader(tmp_path, monkeypatch,
                                                                      capsys):
    """A results file with bad lines and rows it cannot time: each bad line is skipped with
    a warning naming it, each row without a matrix launch is passed over, the cell's row
    kept."""
    import argparse
    import json

    from bench import record
    from tests.conftest import REPO

    lo = _launch_overhead()
    (row, *_) = [r for r in record.load(REPO / "results" / "reference" / "emulated-cpu" /
                                        "1gbit.jsonl") if r["status"] == "ok"]
    cell = {**row, "first_step_done": 2.0, "last_step_done": 8.0,
            "matrix": {**row.get("matrix", {}), "logs": str(tmp_path / "logs"),
                       "launched_at": 1.0, "recorded_at": 9.0}}
    alone = {k: v for k, v in cell.items() if k != "matrix"}     # the trainer's own row

    def matrix_run(cmd, **kwargs):
        results = cmd[cmd.index("--results") + 1]
        with open(results, "w") as out:
            out.write("{torn\n[1]\n" + json.dumps({"mode": "steadiness"}) + "\n"
                      + json.dumps(alone) + "\n" + json.dumps(cell) + "\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(lo.subprocess, "run", matrix_run)
    marks = lo.run_matrix("native", argparse.Namespace(repeats=1, image=""), tmp_path, {},
                          tmp_path / "env")
    assert marks == [{"launched": 1.0, "first_step_done": 2.0, "last_step_done": 8.0,
                      "recorded": 9.0}]
    err = capsys.readouterr().err
    for line in (1, 2, 3):
        assert f"native.jsonl:{line}: skipped" in err, err
