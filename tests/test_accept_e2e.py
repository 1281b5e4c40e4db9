"""``bench accept`` on four emulated hosts with real faults (issue 27), at test scale.

The kernel's own mechanisms make the faults: a host's cgroup CPU quota cut to a quarter, a
host's link shaped to a tenth of the others'. A clean cluster passes every row.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.test_netlab_e2e import lab_host  # noqa: F401  (the fixture)

pytestmark = pytest.mark.e2e

# Small figures: the job measures in about half a minute per condition.
RANK_FLAGS = ("--", "--repeats", "3", "--memory-size", "16MiB", "--matmul-size", "192",
              "--link-size", "4MiB", "--train-steps", "2", "--train-batch", "32")
FAIR = "0.4"


def _accept(out, *flags: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([sys.executable, "-m", "bench", "accept", "--out", str(out),
                           "--nodes", "4", "--stages", "preflight,device,link",
                           "--launcher", "netns", "--link", "1gbit", *flags, *RANK_FLAGS],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    verdict = json.loads((out / "accept.json").read_text())
    return proc, verdict


def _failed(verdict: dict) -> list[tuple[str, str]]:
    return [(row["stage"], row["subject"]) for row in verdict["rows"]
            if row["status"] == "FAIL"]


@pytest.mark.parametrize("condition, flags, expect", [
    ("clean", ["--host-cpu-quota", FAIR], []),
    ("cpu", ["--host-cpu-quota", f"{FAIR},{FAIR},0.1,{FAIR}"], "device"),
    ("link", ["--host-cpu-quota", FAIR, "--host-links", ",,100mbit,"], "link"),
])
def test_a_fault_fails_the_row_that_names_its_host(lab_host, tmp_path, condition,  # noqa: F811
                                                   flags, expect):
    proc, verdict = _accept(tmp_path, *flags)
    failed = _failed(verdict)
    assert proc.returncode == (1 if expect else 0), proc.stderr[-3000:]
    assert verdict["exit_code"] == proc.returncode
    if not expect:
        assert failed == [], verdict["rows"]
        assert {row["stage"] for row in verdict["rows"]} == {"preflight", "device", "link"}
        return
    # Every failed row names host 2, and the stage the fault is in failed.
    assert failed and all("node 2" in subject for _, subject in failed), failed
    assert expect in {stage for stage, _ in failed}, failed
    if expect == "device":
        slow = [row for row in verdict["rows"] if row["status"] == "FAIL"
                and row["stage"] == "device"]
        assert any("below its 3 peer(s)" in row["reason"] for row in slow), slow
        assert any("CPUs' worth of time" in row["reason"] for row in slow), slow
    else:
        (node,) = [row for row in verdict["rows"] if row["subject"] == "node 2"]
        assert "NIC, cable or switch port" in node["reason"], node
        assert not [row for row in verdict["rows"] if row["stage"] == "device"
                    and row["status"] == "FAIL"]
    assert "FAIL" in proc.stdout and "verdict in" in proc.stderr
