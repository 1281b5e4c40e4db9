"""The matrix: parsing, tables, compare, plots, and native runs with failures and --resume."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import record
from bench.analysis.compare import verdict
from bench.analysis.table import render
from bench.host import matrix
from bench.host.outcome import JobOutcome, NodeOutcome
from bench.options import ConfigError
from bench.topology import Topology, parse_hosts, parse_list, parse_positive_ints
from conftest import REPO, run_matrix, validate

FIXTURES = REPO / "tests" / "fixtures"


@pytest.mark.parametrize("text,expected", [
    ("1x1", Topology(1, 1)), ("2X4", Topology(2, 4)), (" 1x2 ", Topology(1, 2))])
def test_topology_parses(text, expected):
    assert Topology.parse(text) == expected


@pytest.mark.parametrize("text", ["3x0", "x2", "2x", "0x1", "2*2", ""])
def test_topology_rejects(text):
    with pytest.raises(ConfigError, match="--topologies"):
        Topology.parse(text)


def test_lists_reject_duplicates_and_empties():
    assert parse_list("1x1,1x2 2x1") == [Topology(1, 1), Topology(1, 2), Topology(2, 1)]
    assert parse_positive_ints("64, 128", "--batch-sizes") == [64, 128]
    assert parse_hosts("a,b") == ["a", "b"]
    for call in (lambda: parse_list("1x1,1x1"), lambda: parse_positive_ints("64,x", "B"),
                 lambda: parse_hosts("a,,b"), lambda: parse_hosts("a,a"), lambda: parse_hosts("")):
        with pytest.raises(ConfigError):
            call()


@pytest.mark.parametrize("argv,message", [
    (["--batch-sizes", "0,64"], "--batch-sizes=0"),
    (["--batch-sizes", "sixty"], "--batch-sizes=sixty"),
    (["--topologies", "3x0"], "--topologies=3x0"),
    (["--topologies", "x2"], "--topologies=x2"),
    (["--launcher", "ssh", "--hosts", "h1,,h2"], "--hosts=h1,,h2: an empty host name"),
    (["--launcher", "ssh", "--hosts", "h1,h1"], "lists h1 twice"),
    (["--launcher", "ssh", "--hosts", "h1", "--topologies", "2x1"], "needs 2 nodes"),
    (["--", "--model", "smallcnn"], "--models before --"),
    (["--", "--steps", "0"], "--steps=0"),
], ids=["batch-zero", "batch-word", "topo-3x0", "topo-x2", "hosts-empty", "hosts-dup",
        "hosts-too-few", "dimension-after-dashes", "bad-trainer-flag"])
def test_bad_matrix_inputs_exit_2(argv, message, capsys, tmp_path):
    results = tmp_path / "runs.jsonl"
    own, trainer = (argv[:argv.index("--")], argv[argv.index("--"):]) if "--" in argv \
        else (argv, ["--", "--steps", "1"])
    code = matrix.main(own + ["--results", str(results)] + trainer)
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not results.exists()


def test_table_from_fixture_equals_expected_text():
    records = list(record.read(FIXTURES / "table-fixture.jsonl"))
    assert render(records) == (FIXTURES / "table-fixture.md").read_text().rstrip("\n")


def test_table_cli_filters_and_rejects_unknown_fields():
    def run(*args):
        return subprocess.run([sys.executable, "-m", "bench", "table",
                               str(FIXTURES / "table-fixture.jsonl"), *args],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
    only = run("--where", "batch=64", "--format", "csv")
    assert only.returncode == 0, only.stderr
    header, *rows = only.stdout.strip().splitlines()
    assert header.startswith("batch,") and len(rows) == 3  # the 3 topologies of batch 64
    assert all(row.startswith("64,") for row in rows)
    bad = run("--group-by", "colour")
    assert bad.returncode == 2 and "--group-by=colour" in bad.stderr


@pytest.mark.parametrize("a,b,higher,expected", [
    ([100, 102, 101], [110, 112, 111], True, "faster"),       # interval 7.7 to 12.3
    ([100, 110, 105], [104, 112, 108], True, "within noise"),  # interval -8.8 to 14.8
    ([10.0, 10.5, 10.2], [12.0, 12.4, 12.2], False, "slower"),  # times: larger is slower
    # Two repeats a side cannot tell 10.25 from 12.2 s (interval -2.1 to 6.0), though the
    # ranges do not overlap: min-max called this "slower".
    ([10.0, 10.5], [12.0, 12.4], False, "within noise"),
    # Ranges that overlap, but eight repeats a side pin the means apart (interval 1.4 to
    # 4.1): min-max overlap called this noise.
    ([100, 101, 99, 100, 102, 98, 100, 101], [103, 102, 104, 103, 101, 105, 103, 102], True,
     "faster"),
    ([100, 100], [100, 100], True, "within noise"),           # no spread, no difference
    ([100], [103], True, "within noise (1 run: threshold)"),
    ([100], [120], True, "faster (1 run: threshold)"),
])
def test_compare_verdicts(a, b, higher, expected):
    assert verdict(a, b, higher, threshold=0.05) == expected


SMALL = ["--models", "smallcnn", "--", "--steps", "2", "--warmup-steps", "1", "--log-every", "0"]


@pytest.fixture(scope="module")
def native_matrix(tmp_path_factory):
    results = tmp_path_factory.mktemp("matrix") / "runs.jsonl"
    proc = run_matrix("--batch-sizes", "8,16", "--topologies", "1x1,1x2,2x1",
                      "--results", str(results), *SMALL)
    return results, proc


@pytest.mark.e2e
@pytest.mark.xdist_group("native_matrix")   # one worker, so the matrix runs once
def test_native_matrix_runs_every_cell_with_table_and_plot(native_matrix):
    results, proc = native_matrix
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = list(record.read(results))
    assert len(records) == 6
    cells = sorted((r["batch_size_per_device"], r["nnodes"], r["nproc_per_node"]) for r in records)
    assert cells == [(8, 1, 1), (8, 1, 2), (8, 2, 1), (16, 1, 1), (16, 1, 2), (16, 2, 1)]
    for rec in records:
        validate(rec)
        assert rec["status"] == "ok" and rec["matrix"]["launcher"] == "native"
        assert (results.parent / "logs" / rec["matrix"]["logs"].split("/logs/")[1]
                / "node0.log").is_file()
    assert "ETA" in proc.stderr and "job 6/6" in proc.stderr
    table = subprocess.run([sys.executable, "-m", "bench", "table", str(results)], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert table.returncode == 0 and table.stdout.count("| multi-node") == 2
    plots = subprocess.run([sys.executable, "-m", "bench", "plot", str(results)], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert plots.returncode == 0, plots.stderr
    pngs = [results.parent / line for line in plots.stdout.split()]
    # metric, efficiency and heatmap per workload; the step breakdown per workload and the
    # per-rank bars of the run whose straggler cost most (issue 26)
    assert len(pngs) == 5 and sum("breakdown" in p.name for p in pngs) == 1
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


@pytest.mark.e2e
@pytest.mark.xdist_group("native_matrix")
def test_resume_skips_finished_cells(native_matrix, tmp_path):
    results = tmp_path / "runs.jsonl"
    shutil.copy(native_matrix[0], results)
    again = run_matrix("--batch-sizes", "8,16", "--topologies", "1x1,1x2,2x1", "--resume",
                       "--results", str(results), *SMALL)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stderr.count("already recorded, skipped (--resume)") == 6
    assert len(list(record.read(results))) == 6
    more = run_matrix("--batch-sizes", "8", "--topologies", "1x1", "--repeats", "2",
                      "--resume", "--results", str(results), *SMALL)
    assert more.returncode == 0, more.stderr[-2000:]
    assert more.stderr.count("skipped (--resume)") == 1 and "job 1/1" in more.stderr
    assert len(list(record.read(results))) == 7


def _kill_node1_when_training(results_dir, stop):
    """SIGKILL node 1's whole process group once its trainer has started stepping."""
    while not stop.is_set():
        found = subprocess.run(["pgrep", "-f", "--", f"--node_rank 1 .*{results_dir}"],
                               capture_output=True, text=True).stdout.split()
        logs = list(results_dir.glob("logs/*/node0.log"))
        if found and logs and "step 2/" in logs[0].read_text():
            os.killpg(int(found[0]), signal.SIGKILL)
            return
        time.sleep(0.2)


@pytest.mark.e2e
def test_a_node_killed_mid_cell_is_recorded_naming_it(tmp_path):
    results = tmp_path / "runs.jsonl"
    record.append(results, {"earlier": "record"})  # must survive intact
    stop = threading.Event()
    killer = threading.Thread(target=_kill_node1_when_training, args=(tmp_path, stop))
    killer.start()
    started = time.monotonic()
    proc = run_matrix("--batch-sizes", "8", "--topologies", "2x1", "--results", str(results),
                      "--models", "smallcnn", "--deadline", "180", "--", "--steps", "100000",
                      "--warmup-steps", "0", "--log-every", "1", "--timeout", "20")
    stop.set()
    killer.join()
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr[-3000:]
    first, rec = list(record.read(results, validate=False))
    assert first == {"earlier": "record"}
    validate(rec)
    assert rec["status"] in ("error", "timeout")
    assert rec["failed_node"]["host"] == "node1" and rec["failed_node"]["returncode"] == -9
    assert "node1 (node 1) killed by SIGKILL" in rec["error"]
    assert "failed cells:" in proc.stderr and "node1" in proc.stderr
    assert elapsed < 120, f"node 0 should give up within --timeout, took {elapsed:.0f}s"
    assert subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True).stdout == b""


def _kill_node1_container_when_training(results_dir, stop):
    """docker kill node 1's trainer container once rank 0 reports steps."""
    while not stop.is_set():
        logs = list(results_dir.glob("logs/*/node0.log"))
        if logs and "step 2/" in logs[0].read_text():
            names = subprocess.run(["docker", "ps", "--format", "{{.Names}}"],
                                   capture_output=True, text=True).stdout.split()
            node1 = [n for n in names if n.startswith("bench-") and "node1" in n]
            if node1:
                subprocess.run(["docker", "kill", node1[0]], capture_output=True)
                return
        time.sleep(0.2)


@pytest.mark.e2e
@pytest.mark.serial   # kills a bench-*node1 container (tests/conftest.py)
def test_a_node_container_killed_mid_cell_is_recorded_and_nothing_is_left(cpu_image,
                                                                          compose_variant,
                                                                          tmp_path):
    from conftest import EXAMPLE_ENV, bench_containers

    env_file = tmp_path / "node.env"
    env_file.write_text(EXAMPLE_ENV.read_text() + f"\nDATA_MOUNT_TYPE=none\nDATA_MOUNT_OPTIONS="
                        f"bind\nDATA_DEVICE={tmp_path}\nGLOO_SOCKET_IFNAME=lo\nOMP_NUM_THREADS=1\n")
    results = tmp_path / "runs.jsonl"
    record.append(results, {"earlier": "record"})
    stop = threading.Event()
    killer = threading.Thread(target=_kill_node1_container_when_training, args=(tmp_path, stop))
    killer.start()
    proc = run_matrix("--launcher", "compose", "--image", cpu_image, "--env-file", str(env_file),
                      "--profile", "cpu", "--batch-sizes", "8", "--topologies", "2x1",
                      "--results", str(results), "--models", "smallcnn", "--deadline", "180",
                      "--", "--steps", "100000", "--warmup-steps", "0", "--log-every", "1",
                      "--timeout", "20", env=compose_variant)
    stop.set()
    killer.join()
    assert proc.returncode == 1, proc.stderr[-3000:]
    first, rec = list(record.read(results, validate=False))
    assert first == {"earlier": "record"}
    validate(rec)
    assert rec["status"] in ("error", "timeout") and rec["failed_node"]["host"] == "node1"
    assert bench_containers() == [], "every node's containers are gone"


def test_bracket_runs_each_one_node_cell_again_after_its_multi_node_cells(tmp_path):
    """--bracket: in each round, each setup's one-node cell before its multi-node cells
    and again right after the last of them."""
    argv = [sys.executable, "-m", "bench", "matrix", "--dry-run", "--topologies", "1x1,2x1,3x1",
            "--batch-sizes", "8,16", "--repeats", "2", "--results", str(tmp_path / "r.jsonl"),
            "--interleave", "--bracket", "--", "--device", "cpu", "--steps", "2"]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    order = [(line.split()[3], line.split("repeat ")[1][:3], "again after" in line)
             for line in proc.stdout.splitlines() if line.startswith("### job: cell")]
    one_round = [("1", False), ("2", False), ("3", False), ("1", True),
                 ("4", False), ("5", False), ("6", False), ("4", True)]
    assert order == [(cell, f"{r}/2", again) for r in (1, 2) for cell, again in one_round]
    # Its job writes its logs under its own id: the cell's, and "a".
    assert proc.stdout.count("-c1r1a") and proc.stdout.count("-c1r1") > proc.stdout.count(
        "-c1r1a")


@pytest.mark.parametrize("flags, why", [
    (["--bracket"], "add --interleave"),
    (["--bracket", "--interleave", "--resume"], "--resume cannot count"),
])
def test_bracket_needs_interleave_and_refuses_resume_in_one_line(tmp_path, flags, why):
    results = tmp_path / "r.jsonl"
    proc = subprocess.run([sys.executable, "-m", "bench", "matrix", "--topologies", "1x1,2x1",
                           "--results", str(results), *flags, "--", "--device", "cpu"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("bench matrix: error: --bracket=") and why in lines[0]
    assert not results.exists() and not (tmp_path / "logs").exists()


_cells = st.lists(st.sampled_from([Topology(1, 1), Topology(2, 1), Topology(3, 1),
                                   Topology(1, 2)]), min_size=1, max_size=4, unique=True)


@given(_cells, st.lists(st.sampled_from(["none", "fp16", "powersgd"]), min_size=1,
                        max_size=3, unique=True), st.integers(1, 3))
def test_a_bracketed_round_runs_each_setups_one_node_jobs_on_both_sides_of_its_wide_ones(
        topologies, hooks, repeats):
    cells = [matrix.Cell(8, t, "mlp", "fp32", "gloo", h) for h in hooks for t in topologies]
    jobs = sorted([(i, cell, r) for i, cell in enumerate(cells, 1)
                   for r in range(1, repeats + 1)], key=lambda job: (job[2], job[0]))
    out = matrix.bracketed(jobs)
    # Every job once untagged; the rounds, and the setups within each, in their order.
    assert sorted(job[:3] for job in out if job[3] == "") == sorted(jobs)
    assert [job[2] for job in out] == sorted(job[2] for job in out)
    setups = [(job[2], job[1].comm_hook) for job in out]
    assert list(dict.fromkeys(setups)) == list(dict.fromkeys((j[2], j[1].comm_hook)
                                                             for j in jobs))
    wide = any(t.nodes > 1 for t in topologies)
    ones = [t for t in topologies if t.nodes == 1]
    for key in dict.fromkeys(setups):
        group = [job for job in out if (job[2], job[1].comm_hook) == key]
        shape = [(job[1].topology.nodes > 1, job[3]) for job in group]
        if wide and ones:
            # One-node, wide, then the one-node ones again, tagged.
            assert shape == [(False, "")] * len(ones) + \
                [(True, "")] * (len(topologies) - len(ones)) + [(False, matrix.AFTER)] * len(ones)
            assert [job[1] for job in group[:len(ones)]] == [job[1] for job in group[-len(ones):]]
        else:
            assert all(tag == "" for _, tag in shape) and len(group) == len(topologies)


def test_a_bracketed_ones_record_says_it_ran_after(tmp_path):
    """The one-node cell's second run of a round: its own job id and logs, its record's
    matrix section marked "after" (the schema takes it); the other rows unmarked."""
    class Finished:
        name = "native"

        def launch(self, job):
            rec = dict(base, job_id=job.job_id)
            node = NodeOutcome(rank=0, host="node0", returncode=0, last_lines=[],
                               output=[record.MARKER, record.dumps(rec)])
            return JobOutcome(nodes=[node], timed_out=False, seconds=0.5)

    base = dict(next(iter(record.read(FIXTURES / "table-fixture.jsonl"))),
                first_step_done=None, last_step_done=None)
    results = tmp_path / "runs.jsonl"
    cfg = matrix.MatrixConfig.from_args(["--models", "smallcnn", "--topologies", "1x1,2x1",
                                         "--interleave", "--bracket", "--results",
                                         str(results), "--", "--steps", "2"], "bench matrix")
    assert matrix.run(cfg, Finished()) == 0
    rows = list(record.read(results))
    assert [(r["matrix"]["cell"], r["matrix"].get("bracket")) for r in rows] == \
        [(1, None), (2, None), (1, "after")]
    assert rows[2]["matrix"]["logs"].endswith("-c1r1a") and rows[2]["job_id"].endswith("-c1r1a")
    assert rows[0]["matrix"]["repeat"] == rows[2]["matrix"]["repeat"] == 1   # one round
    for rec in rows:
        assert record.problem_of(rec) is None
    assert record.problem_of({**rows[2], "matrix": {**rows[2]["matrix"], "bracket": "before"}})


@pytest.mark.parametrize("interleave", [False, True])
def test_interleave_runs_repeat_one_of_every_cell_first(interleave, tmp_path):
    """--interleave: repeat 1 of every cell, then repeat 2, so that drift over the run
    reaches every cell alike; without it each cell's repeats run back to back."""
    argv = [sys.executable, "-m", "bench", "matrix", "--dry-run", "--topologies", "1x1,1x2",
            "--batch-sizes", "8", "--repeats", "2", "--results", str(tmp_path / "r.jsonl"),
            *(["--interleave"] if interleave else []), "--", "--device", "cpu", "--steps", "2"]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    order = [(line.split()[3], line.split("repeat ")[1][:3])
             for line in proc.stdout.splitlines() if line.startswith("### job: cell")]
    expected = [("1", "1/2"), ("2", "1/2"), ("1", "2/2"), ("2", "2/2")] if interleave else \
        [("1", "1/2"), ("1", "2/2"), ("2", "1/2"), ("2", "2/2")]
    assert order == expected
