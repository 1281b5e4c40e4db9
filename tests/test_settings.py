"""Node settings: each bad value is one line naming the setting and the fix."""
from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys

import pytest

from bench.host import settings as settings_module
from bench.host.settings import (
    INTERPOLATED,
    NodeSettings,
    check_data_volume,
    check_nfs_server,
    load,
    read_env_file,
)
from bench.options import ConfigError
from conftest import EXAMPLE_ENV, REPO, free_port

EXAMPLE = EXAMPLE_ENV
ENTRYPOINT = REPO / "nfs" / "entrypoint.sh"
SECCOMP = REPO / "nfs" / "seccomp.json"
# moby v20.10.24 profiles/seccomp/default.json (nfs/README.md)
UPSTREAM_SECCOMP_SHA256 = "ce3585b856aa4a193671fd8280d0d0612a998bd3f10bdb2f8530dfa958c6197f"


def settings(profile="cpu", **overrides) -> NodeSettings:
    return NodeSettings.parse({**read_env_file(EXAMPLE), **overrides}, profile)


def test_example_env_file_is_valid_and_complete():
    values = read_env_file(EXAMPLE)
    node = settings()
    assert (node.nnodes, node.node_rank, node.master_port) == (1, 0, 29500)
    assert values["BENCH_ARGS"] == "--steps 20 --model resnet18"  # no inline comment kept
    # make's env_value (sed) would keep an inline comment as part of the value.
    assert all("#" not in v for v in values.values()), "no inline comments in the example"
    assert values["NFS_ALLOW_ANY_CLIENT"] == "no", "the opt-in is documented, and off"


@pytest.mark.parametrize("overrides,setting,hint", [
    ({"NNODES": "2", "NODE_RANK": "2"}, "NODE_RANK", "below NNODES=2"),
    ({"NNODES": "2", "MASTER_ADDR": ""}, "MASTER_ADDR", "node 0's address"),
    ({"NNODES": "zero"}, "NNODES", "integer"),
    ({"MASTER_PORT": "70000"}, "MASTER_PORT", "1024-65535"),
])
def test_bad_topology(overrides, setting, hint):
    with pytest.raises(ConfigError) as error:
        settings(**overrides)
    assert error.value.flag == setting and hint in str(error.value)


# Every number: a plain decimal in its range. int() alone takes " 2", "+2", "1_0" and
# non-ASCII digits, and a huge count is a typo, not a cluster.
@pytest.mark.parametrize("setting,value", [
    ("NNODES", "0"), ("NNODES", "1025"), ("NNODES", "-1"), ("NNODES", "+2"), ("NNODES", " 2"),
    ("NNODES", "2.0"), ("NNODES", "1e3"), ("NNODES", "02"), ("NNODES", "1_0"),
    ("NNODES", "nan"), ("NNODES", "inf"), ("NNODES", "\u0661\u0662"), ("NNODES", "9" * 40),
    ("NNODES", ""),
    ("NPROC_PER_NODE", "0"), ("NPROC_PER_NODE", "65"), ("NPROC_PER_NODE", "100000"),
    ("NODE_RANK", "-1"), ("NODE_RANK", "1;2"),
    ("MASTER_PORT", "0"), ("MASTER_PORT", "80"), ("MASTER_PORT", "1023"),
    ("MASTER_PORT", "65536"), ("MASTER_PORT", "29500.5"), ("MASTER_PORT", "-29500"),
    ("RDZV_TIMEOUT", "0"), ("RDZV_TIMEOUT", "inf"), ("RDZV_TIMEOUT", "600,join_timeout=1"),
    ("RDZV_TIMEOUT", "99999999"),
])
def test_bad_numbers_are_refused_naming_the_setting(setting, value):
    with pytest.raises(ConfigError) as error:
        settings(**{setting: value})
    assert error.value.flag == setting
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("address", ["-oProxyCommand=id", "node0;id", "node 0", "$(id)",
                                     "node_0", "a..b", "x" * 254])
def test_bad_master_addr_is_refused(address):
    with pytest.raises(ConfigError) as error:
        settings(NNODES="2", MASTER_ADDR=address)
    assert error.value.flag == "MASTER_ADDR"


@pytest.mark.parametrize("address", ["192.168.1.10", "node0", "node0.lab.example", "::1"])
def test_good_master_addr_passes(address):
    assert settings(NNODES="2", MASTER_ADDR=address).master_addr == address


def test_good_numbers_pass():
    node = settings(NNODES="1024", NODE_RANK="1023", NPROC_PER_NODE="64", MASTER_PORT="1024",
                    MASTER_ADDR="10.0.0.1", RDZV_TIMEOUT="")
    assert (node.nnodes, node.node_rank, node.nproc_per_node, node.master_port) == \
        (1024, 1023, 64, 1024)
    assert settings(MASTER_PORT="65535", RDZV_TIMEOUT="3600").master_port == 65535


def test_unknown_profile():
    with pytest.raises(ConfigError, match="PROFILE=tpu: one of cpu, gpu, gpu-ib, nfs"):
        settings("tpu")


# NCCL reads these itself with atoi-like parsing: a typo would silently fall back to a
# default (or to TCP sockets), so each is refused here, naming the setting.
@pytest.mark.parametrize("setting,value,hint", [
    ("NCCL_IB_DISABLE", "yes", "0 or 1"), ("NCCL_IB_DISABLE", "true", "0 or 1"),
    ("NCCL_IB_HCA", "mlx5_0 mlx5_1", "comma"), ("NCCL_IB_HCA", "mlx5_0:0", "comma"),
    ("NCCL_IB_HCA", "mlx5_0;id", "comma"), ("NCCL_IB_HCA", "=", "comma"),
    ("NCCL_IB_HCA", "mlx5_0,,mlx5_1", "comma"),
    ("NCCL_IB_GID_INDEX", "-1", "0 to 255"), ("NCCL_IB_GID_INDEX", "256", "0 to 255"),
    ("NCCL_SOCKET_NTHREADS", "0", "1 to 16"), ("NCCL_SOCKET_NTHREADS", "17", "1 to 16"),
    ("NCCL_SOCKET_NTHREADS", "four", "1 to 16"),
    ("NCCL_NSOCKS_PERTHREAD", "0", "1 to 64"), ("NCCL_NSOCKS_PERTHREAD", "65", "1 to 64"),
])
def test_bad_nccl_transport_values_are_refused(setting, value, hint):
    with pytest.raises(ConfigError) as error:
        settings("gpu", **{setting: value})
    assert error.value.flag == setting and hint in str(error.value)


def test_socket_threads_times_sockets_stays_within_nccls_limit():
    settings("gpu", NCCL_SOCKET_NTHREADS="16", NCCL_NSOCKS_PERTHREAD="4")
    with pytest.raises(ConfigError, match="NCCL_NSOCKS_PERTHREAD=8: NCCL_SOCKET_NTHREADS=16 "
                                          "x 8 sockets is above NCCL's 64"):
        settings("gpu", NCCL_SOCKET_NTHREADS="16", NCCL_NSOCKS_PERTHREAD="8")


@pytest.mark.parametrize("values", [
    {"NCCL_IB_HCA": "mlx5_0:1"}, {"NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1"},
    {"NCCL_IB_HCA": "^=mlx5_2"}, {"NCCL_IB_HCA": "=mlx5_0"}, {"NCCL_IB_HCA": "mlx5"},
    {"NCCL_IB_DISABLE": "1"}, {"NCCL_IB_DISABLE": "0"}, {"NCCL_IB_GID_INDEX": "3"},
    {"NCCL_SOCKET_NTHREADS": "4", "NCCL_NSOCKS_PERTHREAD": "4"},
    {"NCCL_SOCKET_NTHREADS": "", "NCCL_NSOCKS_PERTHREAD": ""},
])
def test_good_nccl_transport_values_pass(values):
    settings("gpu", **values)


def test_the_ib_profile_refuses_disabled_infiniband():
    settings("gpu-ib", NCCL_IB_DISABLE="0")
    with pytest.raises(ConfigError, match="NCCL_IB_DISABLE=1: PROFILE=gpu-ib gives the "
                                          "trainer the HCAs"):
        settings("gpu-ib", NCCL_IB_DISABLE="1")
    settings("nfs", NCCL_IB_DISABLE="yes")  # the NFS server runs no NCCL: not its business


def test_the_expected_network_is_a_networks_name():
    settings("gpu", BENCH_EXPECT_NET="Socket")
    with pytest.raises(ConfigError, match="BENCH_EXPECT_NET=IB;id: the network NCCL must"):
        settings("gpu", BENCH_EXPECT_NET="IB;id")


@pytest.mark.parametrize("profile, values", [
    ("gpu-ib", {"NCCL_DEBUG": "WARN"}),
    ("gpu-ib", {"NCCL_DEBUG": "INFO"}),
    ("gpu", {"BENCH_EXPECT_NET": "IB", "NCCL_DEBUG": "VERSION"}),
])
def test_an_expected_network_needs_nccls_info_lines(profile, values):
    """The trainer can check NCCL's choice only where it sees NCCL's INFO lines."""
    with pytest.raises(ConfigError) as error:
        settings(profile, **values)
    assert error.value.flag == "NCCL_DEBUG" and "unset NCCL_DEBUG" in str(error.value)
    assert ("PROFILE=gpu-ib expects IB" if profile == "gpu-ib" else
            "BENCH_EXPECT_NET=IB is set") in str(error.value)


@pytest.mark.parametrize("profile, values", [
    ("gpu-ib", {}), ("gpu-ib", {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/tmp/n.%h.%p"}),
    ("gpu", {"NCCL_DEBUG": "WARN"}), ("cpu", {"BENCH_EXPECT_NET": "IB", "NCCL_DEBUG": "WARN"}),
])
def test_nccl_debug_is_free_where_nothing_is_checked_or_the_lines_are_read(profile, values):
    settings(profile, **values)


def test_the_ib_profile_needs_the_hosts_rdma_devices(tmp_path):
    settings_module.check_rdma_devices("gpu", tmp_path / "missing")  # only gpu-ib needs them
    settings_module.check_rdma_devices("gpu-ib", tmp_path)
    with pytest.raises(ConfigError) as error:
        settings_module.check_rdma_devices("gpu-ib", tmp_path / "missing")
    assert error.value.flag == "PROFILE" and "PROFILE=gpu" in str(error.value)


def test_settings_cli_checks_the_rdma_devices_for_the_ib_profile(tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.setattr(settings_module, "RDMA_DEVICES", tmp_path / "infiniband")
    assert settings_module.main(["--env-file", str(EXAMPLE), "--profile", "gpu-ib"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("bench settings: error: PROFILE=gpu-ib: no ") and "infiniband" in line


def test_unreachable_nfs_server_is_named():
    port = free_port()  # bound and released: nobody serves it
    node = settings(DATA_MOUNT_OPTIONS=f"addr=127.0.0.9,port={port},nfsvers=4.1,ro")
    with pytest.raises(ConfigError, match=f"NFS server 127.0.0.9:{port} unreachable"):
        check_data_volume(node, timeout=2)


@pytest.mark.parametrize("port", ["abc", "0", "70000", "-1", "20x9", "02049"])
def test_bad_nfs_mount_port_is_named(port):
    node = settings(DATA_MOUNT_OPTIONS=f"addr=127.0.0.1,port={port},nfsvers=4.1,ro")
    with pytest.raises(ConfigError) as error:
        check_data_volume(node, timeout=1)
    assert error.value.flag == "DATA_MOUNT_OPTIONS" and "port" in str(error.value)


def test_reachable_nfs_server_passes():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        check_data_volume(settings(DATA_MOUNT_OPTIONS=f"addr=127.0.0.1,port={port}"), 2)


def test_bind_mount_needs_an_existing_directory(tmp_path):
    ok = settings(DATA_MOUNT_TYPE="none", DATA_MOUNT_OPTIONS="bind", DATA_DEVICE=str(tmp_path))
    check_data_volume(ok, timeout=1)
    missing = settings(DATA_MOUNT_TYPE="none", DATA_DEVICE=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="DATA_DEVICE"):
        check_data_volume(missing, timeout=1)


def test_shell_overrides_the_env_file():
    values = load(EXAMPLE, environ={"NODE_RANK": "1", "NNODES": "3", "UNRELATED": "x"})
    assert values["NODE_RANK"] == "1" and values["NNODES"] == "3"
    assert "UNRELATED" not in values


def test_shell_overrides_only_what_compose_interpolates():
    # OMP_NUM_THREADS reaches the trainers through env_file only, as the file has it.
    values = load(EXAMPLE, environ={"OMP_NUM_THREADS": "7", "NFS_SQUASH": "all_squash",
                                    "RDZV_TIMEOUT": "30"})
    assert values.get("OMP_NUM_THREADS") != "7" and values["NFS_SQUASH"] == "all_squash"
    assert values["RDZV_TIMEOUT"] == "30"   # interpolated: a launcher's --rdzv-timeout


def test_interpolated_settings_are_the_compose_files():
    text = (REPO / "compose" / "docker-compose.yml").read_text()
    assert set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", text)) == set(INTERPOLATED)


# --- the env file, read as Compose reads it ---------------------------------------------

def test_env_file_is_read_as_compose_reads_it(tmp_path):
    """python-dotenv 0.21 (docker-compose 1.29) semantics: tests/test_stack_e2e.py checks the
    same file against the real `docker-compose config`."""
    env = tmp_path / "node.env"
    # With a byte-order mark, and a quote left open at the end: docker-compose 1.29 skips
    # that statement (Compose v2 refuses the file).
    env.write_text(TRICKY_ENV + 'UNFINISHED="no closing quote\n', encoding="utf-8-sig")
    values = read_env_file(env, environ={"FROM_SHELL": "/shell"})
    assert {k: values[k] for k in TRICKY_EXPECTED} == TRICKY_EXPECTED
    assert "ORPHAN" not in values, "a line inside another value's quotes is not a setting"
    assert "UNFINISHED" not in values


TRICKY_ENV = """\
NFS_CLIENTS=192.168.1.0/24
export NFS_CLIENTS=10.1.0.0/16   # the later statement wins
NFS_ACCESS='RO'
NFS_SQUASH="all_squash"
NFS_PSEUDO_PATH=${UNSET_HERE:-/fallback}
BENCH_ARGS=--steps 3 --model smallcnn # an inline comment
NOTE="a quoted value
ORPHAN=inside the quotes above
NFS_PSEUDO_PATH=/inside-quotes"
NFS_EXPORT_DIR=${FROM_SHELL}
NNODES=1 # one node
"""
TRICKY_EXPECTED = {"NFS_CLIENTS": "10.1.0.0/16", "NFS_ACCESS": "RO",
                   "NFS_SQUASH": "all_squash", "NFS_PSEUDO_PATH": "/fallback",
                   "BENCH_ARGS": "--steps 3 --model smallcnn",
                   "NOTE": "a quoted value\nORPHAN=inside the quotes above\n"
                           "NFS_PSEUDO_PATH=/inside-quotes",
                   "NFS_EXPORT_DIR": "/shell", "NNODES": "1"}


def test_env_file_that_is_not_text_is_named(tmp_path):
    env = tmp_path / "node.env"
    env.write_bytes(b"NNODES=1\n\xff\xfe\n")
    with pytest.raises(ConfigError, match="--env-file"):
        read_env_file(env)


# --- the NFS server's values: bench settings and the entrypoint agree -------------------

GOOD_NFS = {"NFS_CLIENTS": "192.168.1.0/24", "NFS_ALLOW_ANY_CLIENT": "no", "NFS_ACCESS": "RO",
            "NFS_SQUASH": "root_squash", "NFS_PSEUDO_PATH": "/datasets"}
INJECTION = ('1.2.3.4; } EXPORT { Export_Id = 2; Path = "/"; Pseudo = "/all"; '
             "Access_Type = RW; Squash = no_root_squash; FSAL { Name = VFS; } "
             "CLIENT { Clients = *")

# (setting, value): refused by `bench settings` and by nfs/entrypoint.sh alike.
BAD_NFS = [
    ("NFS_CLIENTS", "0.0.0.0/0"), ("NFS_CLIENTS", "::/0"), ("NFS_CLIENTS", "10.0.0.1/0"),
    ("NFS_CLIENTS", "192.168.1.0/24,0.0.0.0/0"), ("NFS_CLIENTS", "0.0.0.0/1,128.0.0.0/1"),
    ("NFS_CLIENTS", "::/1,8000::/1"),
    ("NFS_CLIENTS", INJECTION), ("NFS_CLIENTS", "1.2.3.4\n} EXPORT {"),
    ("NFS_CLIENTS", "1.2.3.4;"), ("NFS_CLIENTS", '"1.2.3.4"'), ("NFS_CLIENTS", "1.2.3.4}"),
    ("NFS_CLIENTS", "*"), ("NFS_CLIENTS", "192.168.1.*"), ("NFS_CLIENTS", "1.2.3.4,*"),
    ("NFS_CLIENTS", "@trusted"), ("NFS_CLIENTS", "nas.example.com"),
    ("NFS_CLIENTS", "1.2.3.4, 5.6.7.8"), ("NFS_CLIENTS", " 1.2.3.4"),
    ("NFS_CLIENTS", "1.2.3.4,"), ("NFS_CLIENTS", "1.2.3.4,,5.6.7.8"),
    ("NFS_CLIENTS", "1.2.3.4/33"), ("NFS_CLIENTS", "1.2.3.4/032"), ("NFS_CLIENTS", "01.2.3.4"),
    ("NFS_CLIENTS", "256.1.1.1"), ("NFS_CLIENTS", "fe80::1%eth0"), ("NFS_CLIENTS", "::/129"),
    ("NFS_CLIENTS", "1:2:3:4:5:6:7:8:9"), ("NFS_CLIENTS", "$(touch /pwned)"),
    ("NFS_CLIENTS", "`id`"), ("NFS_CLIENTS", "1" * 5000),
    ("NFS_ALLOW_ANY_CLIENT", "true"), ("NFS_ALLOW_ANY_CLIENT", "YES"),
    ("NFS_ALLOW_ANY_CLIENT", "yes;"),
    ("NFS_ACCESS", "rw"), ("NFS_ACCESS", "None"), ("NFS_ACCESS", "RW; Squash = no_root_squash"),
    ("NFS_ACCESS", "RO\n"),
    ("NFS_SQUASH", "none"), ("NFS_SQUASH", "no_root_squash;"), ("NFS_SQUASH", "Root_Squash"),
    ("NFS_PSEUDO_PATH", "datasets"), ("NFS_PSEUDO_PATH", "/"), ("NFS_PSEUDO_PATH", "//"),
    ("NFS_PSEUDO_PATH", "/data sets"), ("NFS_PSEUDO_PATH", '/a"; Path = "/'),
    ("NFS_PSEUDO_PATH", "/a;b"), ("NFS_PSEUDO_PATH", "/a}"), ("NFS_PSEUDO_PATH", "/a{"),
    ("NFS_PSEUDO_PATH", "/a/../b"), ("NFS_PSEUDO_PATH", "/.."), ("NFS_PSEUDO_PATH", "/a/."),
    ("NFS_PSEUDO_PATH", "/a\nb"), ("NFS_PSEUDO_PATH", "/a$b"), ("NFS_PSEUDO_PATH", "/a*"),
    ("NFS_PSEUDO_PATH", "/" + "x" * 300), ("NFS_PSEUDO_PATH", "/caf\u00e9"),
]
# Refused by `bench settings` only: Compose refuses an empty value before the container
# starts (the entrypoint would take its default), and a network with host bits set is
# ambiguous where Ganesha would guess.
BAD_NFS_SETTINGS_ONLY = [
    ("NFS_CLIENTS", ""), ("NFS_ACCESS", ""), ("NFS_SQUASH", ""), ("NFS_PSEUDO_PATH", ""),
    ("NFS_CLIENTS", "192.168.1.10/24"), ("NFS_CLIENTS", "2001:db8::1/32"),
]
GOOD_CLIENTS = ["127.0.0.1/32", "127.0.0.1", "192.168.1.0/24,10.0.0.2", "2001:db8::/32",
                "::1", "fd00::/8,10.0.0.0/8", "0.0.0.0/1", "::ffff:192.168.1.10",
                "10.0.0.0/8,10.0.0.0/8"]
ANY_CLIENT = ["0.0.0.0/0", "::/0", "0.0.0.0/0,::/0", "0.0.0.0/1,128.0.0.0/1"]


def nfs_values(tmp_path, **overrides) -> dict[str, str]:
    return {**GOOD_NFS, "NFS_EXPORT_DIR": str(tmp_path), **overrides}


def entrypoint_check(tmp_path, **overrides) -> subprocess.CompletedProcess:
    """The container's own check (`nfs-entrypoint --check`), run here with /bin/sh."""
    env = {"PATH": os.environ["PATH"], **GOOD_NFS, "NFS_EXPORT_PATH": str(tmp_path),
           **overrides}
    return subprocess.run(["sh", str(ENTRYPOINT), "--check"], env=env, capture_output=True,
                          text=True, timeout=30)


@pytest.mark.parametrize("setting,value", BAD_NFS + BAD_NFS_SETTINGS_ONLY,
                         ids=[f"{s}={v[:40]!r}" for s, v in BAD_NFS + BAD_NFS_SETTINGS_ONLY])
def test_bad_nfs_value_is_refused_naming_the_setting(tmp_path, setting, value):
    with pytest.raises(ConfigError) as error:
        check_nfs_server(nfs_values(tmp_path, **{setting: value}))
    assert error.value.flag == setting
    assert "\n" not in str(error.value), "one line, whatever the value holds"


@pytest.mark.parametrize("setting,value", BAD_NFS,
                         ids=[f"{s}={v[:40]!r}" for s, v in BAD_NFS])
def test_the_entrypoint_refuses_the_same_values(tmp_path, setting, value):
    check = entrypoint_check(tmp_path, **{setting: value})
    assert check.returncode == 2, check.stderr
    lines = check.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nfs: error: {setting}="), check.stderr


@pytest.mark.parametrize("clients", GOOD_CLIENTS)
def test_good_clients_pass_both_checks(tmp_path, clients):
    check_nfs_server(nfs_values(tmp_path, NFS_CLIENTS=clients))
    check = entrypoint_check(tmp_path, NFS_CLIENTS=clients)
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("clients", ANY_CLIENT)
def test_every_host_needs_the_opt_in(tmp_path, clients):
    with pytest.raises(ConfigError, match="NFS_ALLOW_ANY_CLIENT=yes"):
        check_nfs_server(nfs_values(tmp_path, NFS_CLIENTS=clients))
    assert entrypoint_check(tmp_path, NFS_CLIENTS=clients).returncode == 2
    check_nfs_server(nfs_values(tmp_path, NFS_CLIENTS=clients, NFS_ALLOW_ANY_CLIENT="yes"))
    check = entrypoint_check(tmp_path, NFS_CLIENTS=clients, NFS_ALLOW_ANY_CLIENT="yes")
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("pseudo", ["/datasets", "/a/b-c_d.e", "/x.y", "/..a"])
def test_good_pseudo_paths_pass_both_checks(tmp_path, pseudo):
    check_nfs_server(nfs_values(tmp_path, NFS_PSEUDO_PATH=pseudo))
    assert entrypoint_check(tmp_path, NFS_PSEUDO_PATH=pseudo).returncode == 0


@pytest.mark.parametrize("access,squash", [("RO", "root_squash"), ("RW", "all_squash"),
                                           ("RO", "no_root_squash")])
def test_good_access_and_squash_pass_both_checks(tmp_path, access, squash):
    check_nfs_server(nfs_values(tmp_path, NFS_ACCESS=access, NFS_SQUASH=squash))
    assert entrypoint_check(tmp_path, NFS_ACCESS=access, NFS_SQUASH=squash).returncode == 0


@pytest.mark.parametrize("export,hint", [
    ("/", "whole filesystem"), ("/tmp:/etc", "without ':'"), ("/nonexistent-dir", "no such"),
    ("", "no such"), ("/tmp\n", "without ':'"),
])
def test_bad_export_dir_is_named(tmp_path, export, hint):
    with pytest.raises(ConfigError, match=hint) as error:
        check_nfs_server({**nfs_values(tmp_path), "NFS_EXPORT_DIR": export})
    assert error.value.flag == "NFS_EXPORT_DIR"


@pytest.mark.parametrize("profile", ["unconfined", "builtin", "nfs/seccomp.json",
                                     "/nonexistent/seccomp.json", "/etc/hostname"])
def test_seccomp_profile_must_be_an_absolute_profile(tmp_path, profile):
    with pytest.raises(ConfigError) as error:
        check_nfs_server(nfs_values(tmp_path, NFS_SECCOMP_PROFILE=profile))
    assert error.value.flag == "NFS_SECCOMP_PROFILE"
    check_nfs_server(nfs_values(tmp_path, NFS_SECCOMP_PROFILE=str(SECCOMP)))


def test_settings_cli_refuses_an_injection_in_one_line(tmp_path, capsys, monkeypatch):
    env = tmp_path / "node.env"
    env.write_text(EXAMPLE.read_text() + f"NFS_EXPORT_DIR={tmp_path}\n"
                   f"export NFS_CLIENTS='{INJECTION}'\n")
    monkeypatch.delenv("NFS_CLIENTS", raising=False)
    assert settings_module.main(["--env-file", str(env), "--profile", "nfs"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("bench settings: error: NFS_CLIENTS=1.2.3.4; } EXPORT")


def test_settings_cli_passes_the_example_for_the_nfs_server(tmp_path, capsys, monkeypatch):
    for name in INTERPOLATED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NFS_EXPORT_DIR", str(tmp_path))  # the shell wins, as with Compose
    assert settings_module.main(["--env-file", str(EXAMPLE), "--profile", "nfs"]) == 0
    assert "settings ok" in capsys.readouterr().err


# --- the seccomp profile: Docker's default plus one rule --------------------------------

def test_seccomp_profile_is_dockers_default_plus_name_to_handle_at():
    text = SECCOMP.read_text()
    profile = json.loads(text)
    added = [rule for rule in profile["syscalls"] if rule["comment"].startswith("bench-nfs:")]
    assert len(added) == 1 and added[0]["names"] == ["name_to_handle_at"]
    assert added[0]["includes"] == {"caps": ["CAP_DAC_READ_SEARCH"]}
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    # Without the added rule, the file is upstream's byte for byte.
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if '"name_to_handle_at"' in line
                 and lines[i - 1].strip() == '"names": [' and lines[i + 1].strip() == "],"
                 and "bench-nfs:" in lines[i + 4])
    upstream = "\n".join(lines[:start - 2] + lines[start + 12:])
    assert hashlib.sha256(upstream.encode()).hexdigest() == UPSTREAM_SECCOMP_SHA256


@pytest.mark.parametrize("text, words", [
    ("", []), ("--steps 20", ["--steps", "20"]),
    ("--steps 20 --data-dir '/data/a b'", ["--steps", "20", "--data-dir", "/data/a b"])])
def test_bench_args_are_split_as_a_shell_would(text, words):
    assert settings_module.bench_args({"BENCH_ARGS": text}) == words


@pytest.mark.parametrize("text", ["--model 'resnet18", '--x "a', "--x a\\"])
def test_bench_args_that_cannot_be_split_are_refused_in_one_line(tmp_path, text):
    """An unclosed quote: bench settings names BENCH_ARGS, and so does make node-up, before
    anything starts (it printed a traceback and went on without the flags)."""
    env = tmp_path / "node.env"
    env.write_text(EXAMPLE.read_text() + f"\nBENCH_ARGS={text}\n")
    with pytest.raises(ConfigError, match="BENCH_ARGS"):
        settings_module.bench_args(read_env_file(env))
    for argv in ([sys.executable, "-m", "bench", "settings", "--env-file", str(env),
                  "--profile", "cpu"],
                 ["make", "--no-print-directory", "-C", str(REPO), "node-up",
                  f"NODE_ENV={env}", "PROFILE=cpu"]):
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
        lines = [line for line in proc.stderr.splitlines() if not line.startswith("make")]
        assert proc.returncode == 2 and len(lines) == 1 and "BENCH_ARGS=" in lines[0], proc
        assert "Traceback" not in proc.stderr
