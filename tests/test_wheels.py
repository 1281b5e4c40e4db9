"""The image's wheels are downloaded with the project venv's pip, never the system's: a
fresh GPU server often has python3 without pip. The flavour comes from the one table."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import REPO

SCRIPT = REPO / "scripts" / "download-wheels.sh"


def _stub(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _run(tmp_path: Path, flavour: str, python: Path | None) -> subprocess.CompletedProcess:
    # A PATH whose python3 has no pip: the script must not reach for it.
    bin_dir = tmp_path / "bin"
    _stub(bin_dir / "python3", "echo 'No module named pip' >&2; exit 1\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    if python is not None:
        env["PYTHON"] = str(python)
    return subprocess.run(["bash", str(SCRIPT), str(tmp_path / "wheels"), "3.11", flavour],
                          env=env, capture_output=True, text=True, cwd=tmp_path)


def test_the_venv_pip_downloads_the_pinned_requirements(tmp_path):
    calls = tmp_path / "calls.jsonl"
    venv_python = _stub(tmp_path / "venv" / "bin" / "python",
                        'case "$1" in -c) echo 3.11;; *) python3=/usr/bin/python3; '
                        f'"$python3" -c "import json,sys; print(json.dumps(sys.argv[1:]))" '
                        f'"$@" >> {calls};; esac\n')
    out = _run(tmp_path, "cu126", venv_python)
    assert out.returncode == 0, out.stderr
    (argv,) = [json.loads(line) for line in calls.read_text().splitlines()]
    assert argv[:3] == ["-m", "pip", "download"]
    assert str(REPO / "requirements.txt") in argv
    assert "https://download.pytorch.org/whl/cu126" in argv


def test_without_a_venv_it_says_to_make_one(tmp_path):
    out = _run(tmp_path, "default", tmp_path / "missing" / "python")
    assert out.returncode == 2 and "make venv" in out.stderr


def test_a_flavour_outside_the_table_is_refused(tmp_path):
    for flavour in ("cu128", "cu1$(id)"):
        out = _run(tmp_path, flavour, None)
        assert out.returncode == 2, out.stderr
        assert "TORCH_FLAVOUR=" in out.stderr and "cu126" in out.stderr


def test_the_make_targets_make_the_venv_first_and_hand_its_python_over(tmp_path):
    """`make wheels` on a fresh host: the venv (installing python3-venv where it is missing)
    comes first, and the download runs with its interpreter, never the system's pip."""
    for target in ("wheels", "wheels-cpu"):
        out = subprocess.run(["make", "--no-print-directory", "-n", target,
                              f"VENV={tmp_path / 'fresh-venv'}"], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        venv = next(i for i, line in enumerate(lines) if "-m venv" in line)
        (download,) = [i for i, line in enumerate(lines) if "download-wheels.sh" in line]
        assert venv < download
        assert "scripts/install-host.sh venv" in out.stdout
        assert lines[download].startswith('PYTHON="$MK_VENV/bin/python" ')
        assert "python3 -m pip" not in out.stdout
