"""The rank-side measurement scripts of issue 29 (scripts/hook_cost.py, hook_steps.py,
half_payload_cost.py, run under torchrun by hook_cost_emulated.py): a wrong value is one
line naming the flag, exit 2, before any rank starts and with nothing written."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

WRONG = [
    ("hook_cost.py", ["--tries", "0"], "--tries"),
    ("hook_cost.py", ["--batch-size", "-4"], "--batch-size"),
    ("hook_cost.py", ["--model", "nosuch"], "--model"),
    ("hook_steps.py", ["--rounds", "0"], "--rounds"),
    ("hook_steps.py", ["--steps", "x"], "--steps"),
    ("hook_steps.py", ["--mlp-width", "0"], "--mlp-width"),
    ("hook_steps.py", ["--hooks", "none,none"], "--hooks"),
    ("half_payload_cost.py", ["--elements", "0"], "--elements"),
    ("half_payload_cost.py", ["--tries", "1.5"], "--tries"),
]


@pytest.mark.parametrize(("script", "flags", "named"), WRONG)
def test_a_wrong_value_is_one_line_and_exit_2_before_any_rank(tmp_path, script, flags, named):
    out = tmp_path / "out.json"
    # No torchrun environment: a script that got past its flags would fail on RANK instead.
    proc = subprocess.run([sys.executable, f"scripts/{script}", "--out", str(out), *flags],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert named in line and "--help" in line, line
    assert not out.exists() and list(tmp_path.iterdir()) == []
