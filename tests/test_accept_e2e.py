"""``bench accept`` on four emulated hosts with real faults (issue 27), at test scale: the
conditions of ``scripts/accept_faults.py`` (which measures the rates), one run each.

The kernel's own mechanisms make the faults: a host's cgroup CPU quota cut to a quarter, a
host's link shaped to a tenth of the others', the link of the NFS server (the stack's own
image, on its own emulated host) shaped so that the nodes cannot read the dataset as fast as
they train. A clean cluster passes every row, the data stage's over NFS included.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.test_netlab_e2e import lab_host  # noqa: F401  (the fixture)

# Alone: each fault is told apart by a rate measured on the emulated hosts
# (tests/conftest.py, PHASES).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

_spec = importlib.util.spec_from_file_location("accept_faults",
                                               REPO / "scripts" / "accept_faults.py")
assert _spec is not None and _spec.loader is not None
faults = importlib.util.module_from_spec(_spec)
sys.modules["accept_faults"] = faults     # its dataclasses look their module up
_spec.loader.exec_module(faults)


# The data stage runs where it is under test: on the clean cluster and under its own fault.
WITH_DATA = ("clean", "data")


@pytest.mark.parametrize("condition", list(faults.CONDITIONS))
def test_a_fault_fails_the_row_that_names_its_host(lab_host, tmp_path, condition,  # noqa: F811
                                                   request):
    expect = faults.CONDITIONS[condition].stage
    export = None
    if condition in WITH_DATA:
        request.getfixturevalue("nfs_image")
        export = faults.write_shards(tmp_path / "export")
    stages = "preflight,device" + (",link" if condition != "data" else "")
    proc = subprocess.run(faults.accept_argv(faults.CONDITIONS[condition], tmp_path / "out",
                                             stages, export),
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    tmp_path = tmp_path / "out"
    verdict = json.loads((tmp_path / "accept.json").read_text())
    failed = [(row["stage"], row["subject"]) for row in verdict["rows"]
              if row["status"] == "FAIL"]
    assert proc.returncode == (1 if expect else 0), proc.stderr[-3000:]
    assert verdict["exit_code"] == proc.returncode
    assert (tmp_path / "accept-figures.html").exists()      # the report, verdict first
    if not expect:
        assert failed == [], verdict["rows"]
        assert {row["stage"] for row in verdict["rows"]} == {"preflight", "device", "link",
                                                              "data"}
        data = [row for row in verdict["rows"] if row["stage"] == "data"]
        assert len(data) == faults.HOSTS and all(row["status"] == "PASS" for row in data), data
        return
    if expect == "data":
        # Every node's read is short, with its figures; the rows blame what they share.
        assert {stage for stage, _ in failed} == {"data"}, failed
        assert len(failed) == faults.HOSTS, failed
        for row in (r for r in verdict["rows"] if r["status"] == "FAIL"):
            assert row["measured"] < row["expected"], row
            assert "training needs" in row["reason"] and "the data server" in row["reason"]
        return
    # Every failed row names host 2, and the stage of the fault failed.
    assert failed and all(f"node {faults.FAULTY}" in subject for _, subject in failed), failed
    assert expect in {stage for stage, _ in failed}, failed
    rows = [row for row in verdict["rows"] if row["status"] == "FAIL"]
    if expect == "device":
        assert any("below its 3 peer(s)" in row["reason"] for row in rows), rows
        assert any("CPUs' worth of time" in row["reason"] for row in rows), rows
    else:
        (node,) = [row for row in verdict["rows"] if row["subject"] == "node 2"]
        assert "NIC, cable or switch port" in node["reason"], node
        assert not [row for row in rows if row["stage"] == "device"]
    assert "FAIL" in proc.stdout and "verdict in" in proc.stderr
