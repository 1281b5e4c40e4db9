"""The Makefile and README promise the same front door."""
from __future__ import annotations

import subprocess

from conftest import REPO

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


def test_bench_predict_passes_every_node_count_and_the_measured_link():
    def dry_run(*overrides: str) -> str:
        out = subprocess.run(["make", "--no-print-directory", "-n", "bench-predict",
                              "RESULTS=runs.jsonl", *overrides], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return " ".join(out.stdout.replace("\\\n", " ").split())

    assert "--link 5gbit --nodes 2,4" in dry_run()
    assert "--link-from comm.jsonl --nodes 2,8" in dry_run("LINK_FROM=comm.jsonl", "NODES=2,8")
