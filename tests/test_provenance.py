"""Where a record says it came from: the tree (commit, dirty, the uncommitted change's
hash), and the communication settings a user set, not a base image's or torchrun's."""
from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from bench import provenance, record
from bench.analysis import report


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "a.py").write_text("x = 1\n")
    (root / "blob.bin").write_bytes(bytes(range(256)))
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "one")
    return root


def test_two_dirty_trees_of_one_commit_hash_apart(repo):
    """A working tree beside a stale .git says "<commit>+dirty" whatever it holds: the
    change's hash tells two such trees apart, and a clean tree has none."""
    assert provenance.diff_sha256(repo) is None
    (repo / "a.py").write_text("x = 2\n")
    first = provenance.diff_sha256(repo)
    (repo / "a.py").write_text("x = 3\n")
    second = provenance.diff_sha256(repo)
    (repo / "blob.bin").write_bytes(bytes(range(255, -1, -1)))
    third = provenance.diff_sha256(repo)
    assert len({first, second, third}) == 3 and all(len(h) == 64 for h in (first, second))
    assert provenance.diff_sha256(repo) == third, "the same tree, the same hash"
    (repo / "a.py").write_text("x = 1\n")
    (repo / "blob.bin").write_bytes(bytes(range(256)))
    assert provenance.diff_sha256(repo) is None


def test_the_hash_is_the_build_scripts(repo):
    """scripts/build-image.sh hashes the same command's output with sha256sum."""
    (repo / "a.py").write_text("y = 1\n")
    out = subprocess.run(provenance.DIFF_COMMAND, cwd=repo, capture_output=True, check=True)
    assert provenance.diff_sha256(repo) == hashlib.sha256(out.stdout).hexdigest()
    script = (Path(__file__).parents[1] / "scripts" / "build-image.sh").read_text()
    assert " ".join(provenance.DIFF_COMMAND[1:]) in script.replace("\\\n", " ").replace(
        "git -C \"$repo\" ", "git ")


def test_a_git_that_hangs_gives_null_in_bounded_time(tmp_path, monkeypatch):
    slow = tmp_path / "bin" / "git"
    slow.parent.mkdir()
    slow.write_text("#!/bin/sh\necho partial\nexec sleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setenv("PATH", f"{slow.parent}:{os.environ['PATH']}")
    started = time.monotonic()
    assert provenance.diff_sha256(tmp_path, timeout_s=0.3) is None
    assert time.monotonic() - started < 5
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert provenance.diff_sha256(tmp_path) is None, "no git at all"


def test_the_image_passes_the_tree_in_the_environment(monkeypatch):
    digest = "ab" * 32
    monkeypatch.setenv("BENCH_GIT_COMMIT", "c0ffee")
    monkeypatch.setenv("BENCH_GIT_DIRTY", "1")
    monkeypatch.setenv("BENCH_GIT_DIFF_SHA256", digest)
    assert provenance.git_state() == ("c0ffee", True, digest)
    monkeypatch.setenv("BENCH_GIT_DIFF_SHA256", "not a hash")
    assert provenance.git_state() == ("c0ffee", True, None)
    monkeypatch.delenv("BENCH_GIT_DIFF_SHA256")
    monkeypatch.setenv("BENCH_GIT_DIRTY", "0")
    assert provenance.git_state() == ("c0ffee", False, None)


def test_this_checkout_records_its_diff_hash_when_dirty(monkeypatch):
    monkeypatch.delenv("BENCH_GIT_COMMIT", raising=False)
    commit, dirty, diff = provenance.git_state()
    # CI runs in a clone, and so does every developer: no skip, a checkout is a promise.
    assert commit is not None, "the tests run in a git checkout"
    assert (diff is not None) == bool(dirty)


def test_the_schema_takes_the_hash_and_old_records_stay_valid():
    rec = record.schema("steps")["properties"]["env"]
    assert "git_diff_sha256" not in rec["required"]
    from tests.test_readers import TRAINING

    assert record.problem_of(TRAINING) is None
    digest = "0123456789abcdef" * 4
    assert record.problem_of({**TRAINING, "env": {**TRAINING["env"],
                                                  "git_diff_sha256": digest}}) is None
    bad = {**TRAINING, "env": {**TRAINING["env"], "git_diff_sha256": "xyz"}}
    assert "git_diff_sha256" in (record.problem_of(bad) or "")


def test_the_report_tells_dirty_trees_apart():
    base = {"git_commit": "04afd38", "git_dirty": True}
    assert report.git_tree({**base, "git_diff_sha256": "a" * 64}) == \
        "04afd38+dirty (diff aaaaaaaaaaaa)"
    assert report.git_tree(base) == "04afd38+dirty"
    assert report.git_tree({"git_commit": "04afd38", "git_dirty": False}) == "04afd38"
    assert report.git_tree({}) is None


# --- comm_env: the user's settings only -------------------------------------------------

def test_a_base_images_versions_are_not_settings():
    """The CUDA images export NCCL_VERSION, CUDA_VERSION and NV_LIBNCCL_*: what they name
    is the image's package, not what torch loaded (env.nccl) and not a setting."""
    environ = {"NCCL_VERSION": "2.28.3-1", "CUDA_VERSION": "13.0.3",
               "NV_LIBNCCL_PACKAGE_VERSION": "2.28.3-1", "NV_LIBNCCL_DEV_PACKAGE": "x",
               "NVIDIA_REQUIRE_CUDA": "cuda>=13.0", "NCCL_LIB_DIR": "/usr/lib",
               "NCCL_SOCKET_IFNAME": "eth0"}
    assert provenance.comm_env(environ) == {"NCCL_SOCKET_IFNAME": "eth0"}
    assert not [name for name in provenance.COMM_SETTINGS if name.endswith("_VERSION")]


def test_what_torchrun_adds_is_not_the_users():
    """torchrun sets TORCH_NCCL_ASYNC_ERROR_HANDLING=1 where the user set none; bench's
    torchrun names it, and comm_env leaves it out. A user's own value stays."""
    environ: dict[str, str] = {"NCCL_DEBUG": "WARN"}
    provenance.mark_torchrun_defaults(environ)
    environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"   # as torchrun's agent then does
    assert provenance.comm_env(environ) == {"NCCL_DEBUG": "WARN"}
    mine = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}
    provenance.mark_torchrun_defaults(mine)
    assert provenance.comm_env(mine) == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}
