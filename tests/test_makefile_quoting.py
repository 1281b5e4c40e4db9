"""No value given to make becomes shell syntax: through the REAL make, not a dry run.

Three layers, each tested here:
- injection attempts through the real targets and the real venv: refused in one line
  naming the setting, exit 2, the marker file never created, nothing written;
- with a recording venv (``FakeVenv``): each hostile value reaches the command as exactly
  one argument, byte for byte (no splitting, globbing, quoting or substitution);
- the Makefile's text: no user variable is referenced in a recipe (they reach recipes as
  the environment's MK_* variables only).
"""
from __future__ import annotations

import os
import re
import shutil

import pytest

from bench.host import timed_window
from conftest import REPO, FakeVenv, error_lines, run_make

FIXTURE = REPO / "tests" / "fixtures" / "table-fixture.jsonl"
RUNS = REPO / "results" / "reference" / "emulated-cpu" / "1gbit.jsonl"  # 1-node runs
MAKEFILE = (REPO / "Makefile").read_text()


@pytest.fixture
def marker(tmp_path):
    """An absolute path that an injected command would create."""
    path = tmp_path / "marker"
    yield path
    assert not path.exists(), "an injected command ran"


def results_listing() -> set[str]:
    return {str(p.relative_to(REPO)) for p in (REPO / "results").rglob("*")}


# target, variable, value ({m}: the marker's path), the setting the error line names,
# extra make arguments. Cheap: every value is refused before anything starts.
INJECTIONS = [
    ("doctor", "HOSTS", "a;touch {m}", "HOSTS", []),
    ("doctor", "HOSTS", "x,-oProxyCommand=touch {m}", "HOSTS", []),
    ("doctor", "HOSTS", "`touch {m}`", "HOSTS", []),
    ("doctor", "HOSTS", "a\ntouch {m}", "HOSTS", []),
    ("doctor", "IMAGE", "x;touch {m}", "--image", ["HOSTS=127.0.0.2"]),
    ("table", "RESULTS", "x;touch {m}", "x;touch", []),
    ("table", "RESULTS", "x'; touch {m}; '", "no such file", []),
    ("table", "FORMAT", "csv;touch {m}", "--format", [f"RESULTS={FIXTURE}"]),
    ("plot", "RESULTS", "x`touch {m}`", "`touch", []),
    ("bench-matrix", "TOPOLOGIES", "1x1'; touch {m}; '", "--topologies", []),
    ("bench-matrix", "TOPOLOGIES", "99999999x1", "--topologies", []),
    ("bench-matrix", "MODEL", "`touch {m}`", "--models", []),
    ("bench-matrix", "MODEL", "resnet18;touch {m}", "--models", []),
    ("bench-matrix", "BATCH_SIZES", "8;touch {m}", "--batch-sizes", []),
    ("bench-matrix", "BATCH_SIZES", "32 `touch {m}`", "--batch-sizes", []),
    ("bench-matrix", "BATCH_SIZES", "99999999", "--batch-sizes", []),
    ("bench-matrix", "PRECISION", "fp32|touch {m}", "--precisions", []),
    ("bench-matrix", "REPEATS", "1;touch {m}", "--repeats", []),
    ("bench-matrix", "STEPS", "1 && touch {m}", "--steps", []),
    ("bench-matrix", "MATRIX_ARGS", "--seed 1;touch {m}", "--seed", []),
    ("bench-matrix", "LAUNCHER", "native;touch {m}", "--launcher", []),
    ("bench-multinode", "HOSTS", "a b;touch {m}", "HOSTS", []),
    ("bench-multinode", "HOSTS", "-oProxyCommand=touch {m},b", "HOSTS", []),
    ("bench-emulated", "LINK", "`touch {m}`", "BENCH_LAUNCHER_LINK", []),
    ("bench-predict", "LINK", ";touch {m}", "--link", [f"RESULTS={RUNS}"]),
    ("bench-predict", "NODES", "2;touch {m}", "--nodes", [f"RESULTS={RUNS}"]),
    ("bench-predict", "LINK_FROM", "c;touch {m}", "c;touch", [f"RESULTS={RUNS}"]),
    ("bench-predict", "RESULTS", "r'\"; touch {m}", "no such file", []),
    ("bench-comm", "COMM_TOPOLOGIES", "1x2;touch {m}", "--topologies", []),
    ("bench-comm", "MAX_SIZE", "1MiB;touch {m}", "--max-size", []),
    ("settings", "PROFILE", "cpu;touch {m}", "PROFILE", []),
    ("node-up", "PROFILE", "gpu;touch {m}", "--profile", []),
    ("node-up", "PRECISION", "auto;touch {m}", "--precision", []),
    ("dataset", "DATASET", "x;touch {m}", "dataset", []),
    ("dataset", "SRC", "/nonexistent;touch {m}", "--src", ["DATASET=cifar10"]),
    ("wheels", "TORCH_FLAVOUR", "x;touch {m}", "TORCH_FLAVOUR", []),
    # make itself would expand these ($(shell ...) runs a command): refused by make
    ("bench-matrix", "MODEL", "$(touch {m})", "MODEL", []),
    ("bench-matrix", "MODEL", "$(shell touch {m})", "MODEL", []),
    ("bench-matrix", "BATCH_SIZES", "$(shell touch {m})", "BATCH_SIZES", []),
    ("bench-emulated", "LINK", "$(shell touch {m})", "LINK", []),
    ("doctor", "HOSTS", "x,-oProxyCommand=touch${{IFS}}{m}", "HOSTS", []),
    ("table", "RESULTS", "${{shell touch {m}}}", "RESULTS", []),
]


@pytest.mark.parametrize("target,variable,value,setting,extra", INJECTIONS,
                         ids=[f"{t}-{v}-{i}" for i, (t, v, *_) in enumerate(INJECTIONS)])
def test_an_injection_is_one_line_exit_2_and_runs_nothing(target, variable, value, setting,
                                                         extra, marker):
    before = results_listing()
    proc = run_make(target, f"{variable}={value.format(m=marker)}", *extra)
    lines = error_lines(proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1, proc.stderr
    assert setting in lines[0], lines[0]
    assert results_listing() == before, "results/ changed"


@pytest.mark.parametrize("variable,target", [("HOSTS", "doctor"), ("MODEL", "bench-matrix"),
                                             ("RESULTS", "table")])
def test_a_dollar_from_the_environment_is_refused_too(variable, target, marker):
    proc = run_make(target, env={variable: f"$(shell touch {marker})"})
    lines = error_lines(proc.stderr)
    assert proc.returncode == 2 and len(lines) == 1 and variable in lines[0], proc.stderr


# --- with a recording venv: each value is exactly one argument ---------------------------------
HOSTILE = "a b;touch {m}|c`touch {m}`'d\"e\\f*&g<h>(i)\n#j"


@pytest.mark.parametrize("target,variable,verb,flag,extra", [
    ("doctor", "HOSTS", "doctor", "--hosts", []),
    ("doctor", "CPU_IMAGE", "doctor", "--image", ["HOSTS=h", "PROFILE=cpu"]),
    ("table", "RESULTS", "table", None, []),
    ("table", "FORMAT", "table", "--format", ["RESULTS=r.jsonl"]),
    ("plot", "RESULTS", "plot", None, []),
    ("bench-matrix", "TOPOLOGIES", "matrix", "--topologies", []),
    ("bench-matrix", "BATCH_SIZES", "matrix", "--batch-sizes", []),
    ("bench-matrix", "MODEL", "matrix", "--models", []),
    ("bench-matrix", "PRECISION", "matrix", "--precisions", []),
    ("bench-matrix", "REPEATS", "matrix", "--repeats", []),
    ("bench-matrix", "STEPS", "matrix", "--steps", []),
    ("bench-matrix", "RESULTS", "matrix", "--results", []),
    ("bench-matrix", "LAUNCHER", "matrix", "--launcher", []),
    ("bench-matrix", "CPU_IMAGE", "matrix", "BENCH_LAUNCHER_IMAGE", ["LAUNCHER=compose"]),
    ("bench-multinode", "RUNTIME", "matrix", "BENCH_LAUNCHER_RUNTIME", ["HOSTS=h1,h2"]),
    ("bench-multinode", "IMAGE", "matrix", "BENCH_LAUNCHER_IMAGE", ["HOSTS=h1,h2"]),
    ("bench-emulated", "LINK", "matrix", "BENCH_LAUNCHER_LINK", []),
    ("bench-emulated", "COMM_HOOKS", "matrix", "--comm-hooks", []),
    ("bench-emulated", "MODEL", "matrix", "--lockstep-model", []),
    ("bench-predict", "LINK", "predict", "--link", ["RESULTS=r.jsonl"]),
    ("bench-predict", "LINK_FROM", "predict", "--link-from", ["RESULTS=r.jsonl"]),
    ("bench-predict", "NODES", "predict", "--nodes", ["RESULTS=r.jsonl"]),
    ("bench-comm", "COMM_TOPOLOGIES", "matrix", "--topologies", []),
    ("bench-comm", "MAX_SIZE", "matrix", "--max-size", []),
    ("dataset", "DATASET", "dataset", "stage", []),
    ("dataset", "SRC", "dataset", "--src", []),
    ("dataset", "EXPORT_DIR", "dataset", "--export", ["SRC=/src"]),
    ("settings", "PROFILE", "settings", "--profile", []),
    ("node-up", "IMAGE", "compose", "--image", []),
    ("node-up", "PRECISION", "compose", "--precision", []),
    ("bench-multinode", "PRECISION", "matrix", "--precisions", ["HOSTS=h1,h2"]),
])
def test_a_hostile_value_arrives_as_one_argument(target, variable, verb, flag, extra, marker,
                                                 fake_venv, tmp_path):
    value = HOSTILE.format(m=marker)
    if target == "bench-emulated" and variable != "RESULTS":
        # Its recipe writes the prediction beside RESULTS itself (tee): not in the checkout.
        extra = [*extra, f"RESULTS={tmp_path}/emulated.jsonl"]
    before = set((REPO / "results").iterdir())
    proc = run_make(target, f"{variable}={value}", f"VENV={fake_venv.path}", *extra)
    assert set((REPO / "results").iterdir()) == before, "the test wrote into results/"
    calls = fake_venv.bench_calls(verb)
    assert calls, (proc.returncode, proc.stderr)
    if flag is None:  # the first argument: the file
        assert calls[0][0] == value, calls
    elif flag.startswith("BENCH_LAUNCHER_"):  # a launcher setting: in the environment
        assert any(env.get(flag) == value for env in fake_venv.bench_settings(verb)), calls
    else:
        assert any(argv[argv.index(flag) + 1] == value for argv in calls if flag in argv), calls


@pytest.mark.parametrize("batch_sizes", ["32 64", "32,64", "32"])
def test_the_emulated_sweep_probes_the_first_batch_size_in_lockstep(batch_sizes, fake_venv,
                                                                    tmp_path):
    run_make("bench-emulated", f"BATCH_SIZES={batch_sizes}", "MODEL=mlp",
             f"RESULTS={tmp_path}/emulated.jsonl", f"VENV={fake_venv.path}")
    (sweep, *_) = [argv for argv in fake_venv.bench_calls("matrix") if "--lockstep" in argv]
    probe = sweep[sweep.index("--lockstep") + 1:]
    assert probe == ["--lockstep-model", "mlp", "--lockstep-batch-size", "32",
                     "--lockstep-image-size", "32"], sweep


@pytest.mark.parametrize("variable, value, flag", [
    ("RESULTS", "{t}/demo", "--results"),          # the cells' matrix wants a .jsonl
    ("COMM_HOOKS", "none,bogus", "--comm-hooks"),
    ("REPEATS", "0", "--repeats"),
    ("BATCH_SIZES", "16 0", "--batch-sizes"),      # the sweep's probe takes the first only
])
def test_the_emulated_target_refuses_a_bad_cell_setting_before_its_sweep(variable, value,
                                                                        flag, tmp_path):
    """Every setting of bench-emulated's cells is checked before its sweep (minutes, as
    root): a RESULTS without .jsonl was refused only after the sweep had run and written
    its files. The real venv and make: one line naming the setting, exit 2, nothing
    written, the sweep never started."""
    default = [] if variable == "RESULTS" else [f"RESULTS={tmp_path}/emulated.jsonl"]
    proc = run_make("bench-emulated", f"{variable}={value.format(t=tmp_path)}", "LINK=5gbit",
                    *default)
    lines = error_lines(proc.stderr)
    assert proc.returncode == 2 and len(lines) == 1 and flag in lines[0], proc.stderr
    assert "--workload allreduce" not in proc.stdout, "the sweep started"
    assert list(tmp_path.iterdir()) == []


# NODE_ENV is a path that make reads itself and that bench hands to other hosts' shells
# (ssh, Slurm): anything but a plain path is refused before any recipe runs. A backtick
# passed the '$' check before; it reached the ssh launcher's remote line.
@pytest.mark.parametrize("value", ["x`touch {m}`", "compose/.env`touch {m}`", "a'b", "a b",
                                   "a\nb", "a;touch {m}", 'a"b', "a\\b", "a|b", "a&b"])
@pytest.mark.parametrize("target", ["settings", "bench-matrix"])
def test_node_env_is_a_plain_path_or_refused(target, value, marker, fake_venv):
    proc = run_make(target, f"NODE_ENV={value.format(m=marker)}", f"VENV={fake_venv.path}",
                    "LAUNCHER=compose")
    lines = error_lines(proc.stderr)
    assert proc.returncode == 2 and len(lines) == 1 and "NODE_ENV" in lines[0], proc.stderr
    assert fake_venv.calls() == [], "a recipe ran"


def test_a_plain_node_env_path_reaches_bench_whole(fake_venv, tmp_path):
    path = tmp_path / "node-1.2+x@y%z:w.env"
    path.write_text((REPO / "compose" / ".env.example").read_text())
    proc = run_make("settings", f"NODE_ENV={path}", f"VENV={fake_venv.path}", "PROFILE=cpu")
    calls = fake_venv.bench_calls("settings")
    assert calls and calls[0][calls[0].index("--env-file") + 1] == str(path), proc.stderr


def test_list_values_are_split_without_globbing_or_evaluation(fake_venv, marker):
    proc = run_make("bench-matrix", f"VENV={fake_venv.path}", "BATCH_SIZES=8 16",
                    f"MATRIX_ARGS=--seed 3  *  --tag;touch {marker}", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    (argv,) = fake_venv.bench_calls("matrix")
    assert argv[argv.index("--batch-sizes") + 1] == "8 16"  # bench splits it
    assert argv[argv.index("--") + 1:] == ["--steps", "10", "--seed", "3", "*", "--tag;touch",
                                           str(marker)]


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` before its ``--``, less ``flag`` and its value."""
    head = argv[:argv.index("--")]
    at = head.index(flag)
    return head[:at] + head[at + 2:]


def test_bench_emulated_names_the_sweep_beside_the_results(fake_venv):
    run_make("bench-emulated", f"VENV={fake_venv.path}", "RESULTS=out/a b.jsonl")
    checked, *rounds = fake_venv.bench_calls("matrix")
    # The cells' matrix is first checked as it will run (--dry-run), with every repeat,
    # before the sweep; then, as the accuracy benchmark runs (issue 29), one round per
    # repeat: the sweep, then one repeat of every cell, interleaved, each hook's one-node
    # cell again after its two-node cell (bracketed).
    assert checked[0] == "--dry-run" and checked[checked.index("--repeats") + 1] == "3"
    assert len(rounds) == 2 * 3                       # REPEATS' own default: three rounds
    for sweep, runs in zip(rounds[::2], rounds[1::2], strict=True):
        assert "allreduce" in sweep and "allreduce" not in runs
        assert sweep[sweep.index("--results") + 1] == "out/a b-comm.jsonl"
        assert runs[runs.index("--results") + 1] == "out/a b.jsonl"
        assert runs[runs.index("--repeats") + 1] == "1"
        assert _without(checked[1:], "--repeats") == _without(runs, "--repeats")
        assert "--interleave" in runs[:runs.index("--")]
        assert "--bracket" in runs[:runs.index("--")] and "--bracket" in checked


def test_bench_straggler_passes_each_setting_whole_with_its_defaults(fake_venv, marker):
    proc = run_make("bench-straggler", f"VENV={fake_venv.path}", f"N_CLEAN=1;touch {marker}",
                    "RESULTS=out/a b")
    assert proc.returncode == 0, proc.stderr
    (argv,) = [c for c in fake_venv.calls() if c[0] == "scripts/straggler_detection.py"]
    assert argv[argv.index("--n-clean") + 1] == f"1;touch {marker}"   # the script refuses it
    assert argv[argv.index("--out") + 1] == "out/a b"
    assert [argv[argv.index(flag) + 1] for flag in ("--n-slow", "--link", "--model",
                                                    "--steps")] == ["10", "1gbit", "mlp", "30"]


def test_bench_accuracy_grid_passes_each_setting_whole(fake_venv, marker):
    hostile = HOSTILE.format(m=marker)
    for extra, workloads in (([f"WORKLOADS={hostile}"], hostile), ([], None)):
        before = len(fake_venv.calls())
        proc = run_make("bench-accuracy-grid", f"VENV={fake_venv.path}", f"GRID={hostile}",
                        "RESULTS=out/a b", *extra)
        assert proc.returncode == 0, proc.stderr
        (argv,) = [c for c in fake_venv.calls()[before:]
                   if c[0] == "scripts/prediction_accuracy.py"]
        assert [argv[argv.index(flag) + 1] for flag in ("--grid", "--out", "--nodes")] == \
            [hostile, "out/a b", "2"]
        assert (argv[argv.index("--workloads") + 1] if "--workloads" in argv else None) \
            == workloads


@pytest.mark.parametrize("target", ["bench-accuracy", "bench-accuracy-grid"])
def test_the_accuracy_targets_pass_steady_s_whole_or_leave_the_scripts_default(
        fake_venv, marker, target):
    hostile = HOSTILE.format(m=marker)
    for extra, steady in (([f"STEADY_S={hostile}"], hostile), ([], None)):
        before = len(fake_venv.calls())
        proc = run_make(target, f"VENV={fake_venv.path}", "RESULTS=out/a b", *extra)
        assert proc.returncode == 0, proc.stderr
        (argv,) = [c for c in fake_venv.calls()[before:]
                   if c[0] == "scripts/prediction_accuracy.py"]
        assert (argv[argv.index("--steady-s") + 1] if "--steady-s" in argv else None) \
            == steady
    assert not marker.exists()


def _window_prints(fake_venv: FakeVenv, output: str, code: int) -> None:
    """The fake python, but ``-m bench.host.timed_window SWEEPS`` prints ``output`` and exits
    ``code`` (its --check-only passes), as the real one does with a count or an error."""
    python = fake_venv.path / "bin" / "python"
    lines = python.read_text().splitlines()
    lines[1] = lines[1].replace("exec ", "", 1)
    python.write_text("\n".join([*lines, 'case "$2 $3" in "bench.host.timed_window --check-only")'
                                 ' exit 0;; "bench.host.timed_window "*) '
                                 f'echo {output}; exit {code};; esac', ""]))


def test_bench_emulated_times_each_cell_for_the_window_the_sweep_sizes(fake_venv, marker,
                                                                       tmp_path):
    hostile = HOSTILE.format(m=marker)
    _window_prints(fake_venv, "81", 0)
    proc = run_make("bench-emulated", f"VENV={fake_venv.path}", f"STEPS={hostile}",
                    f"MIN_TIMED_S={hostile}", "BATCH_SIZES=8,16", "MODEL=smallcnn",
                    f"RESULTS={tmp_path}/emulated.jsonl")
    calls = fake_venv.calls()
    (check, window) = [c[2:] for c in calls if c[:2] == ["-m", "bench.host.timed_window"]]
    assert check[0] == "--check-only" and calls[0][2:] == check    # before the sweep runs
    assert window[0] == f"{tmp_path}/emulated-comm.jsonl", window       # the sweep just run
    for argv in (check, window):                                        # each value whole
        assert [argv[argv.index(flag) + 1] for flag in
                ("--model", "--batch-size", "--image-size", "--steps", "--min-timed-s")] == \
            ["smallcnn", "8", "32", hostile, hostile]
    # The cells checked, the machine's drift checked and measured, the first sweep, then the
    # window (once), then every round's cells with the count it printed.
    order = [c[:3] for c in calls if c[:2] in (["-m", "bench"], ["-m", "bench.host.timed_window"])]
    assert order[1:6] == [["-m", "bench", "matrix"], ["-m", "bench", "steadiness"],
                          ["-m", "bench", "steadiness"], ["-m", "bench", "matrix"],
                          ["-m", "bench.host.timed_window", window[0]]], (proc.stderr, order)
    runs = [c for c in fake_venv.bench_calls("matrix")
            if "--interleave" in c and "--dry-run" not in c]
    assert len(runs) == 3                                       # REPEATS' default
    for argv in runs:
        assert argv[argv.index("--steps") + 1] == "81"
        assert argv[argv.index("--comm-probe-steps") + 1] == "81"   # the timeline's probe too
    # The default it names is the one bench.host.timed_window applies.
    assert f"MIN_TIMED_S (default {timed_window.DEFAULT_MIN_TIMED_S:g}) seconds" in proc.stderr


def test_bench_emulated_measures_the_drift_before_and_after_and_predict_reads_it(
        fake_venv, marker, tmp_path):
    hostile = HOSTILE.format(m=marker)
    _window_prints(fake_venv, "81", 0)
    results = f"{tmp_path}/a b.jsonl"
    proc = run_make("bench-emulated", f"VENV={fake_venv.path}", f"STEADY_S={hostile}",
                    f"RESULTS={results}")
    assert proc.returncode == 0, proc.stderr
    steady = fake_venv.bench_calls("steadiness")
    assert len(steady) == 3 and "--check-only" in steady[0], steady
    for argv in steady:                                   # each value whole, the file beside
        assert argv[argv.index("--seconds") + 1] == hostile
        assert argv[argv.index("--out") + 1] == f"{tmp_path}/a b-steadiness.jsonl"
    calls = fake_venv.calls()
    sweeps = [i for i, c in enumerate(calls) if "--workload" in c]
    runs = [i for i, c in enumerate(calls) if c[2:4] == ["steadiness", "--out"]]
    assert runs[0] < sweeps[0] and runs[1] > max(i for i, c in enumerate(calls)
                                                 if "--interleave" in c)
    (predict,) = fake_venv.bench_calls("predict")
    assert predict[predict.index("--steadiness") + 1] == f"{tmp_path}/a b-steadiness.jsonl"
    assert not marker.exists()


def test_bench_emulated_steady_s_0_skips_the_drift(fake_venv, tmp_path):
    _window_prints(fake_venv, "81", 0)
    proc = run_make("bench-emulated", f"VENV={fake_venv.path}", "STEADY_S=0",
                    f"RESULTS={tmp_path}/emulated.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert fake_venv.bench_calls("steadiness") == []
    (predict,) = fake_venv.bench_calls("predict")
    assert "--steadiness" not in predict


def test_bench_emulated_runs_no_cell_when_the_window_fails(fake_venv, tmp_path):
    _window_prints(fake_venv, "", 2)
    proc = run_make("bench-emulated", f"VENV={fake_venv.path}",
                    f"RESULTS={tmp_path}/emulated.jsonl")
    assert proc.returncode != 0
    assert not [c for c in fake_venv.bench_calls("matrix")
                if "--interleave" in c and "--dry-run" not in c]
    (window,) = [c for c in fake_venv.calls() if c[:2] == ["-m", "bench.host.timed_window"]
                 and "--check-only" not in c]
    assert "--min-timed-s" not in window      # not given: the module's own default


@pytest.mark.parametrize("target", ["bench-accuracy", "bench-accuracy-grid"])
def test_the_accuracy_targets_pass_min_timed_s_whole_or_leave_the_default(target, fake_venv,
                                                                          marker):
    hostile = HOSTILE.format(m=marker)
    for extra, given in (([f"MIN_TIMED_S={hostile}"], hostile), ([], None)):
        before = len(fake_venv.calls())
        proc = run_make(target, f"VENV={fake_venv.path}", "RESULTS=out/a b", *extra)
        assert proc.returncode == 0, proc.stderr
        (argv,) = [c for c in fake_venv.calls()[before:]
                   if c[0] == "scripts/prediction_accuracy.py"]
        assert (argv[argv.index("--min-timed-s") + 1] if "--min-timed-s" in argv else None) \
            == given


# --- RESULTS defaults to the newest results file ----------------------------------------------
@pytest.fixture
def checkout(tmp_path):
    """A directory make can run in: the repository's make inputs, an empty results/."""
    root = tmp_path / "checkout"
    root.mkdir()
    for name in ("Makefile", "requirements.txt", "requirements-host.txt", "pyproject.toml",
                 "docker", "compose", "scripts", "bench"):
        (root / name).symlink_to(REPO / name)
    (root / "results").mkdir()
    return root


@pytest.mark.parametrize("target", ["table", "plot", "bench-predict"])
def test_without_a_results_file_it_is_one_line_exit_2(target, checkout, fake_venv):
    proc = run_make(target, f"VENV={fake_venv.path}", cwd=checkout)
    lines = error_lines(proc.stderr)
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "RESULTS=''" in lines[0] and "no results file" in lines[0], lines
    assert fake_venv.calls() == []


def test_the_newest_results_file_is_the_default(checkout, fake_venv):
    results = checkout / "results"
    for age, name in enumerate(["newest-comm.jsonl", "newer.jsonl", "old.jsonl"]):
        shutil.copy(FIXTURE, results / name)
        os.utime(results / name, (1_700_000_000 - age * 100,) * 2)
    for target in ("table", "plot"):
        proc = run_make(target, f"VENV={fake_venv.path}", cwd=checkout)
        assert proc.returncode == 0, proc.stderr
    # bench-predict wants training runs: an all-reduce sweep (*-comm.jsonl) is skipped
    proc = run_make("bench-predict", f"VENV={fake_venv.path}", cwd=checkout)
    assert proc.returncode == 0, proc.stderr
    assert [c[0] for c in fake_venv.bench_calls("table")] == ["results/newest-comm.jsonl"]
    assert [c[0] for c in fake_venv.bench_calls("plot")] == ["results/newest-comm.jsonl"]
    assert [c[0] for c in fake_venv.bench_calls("predict")] == ["results/newer.jsonl"]
    # RESULTS, when given, wins
    run_make("table", f"VENV={fake_venv.path}", "RESULTS=results/old.jsonl", cwd=checkout)
    assert fake_venv.bench_calls("table")[-1][0] == "results/old.jsonl"


# --- the Makefile's text -------------------------------------------------------------------------
def user_variables() -> list[str]:
    match = re.search(r"^override USER_VARIABLES := ((?:.*\\\n)*.*)$", MAKEFILE, re.MULTILINE)
    assert match, "USER_VARIABLES is the list of the variables users set"
    return match.group(1).replace("\\\n", " ").split()


def recipe_text() -> list[str]:
    """Recipe lines (a tab first) and the bodies of define blocks."""
    lines, in_define = [], False
    for line in MAKEFILE.splitlines():
        if line.startswith("define "):
            in_define = True
        elif line.startswith("endef"):
            in_define = False
        elif in_define or line.startswith("\t"):
            lines.append(line)
    return lines


def test_no_recipe_references_a_user_variable():
    names = user_variables()
    assert {"HOSTS", "MODEL", "LINK", "RESULTS", "TOPOLOGIES", "BATCH_SIZES", "PRECISION",
            "STEPS", "REPEATS", "DATASET", "SRC", "EXPORT_DIR", "NODES", "LINK_FROM", "FORMAT",
            "MAX_SIZE", "COMM_HOOKS", "MATRIX_ARGS", "PROFILE", "IMAGE", "VENV",
            "NODE_ENV"} <= set(names)
    pattern = re.compile(r"\$[({](" + "|".join(names) + r")[)}:]")
    offending = [line for line in recipe_text() if pattern.search(line)]
    assert offending == [], offending


def test_the_pre_stop_pattern_finds_nothing():
    pattern = re.compile(r"--[a-z-]+ \$\((HOSTS|MODEL|LINK|RESULTS|TOPOLOGIES|BATCH_SIZES)\)")
    assert pattern.search(MAKEFILE) is None


def test_newest_results_is_not_a_dangling_reference():
    assert "NEWEST_RESULTS" not in MAKEFILE or re.search(r"^NEWEST_RESULTS\s*[:?]?=",
                                                         MAKEFILE, re.MULTILINE)


def logical_recipe_lines() -> list[str]:
    """Recipe lines with their backslash continuations joined: one shell command each."""
    joined, current = [], ""
    for line in recipe_text():
        current += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            joined.append(current)
            current = ""
    return joined


def test_no_recipe_restates_a_launcher_flag():
    """The launchers own their flags (bench/host/launchers/registry.py): the targets that
    run bench matrix, bench k8s or bench slurm pass settings (BENCH_LAUNCHER_*), never a
    launcher's flag, so no recipe says which launcher takes which."""
    from bench.host.launchers import registry

    flags = set(registry.shared_flags()) - {"--k8s-kind"}   # the loop's own: one file a kind
    launching = [line for line in logical_recipe_lines()
                 if re.search(r"-m bench (matrix|k8s|slurm)\b|launcher=\(", line)]
    assert launching, "the matrix targets are found"
    offending = [(flag, line) for line in launching for flag in flags
                 if re.search(rf"(^|\s){re.escape(flag)}(\s|=|$)", line)]
    assert offending == [], offending


def test_slurm_settings_reach_bench_as_settings_and_empty_ones_as_unset(fake_venv):
    proc = run_make("bench-slurm", f"VENV={fake_venv.path}", "PARTITION=gpu a",
                    "ACCOUNT=", "SLURM_RUNTIME=compose", "GPUS_PER_NODE=0")
    assert proc.returncode == 0, proc.stderr
    (argv,), (settings,) = fake_venv.bench_calls("matrix"), fake_venv.bench_settings("matrix")
    assert argv[argv.index("--launcher") + 1] == "slurm" and "--partition" not in argv
    assert settings["BENCH_LAUNCHER_PARTITION"] == "gpu a"
    assert settings["BENCH_LAUNCHER_ACCOUNT"] == ""   # bench: empty is unset
    assert settings["BENCH_LAUNCHER_RUNTIME"] == "compose"
    assert settings["BENCH_LAUNCHER_GPUS_PER_NODE"] == "0"


def test_accept_runs_emulated_hosts_or_hosts_over_ssh(fake_venv):
    proc = run_make("accept", f"VENV={fake_venv.path}", "LINK=5gbit", "RESULTS=r x")
    assert proc.returncode == 0, proc.stderr
    (argv,), (settings,) = fake_venv.bench_calls("accept"), fake_venv.bench_settings("accept")
    assert argv[argv.index("--launcher") + 1] == "netns" and "--link" not in argv
    assert argv[argv.index("--nodes") + 1] == "4" and argv[argv.index("--out") + 1] == "r x"
    assert settings["BENCH_LAUNCHER_LINK"] == "5gbit"
    proc = run_make("accept", f"VENV={fake_venv.path}", "HOSTS=h1,h2,h3", "GPUS_PER_NODE=2")
    assert proc.returncode == 0, proc.stderr
    argv = fake_venv.bench_calls("accept")[-1]
    assert argv[argv.index("--launcher") + 1] == "ssh"
    assert (argv[argv.index("--nodes") + 1], argv[argv.index("--gpus") + 1]) == ("3", "2")
    assert fake_venv.bench_settings("accept")[-1]["BENCH_LAUNCHER_HOSTS"] == "h1,h2,h3"


@pytest.mark.parametrize("repeats", ["1", "2"])
def test_bench_emulated_runs_a_round_per_repeat_each_the_sweep_then_the_cells(repeats,
                                                                            fake_venv,
                                                                            tmp_path):
    proc = run_make("bench-emulated", f"VENV={fake_venv.path}", f"REPEATS={repeats}",
                    f"RESULTS={tmp_path}/emulated.jsonl")
    assert proc.returncode == 0, proc.stderr
    kinds = ["sweep" if "allreduce" in argv else "cells"
             for argv in fake_venv.bench_calls("matrix") if "--dry-run" not in argv]
    assert kinds == ["sweep", "cells"] * int(repeats)
    assert f"round {repeats} of {repeats}: the sweep, then every cell" in proc.stderr


def test_bench_emulated_goes_on_to_the_next_rounds_after_a_failed_cell_then_fails(
        fake_venv, tmp_path):
    """A cells' matrix that recorded a failed cell exits 1: the next rounds still run (their
    rows are data), and the target fails after the last, before the table."""
    fake_venv.exit_with(1, '"-m bench matrix --launcher"*')
    proc = run_make("bench-emulated", f"VENV={fake_venv.path}",
                    f"RESULTS={tmp_path}/emulated.jsonl")
    assert proc.returncode != 0
    kinds = ["sweep" if "allreduce" in argv else "cells"
             for argv in fake_venv.bench_calls("matrix") if "--dry-run" not in argv]
    assert kinds == ["sweep", "cells"] * 3
    assert not fake_venv.bench_calls("table")


# Each target that runs several matrices (kinds, runs, rounds), with what it needs made.
SEVERAL_MATRICES = {"bench-cpu": ["-o", "build-cpu"], "bench-oom": [], "bench-emulated": []}


def matrices_run(fake_venv) -> int:
    return len([argv for argv in fake_venv.bench_calls("matrix") if "--dry-run" not in argv])


@pytest.mark.parametrize("target", list(SEVERAL_MATRICES))
def test_a_failed_cell_lets_the_next_matrices_run_and_a_stop_ends_the_target(
        target, tmp_path):
    """A matrix that recorded a failed cell (exit 1) lets the target's next matrices run,
    their rows are data; a user error (2) or a signal (130 Ctrl-C, 143 SIGTERM) stops the
    target at once, so a Ctrl-C on the first never starts the second."""
    def run(code: int, which: str = '"-m bench matrix "[!-]*|"-m bench matrix --"[!d]*'):
        venv = FakeVenv(tmp_path / f"{code}-{len(which)}")
        if code:
            venv.exit_with(code, which)
        proc = run_make(target, *SEVERAL_MATRICES[target], f"VENV={venv.path}",
                        f"RESULTS={tmp_path}/{code}.jsonl")
        return proc, matrices_run(venv)

    settings_before = set((REPO / "build").glob("cpu-*.env"))
    clean, every = run(0)
    assert clean.returncode == 0 and every >= 2, clean.stderr
    failed, ran = run(1)
    assert ran == every and failed.returncode != 0, failed.stderr
    if target == "bench-oom":
        assert "the 1x2 fsdp run failed, where FSDP should fit" in failed.stderr
        # Its ddp runs are meant to record OOM rows: with those alone it succeeds.
        expected, ran = run(1, '*"--strategies ddp"*')
        assert ran == every and expected.returncode == 0, expected.stderr
    for code in (2, 130, 143):
        stopped, ran = run(code)
        assert ran == 1 and stopped.returncode != 0
        assert f"Error {code}" in stopped.stderr, stopped.stderr
    # bench-cpu's node settings for its containers are removed however it ended (only
    # its own case looks: under xdist another case's bench-cpu may be writing one).
    if target == "bench-cpu":
        assert set((REPO / "build").glob("cpu-*.env")) <= settings_before


@pytest.mark.parametrize("variable, value", [
    ("RUN_TAG", "x;touch {m}"), ("CPU_ENV_FILE", "x;touch {m}"),
    ("matrix_failed", ";touch {m}"), ("PY", "sh -c 'touch {m}'"), ("SHELL", "/bin/sh"),
    ("RUN_TAG", "two\nlines;touch {m}")])
def test_a_make_variable_that_is_not_a_setting_is_refused(variable, value, marker,
                                                         fake_venv, tmp_path):
    """Only the settings (USER_VARIABLES) are checked where they enter; any other variable
    given on the command line would be recipe text as it stands."""
    proc = run_make("bench-cpu", "-o", "build-cpu", f"VENV={fake_venv.path}",
                    f"{variable}={value.format(m=marker)}",
                    f"RESULTS={tmp_path}/cpu.jsonl")
    assert proc.returncode == 2
    (line,) = error_lines(proc.stderr)
    assert line.startswith("Makefile:") and f"*** {variable}: given on the command line" in line
    assert not marker.exists() and not fake_venv.calls()


def test_the_settings_list_and_the_environment_cannot_widen_what_is_checked(marker,
                                                                           fake_venv):
    """The list of settings is the Makefile's own: one given beside RUN_TAG does not admit
    it; `make -e` (the environment over the Makefile's own variables) is refused; COMPOSE,
    a setting read as a command, is checked for make's `$` as the others are."""
    injected = f"x;touch {marker}"
    widened = run_make("bench-cpu", "-o", "build-cpu", f"VENV={fake_venv.path}",
                       "USER_VARIABLES=USER_VARIABLES RUN_TAG", f"RUN_TAG={injected}")
    assert widened.returncode == 2 and "*** RUN_TAG: given on the command line" in \
        widened.stderr
    for flags, env in ((["-e"], {}), ([], {"MAKEFLAGS": "e"})):
        proc = run_make(*flags, "help", env={"RUN_TAG": injected, **env})
        assert proc.returncode == 2 and "make -e: the environment would override" in \
            proc.stderr
    compose = run_make("help", f"COMPOSE=$(shell touch {marker})")
    assert compose.returncode == 2 and "COMPOSE=" in compose.stderr
    assert not fake_venv.calls()
