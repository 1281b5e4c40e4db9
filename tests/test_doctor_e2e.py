"""bench doctor against two loopback hosts served by a real sshd."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import EXAMPLE_ENV, LOOPBACK_HOSTS, REPO, free_port

pytestmark = pytest.mark.e2e


def doctor(sshd_home, image, env_lines: str, tmp_path, hosts=LOOPBACK_HOSTS):
    env_file = tmp_path / "node.env"
    env_file.write_text(EXAMPLE_ENV.read_text() + env_lines)
    # A port free now: a job elsewhere on this machine may hold the default 29500.
    return subprocess.run([sys.executable, "-m", "bench", "doctor", "--hosts",
                           ",".join(hosts), "--image", image, "--env-file",
                           str(env_file), "--ssh-config", str(sshd_home / "ssh_config"),
                           "--master-port", str(free_port())],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def rows(stdout: str) -> dict[tuple[str, str], tuple[str, str]]:
    """{(host, check): (result, detail)} from the doctor's table (first row per pair)."""
    found = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 4 and cells[2] in ("PASS", "WARN", "FAIL"):
            found.setdefault((cells[0], cells[1]), (cells[2], cells[3]))
    return found


def bind_dataset(export) -> str:
    return (f"\nDATA_MOUNT_TYPE=none\nDATA_MOUNT_OPTIONS=bind\nDATA_DEVICE={export}\n"
            "GLOO_SOCKET_IFNAME=lo\n")


def test_doctor_passes_a_ready_pair_of_hosts(loopback_sshd, cpu_image, staged_fashion_mnist,
                                             tmp_path):
    out = doctor(loopback_sshd, cpu_image, bind_dataset(staged_fashion_mnist) +
                 "NCCL_SOCKET_IFNAME=lo\n", tmp_path)
    found = rows(out.stdout)
    for host in LOOPBACK_HOSTS:
        for check in ("ssh", "docker", "image", "interface", "rendezvous", "dataset",
                      "resolve", "clock", "exposure"):
            assert found[(host, check)][0] == "PASS", (host, check, found.get((host, check)))
        assert found[(host, "gpu")][0] == "WARN"  # no NVIDIA driver here: a CPU host
    assert out.returncode == (1 if any(r == "FAIL" for r, _ in found.values()) else 0)


def test_doctor_fails_a_wrong_interface_naming_the_host(loopback_sshd, cpu_image,
                                                        staged_fashion_mnist, tmp_path):
    out = doctor(loopback_sshd, cpu_image, bind_dataset(staged_fashion_mnist) +
                 "NCCL_SOCKET_IFNAME=eth9\n", tmp_path)
    assert out.returncode == 1
    found = rows(out.stdout)
    for host in LOOPBACK_HOSTS:
        result, detail = found[(host, "interface")]
        assert result == "FAIL" and f"no such interface on {host}" in detail


def test_doctor_fails_a_missing_image_naming_the_host(loopback_sshd, docker_engine,
                                                      tmp_path):
    out = doctor(loopback_sshd, "bench-trainer:no-such-tag", "\nGLOO_SOCKET_IFNAME=lo\n",
                 tmp_path)
    assert out.returncode == 1
    found = rows(out.stdout)
    for host in LOOPBACK_HOSTS:
        result, detail = found[(host, "image")]
        assert result == "FAIL" and f"missing on {host}" in detail


def test_doctor_takes_user_at_host_and_leads_with_the_first_address(loopback_sshd,
                                                                     docker_engine, tmp_path):
    # user@host reaches ssh whole; MASTER_ADDR (interface route, rendezvous) is the address.
    hosts = [f"root@{host}" for host in LOOPBACK_HOSTS]
    out = doctor(loopback_sshd, "bench-trainer:no-such-tag",
                 "\nGLOO_SOCKET_IFNAME=lo\nNCCL_SOCKET_IFNAME=lo\n", tmp_path, hosts=hosts)
    found = rows(out.stdout)
    for host in hosts:
        for check in ("ssh", "interface", "rendezvous", "resolve", "exposure"):
            assert found[(host, check)][0] == "PASS", (host, check, found.get((host, check)))
    assert f"{LOOPBACK_HOSTS[0]}:" in found[(hosts[1], "rendezvous")][1]
    assert "private or loopback" in found[(hosts[0], "exposure")][1]
    assert "warning" not in out.stderr

