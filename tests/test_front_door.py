"""The Makefile and README promise the same front door."""
from __future__ import annotations

import re
import subprocess

from conftest import REPO, run_make

PROMISED = ["build", "wheels", "bench-single", "bench-multigpu", "bench-cpu", "nfs-up",
            "nfs-down", "dataset", "test", "lint", "clean", "help"]


def test_make_help_lists_every_promised_target():
    out = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    listed = {line.split()[0] for line in out.stdout.splitlines() if line.strip()}
    assert set(PROMISED) <= listed, set(PROMISED) - listed


def test_readme_first_screen_gives_the_two_commands():
    first_screen = "\n".join((REPO / "README.md").read_text().splitlines()[:15])
    assert "make bench-cpu" in first_screen and "make test" in first_screen


def test_bench_predict_passes_every_node_count_and_the_measured_link(fake_venv):
    def predict_argv(*overrides: str) -> list[str]:
        proc = run_make("bench-predict", "RESULTS=runs.jsonl", f"VENV={fake_venv.path}",
                        *overrides)
        assert proc.returncode == 0, proc.stderr
        return fake_venv.bench_calls("predict")[-1]

    assert predict_argv() == ["runs.jsonl", "--link", "5gbit", "--nodes", "2,4"]
    assert predict_argv("LINK_FROM=comm.jsonl", "NODES=2,8") == [
        "runs.jsonl", "--link", "5gbit", "--link-from", "comm.jsonl", "--nodes", "2,8"]


def test_make_test_installs_its_own_prerequisites_first():
    """`make test` from the README works on a fresh Debian machine: its first prerequisite
    installs what the tests need (where missing); CI does nothing but call it."""
    makefile = (REPO / "Makefile").read_text()
    test_rule = re.search(r"^test: (.*?)##", makefile, re.MULTILINE)
    assert test_rule and test_rule.group(1).split()[0] == "test-deps", test_rule
    recipe = makefile.split("\ntest-deps:", 1)[1].split("\n\n", 1)[0]
    assert "scripts/install-host.sh" in recipe and "parts=(test docker)" in recipe
    ci = (REPO / ".ci" / "run").read_text()
    assert "apt-get install" not in ci and "pip install" not in ci
    commands = [line for line in ci.splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert "make test" in commands
    assert not any(re.search(r"\b(apt|apt-get|pip|pip3|dpkg)\b", c) for c in commands), commands


def test_install_host_knows_the_test_packages():
    script = (REPO / "scripts" / "install-host.sh").read_text()
    for package in ("libnfs-utils", "openssh-server", "iproute2"):
        assert package in script
    proc = subprocess.run(["scripts/install-host.sh", "no-such-part"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "test" in proc.stderr.splitlines()[-1], proc.stderr

