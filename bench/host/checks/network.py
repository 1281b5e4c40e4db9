"""The network between the nodes: the interface NCCL/gloo use routes to MASTER_ADDR, no
address they listen on is public, and the rendezvous port on the first host is reachable
from every host."""
from __future__ import annotations

import ipaddress
import re
import socket

from bench.host.checks import FAIL, PASS, WARN, Row
from bench.host.checks.remote import Hosts, shell
from bench.shell import words
from bench.topology import host_address

_ADDRESS = re.compile(r"\binet6? ([0-9A-Fa-f:.]+)/")
EXPOSED = ("the c10d store and NCCL/gloo have no authentication and exchange pickled "
           "objects: keep the job on a private network, or firewall MASTER_PORT and the "
           "NCCL/gloo ports to the nodes")
# Remote checks that need a shell: fixed text, each value an argument ("$1", "$@") of
# ``sh -c SCRIPT bench-doctor VALUE...``, rendered with bench.shell.words.
ROUTE = ('ip route get "$(getent ahostsv4 "$1" | awk \'NR==1{print $1}\')" '
         '| grep -o \'dev [^ ]*\' | head -n 1')
ANY_LINK = 'for name; do ip link show "$name" >/dev/null 2>&1 && exit 0; done; exit 1'
TCP_OPEN = ': <"/dev/tcp/$1/$2"'
# A listener on the rendezvous port (sys.argv[1]) for the other hosts to reach.
LISTENER = ("import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
            "socket.SO_REUSEADDR, 1); s.bind(('', int(sys.argv[1]))); s.listen(16); "
            "print('listening', flush=True)\nwhile True: s.accept()[0].close()")
SOCKET_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def interface_rows(job: Hosts, host: str) -> tuple[list[Row], list[str]]:
    """The ``interface`` rows of ``host``, and the interfaces NCCL/gloo will use there."""
    route = job.run(host, shell(ROUTE, job.master))
    device = route.stdout.strip().removeprefix("dev ").strip()
    if not device:
        return [Row(host, "interface", FAIL, f"no route to MASTER_ADDR {job.master}")], []
    rows, used = [], []
    for variable in SOCKET_VARIABLES:
        wanted = job.settings.get(variable, "")
        if not wanted:
            rows.append(Row(host, "interface", WARN, f"{variable} unset: the library guesses; "
                            f"set {variable}={device} (the route to {job.master})"))
            used.append(device)
            continue
        names = [n.lstrip("=") for n in wanted.split(",") if n and not n.startswith("^")]
        exists = job.run(host, shell(ANY_LINK, *names))
        if exists.returncode != 0:
            rows.append(Row(host, "interface", FAIL, f"{variable}={wanted}: no such interface "
                            f"on {host}; the route to {job.master} uses {device}"))
        elif device not in names:
            rows.append(Row(host, "interface", FAIL, f"{variable}={wanted} but the route to "
                            f"{job.master} uses {device}: set {variable}={device}"))
            used.extend(names)
        else:
            rows.append(Row(host, "interface", PASS, f"{variable}={wanted} routes to "
                            f"{job.master}"))
            used.extend(names)
    return rows, list(dict.fromkeys(used))


def interface_addresses(job: Hosts, host: str, devices: list[str]) -> dict[str, list[str]]:
    """{interface: its IPv4 and IPv6 addresses} on ``host`` (``ip -o addr``)."""
    found: dict[str, list[str]] = {}
    for device in devices:
        out = job.run(host, words(["ip", "-o", "addr", "show", "dev", device]))
        found[device] = _ADDRESS.findall(out.stdout) if out.returncode == 0 else []
    return found


def exposure_row(job: Hosts, host: str, devices: list[str]) -> Row:
    """WARN where MASTER_ADDR (on the first host's row) or an address of the interface
    NCCL/gloo use on ``host`` is public: nothing authenticates who joins or what they
    send. Loopback, private, link-local and shared addresses pass."""
    leads = host_address(host) == job.master
    public = []
    if leads:
        public += [f"{a} (MASTER_ADDR {name})" if a != name else f"{a} (MASTER_ADDR)"
                   for name in master_names(job) for a in resolve(name) if is_public(a)]
    for device, addresses in interface_addresses(job, host, devices).items():
        public += [f"{a} ({device})" for a in addresses if is_public(a)]
    if public:
        return Row(host, "exposure", WARN, f"public address {', '.join(public)}: {EXPOSED}")
    checked = ["MASTER_ADDR"] if leads else []
    checked += devices
    return Row(host, "exposure", PASS, f"{' and '.join(checked) or 'nothing'} private or "
               "loopback only")


def master_names(job: Hosts) -> list[str]:
    """MASTER_ADDR as the SSH fan-out sets it (the first host) and, where it differs,
    as the settings file sets it for `make node-up`."""
    names = [job.master]
    configured = job.settings.get("MASTER_ADDR", "").strip()
    if configured and configured != job.master:
        names.append(configured)
    return names


def rendezvous_rows(job: Hosts, reachable: list[str]) -> list[Row]:
    """From every reachable host, MASTER_PORT on the first host (a listener there for the
    while); nothing where the first host is not reachable (it leads)."""
    if job.names[0] not in reachable:
        return []
    port, master = job.master_port, job.master
    listener = job.remote.start(job.names[0], words(["timeout", "30", "python3", "-c",
                                                     LISTENER, str(port)]))
    try:
        ready = listener.stdout.readline().strip() == "listening"  # type: ignore[union-attr]
        rows = []
        for host in reachable:
            if not ready:
                rows.append(Row(host, "rendezvous", FAIL, f"port {port} on {master} is in "
                                "use or cannot be opened: free it or set MASTER_PORT"))
                continue
            out = job.run(host, words(["timeout", "5", "bash", "-c", TCP_OPEN, "bench-doctor",
                                       master, str(port)]))
            rows.append(Row(host, "rendezvous", PASS, f"{master}:{port} reachable")
                        if out.returncode == 0 else
                        Row(host, "rendezvous", FAIL, f"{master}:{port} unreachable: open TCP "
                            f"{port} (and the NCCL/gloo ports) between the nodes"))
        return rows
    finally:
        listener.kill()
        listener.wait()


def is_public(address: str) -> bool:
    """Whether ``address`` is globally routable (not loopback, private, link-local,
    shared or documentation space)."""
    try:
        return ipaddress.ip_address(address).is_global
    except ValueError:
        return False


def resolve(name: str) -> list[str]:
    """The addresses ``name`` resolves to on this machine (a literal is itself)."""
    try:
        ipaddress.ip_address(name)
        return [name]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))
