"""The InfiniBand/RoCE variant of the GPU trainer (profile gpu-ib), as Compose v1 and v2
render it: the HCAs and IPC_LOCK there, and nowhere else; IB is not disabled by default."""
from __future__ import annotations

import os
import re
import subprocess

import pytest
import yaml

from conftest import EXAMPLE_ENV, REPO

pytestmark = pytest.mark.e2e
COMPOSE_FILE = REPO / "compose" / "docker-compose.yml"


def _rendered(compose_variant, profile: str) -> dict:
    out = subprocess.run([*compose_variant["COMPOSE"].split(), "-f", str(COMPOSE_FILE),
                          "--env-file", str(EXAMPLE_ENV), "--profile", profile, "config"],
                         cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "BENCH_ENV_FILE": str(EXAMPLE_ENV)})
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)["services"]


def test_the_ib_variant_adds_the_hcas_and_memory_locking(compose_variant):
    ib = _rendered(compose_variant, "gpu-ib")["trainer-ib"]
    devices = [d if isinstance(d, str) else f"{d['source']}:{d['target']}"
               for d in ib["devices"]]
    assert any(d.startswith("/dev/infiniband:/dev/infiniband") for d in devices)
    # The trainers' one capability (test_stack_e2e) and, here only, IPC_LOCK.
    assert [cap.removeprefix("CAP_") for cap in ib["cap_add"]] == ["DAC_OVERRIDE", "IPC_LOCK"]
    # RDMA registers (pins) memory: no limit on locked memory, as for the GPU trainer.
    assert ib["ulimits"]["memlock"] in (-1, {"soft": -1, "hard": -1})
    # Everything else is the GPU trainer's: GPUs, host networking, memlock.
    assert ib["network_mode"] == "host"
    assert ib["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert ib["environment"]["BENCH_MODULE"] == "bench.rank.train"
    # A fall-back to sockets fails the job (bench.rank.job); only this trainer expects IB.
    assert ib["environment"]["BENCH_EXPECT_NET"] == "IB"


@pytest.mark.parametrize("profile, service", [("gpu", "trainer"), ("cpu", "trainer-cpu")])
def test_other_trainers_get_no_rdma_rights(compose_variant, profile, service):
    rendered = _rendered(compose_variant, profile)[service]
    assert "devices" not in rendered and "BENCH_EXPECT_NET" not in rendered["environment"]
    assert "IPC_LOCK" not in [cap.removeprefix("CAP_") for cap in rendered["cap_add"]]


def test_infiniband_is_not_disabled_by_default():
    settings = {line.split("=", 1)[0] for line in EXAMPLE_ENV.read_text().splitlines()
                if line and not line.startswith("#") and "=" in line}
    assert "NCCL_IB_DISABLE" not in settings
    assert "#NCCL_IB_HCA=" in EXAMPLE_ENV.read_text()


def test_nothing_in_the_stack_disables_infiniband():
    """Only a user's settings file may set NCCL_IB_DISABLE: no image, entrypoint, Compose
    file or launcher does."""
    sets_it = re.compile(r"NCCL_IB_DISABLE[\"']?\]?\s*[=:]\s*[\"']?1")
    files = [*(REPO / "docker").iterdir(), COMPOSE_FILE, *(REPO / "scripts").iterdir(),
             *(REPO / "bench").rglob("*.py"), REPO / "Makefile"]
    offenders = [str(f.relative_to(REPO)) for f in files
                 if f.is_file() and sets_it.search(f.read_text(errors="replace"))]
    assert offenders == []
