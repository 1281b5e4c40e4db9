"""Clocks for the rank side: when work finished, not when the CPU queued it.

Kernels run asynchronously on CUDA. A host clock read times the launch; a synchronize
before every read is right but stops the CPU queueing step N+1 while the GPU finishes step
N. ``StepClock`` marks with CUDA events instead and resolves them once per window.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import torch


def make_clock(device: torch.device) -> Callable[[], float]:
    """A wall clock that first waits for the device: for windows timed as a whole."""
    if device.type == "cuda":
        def clock() -> float:
            torch.cuda.synchronize()  # note: a CPU-GPU sync point, on purpose
            return time.perf_counter()
        return clock
    return time.perf_counter


Mark = float | torch.cuda.Event


class StepClock:
    """Marks points in the work; seconds between marks are resolved later.

    On the CPU a mark is the host clock. On CUDA a mark is an event recorded on the current
    stream: it completes when the GPU reaches it, so the time between two marks is GPU time,
    and no mark makes the CPU wait."""

    def __init__(self, device: torch.device) -> None:
        self.on_cuda = device.type == "cuda"
        self.stamped_by = "cuda_events" if self.on_cuda else "host_clock"

    def mark(self) -> Mark:
        if not self.on_cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start: Mark, end: Mark) -> float:
        """From ``start`` to ``end``; on CUDA this waits for ``end`` (a sync point)."""
        if not self.on_cuda:
            return end - start
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def wait(self, mark: Mark) -> None:
        """Block until the device has reached ``mark``."""
        if self.on_cuda:
            mark.synchronize()

    def now(self) -> float:
        """Host seconds once the device has finished everything queued (a window's edge)."""
        if self.on_cuda:
            torch.cuda.synchronize()  # note: a CPU-GPU sync point, on purpose
        return time.perf_counter()
