"""The GPU image carries the userspace verbs NCCL loads for InfiniBand and RoCE (issue 27/28):
its CUDA base cannot be pulled here, so the Dockerfile's step is read, and its shell run with
apt-get, apt-cache and rm stood in for, on a CUDA base and on a CPU one."""
from __future__ import annotations

import os
import re
import stat
import subprocess

import pytest

from conftest import REPO

DOCKERFILE = (REPO / "docker" / "Dockerfile").read_text()
PACKAGES = ["libibverbs1", "ibverbs-providers", "ibverbs-utils"]
# What --compile needs at run time (bench.config.compile_toolchain_missing): g++ (with gcc)
# and the base Python's headers.
COMPILE_PACKAGES = ["g++", "python3-dev"]


def _final_stage() -> str:
    return DOCKERFILE[DOCKERFILE.rindex("\nFROM "):]


def _rdma_step() -> str:
    """The final stage's RUN that installs the verbs, as the shell gets it."""
    runs = re.findall(r"^RUN (.*?)(?<!\\)$", _final_stage(), re.MULTILINE | re.DOTALL)
    (step,) = [r for r in runs if "ibverbs" in r]
    return step.replace("\\\n", " ")


def test_the_final_stage_installs_rdma_core_userspace_before_the_venv():
    stage = _final_stage()
    step = _rdma_step()
    assert stage.index("ibverbs-utils") < stage.index("COPY --from=build /opt/venv"), \
        "before the large, often rebuilt layers"
    for package in PACKAGES + COMPILE_PACKAGES:
        assert re.search(rf"(?<![\w-]){re.escape(package)}(?![\w-])", step), package
    assert "librdmacm1" in step and "librdmacm1t64" in step
    assert "--no-install-recommends" in step and "rm -rf /var/lib/apt/lists/*" in step


def _tool(folder, name: str, text: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("base_env, known, installed", [
    # Ubuntu 24.04 (the CUDA bases) renamed librdmacm1 in its 64-bit time_t transition.
    ({"NVIDIA_REQUIRE_CUDA": "cuda>=13.0"}, "librdmacm1t64", "librdmacm1t64"),
    ({"CUDA_VERSION": "13.0.3"}, "librdmacm1", "librdmacm1"),
    ({}, "librdmacm1t64", None),   # a CPU base: gloo, no verbs, no apt-get at all
])
def test_the_step_picks_the_bases_package_names(tmp_path, base_env, known, installed):
    log = tmp_path / "apt.log"
    _tool(tmp_path, "apt-get", f'echo "apt-get $*" >> {log}\n')
    _tool(tmp_path, "apt-cache", f'[ "$2" = {known} ]\n')
    # rm stood in for too, and -f (no globbing): this machine's apt lists stay.
    _tool(tmp_path, "rm", f'echo "rm $*" >> {log}\n')
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", **base_env}
    out = subprocess.run(["sh", "-efc", _rdma_step()], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    if installed is None:
        assert calls == []
        return
    assert calls[0] == "apt-get update"
    words = calls[1].split()
    assert words[:4] == ["apt-get", "install", "-y", "--no-install-recommends"]
    assert sorted(words[4:]) == sorted([*PACKAGES, *COMPILE_PACKAGES, installed])
    assert calls[2:] == ["rm -rf /var/lib/apt/lists/*"]
