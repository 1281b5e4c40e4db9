"""The trainer image as Compose runs it: what it refuses up front."""
from __future__ import annotations

import subprocess

import pytest

pytestmark = pytest.mark.e2e


def test_compile_is_refused_in_one_line_where_the_image_cannot_build_kernels(cpu_image):
    # The image has neither a C++ compiler nor Python.h, which Inductor and Triton need at
    # run time: one line and exit 2 before anything runs, not a failed run after set-up.
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "host", cpu_image, "python", "-m", "bench",
         "train", "--steps", "1", "--model", "smallcnn", "--compile", "--results",
         "/tmp/runs.jsonl"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("bench train: error: --compile=True: torch.compile builds")
    assert "no C++ compiler and no Python.h" in lines[0]
