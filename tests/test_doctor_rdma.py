"""bench doctor's rdma row (profile gpu-ib), without an HCA: ``ibv_devinfo`` in the image
with /dev/infiniband attached lists the HCAs NCCL will see, or the row names why NCCL would
fall back to sockets. A fake docker on PATH runs a fake ibv_devinfo, so the command goes
through the real Remote, quoted as one argv."""
from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys

import pytest

from bench.host import doctor
from bench.host.checks import FAIL, PASS, rdma
from bench.host.checks.remote import Hosts, Remote

# ibv_devinfo's own format (rdma-core libibverbs/examples/devinfo.c): one block per HCA.
TWO_HCAS = """hca_id:\tmlx5_0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t4096 (5)
\t\t\tlink_layer:\t\tInfiniBand

hca_id:\tmlx5_1
\ttransport:\t\t\tInfiniBand (0)
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_DOWN (1)
\t\t\tlink_layer:\t\tEthernet

"""
FAKE_DOCKER = """#!/bin/sh
# docker run --rm --device D --entrypoint E IMAGE ARGS...: record the argv, run E from PATH
printf '%s\\n' "$@" > "$FAKE_LOG"
[ -n "$FAKE_DOCKER_SAYS" ] && { echo "$FAKE_DOCKER_SAYS" >&2; exit 127; }
shift 5; entry=$1; shift 2
exec "$entry" "$@"
"""


def _tool(folder, name: str, text: str) -> None:
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def fake_host(tmp_path, monkeypatch):
    """A host whose docker and ibv_devinfo are scripts; its answer set per test."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "docker", FAKE_DOCKER)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "argv"))
    monkeypatch.delenv("FAKE_DOCKER_SAYS", raising=False)

    def answer(stdout: str = "", stderr: str = "", code: int = 0, docker_says: str = "",
               **settings: str):
        _tool(bin_dir, "ibv_devinfo", f"#!/bin/sh\nprintf %s {shlex.quote(stdout)}\n"
              f"printf '%s\\n' {shlex.quote(stderr)} >&2\nexit {code}\n")
        if docker_says:
            monkeypatch.setenv("FAKE_DOCKER_SAYS", docker_says)
        # The host's shell runs the line as ssh would hand it over.
        remote = Remote(lambda host, line: ["sh", "-c", line])
        job = Hosts(("ib1",), remote, image="registry.example:5000/bench trainer:cuda",
                    settings=settings, profile="gpu-ib")
        row = rdma.rdma_row(job, "ib1")
        return row, (tmp_path / "argv").read_text().splitlines()

    return answer


def test_the_hcas_the_image_sees_pass_named_with_their_ports(fake_host):
    row, argv = fake_host(TWO_HCAS)
    assert row.result == PASS and row.check == "rdma"
    assert row.detail == ("2 HCA(s) in the image: mlx5_0 port 1 ACTIVE InfiniBand, "
                          "mlx5_1 port 1 DOWN RoCE")
    # One argv, the image name kept whole (it holds a space): no word became shell syntax.
    assert argv == ["run", "--rm", "--device", "/dev/infiniband:/dev/infiniband",
                    "--entrypoint", "ibv_devinfo", "registry.example:5000/bench trainer:cuda"]


def test_no_active_port_fails_naming_the_ports(fake_host):
    row, _ = fake_host(TWO_HCAS.replace("PORT_ACTIVE (4)", "PORT_INIT (2)"))
    assert row.result == FAIL and "no HCA port is active" in row.detail
    assert "mlx5_0 port 1 INIT InfiniBand" in row.detail and "subnet manager" in row.detail


@pytest.mark.parametrize("hca, ok", [("mlx5_0:1", True), ("mlx5", True), ("=mlx5_0", True),
                                     ("mlx5_2:1", False), ("=mlx5", False), ("^mlx5_0", True)])
def test_an_nccl_ib_hca_that_names_no_listed_device_fails(fake_host, hca, ok):
    row, _ = fake_host(TWO_HCAS, NCCL_IB_HCA=hca)
    assert (row.result == PASS) is ok, row.detail
    if not ok:
        assert row.detail.startswith(f"NCCL_IB_HCA={hca} names ") and "mlx5_0, mlx5_1" in \
            row.detail


@pytest.mark.parametrize("answer, words", [
    ({"stderr": "No IB devices found", "code": 255}, "the container sees no HCA (No IB "
     "devices found): load ib_uverbs"),
    ({"stderr": "Failed to get IB devices list: Function not implemented", "code": 255},
     "the container sees no HCA (Failed to get IB devices list"),
    ({"stderr": "libibverbs: Warning: couldn't load driver 'libmlx5-rdmav34.so'\nNo IB "
               "devices found", "code": 255}, "cannot load ib1's HCA driver"),
    ({"docker_says": 'docker: Error response from daemon: error gathering device information '
                     'while adding custom device "/dev/infiniband": no such file or directory'},
     "no /dev/infiniband on ib1: load the RDMA drivers"),
    ({"docker_says": 'docker: Error response from daemon: failed to create shim task: exec: '
                     '"ibv_devinfo": executable file not found in $PATH: unknown'},
     "ibv_devinfo is not in registry.example:5000/bench trainer:cuda: rebuild it"),
    ({"stdout": "", "code": 0}, "ibv_devinfo in the image lists no HCA port"),
])
def test_each_reason_nccl_would_see_no_hca_is_named_with_its_fix(fake_host, answer, words):
    row, _ = fake_host(**answer)
    assert row.result == FAIL and words in row.detail, row.detail


def test_only_the_ib_profile_runs_it(monkeypatch):
    """doctor --profile gpu-ib adds the row right after the gpu row; gpu does not."""
    def passes(check):
        return lambda *args: doctor.Row(args[-1] if check != "exposure" else args[1], check,
                                        PASS, "")

    for module, name, check in [
            (doctor.ssh, "reach", "ssh"), (doctor.ssh, "resolve_row", "resolve"),
            (doctor.ssh, "clock_row", "clock"), (doctor.containers, "docker_row", "docker"),
            (doctor.data, "dataset_row", "dataset"), (doctor.data, "shm_row", "shm"),
            (doctor.network, "exposure_row", "exposure"), (doctor.rdma, "rdma_row", "rdma")]:
        monkeypatch.setattr(module, name, passes(check))
    monkeypatch.setattr(doctor.containers, "image_row",
                        lambda remote, host, image: (passes("image")(host), ("sha256:1", "v")))
    monkeypatch.setattr(doctor.gpu, "gpu_row", lambda job, host: (passes("gpu")(host), None))
    monkeypatch.setattr(doctor.network, "interface_rows", lambda job, host: ([], []))
    monkeypatch.setattr(doctor.network, "rendezvous_rows", lambda job, hosts: [])
    remote = Remote(lambda host, line: ["true"])
    for profile in ("gpu", "gpu-ib"):
        rows = doctor.check_hosts(Hosts(("a", "b"), remote, profile=profile))
        for host in ("a", "b"):
            checks = [row.check for row in rows if row.host == host]
            assert ("rdma" in checks) is (profile == "gpu-ib"), checks
            if profile == "gpu-ib":
                assert checks.index("rdma") == checks.index("gpu") + 1


def test_doctor_takes_the_ib_profile_and_kubernetes_refuses_it(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bench", "doctor", "--k8s", "--image", "x:1",
                          "--profile", "gpu-ib"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().startswith("bench doctor: error: --profile=gpu-ib: cpu or gpu")
