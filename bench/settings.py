"""``python -m bench settings``: check a node's stack settings before Compose starts anything.

The settings are the env file (compose/.env, else compose/.env.example) with the shell's
variables on top, exactly as Compose interpolates them. Each problem is one line naming the
setting, its value and the fix; exit code 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import socket
import sys
from pathlib import Path

from bench.config import OneLineErrorParser
from bench.options import ConfigError

PROFILES = ("cpu", "gpu", "nfs")
NFS_PORT = 2049
COMPOSE_DIR = Path(__file__).resolve().parent.parent / "compose"


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as Compose 1.29 reads them: no inline comments, optional quotes."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def _int(values: dict, name: str, minimum: int) -> int:
    raw = values.get(name, "")
    try:
        number = int(raw)
    except ValueError:
        raise ConfigError(name, raw, f"must be an integer >= {minimum}") from None
    if number < minimum:
        raise ConfigError(name, raw, f"must be an integer >= {minimum}")
    return number


@dataclasses.dataclass(frozen=True, slots=True)
class NodeSettings:
    """One node's place in a job and where its data comes from."""

    profile: str
    nnodes: int
    node_rank: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    data_mount_type: str
    data_mount_options: str
    data_device: str

    @classmethod
    def parse(cls, values: dict[str, str], profile: str) -> NodeSettings:
        if profile not in PROFILES:
            raise ConfigError("PROFILE", profile, f"one of {', '.join(PROFILES)}")
        nnodes = _int(values, "NNODES", 1)
        node_rank = _int(values, "NODE_RANK", 0)
        if node_rank >= nnodes:
            raise ConfigError("NODE_RANK", node_rank, f"must be below NNODES={nnodes} "
                              f"(node ranks are 0..{nnodes - 1})")
        master_addr = values.get("MASTER_ADDR", "").strip()
        if nnodes > 1 and not master_addr:
            raise ConfigError("MASTER_ADDR", "''", f"NNODES={nnodes} needs node 0's address, "
                              "as the other nodes reach it")
        master_port = _int(values, "MASTER_PORT", 1)
        if master_port > 65535:
            raise ConfigError("MASTER_PORT", master_port, "must be a TCP port, 1-65535")
        return cls(profile=profile, nnodes=nnodes, node_rank=node_rank,
                   nproc_per_node=_int(values, "NPROC_PER_NODE", 1),
                   master_addr=master_addr or "127.0.0.1", master_port=master_port,
                   data_mount_type=values.get("DATA_MOUNT_TYPE", ""),
                   data_mount_options=values.get("DATA_MOUNT_OPTIONS", ""),
                   data_device=values.get("DATA_DEVICE", ""))

    def mount_option(self, name: str) -> str | None:
        """One ``name=value`` of DATA_MOUNT_OPTIONS (``addr``, ``port``...), or None."""
        for option in self.data_mount_options.split(","):
            key, _, value = option.partition("=")
            if key.strip() == name:
                return value.strip()
        return None


def check_data_volume(settings: NodeSettings, timeout: float) -> None:
    """The trainer's dataset volume must be mountable: a reachable NFS server or a directory."""
    if settings.data_mount_type == "nfs":
        server = settings.mount_option("addr")
        if not server:
            raise ConfigError("DATA_MOUNT_OPTIONS", settings.data_mount_options,
                              "an NFS mount needs addr=<server>, e.g. addr=192.168.1.10,"
                              "nfsvers=4.1,ro")
        port = int(settings.mount_option("port") or NFS_PORT)
        try:
            with socket.create_connection((server, port), timeout=timeout):
                pass
        except OSError as error:
            raise ConfigError("DATA_MOUNT_OPTIONS", f"addr={server}",
                              f"NFS server {server}:{port} unreachable ({error}); start it "
                              "there with `make nfs-up`, or use a bind mount "
                              "(DATA_MOUNT_TYPE=none DATA_MOUNT_OPTIONS=bind "
                              "DATA_DEVICE=/abs/dir)") from None
    elif settings.data_mount_type == "none":
        device = Path(settings.data_device)
        if not device.is_absolute() or not device.is_dir():
            raise ConfigError("DATA_DEVICE", settings.data_device,
                              "a bind mount needs an existing absolute directory")
    else:
        raise ConfigError("DATA_MOUNT_TYPE", settings.data_mount_type,
                          "nfs, or none (with DATA_MOUNT_OPTIONS=bind) for a local directory")


def check_nfs_server(values: dict[str, str]) -> None:
    clients = values.get("NFS_CLIENTS", "")
    if not clients or "*" in clients:
        raise ConfigError("NFS_CLIENTS", clients or "''",
                          "name the client network, e.g. 192.168.1.0/24 (no '*')")
    export = Path(values.get("NFS_EXPORT_DIR", ""))
    export = export if export.is_absolute() else COMPOSE_DIR / export
    if not export.is_dir():
        raise ConfigError("NFS_EXPORT_DIR", values.get("NFS_EXPORT_DIR", ""),
                          "no such directory: stage a dataset first (make dataset)")


def load(env_file: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The env file with the shell's variables on top, as Compose interpolates."""
    values = read_env_file(env_file)
    environ = os.environ if environ is None else environ
    overridable = set(values) | set(_KNOWN)
    values.update({key: environ[key] for key in overridable if key in environ})
    return values


# Settings the shell may give even when the env file leaves them out.
_KNOWN = ("NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT",
          "DATA_MOUNT_TYPE", "DATA_MOUNT_OPTIONS", "DATA_DEVICE", "NFS_CLIENTS",
          "NFS_EXPORT_DIR")


def main(argv: list[str] | None = None, prog: str = "bench settings") -> int:
    parser = OneLineErrorParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-file", type=Path, required=True)
    parser.add_argument("--profile", required=True, help="cpu, gpu or nfs")
    parser.add_argument("--nfs-timeout", type=float, default=5.0,
                        help="seconds to wait for the NFS server (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.env_file.is_file():
        print(f"{prog}: error: --env-file={args.env_file}: no such file; "
              "cp compose/.env.example compose/.env", file=sys.stderr)
        return 2
    values = load(args.env_file)
    try:
        settings = NodeSettings.parse(values, args.profile)
        if settings.profile == "nfs":
            check_nfs_server(values)
        else:
            check_data_volume(settings, args.nfs_timeout)
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    loopback = _is_loopback(settings.master_addr)
    note = " (all nodes on this host)" if settings.nnodes > 1 and loopback else ""
    print(f"settings ok: profile {settings.profile}, node {settings.node_rank} of "
          f"{settings.nnodes}, {settings.nproc_per_node} process(es), master "
          f"{settings.master_addr}:{settings.master_port}{note}", file=sys.stderr)
    return 0


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


if __name__ == "__main__":
    sys.exit(main())
