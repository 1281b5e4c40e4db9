"""Node settings: each bad value is one line naming the setting and the fix."""
from __future__ import annotations

import socket

import pytest

from bench.options import ConfigError
from bench.settings import NodeSettings, check_data_volume, load, read_env_file
from conftest import EXAMPLE_ENV, free_port

EXAMPLE = EXAMPLE_ENV


def settings(profile="cpu", **overrides) -> NodeSettings:
    return NodeSettings.parse({**read_env_file(EXAMPLE), **overrides}, profile)


def test_example_env_file_is_valid_and_complete():
    values = read_env_file(EXAMPLE)
    node = settings()
    assert (node.nnodes, node.node_rank, node.master_port) == (1, 0, 29500)
    assert values["BENCH_ARGS"] == "--steps 20 --model resnet18"  # no inline comment kept
    assert all("#" not in v for v in values.values()), "Compose 1.29 keeps inline comments"


@pytest.mark.parametrize("overrides,setting,hint", [
    ({"NNODES": "2", "NODE_RANK": "2"}, "NODE_RANK", "below NNODES=2"),
    ({"NNODES": "2", "MASTER_ADDR": ""}, "MASTER_ADDR", "node 0's address"),
    ({"NNODES": "zero"}, "NNODES", "integer"),
    ({"MASTER_PORT": "70000"}, "MASTER_PORT", "1-65535"),
])
def test_bad_topology(overrides, setting, hint):
    with pytest.raises(ConfigError) as error:
        settings(**overrides)
    assert error.value.flag == setting and hint in str(error.value)


def test_unknown_profile():
    with pytest.raises(ConfigError, match="PROFILE=tpu: one of cpu, gpu, nfs"):
        settings("tpu")


def test_unreachable_nfs_server_is_named():
    port = free_port()  # bound and released: nobody serves it
    node = settings(DATA_MOUNT_OPTIONS=f"addr=127.0.0.9,port={port},nfsvers=4.1,ro")
    with pytest.raises(ConfigError, match=f"NFS server 127.0.0.9:{port} unreachable"):
        check_data_volume(node, timeout=2)


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
