"""What NCCL chose for a job's communication, read from NCCL's own INFO lines.

``parse`` turns the text NCCL writes with ``NCCL_DEBUG=INFO`` and ``NCCL_DEBUG_SUBSYS``
including INIT and NET into a small dict (``EMPTY`` has its keys):

  network     the network plugin NCCL uses between nodes: ``IB`` (InfiniBand or RoCE
              verbs), ``Socket`` (TCP), or an external plugin's name; from "Using network
              X" (the last communicator's), else "Assigned NET plugin X to comm"
  gdr         GPUDirect RDMA: once connections crossed the network, whether every one of
              them reads and writes GPU memory directly ("via NET/IB/0/GDRDMA"); before
              that, whether the network's HCAs support it as NCCL sees them ("GPU Direct
              RDMA Enabled for HCA 0"); null where NCCL said neither
  transports  the transports NCCL's channels connected with: P2P, SHM, NET, COLLNET, and
              NVLS where NVLink SHARP channels were set up
  p2p         how P2P connections map peer memory: CUMEM/read, IPC, direct pointer, ...
  nvls        whether NVLS multicast is available (null: not said)
  version     NCCL's own version line, e.g. 2.28.9+cuda13.0
  devices     the network's devices as NCCL lists them: mlx5_0:1/IB, eth0:10.0.0.1<0>

The formats are NCCL's (src/init.cc, src/plugin/net.cc, src/graph/topo.cc,
src/transport/{p2p,shm,net,coll_net,nvls}.cc, src/transport/net_ib/init.cc). Any text may
come in (a cut line, another program's output, garbage): nothing raises, and every string
out is one printable line of bounded length, so a record can carry it.

The rest of the module is what a job expects of the network (``BENCH_EXPECT_NET``): the
setting checked, and the one line that names a rank where NCCL chose otherwise. Torch-free:
the rank side captures the lines, the analysis judges them.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from bench.options import ConfigError

MAX_TEXT = 64          # characters of any name or device kept
MAX_ITEMS = 64         # devices or P2P kinds kept
TRANSPORTS = ("P2P", "SHM", "NET", "COLLNET", "NVLS")
EMPTY: dict = {"network": None, "gdr": None, "transports": [], "p2p": [], "nvls": None,
               "version": None, "devices": []}

_MARK = "NCCL INFO "
_VERSION = re.compile(r"NCCL version (\S+)")
_USING = re.compile(r"Using network (.+)")
_ASSIGNED = re.compile(r"Assigned NET plugin (.+) to comm")
_NET_DEVICES = re.compile(r"NET/(\S+) : Using(.*)")
_DEVICE = re.compile(r"\[\d{1,6}\](\S+)")
_HCA_GDR = re.compile(r"NET/(\S+) : GPU Direct RDMA (Enabled|Disabled) for HCA")
_CHANNEL = re.compile(r"Channel \d{1,6}(?:/\d{1,6})? : \d{1,9}\[\d{1,9}\] -> \d{1,9}\[\d{1,9}\]"
                      r"(?: \[(?:send|receive)\])? via (\S+(?: pointer)?\S*)")
_COLLNET = re.compile(r"CollNet \d{1,6}/\d{1,6} : .* via COLLNET/")
_NVLS_SUPPORT = re.compile(r"NVLS multicast support is (not )?available")
_NVLS_CHANNELS = re.compile(r"(\d{1,9}) nvls channels")
_HOP = re.compile(r"/\d{1,9}\[\d{1,9}\]")


def _clean(text: str) -> str | None:
    """One printable line of at most MAX_TEXT characters, or None where nothing is left."""
    kept = "".join(c for c in text.strip() if c.isprintable())[:MAX_TEXT].strip()
    return kept or None


def _add(items: list[str], item: str | None) -> None:
    if item and item not in items and len(items) < MAX_ITEMS:
        items.append(item)


def parse(text: str) -> dict:
    """NCCL's INFO text as the dict described above (a fresh one each call)."""
    return parse_lines(text.splitlines())


def parse_lines(lines: Iterable[str]) -> dict:
    """``parse`` over lines, read one at a time (a long log need not be held whole)."""
    view = {**EMPTY, "transports": [], "p2p": [], "devices": []}
    assigned = None
    devices: dict[str, list[str]] = {}
    hca_gdr: dict[str, list[bool]] = {}
    net_gdr: list[bool] = []
    transports: set[str] = set()
    for line in lines:
        at = line.find(_MARK)
        if at < 0:
            continue
        message = line[at + len(_MARK):].strip()
        if match := _USING.match(message):
            view["network"] = _clean(match.group(1)) or view["network"]
        elif match := _ASSIGNED.match(message):
            assigned = _clean(match.group(1)) or assigned
        elif match := _VERSION.match(message):
            view["version"] = _clean(match.group(1))
        elif match := _NET_DEVICES.match(message):
            listed = match.group(2).split(";")[0]
            found = devices.setdefault(match.group(1), [])
            for device in _DEVICE.findall(listed):
                _add(found, _clean(device))
        elif match := _HCA_GDR.match(message):
            hca_gdr.setdefault(match.group(1), []).append(match.group(2) == "Enabled")
        elif match := _CHANNEL.match(message):
            path = match.group(1)
            kind, _, rest = path.partition("/")
            if kind in ("P2P", "SHM", "NET"):
                transports.add(kind)
            if kind == "P2P":
                _add(view["p2p"], _clean(_HOP.sub("", rest)))
            elif kind == "NET":
                net_gdr.append("/GDRDMA" in path)
        elif _COLLNET.match(message):
            transports.add("COLLNET")
        elif match := _NVLS_SUPPORT.match(message):
            view["nvls"] = match.group(1) is None
        elif (match := _NVLS_CHANNELS.search(message)) and int(match.group(1)) > 0:
            transports.add("NVLS")
    network = view["network"] = view["network"] or assigned
    view["transports"] = [t for t in TRANSPORTS if t in transports]
    view["devices"] = devices.get(network or "", [])
    if net_gdr:
        view["gdr"] = all(net_gdr)
    elif hca_gdr.get(network or ""):
        view["gdr"] = any(hca_gdr[network or ""])
    return view


# --- what a job expects of the network ----------------------------------------------------

EXPECT_SETTING = "BENCH_EXPECT_NET"
_NET_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,31}")


def expected_net(environ: Mapping[str, str], setting: str = EXPECT_SETTING) -> str | None:
    """The network a job expects NCCL to choose (``BENCH_EXPECT_NET``), or None; a value no
    NCCL network could have is a ConfigError naming the setting."""
    return net_name(environ.get(setting, ""), setting)


def net_name(value: str | None, setting: str) -> str | None:
    """``value`` as an expected network's name (None where empty); else a ConfigError."""
    if not value:
        return None
    if not _NET_NAME.fullmatch(value):
        raise ConfigError(setting, "".join(c if c.isprintable() else "?" for c in value[:64]),
                          "the network NCCL must choose between nodes: IB (InfiniBand or "
                          "RoCE), Socket, or a network plugin's name")
    return value


def meets(expected: str, network: str | None) -> bool:
    """Whether NCCL's ``network`` is the one expected. IB is also met by a plugin built on
    the same verbs (IBext, IBext_v8: the SHARP plugin)."""
    if network is None:
        return False
    return network == expected or (expected == "IB" and network.startswith("IB"))


def fix_for(expected: str, setting: str = EXPECT_SETTING) -> str:
    """What to do where NCCL did not choose ``expected``."""
    if expected.startswith("IB"):
        return ("no InfiniBand device or verbs library in the container: check `ibv_devinfo` "
                "there (bench doctor --profile gpu-ib), that the image has rdma-core "
                "(make build) and that NCCL_IB_HCA names a device it lists; or use "
                "PROFILE=gpu for TCP sockets")
    if expected == "Socket":
        return (f"keep NCCL off InfiniBand with NCCL_IB_DISABLE (1 forces TCP sockets), or "
                f"unset {setting}")
    return (f"NCCL did not load the {expected} plugin: check NCCL_NET_PLUGIN and that the "
            f"plugin is on the image's library path, or unset {setting}")


def where(view: Mapping) -> str:
    """``node 1 (host gpu2, rank 2)`` for one rank's view."""
    return (f"node {view.get('node_rank')} (host {view.get('hostname')}, rank "
            f"{view.get('rank')})")


def mismatch(views: Iterable[Mapping], expected: str | None = None,
             setting: str = EXPECT_SETTING) -> str | None:
    """One line for the first rank where NCCL's network is not the one expected (the
    rank's own ``expected_net``, else ``expected``), or None where every rank's is."""
    for view in views:
        wanted = view.get("expected_net") or expected
        if wanted is None:
            continue
        if not view.get("captured"):
            return (f"{setting}={wanted} cannot be checked on {where(view)}: "
                    f"{view.get('reason') or 'NCCL INFO lines not captured'}")
        network = view.get("network")
        if not meets(wanted, network):
            chose = f"NCCL chose {network}" if network else "NCCL named no network"
            return (f"{chose} on {where(view)} where {setting}={wanted} expects {wanted}: "
                    f"{fix_for(wanted, setting)}")
    return None
