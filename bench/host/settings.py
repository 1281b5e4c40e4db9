"""``python -m bench settings``: check a node's stack settings before Compose starts anything.

The settings are the env file (compose/.env, else compose/.env.example) with the shell's
variables on top, exactly as Compose interpolates them. Each problem is one line naming the
setting, its value and the fix; exit code 2.
"""
from __future__ import annotations

import argparse
import codecs
import dataclasses
import ipaddress
import json
import os
import re
import shlex
import socket
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from bench import nccl_log
from bench.config import MAX_TIMEOUT_S, OneLineErrorParser
from bench.options import MAX_PORT, MIN_PORT, ConfigError, finite_float
from bench.paths import path_arg

PROFILES = ("cpu", "gpu", "gpu-ib", "nfs")
NFS_PORT = 2049
COMPOSE_DIR = Path(__file__).resolve().parents[2] / "compose"
# Bounds on the job's shape: more is a typo, not a cluster this stack will meet.
MAX_NNODES, MAX_NPROC_PER_NODE = 1024, 64

# The env file's grammar, as python-dotenv 0.21 parses it for docker-compose 1.29 (the one
# Debian ships): `export` prefixes, quoted values spanning lines, escapes in double quotes,
# inline comments after unquoted values, ${VAR} and ${VAR:-default}; a statement it cannot
# parse is skipped to the end of its line. A simpler reader would check other values than the
# ones Compose passes on: `export NFS_CLIENTS=0.0.0.0/0` below a checked NFS_CLIENTS line, or
# a checked line inside another setting's quoted value. Compose v2 reads the same file with
# small differences ($VAR without braces); what they could change is refused by the strict
# patterns below, and nfs/entrypoint.sh checks the NFS values again in the container.
_SPACES = re.compile(r"\s*")
_BLANKS = re.compile(r"[^\S\r\n]*")
_EXPORT = re.compile(r"(?:export[^\S\r\n]+)?")
_QUOTED_KEY = re.compile(r"'([^']+)'")
_KEY = re.compile(r"([^=\#\s]+)")
_EQUALS = re.compile(r"=[^\S\r\n]*")
_SINGLE_QUOTED = re.compile(r"'((?:\\'|[^'])*)'")
_DOUBLE_QUOTED = re.compile(r'"((?:\\"|[^"])*)"')
_UNQUOTED = re.compile(r"([^\r\n]*)")
_COMMENT = re.compile(r"(?:[^\S\r\n]*#[^\r\n]*)?")
_END_OF_LINE = re.compile(r"[^\S\r\n]*(?:\r\n|\n|\r|$)")
_REST_OF_LINE = re.compile(r"[^\r\n]*(?:\r|\n|\r\n)?")
_DOUBLE_QUOTE_ESCAPES = re.compile(r"\\[\\'\"abfnrtv]")
_SINGLE_QUOTE_ESCAPES = re.compile(r"\\[\\']")
_VARIABLE = re.compile(r"\$\{(?P<name>[^}:]*)(?::-(?P<default>[^}]*))?\}")


class _Unparsable(Exception):
    pass


def _take(regex: re.Pattern[str], text: str, pos: int) -> re.Match[str]:
    """The match of ``regex`` at ``pos``; a statement that does not match is unparsable (the
    patterns that may match nothing, such as ``_SPACES``, always match)."""
    match = regex.match(text, pos)
    if match is None:
        raise _Unparsable
    return match


def _unescape(regex: re.Pattern[str], value: str) -> str:
    return regex.sub(lambda m: codecs.decode(m.group(0), "unicode-escape"), value)


def _bindings(text: str) -> Iterator[tuple[str, str | None]]:
    """(key, raw value or None) per statement, in order, as python-dotenv 0.21 reads them."""
    pos = 0
    while pos < len(text):
        pos = _take(_SPACES, text, pos).end()
        if pos >= len(text):
            return
        try:
            pos = _take(_EXPORT, text, pos).end()
            if text.startswith("#", pos):
                key = None
            else:
                match = _take(_QUOTED_KEY if text.startswith("'", pos) else _KEY, text, pos)
                key, pos = match.group(1), match.end()
            pos = _take(_BLANKS, text, pos).end()
            value = None
            if key is not None and text.startswith("=", pos):
                pos = _take(_EQUALS, text, pos).end()
                if text.startswith("'", pos):
                    match = _take(_SINGLE_QUOTED, text, pos)
                    value = _unescape(_SINGLE_QUOTE_ESCAPES, match.group(1))
                elif text.startswith('"', pos):
                    match = _take(_DOUBLE_QUOTED, text, pos)
                    value = _unescape(_DOUBLE_QUOTE_ESCAPES, match.group(1))
                else:
                    match = _take(_UNQUOTED, text, pos)
                    value = re.sub(r"\s+#.*", "", match.group(1)).rstrip()
                pos = match.end()
            pos = _take(_END_OF_LINE, text, _take(_COMMENT, text, pos).end()).end()
        except _Unparsable:
            pos = _take(_REST_OF_LINE, text, pos).end()
            continue
        if key is not None:
            yield key, value


def _interpolate(raw: str, scope: Mapping[str, str | None]) -> str:
    """${VAR} and ${VAR:-default} in ``raw`` replaced from ``scope`` (unset or empty: the
    default, else nothing)."""
    return _VARIABLE.sub(
        lambda m: scope.get(m.group("name"), m.group("default") or "") or "", raw)


def read_env_file(path: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """KEY=VALUE statements as docker-compose 1.29 reads them (python-dotenv 0.21, above);
    ${VAR} takes an earlier value of the file, else the shell's. A key without ``=`` unsets."""
    environ = os.environ if environ is None else environ
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError("--env-file", path, f"is not UTF-8 text ({error.reason})") from None
    values: dict[str, str | None] = {}
    for key, raw in _bindings(text):
        if raw is not None:
            raw = _interpolate(raw, {**environ, **values})
        values[key] = raw
    return {key: value for key, value in values.items() if value is not None}


def shown(value: object, limit: int = 200) -> str:
    """A value for a one-line message: unprintable characters escaped, long ones cut."""
    text = str(value)
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode()
                   for c in text[:limit])
    return text + ("..." if len(str(value)) > limit else "")


_DECIMAL = re.compile(r"0|[1-9][0-9]{0,9}")


def _int(values: dict, name: str, low: int, high: int, default: str | None = None,
         allowed: str | None = None) -> int:
    """A setting that must be a plain decimal integer in [low, high]: no sign, spaces, '_' or
    leading zeros, which some readers of the same value (torchrun, the shell) take otherwise."""
    raw = values.get(name) or default or ""  # empty takes the default, as the entrypoint does
    allowed = allowed or f"must be an integer from {low} to {high:,}"
    if not _DECIMAL.fullmatch(raw) or not low <= int(raw) <= high:
        raise ConfigError(name, shown(raw) or "''", allowed)
    return int(raw)


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
        nnodes = _int(values, "NNODES", 1, MAX_NNODES)
        node_rank = _int(values, "NODE_RANK", 0, MAX_NNODES - 1)
        if node_rank >= nnodes:
            raise ConfigError("NODE_RANK", node_rank, f"must be below NNODES={nnodes} "
                              f"(node ranks are 0..{nnodes - 1})")
        master_addr = values.get("MASTER_ADDR", "").strip()
        if nnodes > 1 and not master_addr:
            raise ConfigError("MASTER_ADDR", "''", f"NNODES={nnodes} needs node 0's address, "
                              "as the other nodes reach it")
        if master_addr and not _is_host(master_addr):
            raise ConfigError("MASTER_ADDR", shown(master_addr), "a host name or IP address "
                              "of node 0, e.g. 192.168.1.10")
        # Node 0 binds it for the rendezvous: unprivileged ports only (options.MIN_PORT).
        master_port = _int(values, "MASTER_PORT", MIN_PORT, MAX_PORT,
                           allowed=f"must be a TCP port, {MIN_PORT}-{MAX_PORT}")
        # torchrun's --rdzv-conf timeout=<this>: a comma in it would add another option.
        _int(values, "RDZV_TIMEOUT", 1, MAX_TIMEOUT_S, default="600",
             allowed=f"must be whole seconds, 1 to {MAX_TIMEOUT_S:,}")
        module = values.get("BENCH_MODULE", "")
        if module and module not in WORKLOAD_MODULES:
            moved = f"bench.rank.{module.removeprefix('bench.')}"
            fix = f"it moved: {moved}" if moved in WORKLOAD_MODULES else \
                f"one of {', '.join(WORKLOAD_MODULES)}"
            raise ConfigError("BENCH_MODULE", shown(module), fix)
        job_id = values.get("BENCH_JOB_ID", "")
        if job_id and not _JOB_ID.fullmatch(job_id):
            raise ConfigError("BENCH_JOB_ID", shown(job_id), "letters, digits, '-', '_' and "
                              "'.', at most 64, not starting with '-' (launchers set it)")
        if profile != "nfs":  # the trainers' NCCL transport; the NFS server has none
            check_nccl_transport(values, profile)
        return cls(profile=profile, nnodes=nnodes, node_rank=node_rank,
                   nproc_per_node=_int(values, "NPROC_PER_NODE", 1, MAX_NPROC_PER_NODE),
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


# NCCL's transport settings, which reach the trainers through env_file as the file has them.
# NCCL reads numbers with strtoll and names as prefixes, so a typo does not fail: it becomes
# 0, a default, or an HCA that matches nothing, and the job silently runs over TCP sockets.
# Limits are NCCL's own (src/transport/net_socket.cc: MAX_THREADS 16, MAX_SOCKETS 64).
MAX_SOCKET_THREADS, MAX_SOCKETS = 16, 64
# NCCL_IB_HCA: [^][=]name[:port][,name[:port]...], e.g. mlx5_0:1,mlx5_1:1 or ^=mlx5_2
_IB_HCA = re.compile(r"\^?=?[A-Za-z0-9_.-]{1,64}(:[1-9][0-9]{0,2})?"
                     r"(,[A-Za-z0-9_.-]{1,64}(:[1-9][0-9]{0,2})?){0,63}")
RDMA_DEVICES = Path("/dev/infiniband")


def check_nccl_transport(values: dict[str, str], profile: str) -> None:
    """NCCL_IB_DISABLE, NCCL_IB_HCA, NCCL_IB_GID_INDEX, NCCL_SOCKET_NTHREADS and
    NCCL_NSOCKS_PERTHREAD, where set: values NCCL takes as meant, and a profile that agrees."""
    disable = values.get("NCCL_IB_DISABLE", "")
    if disable not in ("", "0", "1"):
        raise ConfigError("NCCL_IB_DISABLE", shown(disable), "0 or 1 (1 forces TCP sockets); "
                          "unset, NCCL uses InfiniBand/RoCE where the node has an HCA")
    if profile == "gpu-ib" and disable == "1":
        raise ConfigError("NCCL_IB_DISABLE", "1", "PROFILE=gpu-ib gives the trainer the HCAs "
                          "for NCCL to use: unset NCCL_IB_DISABLE, or use PROFILE=gpu")
    hca = values.get("NCCL_IB_HCA", "")
    if hca and not _IB_HCA.fullmatch(hca):
        raise ConfigError("NCCL_IB_HCA", shown(hca), "HCA names with an optional port, comma "
                          "separated, e.g. mlx5_0:1 or mlx5_0:1,mlx5_1:1 (ibv_devinfo lists "
                          "them); ^ in front excludes, = matches names exactly")
    if values.get("NCCL_IB_GID_INDEX"):
        _int(values, "NCCL_IB_GID_INDEX", 0, 255, allowed="a GID index, 0 to 255 (RoCE v2 "
             "is usually 3; show_gids lists them)")
    check_expected_net(values, profile)
    threads = sockets = None
    if values.get("NCCL_SOCKET_NTHREADS"):
        threads = _int(values, "NCCL_SOCKET_NTHREADS", 1, MAX_SOCKET_THREADS)
    if values.get("NCCL_NSOCKS_PERTHREAD"):
        sockets = _int(values, "NCCL_NSOCKS_PERTHREAD", 1, MAX_SOCKETS)
    if threads and sockets and threads * sockets > MAX_SOCKETS:
        raise ConfigError("NCCL_NSOCKS_PERTHREAD", sockets, f"NCCL_SOCKET_NTHREADS={threads} "
                          f"x {sockets} sockets is above NCCL's {MAX_SOCKETS}: lower one, e.g. "
                          "4 x 4 for 25-100 GbE")


# The network profile gpu-ib expects of NCCL (compose/docker-compose.yml, trainer-ib).
IB_PROFILE_NET = "IB"


def check_expected_net(values: dict[str, str], profile: str) -> None:
    """BENCH_EXPECT_NET, where set, is a network's name; where a GPU job expects one (the
    gpu-ib profile expects IB), NCCL's INFO lines must reach the trainer, which checks what
    NCCL chose against it: NCCL_DEBUG unset (the trainer captures them), or INFO with
    NCCL_DEBUG_FILE."""
    expected = nccl_log.expected_net(values) or (IB_PROFILE_NET if profile == "gpu-ib"
                                                 else None)
    debug = values.get("NCCL_DEBUG", "")
    if expected is None or profile == "cpu" or not debug:
        return
    if debug.upper() not in ("INFO", "TRACE") or not values.get("NCCL_DEBUG_FILE"):
        why = "PROFILE=gpu-ib expects IB" if profile == "gpu-ib" and \
            not values.get(nccl_log.EXPECT_SETTING) else \
            f"{nccl_log.EXPECT_SETTING}={expected} is set"
        raise ConfigError("NCCL_DEBUG", shown(debug), f"{why}, and the trainer checks the "
                          "network NCCL chose from NCCL's INFO lines, which it captures only "
                          "where NCCL_DEBUG is unset: unset NCCL_DEBUG (or set "
                          "NCCL_DEBUG=INFO with NCCL_DEBUG_FILE)")


def check_rdma_devices(profile: str, devices: Path | None = None) -> None:
    """PROFILE=gpu-ib passes the host's /dev/infiniband to the trainer: without it, the
    container does not start ("error gathering device information")."""
    devices = devices or RDMA_DEVICES
    if profile == "gpu-ib" and not devices.is_dir():
        raise ConfigError("PROFILE", "gpu-ib", f"no {devices} on this host: load the RDMA "
                          "drivers (ibv_devinfo lists the HCAs), or use PROFILE=gpu for TCP "
                          "sockets")


def check_data_volume(settings: NodeSettings, timeout: float) -> None:
    """The trainer's dataset volume must be mountable: a reachable NFS server or a directory."""
    if settings.data_mount_type == "nfs":
        server = settings.mount_option("addr")
        if not server:
            raise ConfigError("DATA_MOUNT_OPTIONS", settings.data_mount_options,
                              "an NFS mount needs addr=<server>, e.g. addr=192.168.1.10,"
                              "nfsvers=4.1,ro")
        raw_port = settings.mount_option("port") or str(NFS_PORT)
        # Only connected to, never bound here: any TCP port a server may use.
        if not _DECIMAL.fullmatch(raw_port) or not 1 <= int(raw_port) <= MAX_PORT:
            raise ConfigError("DATA_MOUNT_OPTIONS", f"port={shown(raw_port)}",
                              f"the NFS server's TCP port is 1-65535 (default {NFS_PORT})")
        port = int(raw_port)
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


# The NFS values that nfs/entrypoint.sh pastes into ganesha.conf, checked with the same
# patterns as the entrypoint checks them in the container (tests/test_settings.py runs both
# on one table), so that a value passes here exactly when the server will take it. Decimal
# parts have no leading zeros: 010 is octal to some parsers and decimal to others.
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}(\.{_OCTET}){{3}}"
_H = r"[0-9A-Fa-f]{1,4}"
_IPV6 = "|".join([
    rf"({_H}:){{7}}{_H}", rf"({_H}:){{1,7}}:", rf"({_H}:){{1,6}}:{_H}",
    rf"({_H}:){{1,5}}(:{_H}){{1,2}}", rf"({_H}:){{1,4}}(:{_H}){{1,3}}",
    rf"({_H}:){{1,3}}(:{_H}){{1,4}}", rf"({_H}:){{1,2}}(:{_H}){{1,5}}",
    rf"{_H}:(:{_H}){{1,6}}", rf":((:{_H}){{1,7}}|:)",
    rf"({_H}:){{6}}{_IPV4}", rf"::(ffff(:0{{1,4}})?:)?{_IPV4}", rf"({_H}:){{1,4}}:{_IPV4}"])
_CLIENT = re.compile(rf"({_IPV4})(/(3[0-2]|[12][0-9]|[0-9]))?"
                     rf"|({_IPV6})(/(12[0-8]|1[01][0-9]|[1-9]?[0-9]))?")
_CLIENTS_CHARS = re.compile(r"[0-9A-Fa-f.:/,]+")
_ABSPATH = re.compile(r"(/[A-Za-z0-9_.-]+)+")
NFS_ACCESS = ("RO", "RW")
NFS_SQUASH = ("root_squash", "all_squash", "no_root_squash")
_CLIENTS_HINT = ("comma-separated IP addresses or networks without spaces, e.g. "
                 "192.168.1.0/24 (no '*', no host names)")
_ANY_FIX = ("name the client network (e.g. 192.168.1.0/24), or set NFS_ALLOW_ANY_CLIENT=yes "
            "to mean it")


def nfs_clients(value: str, allow_any: bool = False) -> list:
    """NFS_CLIENTS as networks: addresses or CIDR networks, comma separated. Every address at
    once (a prefix length of 0, or networks that together cover a whole address family)
    only with ``allow_any`` (NFS_ALLOW_ANY_CLIENT=yes)."""
    if not value:
        raise ConfigError("NFS_CLIENTS", "''", "name the client network, e.g. 192.168.1.0/24")
    if len(value) > 4096 or not _CLIENTS_CHARS.fullmatch(value):
        raise ConfigError("NFS_CLIENTS", shown(value), _CLIENTS_HINT)
    networks = []
    for client in value.split(","):
        if not _CLIENT.fullmatch(client):
            raise ConfigError("NFS_CLIENTS", value, f"'{client}' is not an IP address or "
                              "network such as 192.168.1.0/24")
        try:
            network = ipaddress.ip_network(client)
        except ValueError:  # host bits set: which network was meant is a guess
            network = ipaddress.ip_network(client, strict=False)
            raise ConfigError("NFS_CLIENTS", value, f"'{client}' has host bits set: the "
                              f"network is {network}") from None
        if network.prefixlen == 0 and not allow_any:
            raise ConfigError("NFS_CLIENTS", value, f"'{client}' lets every host mount "
                              f"the export; {_ANY_FIX}")
        networks.append(network)
    # 0.0.0.0/1,128.0.0.0/1 is 0.0.0.0/0 too. The sizes' sum is what the entrypoint can
    # count in shell arithmetic: overlapping networks only make it refuse sooner.
    for version, total in ((4, 2 ** 32), (6, 2 ** 128)):
        if not allow_any and sum(n.num_addresses for n in networks
                                 if n.version == version) >= total:
            raise ConfigError("NFS_CLIENTS", value, "together these networks let every "
                              f"host mount the export; {_ANY_FIX}")
    return networks


def check_abspath(setting: str, value: str) -> str:
    """An absolute path of plain names: nothing that could end a quoted string in a config
    file or start another statement, no '.' or '..' components."""
    if len(value) > 255 or not _ABSPATH.fullmatch(value):
        raise ConfigError(setting, shown(value) or "''", "an absolute path of letters, digits, "
                          "'_', '.' and '-', e.g. /datasets")
    if {".", ".."} & set(value.split("/")):
        raise ConfigError(setting, value, "no '.' or '..' components")
    return value


def _choice(values: dict[str, str], name: str, choices: tuple[str, ...],
            default: str | None = None) -> str:
    value = values.get(name) or default or ""
    if value not in choices:
        raise ConfigError(name, shown(value) or "''", f"one of {', '.join(choices)}")
    return value


def check_nfs_server(values: dict[str, str]) -> None:
    """The NFS server's settings (profile nfs): every value that ends in ganesha.conf, the
    export directory and the seccomp profile."""
    allow_any = _choice(values, "NFS_ALLOW_ANY_CLIENT", ("yes", "no"), default="no") == "yes"
    nfs_clients(values.get("NFS_CLIENTS", ""), allow_any)
    _choice(values, "NFS_ACCESS", NFS_ACCESS)
    _choice(values, "NFS_SQUASH", NFS_SQUASH)
    check_abspath("NFS_PSEUDO_PATH", values.get("NFS_PSEUDO_PATH", ""))
    raw = values.get("NFS_EXPORT_DIR", "")
    # Compose's short volume syntax is SOURCE:TARGET:MODE: a ':' here would move the rest.
    if ":" in raw or not raw.isprintable():
        raise ConfigError("NFS_EXPORT_DIR", shown(raw), "a directory path without ':'")
    export = Path(raw)
    export = export if export.is_absolute() else COMPOSE_DIR / export
    if not raw or not export.is_dir():
        raise ConfigError("NFS_EXPORT_DIR", raw or "''",
                          "no such directory: stage a dataset first (make dataset)")
    if export.resolve() == Path("/"):
        raise ConfigError("NFS_EXPORT_DIR", raw, "serves the host's whole filesystem: name "
                          "the dataset directory, e.g. ../nfs/export")
    profile = values.get("NFS_SECCOMP_PROFILE", "")
    if profile:
        # Relative paths mean the current directory to docker-compose 1.29 and the compose
        # file's directory to Compose v2: only an absolute one means one file to both.
        # "unconfined" would switch seccomp off.
        try:
            content = json.loads(Path(profile).read_text()) if Path(profile).is_absolute() \
                else None
        except (OSError, ValueError):
            content = None
        ok = isinstance(content, dict) and isinstance(content.get("syscalls"), list)
        if not ok:
            raise ConfigError("NFS_SECCOMP_PROFILE", shown(profile), "the absolute path of a "
                              "seccomp profile (JSON), such as this repository's "
                              "nfs/seccomp.json; unset, Compose uses that one")


def load(env_file: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The env file with the shell's variables on top where Compose interpolates them (the
    compose file's ${...}); the other settings reach the containers through env_file as the
    file has them, whatever the shell says."""
    environ = os.environ if environ is None else environ
    values = read_env_file(env_file, environ)
    values.update({key: environ[key] for key in INTERPOLATED if key in environ})
    return values


# The settings compose/docker-compose.yml interpolates (tests/test_settings.py keeps the two
# in step): for these, and only these, the shell wins over the env file.
INTERPOLATED = (
    "NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT", "RDZV_TIMEOUT",
    "BENCH_JOB_ID", "BENCH_GPUS",
    "BENCH_MODULE", "BENCH_EXPECT_NET",
    "BENCH_ARGS", "RESULTS_NAME", "RESULTS_DIR", "BENCH_IMAGE_ID", "BENCH_IMAGE_DIGEST",
    "BENCH_ENV_FILE", "IMAGE", "CPU_IMAGE", "NFS_IMAGE", "DATA_MOUNT_TYPE",
    "DATA_MOUNT_OPTIONS", "DATA_DEVICE", "NFS_CLIENTS", "NFS_ALLOW_ANY_CLIENT", "NFS_ACCESS",
    "NFS_SQUASH", "NFS_PSEUDO_PATH", "NFS_EXPORT_DIR", "NFS_SECCOMP_PROFILE")


def bench_args(values: dict[str, str]) -> list[str]:
    """BENCH_ARGS as the trainer's flags, split as a shell would split them (nothing run);
    ConfigError naming BENCH_ARGS where it cannot be split (an unclosed quote)."""
    text = values.get("BENCH_ARGS", "")
    try:
        return shlex.split(text)
    except ValueError as error:
        raise ConfigError("BENCH_ARGS", text, f"cannot be split into flags ({error}): close "
                          "each quote, e.g. BENCH_ARGS=--steps 20 --model 'resnet18'") from None


def main(argv: list[str] | None = None, prog: str = "bench settings") -> int:
    parser = OneLineErrorParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-file", type=path_arg, required=True)
    parser.add_argument("--profile", required=True, help=", ".join(PROFILES))
    parser.add_argument("--nfs-timeout", type=finite_float, default=5.0,
                        help="seconds to wait for the NFS server (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.env_file.is_file():
        print(f"{prog}: error: --env-file={args.env_file}: no such file; "
              "cp compose/.env.example compose/.env", file=sys.stderr)
        return 2
    try:
        if not 0 < args.nfs_timeout <= 600:
            raise ConfigError("--nfs-timeout", args.nfs_timeout, "must be in (0, 600] seconds")
        values = load(args.env_file)
        settings = NodeSettings.parse(values, args.profile)
        bench_args(values)
        if settings.profile == "nfs":
            check_nfs_server(values)
        else:
            check_rdma_devices(settings.profile)
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


# The workloads a node can run (torchrun -m), as bench.host.matrix names them.
WORKLOAD_MODULES = ("bench.rank.train", "bench.rank.allreduce", "bench.rank.accept")
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_HOST_NAME = re.compile(r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+")


def _is_host(address: str) -> bool:
    """An IP address or an RFC 1123 host name: nothing torchrun could read as an option."""
    try:
        ipaddress.ip_address(address)
        return True
    except ValueError:
        return bool(_HOST_NAME.fullmatch(address))


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


if __name__ == "__main__":
    sys.exit(main())
