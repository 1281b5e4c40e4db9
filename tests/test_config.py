"""Bad inputs: each gives one line naming the flag, exit code 2, and writes nothing."""
from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.config import TrainConfig
from bench.rank.train import main
from conftest import REPO


def run_main(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    return code, capsys.readouterr().err


BAD_INPUTS = {
    "unknown model": (["--steps", "1", "--model", "resnet9000"], "--model", "resnet9000"),
    "batch size 0": (["--steps", "1", "--batch-size", "0"], "--batch-size", "positive"),
    "both steps and epochs": (["--steps", "1", "--epochs", "1"], "--steps", "exactly one"),
    "neither steps nor epochs": ([], "--steps", "exactly one"),
    "missing data directory": (["--steps", "1", "--data", "fashion-mnist", "--data-dir",
                                "/nonexistent/fmnist"], "--data-dir", "no such directory"),
    "cifar10 directory without the batches": (["--steps", "1", "--data", "cifar10", "--data-dir",
                                               "/tmp"], "--data-dir", "--download"),
    "unknown precision": (["--steps", "1", "--precision", "fp8"], "--precision", "fp8"),
    "epochs on synthetic data": (["--epochs", "1"], "--epochs", "real dataset"),
    "nccl without cuda": (["--steps", "1", "--backend", "nccl", "--device", "cpu"],
                          "--backend", "gloo"),
    "vit size not a patch multiple": (["--steps", "1", "--model", "vit_b_16",
                                       "--image-size", "100"], "--image-size", "16"),
    "small vit size not a patch multiple": (["--steps", "1", "--model", "vit_tiny",
                                             "--image-size", "30"], "--image-size", "4"),
}


@pytest.mark.parametrize("argv,flag,hint", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_exits_2_with_one_line_and_writes_nothing(argv, flag, hint, tmp_path, capsys):
    results = tmp_path / "results" / "runs.jsonl"
    code, err = run_main(argv + ["--results", str(results)], capsys)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert flag in lines[0] and hint in lines[0], lines[0]
    assert not results.exists() and not results.parent.exists()


def test_bad_input_process_exit_code_is_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench", "train", "--steps", "0",
                           "--results", str(tmp_path / "r.jsonl")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--steps=0" in proc.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_cli_lists_verbs():
    proc = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "train" in proc.stdout


def test_every_flag_has_help_and_defaults_resolve():
    parser = TrainConfig.parser()
    flags = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert len(flags) > 20
    assert all(a.help for a in flags)
    cfg = TrainConfig.from_args(["--steps", "3"])
    assert cfg.model.image_size == 224 and cfg.distributed.backend in ("gloo", "nccl")


def test_config_hash_ignores_output_path_but_not_measurement():
    a = TrainConfig.from_args(["--steps", "3", "--results", "a.jsonl"])
    b = TrainConfig.from_args(["--steps", "3", "--results", "b.jsonl"])
    c = TrainConfig.from_args(["--steps", "3", "--batch-size", "32"])
    assert a.hash() == b.hash() != c.hash()


@given(st.text(), st.text(), st.text())
def test_a_config_error_is_one_printable_line_whatever_it_names(flag, value, allowed):
    from bench.options import ConfigError

    message = str(ConfigError(flag, value, allowed))
    assert message.isprintable() and "\n" not in message
    # Printable text is kept as given: a value the user can read is shown as typed.
    if (flag + value + allowed).isprintable():
        assert message == f"{flag}={value}: {allowed}"


@pytest.mark.parametrize("args", [
    ["matrix", "--dry-run", "--results", "/tmp/a\nb.txt", "--", "--steps", "5"],
    ["matrix", "--dry-run", "--launcher", "netns", "--link", "a\nb", "--", "--steps", "5"],
    ["predict", "/nonexistent\n.jsonl", "--link", "a\nb"],
])
def test_a_value_holding_a_newline_is_refused_on_one_line(args, tmp_path):
    import os

    proc = subprocess.run([sys.executable, "-m", "bench", *args], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "\\n" in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []
