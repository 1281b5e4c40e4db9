"""DDP wrapping, and the gradient traffic it sends: bytes per step and the bucket timeline.

Apart from the process group (``bench.rank.distributed``): this module decides how gradients are
synchronised (DDP's built-in all-reduce, or a comm hook) and observes what that sends, for
the record's bytes per step and the predictor's bucket timeline.
"""
from __future__ import annotations

import queue
import statistics
import threading

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from bench.config import DistributedConfig
from bench.rank import breakdown
from bench.rank.clock import Mark, StepClock
from bench.rank.distributed import DistContext, collective_threads
from bench.spread import deciles


class GradientTraffic:
    """The gradient bytes each step sends, and when each bucket was ready and done.

    Bytes are counted where the stock DDP comm hooks call all_reduce (see
    ``_CountingCollectives``), so they are what was actually sent: halved by the fp16 and
    bf16 hooks, PowerSGD's P and Q factors plus its uncompressed tensors. The bucket
    timeline (each bucket's ready and done time from the step's start, and its size) is what
    the predictor needs to know how much communication a step can hide behind backward.
    Times are ``StepClock`` marks: on CUDA, events on the stream that did the work (so the
    GPU's time, not when the CPU queued it), resolved only when the timeline is read.
    """

    MAX_TIMELINE_STEPS = 200   # steps stamped; later steps still count their bytes

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock
        self.bytes = 0
        self.calls = 0
        self.by_kind: dict[str, int] = {}   # bytes per collective: all_reduce, all_gather...
        self.steps: list[dict] = []
        self._step: dict | None = None
        self.serialized = False   # set by wrap_model where buckets wait for one another
        # Gloo's worker threads (set by wrap_model): how many buckets sync at once there.
        self.collective_threads: int | None = None
        # Bytes of each broadcast DDP makes before every forward (set by wrap_model).
        self.broadcast_bytes: list[int] = []

    def reset(self) -> None:
        self.bytes = self.calls = 0
        self.by_kind.clear()
        self.steps.clear()

    def sent(self, tensor: torch.Tensor, kind: str = "all_reduce") -> None:
        """A collective over ``tensor`` (its whole, unsharded size: what an all-reduce is
        handed, what an all-gather returns, what a reduce-scatter is handed)."""
        size = tensor.numel() * tensor.element_size()
        self.bytes += size
        self.calls += 1
        self.by_kind[kind] = self.by_kind.get(kind, 0) + size
        if self._step is not None:
            self._step["sent"] += size

    def begin_step(self, mark: Mark) -> None:
        self._step = {"origin": mark, "ready": [], "issued": [], "done": [], "sent": 0,
                      "end": None} if len(self.steps) < self.MAX_TIMELINE_STEPS else None

    def bucket_ready(self, buffer_bytes: int) -> None:
        if self._step is not None:
            self._step["ready"].append((self.clock.mark(), buffer_bytes))

    def bucket_issued(self) -> None:
        """Called when a bucket's hook has returned its future: its synchronous work (for
        PowerSGD the error feedback and the first matmul) is done on backward's thread, and
        its first collective is under way."""
        if self._step is not None:
            self._step["issued"].append(self.clock.mark())

    def bucket_done(self) -> None:
        """Called when a bucket's all-reduce is done: on CPU from the thread that completes
        its future (gloo's); on CUDA from a callback whose current stream waits for it."""
        if self._step is not None:
            self._step["done"].append(self.clock.mark())

    def end_step(self, mark: Mark) -> None:
        if self._step is not None:
            self._step["end"] = mark
            self.steps.append(self._step)
            self._step = None

    def timeline(self) -> dict | None:
        """The median step's bucket timeline, over steps with the usual bucket count."""
        synced = [s for s in self.steps if s["ready"]]
        if not synced:
            return None
        counts = [len(s["ready"]) for s in synced]
        usual = max(set(counts), key=counts.count)
        steps = [self._resolved(s) for s in synced if len(s["ready"]) == usual]
        buffer_bytes = [steps[0]["ready"][i][1] for i in range(usual)]
        sent = statistics.median(s["sent"] for s in steps)
        total = sum(buffer_bytes)
        return {"ready_s": [statistics.median(s["ready"][i][0] for s in steps)
                            for i in range(usual)],
                "buffer_bytes": buffer_bytes,
                # Each bucket's share of what the step sent, in proportion to its size.
                "sent_bytes": [sent * b / total for b in buffer_bytes],
                "done_s": self._per_bucket(steps, "done", usual),
                # When backward handed each bucket over (its hook returned): the predictor
                # starts a bucket's collectives there, and charges the rest of the hook's
                # work (done - issued, after the first collective) to its send.
                "issued_s": self._per_bucket(steps, "issued", usual),
                # Backward waited at each bucket for the previous one's hook to finish.
                "serialized": self.serialized,
                # Gloo runs each collective on one of these threads, so as many buckets sync
                # at once; null on NCCL, which runs them in order on one stream.
                "collective_threads": self.collective_threads,
                # DDP's broadcast of rank 0's buffers before each forward, one per entry:
                # blocking collectives that a one-node step has no peer to wait for.
                "broadcast_bytes": list(self.broadcast_bytes),
                "step_s": statistics.median(s["duration"] for s in steps),
                # Their mean: what a timed window measures (samples over seconds), slow
                # steps and all; the predictor draws the median step's timeline out to it.
                "mean_step_s": statistics.fmean(s["duration"] for s in steps),
                # How the steps spread around those medians, bucket by bucket: what a
                # serialized hand-over's race (backward going on at the later of its reaching
                # the bucket and the previous chain's end) is read from over N nodes.
                "stretch_deciles_s": _stretch_deciles(steps, usual),
                "chain_deciles_s": _chain_deciles(steps, usual),
                "steps": len(steps),
                "stamped_by": self.clock.stamped_by}

    @staticmethod
    def _per_bucket(steps: list[dict], key: str, buckets: int) -> list[float] | None:
        """The median of each bucket's ``key`` mark, where every step has one per bucket."""
        if not all(len(s[key]) == buckets for s in steps):
            return None
        return [statistics.median(s[key][i] for s in steps) for i in range(buckets)]

    def _resolved(self, step: dict) -> dict:
        """A step's marks as seconds from its start (on CUDA this waits for its events)."""
        since = lambda mark: self.clock.seconds(step["origin"], mark)  # noqa: E731
        return {"ready": [(since(m), size) for m, size in step["ready"]],
                "issued": [since(m) for m in step["issued"]],
                "done": sorted(since(m) for m in step["done"]),
                "sent": step["sent"], "duration": since(step["end"])}


def _stretch_deciles(steps: list[dict], buckets: int) -> list[list[float] | None]:
    """Per bucket, the deciles over steps of backward's compute before it reached the
    bucket: from the previous bucket's hand-over (its hook returned; where a step has no
    hand-over per bucket, its ready), and for the first bucket from the step's start."""
    def stretches(step: dict) -> list[float]:
        ready = [t for t, _ in step["ready"]]
        handed = step["issued"] if len(step["issued"]) == buckets else ready
        return [max(0.0, ready[i] - (handed[i - 1] if i else 0.0)) for i in range(buckets)]
    per_step = [stretches(s) for s in steps]
    return [deciles([one[i] for one in per_step]) for i in range(buckets)]


def _chain_deciles(steps: list[dict], buckets: int) -> list[list[float] | None] | None:
    """Per bucket, the deciles over steps of its hand-over to its end (done less issued:
    the hook's collectives and the work chained to them), where every step has both per
    bucket; None where not."""
    if not all(len(s["issued"]) == len(s["done"]) == buckets for s in steps):
        return None
    return [deciles([max(0.0, s["done"][i] - s["issued"][i]) for s in steps])
            for i in range(buckets)]


class _CountingCollectives:
    """Stands in for ``torch.distributed`` inside torch's stock comm-hook modules: its
    all_reduce counts the bytes it is handed into the current ``GradientTraffic``, and
    everything else passes through. The stock hooks (plain, fp16, bf16, PowerSGD) stay
    torch's own; only what they send is observed, whichever thread sends it.

    ``defer`` (a one-rank probe of a serialized hook, PowerSGD on gloo): a hook's first
    all-reduce completes on a thread of its own, as it does on gloo's over N ranks, instead
    of at once. On one rank it was already done when PowerSGD chained the rest of its work
    to it, so that work (two matmuls, the orthogonalisation, two more all-reduces) ran
    inline on backward's thread and the timeline saw none of it after the hand-over; over
    two ranks it runs on gloo's thread beside backward, and took 49-63 ms after the first
    bucket's hand-over on two emulated hosts (issue 29). Deferred, the one-rank timeline
    splits the hook where N ranks do, and its ``done_s`` holds the chain's own time."""

    def __init__(self) -> None:
        self.traffic: GradientTraffic | None = None
        self.defer = False
        self._completer: queue.SimpleQueue | None = None
        self._held: list[_DeferredWork] = []

    def __getattr__(self, name: str):
        return getattr(dist, name)

    def all_reduce(self, tensor, *args, **kwargs):
        if self.traffic is not None:
            self.traffic.sent(tensor)
        work = dist.all_reduce(tensor, *args, **kwargs)
        # The chain's own all-reduces, issued from the completing thread, complete at once
        # there (as a callback on gloo's thread waits for the next collective).
        if not (self.defer and kwargs.get("async_op")) or getattr(_COMPLETING, "now", False):
            return work
        if self._completer is None:
            self._completer = queue.SimpleQueue()
            # A daemon: a job that fails with a collective held must still exit.
            threading.Thread(target=_complete_forever, args=(self._completer,),
                             name="one-rank-completer", daemon=True).start()
        deferred = _DeferredWork(work, tensor)
        self._completer.put(deferred.complete)
        self._held.append(deferred)
        return deferred

    def release(self) -> None:
        """Let the deferred all-reduces complete: the hook has returned, and everything it
        chained to them is attached (completing earlier would run the chain inline)."""
        held, self._held = self._held, []
        for deferred in held:
            deferred.released.set()


_COMPLETING = threading.local()


def _complete_forever(tasks: queue.SimpleQueue) -> None:
    while True:
        tasks.get()()


class _DeferredWork:
    """A one-rank all-reduce's work whose future completes on the completer's thread."""

    def __init__(self, work, tensor: torch.Tensor) -> None:
        self._work, self._tensor = work, tensor
        self._future: torch.futures.Future = torch.futures.Future()
        self.released = threading.Event()

    def complete(self) -> None:
        self.released.wait()
        try:
            self._work.wait()
        except Exception as error:  # noqa: BLE001  (the hook's future carries it)
            self._future.set_exception(error)
            return
        _COMPLETING.now = True
        try:
            self._future.set_result([self._tensor])    # the hook's callbacks run here
        finally:
            _COMPLETING.now = False

    def get_future(self) -> torch.futures.Future:
        return self._future

    def wait(self, *args, **kwargs) -> bool:
        self._future.wait()
        return True


_COUNTER = _CountingCollectives()


def _install_counter(traffic: GradientTraffic) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    _COUNTER.traffic = traffic
    default_hooks.dist = _COUNTER
    powerSGD_hook.dist = _COUNTER


def comm_hook(cfg: DistributedConfig):
    """(state, hook) for ``cfg.comm_hook``: torch's stock hooks."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if cfg.comm_hook == "fp16":
        return None, default_hooks.fp16_compress_hook
    if cfg.comm_hook == "bf16":
        return None, default_hooks.bf16_compress_hook
    if cfg.comm_hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=cfg.powersgd_rank,
            start_powerSGD_iter=cfg.powersgd_warmup)
        return state, powerSGD_hook.powerSGD_hook
    return None, default_hooks.allreduce_hook


class _ObservedHook:
    """The configured hook, with each bucket's ready and done times noted.

    ``serialize``: wait for the previous bucket's hook to finish before starting the next.
    gloo needs every rank to issue its collectives in the same order, and PowerSGD issues
    its second and third all-reduce from callbacks on gloo's threads, which would race the
    next bucket's first (seen as "Received data size doesn't match expected size").
    """

    def __init__(self, traffic: GradientTraffic, state, hook, serialize: bool) -> None:
        self.traffic, self.state, self.hook = traffic, state, hook
        self.serialize = serialize
        self.pending = None

    def done(self, future: torch.futures.Future) -> torch.Tensor:
        self.traffic.bucket_done()
        return future.value()


# DDP checks the bucket annotation by identity, which a stringified annotation (from the
# __future__ import) fails; so the parameter carries none.
def _observed(observed: _ObservedHook, bucket):  # bucket: dist.GradBucket
    buffer = bucket.buffer()
    observed.traffic.bucket_ready(buffer.numel() * buffer.element_size())
    if observed.pending is not None:
        observed.pending.wait()
    future = observed.hook(observed.state, bucket).then(observed.done)
    observed.traffic.bucket_issued()
    _COUNTER.release()
    if observed.serialize:
        observed.pending = future
    return future


def wrap_model(model: nn.Module, ctx: DistContext, cfg: DistributedConfig,
               traffic: GradientTraffic, *, observe: bool) -> nn.Module:
    """DDP around the model. Gradients are views into DDP's buckets (no copy per step).

    ``observe``: run the configured comm hook (the plain all-reduce hook for none) inside
    an observer that counts the bytes it sends and stamps each bucket, for the record's
    bytes per step and bucket timeline. Without it and with no compression hook, DDP keeps
    its built-in C++ all-reduce, the fastest path; the job then observes a few extra steps
    of a second, observed wrapper (see ``bench.rank.train.traffic_probe``)."""
    ddp = DistributedDataParallel(
        model, device_ids=[ctx.local_rank] if ctx.device.type == "cuda" else None,
        bucket_cap_mb=cfg.bucket_cap_mb, static_graph=cfg.static_graph,
        gradient_as_bucket_view=True)
    traffic.broadcast_bytes = buffer_broadcasts(ddp)
    traffic.collective_threads = collective_threads(ctx)
    if not observe and cfg.comm_hook == "none":
        return ddp
    _install_counter(traffic)
    state, hook = comm_hook(cfg)
    serialize = cfg.comm_hook == "powersgd" and ctx.backend == "gloo"
    traffic.serialized = serialize
    _COUNTER.defer = serialize and ctx.world_size == 1
    ddp.register_comm_hook(_ObservedHook(traffic, state, hook, serialize), _observed)
    return ddp


def buffer_broadcasts(ddp: DistributedDataParallel) -> list[int]:
    """The bytes of each collective DDP makes before a step's forward to copy rank 0's
    module buffers (BatchNorm's running statistics) to the other ranks:
    ``broadcast_buffers``, on by default. The buffers are packed as torch's
    ``broadcast_coalesced`` packs them, with the same routine (per dtype, a bucket closed
    once it reaches DDP's ``broadcast_bucket_size``). Each is a collective the forward
    waits for: measured on two emulated hosts at 5 Gbit/s, resnet18's two (float32
    statistics, int64 counters) made its forward 14 ms longer than with
    ``broadcast_buffers=False`` (issue 29)."""
    if not ddp.will_sync_module_buffers():
        return []
    buffers = list(ddp.modules_buffers)
    limit = int(getattr(ddp, "broadcast_bucket_size", 250 * 2**20))
    buckets, _ = dist._compute_bucket_assignment_by_size(buffers, [limit])
    return [sum(buffers[i].numel() * buffers[i].element_size() for i in bucket)
            for bucket in buckets if bucket]


def observes_timed_steps(cfg: DistributedConfig, world_size: int) -> bool:
    """Whether the timed steps themselves are observed: when a compression hook replaces
    DDP's all-reduce anyway, and under FSDP (its collectives are counted where they are
    issued, at no cost). One process trains bare, and DDP's plain all-reduce stays its own;
    both are observed by a short probe after training."""
    return world_size > 1 and (cfg.comm_hook != "none" or cfg.strategy == "fsdp")


# FSDP2's collectives by the name it calls them: torch 2.14 calls the ``*_single`` ones,
# earlier releases (2.11 on the lent GPUs) ``all_gather_into_tensor`` and
# ``reduce_scatter_tensor``. Each is counted by what crosses the wire: an all-gather's output
# (the unsharded parameters), a reduce-scatter's input (the unsharded gradients).
FSDP_COLLECTIVES = {"all_gather_single": "all_gather", "all_gather_into_tensor": "all_gather",
                    "reduce_scatter_single": "reduce_scatter",
                    "reduce_scatter_tensor": "reduce_scatter"}


class _CountingFSDPCollectives:
    """Stands in for ``torch.distributed`` inside FSDP2's collectives module: counts each
    all-gather and reduce-scatter into the current ``GradientTraffic`` and, where
    ``host_timed``, times it for the step breakdown; everything passes through."""

    def __init__(self) -> None:
        self.traffic: GradientTraffic | None = None
        self.host_timed = False

    def __getattr__(self, name: str):
        real = getattr(dist, name)
        kind = FSDP_COLLECTIVES.get(name)
        if kind is None:
            return real
        call = breakdown.host_timed(kind, real) if self.host_timed else real

        def counted(output, input, *args, **kwargs):
            if self.traffic is not None:
                self.traffic.sent(output if kind == "all_gather" else input, kind)
            return call(output, input, *args, **kwargs)
        return counted


_FSDP_COUNTER = _CountingFSDPCollectives()
# Sharding unit: a submodule becomes its own FSDP unit once it holds this many parameters
# not already in a unit below it (as FSDP1's size-based policy): per layer for the deep &
# wide MLP, per block for ResNets.
MIN_UNIT_PARAMS = 1_000_000


def shard_model(model: nn.Module, traffic: GradientTraffic,
                min_unit_params: int = MIN_UNIT_PARAMS, *, host_timed: bool = False
                ) -> nn.Module:
    """FSDP2 (fully_shard) over the model: units bottom-up by size, then the root. Each
    rank keeps 1/world of the parameters, gradients and optimizer state; a unit's
    parameters are all-gathered for its forward and backward, its gradients
    reduce-scattered. Build the optimizer after this: the parameters are new (DTensors).

    ``host_timed`` (CPU, where a collective's host time is its time): the step breakdown
    counts the time spent in each all-gather, reduce-scatter and the wait for an all-gather
    issued ahead as those collectives' own, not as the forward or backward they ran in."""
    from torch.distributed.fsdp import _fully_shard, fully_shard
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group

    _FSDP_COUNTER.traffic = traffic
    _fully_shard._fsdp_collectives.dist = _FSDP_COUNTER
    _FSDP_COUNTER.host_timed = host_timed
    if host_timed:
        copy_out = _fsdp_param_group.foreach_all_gather_copy_out
        if not getattr(copy_out, "host_timed", False):
            _fsdp_param_group.foreach_all_gather_copy_out = breakdown.host_timed(
                "all_gather", copy_out)

    def unsharded(module: nn.Module) -> int:
        """Parameters of ``module`` not yet in a unit, after sharding its children."""
        left = sum(p.numel() for p in module.parameters(recurse=False))
        for child in module.children():
            left += unsharded(child)
        if module is not model and left >= min_unit_params:
            fully_shard(module)
            return 0
        return left

    unsharded(model)
    fully_shard(model)
    return model
