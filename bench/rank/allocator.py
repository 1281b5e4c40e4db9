"""What glibc's malloc does with the host memory a rank frees: one policy per process, set
before the rank builds anything, and named in the record (``env.malloc``).

By default glibc serves each block of 128 KiB or more with its own mmap (the threshold then
rises to the largest block freed, up to 32 MiB) and hands freed memory at the top of a
heap back to the kernel. A training step on CPU allocates and frees the same activation
and gradient blocks every step, so every step faults them in again: the held-out smallcnn
at batch 16 took about 1,000 minor faults a step, 6-20% of its main thread's CPU time in
the kernel, and more of it on two emulated hosts than on one (results/reference/
smallcnn-b16-malloc/). CPU tuning guides recommend a caching allocator (jemalloc,
tcmalloc) for the same reason (AMD's ZenDNN user guide, "Memory Allocators"); this keeps
glibc, which every image has, and tells it to keep memory.

- ``keep`` (every rank, by default): blocks up to 32 MiB (glibc's largest threshold) come
  from the heaps and stay there when freed; a heap is trimmed only past 1 GiB free.
- ``exact`` (a run under ``--memory-cap``): every block of 1 MiB or more is returned when
  freed, one arena, the heap trimmed at glibc's default, so the cap counts live memory.

Not glibc (no ``mallopt``): nothing is set, and the record says ``None``.
"""
from __future__ import annotations

import ctypes

# malloc.h
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
KEEP_MMAP_THRESHOLD = 32 << 20   # glibc refuses more (HEAP_MAX_SIZE / 2 on 64-bit)
KEEP_TRIM_THRESHOLD = 1 << 30
EXACT_MMAP_THRESHOLD = 1 << 20
DEFAULT_TRIM_THRESHOLD = 128 << 10

# The policy this process last set, as the record names it (None: none set, or no glibc).
_current: dict | None = None


def _mallopt():
    try:
        return ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):   # not glibc: nothing to tune
        return None


def _apply(policy: str, settings: dict[str, tuple[int, int]]) -> dict | None:
    """Each ``name: (mallopt parameter, value)``; the policy as recorded, or None where this
    libc has no mallopt or refused a setting (then the record must not claim it)."""
    global _current
    mallopt = _mallopt()
    ok = mallopt is not None and all(mallopt(param, value) == 1
                                     for param, value in settings.values())
    _current = {"policy": policy, **{name: value for name, (_, value) in settings.items()}} \
        if ok else None
    return _current


def current() -> dict | None:
    """The policy in force, for the record's ``env.malloc``."""
    return _current


def keep_freed_memory() -> dict | None:
    return _apply("keep", {"mmap_threshold_bytes": (M_MMAP_THRESHOLD, KEEP_MMAP_THRESHOLD),
                           "trim_threshold_bytes": (M_TRIM_THRESHOLD, KEEP_TRIM_THRESHOLD)})


def allocate_exactly() -> dict | None:
    """Make a memory limit count live memory, not malloc's reserves: glibc otherwise serves
    large blocks from per-thread arenas that keep freed memory (gloo's and autograd's
    threads each have one) and raises its mmap threshold after frees, so FSDP's gather and
    scatter buffers, allocated and freed every step, would look like growth. A fixed 1 MiB
    mmap threshold returns every large block to the system when it is freed."""
    return _apply("exact", {"mmap_threshold_bytes": (M_MMAP_THRESHOLD, EXACT_MMAP_THRESHOLD),
                            "trim_threshold_bytes": (M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD),
                            "arena_max": (M_ARENA_MAX, 1)})
