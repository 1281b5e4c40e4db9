"""torchrun as every launcher starts it: it leaves at once when the job is over, and
node 0's rendezvous store listens on one address where the launcher knows it.

  python -m bench.rank.torchrun [--store-bind 127.0.0.1] [torchrun's own flags...]

Leaving: once every rank ended well and the agents met at their exit barrier, the job is
over and its launcher waits only for this process; the interpreter's unwinding of torch
(about a second of a loaded host, in every cell) is skipped (``bench.rank.exiting``).

torch's TCPStore server listens on every interface, whatever host name it is given: the
libuv backend binds ``::`` (or ``0.0.0.0``) with the port alone (``UvTcpServer::
makeWithPort`` in torch/csrc/distributed/c10d/TCPStoreLibUvBackend.cpp), and torchrun has
no flag to change that. A rendezvous on 127.0.0.1 would then accept connections from the
whole network. TCPStore does take a socket already bound (``master_listen_fd``): this
module binds one to the given address and hands it to the static rendezvous's store, then
runs torchrun unchanged. The launchers that know every node is on this host (native,
netns) give ``--store-bind``; the others (their nodes on other hosts, a container's
entrypoint) give none, and the store listens as torchrun's does.

Orphans: torchrun's agent ends the ranks it started when it is stopped (SIGTERM), but only
those it has taken note of: a SIGTERM that lands while it starts them (torch's
``start_processes`` has launched a rank and not yet returned) leaves that rank running in a
session of its own, holding the job's output open, after the agent is gone. So when
torchrun ends in an exception, whatever is still running below this process is ended
here (``bench.processes.end``) before the agent leaves.

Litter: torchrun without ``--log-dir`` makes a ``torchelastic_*`` directory in the temp dir
for its per-run files (the ranks' error files) and never removes it: one more on every host
for every job. Here the agent's log directory is a temporary one, removed when the agent
ends, however it ends short of SIGKILL; a ``--log-dir`` given among torchrun's flags still
wins (it comes later on the line), and then that directory is the user's to keep.
"""
from __future__ import annotations

import ipaddress
import os
import signal
import socket
import sys
from typing import Any

from torch.distributed import TCPStore
from torch.distributed import run as torchrun
from torch.distributed.elastic.rendezvous import static_tcp_rendezvous

from bench import processes, provenance
from bench.paths import temporary_tree
from bench.rank import exiting


def listening_socket(address: str, port: int) -> socket.socket:
    """A TCP socket listening on ``address``:``port`` only."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return socket.create_server((address, port), family=family)


def store_bound_to(address: str):
    """A stand-in for TCPStore whose server (node 0's) listens on ``address`` only; a
    client store is made as before."""
    def make(host_name: str, port: int, world_size: int | None = None,
             is_master: bool = False, *args: Any, **kwargs: Any) -> TCPStore:
        if is_master:
            # detach(): the store owns the descriptor from here and closes it.
            kwargs["master_listen_fd"] = listening_socket(address, port).detach()
        return TCPStore(host_name, port, world_size, is_master, *args, **kwargs)
    return make


# How long a rank the agent left behind gets to act on SIGTERM before SIGKILL: the agent
# has already given its own ranks their grace (torch's 30 s) where it knew of them.
LEFT_BEHIND_GRACE_S = 5.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def end_left_behind(grace_s: float = LEFT_BEHIND_GRACE_S) -> None:
    """End every process still running below this one (a rank torchrun started and did not
    end), undisturbed by a further stop signal: the agent is on its way out either way."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    processes.end(processes.descendants(os.getpid()), grace_s)


def main(argv: list[str] | None = None) -> None:
    # Our flag comes first, and only there: torchrun's own flags and the workload's follow
    # untouched (no parser of ours could take a workload flag for its own).
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--store-bind"]:
        if len(args) < 2:
            sys.exit("usage: python -m bench.rank.torchrun [--store-bind ADDRESS] "
                     "[torchrun flags]")
        address = str(ipaddress.ip_address(args[1]))
        static_tcp_rendezvous.TCPStore = store_bound_to(address)
        args = args[2:]
    # What torchrun adds is not the user's setting: the ranks' comm_env leaves it out.
    provenance.mark_torchrun_defaults(os.environ)
    with temporary_tree("torchelastic_", "torchrun's log directory") as log_dir:
        try:
            # First on the line, so that a --log-dir among torchrun's flags overrides it.
            torchrun.main(["--log-dir", str(log_dir), *args])
        except BaseException:
            end_left_behind()
            raise
    # Every rank ended well and the agents met at their exit barrier: the job is over, and
    # the launcher waits only for this process. A failure raised above, and goes out as
    # torchrun's own (its report, exit 1).
    exiting.leave(0)


if __name__ == "__main__":
    main()
