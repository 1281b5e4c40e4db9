"""Run one process per node, watch them together, stop them together.

Every launcher (native torchrun, Compose, SSH) reduces a job to one command per node; this
module starts them, streams each node's output with its host as prefix (and into
``<log_dir>/<host>.log``), and once any node fails, the deadline passes or the user presses
Ctrl-C (or SIGTERM/SIGHUP arrive as SystemExit, see ``netlab.terminate_raises``), stops the
rest, shielded from a second signal, and calls the launcher's own clean-up. A background node (an
emulated host's busy neighbour) runs while the job does: the job is over when every other
node has ended, and the background ones are then stopped (once the launcher's
``background_done`` says so, where it gives one), which is not a failure.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench import processes, record
from bench.host.failures import peer_lost
from bench.host.outcome import JobOutcome, NodeOutcome

TAIL_LINES = 20
PEER_GRACE_S = 10.0  # how long other nodes may take to fail on their own
# How often the nodes are looked at while the job runs: each look is a waitpid per node, and
# what it costs a cell is half of it on average, between the last node's end and its row.
POLL_S = 0.05
# Lines that say nothing to a user: Compose v1's note on --exit-code-from, and c10d's
# warning that a loopback peer has no resolvable name. They stay in the node logs.
CONSOLE_NOISE = ("--exit-code-from implies", "hostname of the client socket cannot be")


@dataclasses.dataclass(slots=True)
class Console:
    """Whether nodes' output is echoed to this console (the node logs always get it). A
    single job shows it; the matrix shows one line per job and points at the logs."""

    echo: bool = True


CONSOLE = Console()


@dataclasses.dataclass(frozen=True, slots=True)
class NodeCommand:
    rank: int
    host: str                  # a label for output and logs: a hostname, or node<rank>
    argv: list[str]
    env: dict[str, str] | None = None
    # Runs while the job does and is stopped once every other node has ended (its exit then
    # is not a failure); one that fails before that fails the job, as any node does.
    background: bool = False


def _open_log(log_path: Path | None, node: NodeOutcome):
    if log_path is None:
        return None
    try:
        return open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - the pump closes it
    except OSError as error:
        node.log_error = f"cannot write its log {log_path} ({error})"
        say(f"[{node.host}] warning: {node.log_error}; its output still reaches this "
              "console")
        return None


def say(line: str) -> None:
    """A line on the console, which may itself be gone (a closed terminal)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _close_quietly(log) -> None:
    """Close a log whose last write may have failed: close() flushes what is buffered and
    fails again on a full disk, which must not end the pump."""
    try:
        log.close()
    except OSError:
        pass


class _NodeSink:
    """Where a node's lines go from both its pumps (stdout and stderr): its output, the
    console and its log, one whole line at a time under one lock. Nothing here may stop the
    reading: a node blocked on a full pipe would hang the job until its deadline. A log or
    console that cannot be written (a full disk, a closed terminal) is dropped, the first
    error kept in ``node.log_error``, and the pumps go on draining."""

    def __init__(self, node: NodeOutcome, log_path: Path | None):
        self.node, self.log_path = node, log_path
        self.lock = threading.Lock()
        self.log = _open_log(log_path, node)

    def take(self, line: str, echo: bool) -> None:
        with self.lock:
            self.node.output.append(line.rstrip("\n"))
            if echo and CONSOLE.echo and not any(noise in line for noise in CONSOLE_NOISE):
                _echo(f"[{self.node.host}] {line}")
            if self.log:
                try:
                    self.log.write(line)
                    self.log.flush()
                except OSError as error:
                    self.node.log_error = f"its log {self.log_path} stopped ({error})"
                    say(f"[{self.node.host}] warning: {self.node.log_error}")
                    _close_quietly(self.log)
                    self.log = None

    def close(self) -> None:
        with self.lock:
            if self.log:
                _close_quietly(self.log)
                self.log = None
            self.node.last_lines = self.node.output[-TAIL_LINES:]


def _pump_stream(stream, sink: _NodeSink, kept: list[str] | None) -> None:
    """Every line of one stream into the sink (and into ``kept``, the stdout lines records
    are read from). A record is data for the launcher and the results file, not for the
    console."""
    record_line = False
    for line in stream:
        if kept is not None:
            kept.append(line.rstrip("\n"))
        sink.take(line, echo=not record_line and not record.is_record_line(line))
        record_line = line.rstrip("\n") == record.MARKER


def _pump(proc: subprocess.Popen, node: NodeOutcome, log_path: Path | None) -> None:
    """Copy a node's stdout and stderr, each read on its own (so that no line of one lands
    inside a line of the other), to its output, the console and its log until it closes
    both."""
    sink = _NodeSink(node, log_path)
    errors = threading.Thread(target=_pump_stream, args=(proc.stderr, sink, None), daemon=True)
    errors.start()
    try:
        _pump_stream(proc.stdout, sink, node.stdout)
        errors.join()
    finally:
        sink.close()


def _echo(text: str) -> None:
    """A node's line on the console; a console that is gone costs only the echo."""
    try:
        sys.stderr.write(text)
    except (OSError, ValueError):
        pass


def run_nodes(commands: list[NodeCommand], *, deadline_s: float, log_dir: Path | None = None,
              cleanup: Callable[[], None] | None = None, cwd: Path | None = None,
              background_done: Callable[[], bool] | None = None) -> JobOutcome:
    """Start every node's command, wait for all; stop all on the first failure or deadline.
    ``background_done``: once the job is over, the background nodes run on until it says
    True (or they have all ended, or the deadline passes) before they are stopped."""
    if log_dir:
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # the job still runs; its output reaches the console
            print(f"warning: cannot create the log directory {log_dir} ({error})",
                  file=sys.stderr)
            log_dir = None
    started = time.monotonic()
    procs: list[subprocess.Popen] = []
    nodes: list[NodeOutcome] = []
    threads: list[threading.Thread] = []
    timed_out, culprit = False, None
    planned: set[int] = set()   # the background nodes, stopped because the job was over
    try:
        for command in commands:
            env = {**os.environ, **(command.env or {})}
            # Its own session, so that its process group is the node's (torchrun's ranks
            # start sessions of their own; _stop reaches them as the node's descendants).
            proc = subprocess.Popen(command.argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                    text=True, errors="replace", start_new_session=True)
            node = NodeOutcome(command.rank, command.host, None, [], [], stdout=[])
            log_path = log_dir / f"{command.host}.log" if log_dir else None
            thread = threading.Thread(target=_pump, args=(proc, node, log_path), daemon=True)
            thread.start()
            procs.append(proc)
            nodes.append(node)
            threads.append(thread)
        foreground = [p for p, c in zip(procs, commands, strict=True) if not c.background]
        timed_out, culprit = _wait(procs, started + deadline_s, foreground)
        if timed_out:  # a node that never ended because it was stopped says so in the row
            for proc, node in zip(procs, nodes, strict=True):
                node.stopped = _is_stopped(proc)
        if not timed_out and culprit is None:  # the job is over: stop what ran beside it
            planned = {i for i, c in enumerate(commands) if c.background}
            if background_done is not None:
                _await(background_done, [procs[i] for i in planned], started + deadline_s)
            _stop([procs[i] for i in planned])
        # A node that lost its peer often fails before the peer's own death is seen: give
        # the others a moment to fail on their own, so the row can name the real cause.
        failed_alone = _settle(procs, PEER_GRACE_S) if culprit is not None else []
    except BaseException:
        # Interrupted (Ctrl-C, or SIGTERM/SIGHUP made SystemExit): every node and rank is
        # stopped before the interruption goes on, and a second signal cannot cut that
        # short and leave them running.
        with shielded():
            _stop(procs)
            if cleanup:
                cleanup()
        raise
    if timed_out or any(p.returncode != 0 for i, p in enumerate(procs) if i not in planned):
        _stop(procs)
    if cleanup:
        cleanup()
    for thread in threads:
        thread.join(timeout=10)
    for index, (proc, node) in enumerate(zip(procs, nodes, strict=True)):
        node.returncode = 0 if index in planned else proc.returncode
    if culprit is not None:
        culprit = root_cause([nodes[i] for i in failed_alone], nodes[culprit]).rank
        culprit = next(i for i, n in enumerate(nodes) if n.rank == culprit)
    return JobOutcome(nodes, timed_out, time.monotonic() - started,
                      nodes[culprit] if culprit is not None else None)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP ignored while inside (in the main thread, where Python
    handles them): for stopping what was started, which must not itself be interrupted."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _is_stopped(proc: subprocess.Popen) -> bool:
    """Whether a running node's process is stopped (SIGSTOP: state T)."""
    stat = processes.stat(proc.pid) if proc.poll() is None else None
    return stat is not None and stat[0] in ("T", "t")


def _settle(procs: list[subprocess.Popen], grace_s: float) -> list[int]:
    """Wait up to ``grace_s`` while nodes are still running; the indexes of those that
    failed by then on their own (before anything stopped them)."""
    end = time.monotonic() + grace_s
    while time.monotonic() < end and any(p.poll() is None for p in procs):
        time.sleep(0.1)
    return [i for i, p in enumerate(procs) if p.poll() not in (None, 0)]


def root_cause(failed: list[NodeOutcome], first: NodeOutcome) -> NodeOutcome:
    """The first node to fail, unless all it says is that it lost a peer: then the node
    that failed on its own for another reason (killed, out of memory, a bad setting)."""
    if not peer_lost(first.output):
        return first
    return next((n for n in failed if n is not first and not peer_lost(n.output)), first)


def _wait(procs: list[subprocess.Popen], deadline: float,
          foreground: list[subprocess.Popen] | None = None) -> tuple[bool, int | None]:
    """Until the ``foreground`` ones (all, by default) have ended or any one failed:
    (deadline passed, index of the first failure)."""
    foreground = procs if foreground is None else foreground
    while True:
        failed = [i for i, p in enumerate(procs) if p.poll() not in (None, 0)]
        if failed:
            return False, failed[0]
        if all(p.poll() is not None for p in foreground):
            return False, None
        if time.monotonic() > deadline:
            return True, None
        time.sleep(POLL_S)


def _await(done: Callable[[], bool], procs: list[subprocess.Popen], deadline: float) -> None:
    """Until ``done()``, every one of ``procs`` has ended, or the deadline has passed."""
    while not done() and any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(POLL_S)


def _stop(procs: list[subprocess.Popen], grace_s: float = 20) -> None:
    """SIGTERM each node's process group and every process it started, then SIGKILL what
    is left after the grace. torchrun starts each rank in a session of its own, out of
    reach of the node's group: a rank that does not act on SIGTERM (hung, or stopped, which
    a continue lets act on it) would outlive a torchrun killed before its own escalation."""
    # Only below a node still running: a reaped node's pid may belong to another process
    # by now, and its own children were handed to init when it ended.
    trees = [processes.descendants(proc.pid) if proc.poll() is None else [] for proc in procs]
    for proc, tree in zip(procs, trees, strict=True):
        if proc.poll() is None:
            _signal(proc, signal.SIGTERM)
            _signal(proc, signal.SIGCONT)   # a stopped node acts on SIGTERM only once continued
        processes.ask_to_stop(tree)
    end = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL)
            proc.wait()
    processes.kill_after([m for tree in trees for m in tree], end)


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def failed_to_start(host: str, reason: str) -> JobOutcome:
    """The outcome of a job that never started, for the matrix to record as a failure."""
    node = NodeOutcome(0, host, 1, [reason], [reason])
    return JobOutcome([node], timed_out=False, seconds=0.0, culprit=node)
