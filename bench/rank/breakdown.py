"""The parts of each timed step, as this rank saw them.

The trainer marks where each part of a step ends (data, h2d, forward, backward, sync,
optimizer) on the ``StepClock``: on CUDA an event on the stream, so a part is the GPU's
time for it and a data wait the GPU did not notice counts as nothing; on the CPU the host
clock. Seconds are resolved once, after the timed steps, as the step clock does.

Backward's end is told apart from the communication DDP exposes after it: a callback queued
on autograd's engine when backward starts runs when the graph is done, before DDP's own
(queued later, when the last bucket is ready) waits for the all-reduce. FSDP's collectives
are timed where they are called and waited for (on the host: ``host_collectives``), and
taken out of the part they ran in.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from bench.rank.clock import Mark, StepClock


class StepParts:
    """Marks of the current step's parts; ``resolved()`` gives seconds per part per step."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock
        self.running = "data"          # the part under way: host-timed collectives leave it
        self._origin: Mark | None = None
        self._marks: list[tuple[str, Mark]] = []
        self._inner: dict[tuple[str, str], float] = {}
        self._steps: list[tuple[Mark, list[tuple[str, Mark]], dict[tuple[str, str], float]]] = []

    @property
    def active(self) -> bool:
        return self._origin is not None

    def begin(self, origin: Mark) -> None:
        self._origin, self._marks, self._inner = origin, [], {}
        self.running = "data"

    def done(self, part: str, then: str) -> None:
        """``part`` ended now; ``then`` is under way."""
        if self._origin is not None:
            self._marks.append((part, self.clock.mark()))
            self.running = then

    def last_mark(self) -> Mark:
        """Where the current step's last part ended (its origin if none has)."""
        assert self._origin is not None, "last_mark() outside a step"
        return self._marks[-1][1] if self._marks else self._origin

    def collective(self, kind: str, seconds: float) -> None:
        """A collective kept this (host) thread ``seconds`` inside the running part."""
        if self._origin is not None:
            key = (self.running, kind)
            self._inner[key] = self._inner.get(key, 0.0) + seconds

    def end(self) -> None:
        if self._origin is not None:
            self._steps.append((self._origin, self._marks, self._inner))
        self._origin = None

    def resolved(self) -> list[dict[str, float]]:
        """Per step, seconds per part (on CUDA this waits for the events)."""
        steps = []
        for origin, marks, inner in self._steps:
            parts: dict[str, float] = {}
            previous = origin
            for name, mark in marks:
                parts[name] = parts.get(name, 0.0) + self.clock.seconds(previous, mark)
                previous = mark
            for (enclosing, kind), seconds in inner.items():
                taken = min(seconds, parts.get(enclosing, 0.0))
                parts[enclosing] = parts.get(enclosing, 0.0) - taken
                parts[kind] = parts.get(kind, 0.0) + taken
            steps.append(parts)
        return steps

    def mark_backward_end(self, root: torch.Tensor) -> None:
        """Mark backward's end (every gradient computed) when the graph from ``root`` is
        done, before anything waits for the gradient sync."""
        if self._origin is None or not root.requires_grad:
            return

        def at_start(grad: torch.Tensor) -> None:
            torch.autograd.Variable._execution_engine.queue_callback(  # type: ignore[attr-defined]
                lambda: self.done("backward", then="sync"))

        root.register_hook(at_start)


_CURRENT: list[StepParts] = []   # the parts host-timed collectives report to, if any


def reporting_to(parts: StepParts | None) -> None:
    """Host-timed collectives (``host_collectives``) report to ``parts`` from now on."""
    _CURRENT.clear()
    if parts is not None:
        _CURRENT.append(parts)


@contextmanager
def _timed(kind: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        if _CURRENT:
            _CURRENT[0].collective(kind, time.perf_counter() - start)


def host_timed(kind: str, call: Callable) -> Callable:
    """``call``, with the host time it takes reported as a ``kind`` collective."""
    def timed(*args, **kwargs):
        with _timed(kind):
            return call(*args, **kwargs)
    timed.host_timed = True  # type: ignore[attr-defined]
    return timed
