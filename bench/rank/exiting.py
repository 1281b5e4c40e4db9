"""Leaving a finished process without the interpreter's teardown.

A process that has imported torch spends about half a second at exit unwinding its modules
(more on a loaded host): a rank, and then torchrun's agent, each pay it after the job's
work is done, and the launcher waits for both. Nothing is measured then. ``leave`` runs what
an exit must still do (threads still working are joined, the exit handlers: multiprocessing
stops data-loader workers, logging flushes), flushes the standard streams and ends the
process. No torch here: the agent's entry point uses it too.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # the reader gone: nothing left to say to it
            pass


def _join_threads() -> None:
    """Wait for the threads the interpreter would wait for at exit (not daemons)."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()


def leave(code: int) -> NoReturn:
    """End this process with ``code`` after what an exit must do, skipping the unwinding."""
    flush_streams()
    _join_threads()
    atexit._run_exitfuncs()
    flush_streams()
    os._exit(code)
