"""The acceptance run's settings (bench.accept_config) and its pairing of nodes."""
from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import paths
from bench.accept_config import AcceptConfig, parse_stages, round_robin
from bench.host import accept
from bench.options import ConfigError, on_head


@given(st.integers(min_value=1, max_value=40))
def test_round_robin_pairs_every_two_nodes_once_and_each_node_once_per_round(nodes):
    rounds = round_robin(nodes)
    pairs = [pair for r in rounds for pair in r]
    assert sorted(pairs) == list(itertools.combinations(range(nodes), 2))
    for r in rounds:
        members = [n for pair in r for n in pair]
        assert len(members) == len(set(members))
    # The fewest rounds that can hold every pair: n-1 for even n, n for odd (one rests).
    assert len(rounds) == (0 if nodes == 1 else nodes - 1 if nodes % 2 == 0 else nodes)


@pytest.mark.parametrize("text, stages", [("device", ("device",)),
                                          ("link,device", ("device", "link")),
                                          (" data , link ", ("link", "data"))])
def test_stages_are_kept_in_their_order(text, stages):
    assert parse_stages(text) == stages


@pytest.mark.parametrize("text", ["", "device,device", "gpu", "device,,nfs", ","])
def test_a_bad_stage_list_is_refused_naming_the_stages(text):
    with pytest.raises(ConfigError, match="--stages.*device,link,data"):
        parse_stages(text)


@pytest.mark.parametrize("argv, setting", [
    (["--repeats", "1"], "--repeats"), (["--link-size", "2"], "--link-size"),
    (["--link-size", "2GiB"], "--link-size"), (["--train-model", "gpt"], "--train-model"),
    (["--stages", "data"], "--data-dir"), (["--data-max-size", "0"], "--data-max-size"),
    (["--matmul-size", "-1"], "--matmul-size")])
def test_every_setting_is_checked_before_anything_runs(argv, setting):
    with on_head(), pytest.raises(ConfigError, match=setting):
        AcceptConfig.from_args(argv)


def test_accept_refuses_a_bad_setting_with_exit_2(tmp_path, capsys):
    for argv in (["--out", str(tmp_path), "--nodes", "0"],
                 ["--out", str(tmp_path), "--stages", "device,wire"],
                 ["--out", str(tmp_path), "--launcher", "netns"],      # no --link
                 ["--out", str(tmp_path), "--", "--repeats", "0"],
                 ["--out", str(tmp_path), "--topolog", "2x2"],        # accept sets it
                 ["--out", str(tmp_path), "--results=x.jsonl"],
                 ["--out", str(tmp_path), "--brack"]):                # accept sets it
        assert accept.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("bench accept: error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "accept.json").exists()


@pytest.mark.parametrize("flag, owned", [("--brack", "--bracket"), ("--bracket", "--bracket"),
                                         ("--interl", "--interleave")])
def test_the_job_stages_run_order_is_accepts_own(flag, owned):
    """The job stage runs its cells interleaved and bracketed; a launcher flag that would
    change that is refused by name, not passed on to the matrix."""
    with pytest.raises(ConfigError, match=f"set by bench accept itself \\({owned}\\)"):
        accept.refuse_owned(["--launcher", "netns", flag])


def test_a_json_verdict_is_the_stacks_own_and_replaces_only_its_own(tmp_path):
    target = tmp_path / "accept.json"
    paths.write_output(target, paths.owned_json({"rows": []}), setting="--out")
    paths.write_output(target, paths.owned_json({"rows": [1]}), setting="--out")
    assert '"rows": [\n  1\n ]' in target.read_text()
    mine = tmp_path / "mine.json"
    mine.write_text('{"rows": "my own notes"}\n')
    with pytest.raises(ConfigError, match="--out"):
        paths.write_output(mine, paths.owned_json({}), setting="--out")
    assert mine.read_text() == '{"rows": "my own notes"}\n'


def test_kubernetes_renders_every_job_of_the_acceptance(tmp_path, capsys):
    """``--dry-run`` through the k8s launcher: the measurement job, the job stage's sweep
    and its training runs (each round's 1-node run again after its 2-node one: bracketed,
    as the demo and the accuracy benchmark run), each as manifests the Kubernetes schemas
    accept."""
    import kubernetes_validate
    import yaml

    code = accept.main(["--out", str(tmp_path / "acc"), "--nodes", "2", "--launcher", "k8s",
                        "--image", "bench-trainer:cpu", "--dry-run", "--job-repeats", "2"])
    out = capsys.readouterr().out
    assert code == 0
    jobs = [part for part in out.split("### job: ")[1:]]
    again = ", again after its multi-node cells (--bracket)"
    assert [job.split(" (k8s)")[0].split(" ", 2)[2] for job in jobs] == [
        "acceptance 2x1 auto repeat 1/1", "all-reduce 2x1 auto repeat 1/1",
        *[f"batch 16 {topology} mlp fp32 auto repeat {r}/2{tag}" for r in (1, 2)
          for topology, tag in (("1x1", ""), ("2x1", ""), ("1x1", again))]]
    assert "bench.rank.accept" in jobs[0] and "bench.rank.train" in jobs[2]
    version = kubernetes_validate.latest_version()
    for job in jobs:
        for doc in yaml.safe_load_all(job.split("\n", 1)[1]):
            kubernetes_validate.validate(doc, version, strict=True)
    assert not (tmp_path / "acc").exists()     # a dry run starts and writes nothing


def test_the_job_stage_trains_in_mixed_precision_that_every_gpu_runs():
    """--precision bf16 now fails on a GPU without it (a V100, a T4): the job stage asks
    auto, which is bf16 where the GPUs have it and fp16 elsewhere."""
    gpu = accept.job_workload("cuda")
    assert gpu[gpu.index("--precisions") + 1] == "auto"
    assert "--precisions" not in accept.job_workload("cpu"), "the CPU workload stays fp32"


def _faults_script():
    import importlib.util
    import sys

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("accept_faults",
                                                  REPO / "scripts" / "accept_faults.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["accept_faults"] = module
    spec.loader.exec_module(module)
    return module


def test_the_fault_benchmark_tallies_each_condition(tmp_path, capsys):
    faults = _faults_script()

    def verdict(name: str, rows: list[tuple[str, str, str]], figures=()) -> None:
        (tmp_path / name).mkdir()
        failed = sum(status == "FAIL" for _, _, status in rows)
        (tmp_path / name / "accept.json").write_text(json.dumps({
            "exit_code": 1 if failed else 0, "failed": failed,
            "warned": sum(status == "WARN" for _, _, status in rows),
            "rows": [{"stage": s, "subject": subject, "status": status,
                      **dict(zip(("measured", "expected"), figure, strict=False))}
                     for (s, subject, status), figure in
                     itertools.zip_longest(rows, figures, fillvalue=())]}))

    # the shortfall is read from device rows with two good figures only
    verdict("clean-1", [("device", "node 0 vm rank 0", "PASS"),
                        ("device", "node 1 vm rank 1", "WARN"),
                        ("device", "node 2 vm rank 2", "PASS"),
                        ("link", "node 0 - node 1", "PASS"),
                        ("device", "node 3 vm rank 3", "PASS")],
            [(95.0, 100.0), (88.0, 100.0), ("88", 100.0), (1.0, 100.0), (50.0, 0.0)])
    verdict("clean-2", [("device", "node 3 vm rank 3", "FAIL")])           # a false alarm
    verdict("cpu-1", [("device", "node 2 vm rank 2", "FAIL"), ("link", "node 2", "FAIL")])
    verdict("link-1", [("device", "node 2 vm rank 2", "FAIL")])            # the wrong stage
    assert faults.main(["--out", str(tmp_path), "--analyse-only"]) == 0
    rows = {r["condition"]: r for r in json.loads(
        (tmp_path / "accept-faults.json").read_text())["rows"]}
    assert (rows["clean"]["runs"], rows["clean"]["exit_0"], rows["clean"]["warn_rows"],
            rows["clean"]["runs_with_a_fail"]) == (2, 1, 1, 1)
    assert rows["cpu"]["fault_named"] == 1 and rows["link"]["fault_named"] == 0
    assert rows["clean"]["largest_device_shortfall"] == pytest.approx(0.12)
    assert rows["cpu"]["largest_device_shortfall"] is None        # no figures
    assert "| clean | 2 | 1 | 1 | 1 | 1 | 12% | - |" in capsys.readouterr().out
    # Its outputs are its own: a stranger's file there is refused before anything runs.
    (tmp_path / "accept-faults.md").write_text("mine\n")
    assert faults.main(["--out", str(tmp_path), "--analyse-only"]) == 2


def test_the_fault_benchmark_counts_each_device_check_apart(tmp_path, capsys):
    faults = _faults_script()
    figures = {"clean-1": [("memory bandwidth", 80.0), ("memory bandwidth", 95.0),
                           ("matmul fp32", 99.0)],
               "clean-2": [("memory bandwidth", 89.9), ("matmul fp32", 110.0)]}
    for name, rows in figures.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "accept.json").write_text(json.dumps({"rows": [
            {"stage": "device", "subject": f"node {i} vm rank {i}", "check": check,
             "measured": measured, "expected": 100.0, "status": "PASS"}
            for i, (check, measured) in enumerate(rows)]
            + [{"stage": "link", "check": "all-reduce", "measured": 1.0, "expected": 9.0}]}))
    # A run that cannot be read, and one that is no verdict, are skipped naming their file.
    (tmp_path / "clean-3").mkdir()
    (tmp_path / "clean-3" / "accept.json").write_text("{not json")
    (tmp_path / "clean-4").mkdir()
    (tmp_path / "clean-4" / "accept.json").write_text('["rows"]')
    checks = {row["check"]: row for row in faults.by_check(tmp_path)}
    err = capsys.readouterr().err
    assert "clean-3/accept.json: skipped" in err and "clean-4/accept.json: skipped" in err
    assert set(checks) == {"memory bandwidth", "matmul fp32"}      # device rows only
    memory, matmul = checks["memory bandwidth"], checks["matmul fp32"]
    assert (memory["rows"], memory["short_10"]) == (3, 2)          # 20% and 10.1% below
    assert memory["largest_shortfall"] == pytest.approx(0.2)
    assert (matmul["rows"], matmul["short_10"]) == (2, 0)
    assert matmul["largest_shortfall"] == pytest.approx(0.01)
    text = faults.markdown([], "device", faults.by_check(tmp_path))
    assert "| clean | memory bandwidth | 3 | 2 | 20.0% |" in text


@pytest.mark.parametrize("text", ["[", "[]", '{"models": [1]}', '{"models": {"m": [1]}}',
                                  '{"models": {}, "models": {}}', '{"models": {"m": NaN}}',
                                  "[" * 100_000 + "]" * 100_000])
def test_a_reference_table_that_is_none_is_refused_naming_the_setting(tmp_path, text):
    path = tmp_path / "reference.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match="--reference"):
        accept.load_reference(path)


def test_the_fault_benchmark_skips_a_verdict_it_cannot_read(tmp_path, capsys):
    faults = _faults_script()
    for name, text in (("clean-1", "[" * 100_000), ("clean-2", '{"rows": [], "rows": 1}'),
                       ("clean-3", '{"exit_code": 0, "failed": 0, "warned": 0, "rows": []}')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "accept.json").write_text(text)
    assert [v["exit_code"] for v in faults._verdicts(tmp_path, "clean")] == [0]
    err = capsys.readouterr().err
    assert "clean-1/accept.json: skipped" in err and "clean-2/accept.json: skipped" in err
