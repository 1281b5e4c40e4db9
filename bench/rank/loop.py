"""The train loop: timed steps (throughput) or timed epochs (time to train).

It receives a ready model and data; it does not know how the processes were launched.
Steps are timed with ``bench.rank.clock.StepClock``: on CUDA, events resolved once per window
(the end of the timed steps, a progress line, an epoch), so no step waits for the GPU.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import sys
import time
from collections.abc import Callable, Iterator

import torch
from torch import nn

from bench.config import ScheduleConfig
from bench.rank.breakdown import StepParts
from bench.rank.clock import Mark, StepClock
from bench.rank.data import Batch, DataBundle
from bench.rank.distributed import DistContext, sum_across_ranks


@dataclasses.dataclass(slots=True)
class Precision:
    """Autocast and loss scaling for the configured precision."""

    device_type: str
    dtype: torch.dtype | None          # None: no autocast
    scaler: torch.amp.GradScaler

    @classmethod
    def setup(cls, precision: str, device: torch.device) -> Precision:
        """``precision``: what the job trains in (``auto`` already resolved, by
        ``bench.rank.precision``)."""
        tf32 = precision == "tf32"
        # fp32 means true fp32: tf32 tensor-core math is opted into, never implied.
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        # Every step has the same shapes: let cuDNN time its algorithms once and keep the
        # fastest (the warm-up steps absorb the search). Recorded as cudnn_benchmark.
        torch.backends.cudnn.benchmark = device.type == "cuda"
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        return cls(device.type, dtype, scaler)

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)


class Trainer:
    """One optimizer step over ``grad_accum`` micro-batches."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer,
                 precision: Precision, to_device: Callable[[Batch], Batch], grad_accum: int):
        self.model, self.optimizer, self.precision = model, optimizer, precision
        self.to_device, self.grad_accum = to_device, grad_accum
        self.criterion = nn.CrossEntropyLoss()
        # A bare model (one process) has no gradient sync to skip. DDP skips it with
        # no_sync; FSDP defers its reduce-scatter, though it still all-gathers parameters,
        # so only DDP's skipped step is one without communication (the probe below).
        self.can_skip_sync = hasattr(model, "no_sync")
        self.can_defer_sync = self.can_skip_sync or hasattr(model, "set_requires_gradient_sync")

    def _synced(self, sync: bool):
        """Gradients synchronise in this micro-batch's backward, or not."""
        if sync or not self.can_defer_sync:
            if hasattr(self.model, "set_requires_gradient_sync"):
                self.model.set_requires_gradient_sync(True)
            return contextlib.nullcontext()
        if self.can_skip_sync:
            return self.model.no_sync()
        self.model.set_requires_gradient_sync(False)
        return contextlib.nullcontext()

    def step(self, batches: Iterator[Batch], *, sync: bool = True,
             parts: StepParts | None = None) -> tuple[torch.Tensor, float]:
        """Returns the step's loss (a device tensor: no sync here) and seconds spent
        blocked on the data loader and host-to-device copy. ``sync=False`` skips the
        gradient all-reduce on every micro-batch (the communication probe). ``parts``, when
        timing, is told where each part of the step ends."""
        parts = parts if parts is not None and parts.active else None
        waited, loss_sum = 0.0, None
        for micro in range(self.grad_accum):
            start = time.perf_counter()
            batch = next(batches)
            if parts:
                parts.done("data", then="h2d")
            images, labels = self.to_device(batch)
            waited += time.perf_counter() - start
            if parts:
                parts.done("h2d", then="forward")
            last = micro == self.grad_accum - 1 and sync
            # Gradients synchronise only on the last micro-batch of the step.
            with self._synced(last):
                with self.precision.autocast():
                    loss = self.criterion(self.model(images), labels) / self.grad_accum
                scaled = self.precision.scaler.scale(loss)
                if parts:
                    parts.done("forward", then="backward")
                    parts.mark_backward_end(scaled)
                scaled.backward()
                if parts:
                    # After backward's own end: the wait for the gradient sync, if any.
                    parts.done("sync", then="optimizer" if micro == self.grad_accum - 1
                               else "data")
            loss_sum = loss.detach() if loss_sum is None else loss_sum + loss.detach()
        self.precision.scaler.step(self.optimizer)
        self.precision.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if parts:
            parts.done("optimizer", then="other")   # the step's end: see _timed_steps
        return loss_sum, waited


@dataclasses.dataclass(slots=True)
class LoopResult:
    """Raw per-rank timings; ``bench.rank.summary`` turns them into the record's figures."""

    step_times: list[float] = dataclasses.field(default_factory=list)
    data_waits: list[float] = dataclasses.field(default_factory=list)
    losses: list[float] = dataclasses.field(default_factory=list)  # every step, warm-up too
    timed_seconds: float = 0.0       # steps mode: the timed steps; epochs: all epochs + evals
    train_seconds: float = 0.0       # time inside training steps only
    epochs: list[dict] = dataclasses.field(default_factory=list)
    # Epochs mode: the steps and step time of the first epoch, whose first steps run
    # un-warmed (allocator, cuDNN autotuning, the loader's start): the steady state is the
    # rest (``samples_per_s_steady``).
    first_epoch_steps: int = 0
    first_epoch_seconds: float = 0.0
    time_to_target: float | None = None
    eval_loss: float | None = None
    eval_accuracy: float | None = None
    # Wall-clock (Unix) times of the first step's end, warm-up included, and the last step's
    # end: a launcher subtracts its own start and finish from them (launch overhead).
    first_step_done: float | None = None
    last_step_done: float | None = None
    # Steps timed without gradient sync after training (the communication probe).
    nosync_step_times: list[float] = dataclasses.field(default_factory=list)


class StepObserver:
    """Told each timed step's start and end (``StepClock`` marks); ``GradientTraffic`` is one."""

    def begin_step(self, mark: Mark) -> None: ...

    def end_step(self, mark: Mark) -> None: ...


class Progress:
    """Rank 0 prints a line every ``every`` steps, on stderr (stdout carries the record)."""

    def __init__(self, ctx: DistContext, every: int, total: int, samples_per_step: int):
        self.enabled = ctx.is_leader and every > 0
        self.every, self.total, self.samples_per_step = every, total, samples_per_step
        self.started = time.perf_counter()

    def update(self, done: int, loss: torch.Tensor, label: str = "step") -> None:
        if not self.enabled or (done % self.every and done != self.total):
            return
        rate = done * self.samples_per_step / max(time.perf_counter() - self.started, 1e-9)
        print(f"[bench] {label} {done}/{self.total} loss {loss.item():.4f} "
              f"{rate:.1f} samples/s", file=sys.stderr, flush=True)


def _timed_steps(trainer: Trainer, batches: Iterator[Batch], count: int, clock: StepClock,
                 result: LoopResult, progress: Progress, label: str,
                 observer: StepObserver | None = None, parts: StepParts | None = None) -> None:
    losses: list[torch.Tensor] = []
    observer = observer or StepObserver()
    marks = [clock.mark()]
    for done in range(1, count + 1):
        observer.begin_step(marks[-1])
        if parts:
            parts.begin(marks[-1])
        loss, waited = trainer.step(batches, parts=parts)
        # Where parts are timed, the step ends where its last part (the optimizer, zero_grad
        # included) ended: a mark of its own even microseconds later left a gap no part
        # explains, and a preemption landing in it read as 12% of a step (3 ranks, 2 CPUs).
        marks.append(parts.last_mark() if parts and parts.active else clock.mark())
        if parts:
            parts.end()
        observer.end_step(marks[-1])
        result.data_waits.append(waited)
        losses.append(loss)
        if result.first_step_done is None:
            clock.wait(marks[-1])  # once per run: when the first step has really finished
            result.first_step_done = time.time()
        progress.update(done, loss, label)
    # Resolved after the loop: reading a mark (or .item()) inside it would sync every step.
    times = [clock.seconds(a, b) for a, b in itertools.pairwise(marks)]
    if count:
        result.last_step_done = time.time()  # the last mark was waited for just above
    result.step_times.extend(times)
    result.losses.extend(float(x) for x in losses)
    result.train_seconds += sum(times)


def run_steps(trainer: Trainer, data: DataBundle, ctx: DistContext, cfg: ScheduleConfig,
              clock: StepClock, samples_per_step: int, on_timing_start: Callable[[], None],
              observer: StepObserver | None = None, parts: StepParts | None = None
              ) -> LoopResult:
    """Warm-up, then ``cfg.steps`` timed steps."""
    result = LoopResult()
    batches = data.endless()
    warmup = LoopResult()
    _timed_steps(trainer, batches, cfg.warmup_steps, clock, warmup,
                 Progress(ctx, 0, 0, 0), "warm-up")
    result.losses.extend(warmup.losses)
    result.first_step_done = warmup.first_step_done
    on_timing_start()
    progress = Progress(ctx, cfg.log_every, cfg.steps, samples_per_step)
    _timed_steps(trainer, batches, cfg.steps, clock, result, progress, "step", observer, parts)
    result.timed_seconds = result.train_seconds
    return result


def comm_probe(trainer: Trainer, data: DataBundle, ctx: DistContext, count: int,
               clock: StepClock) -> list[float]:
    """Step times with the gradient all-reduce skipped (DDP's no_sync) on every rank.

    Against the synced steps of the same job this gives the communication a step exposes
    (what DDP could not overlap with backward). Run after training and evaluation: the
    replicas drift apart without sync, which no longer matters then.
    """
    if not count or not trainer.can_skip_sync:
        return []
    if ctx.is_leader:
        print(f"[bench] communication probe: {count} steps without gradient sync",
              file=sys.stderr, flush=True)
    batches = data.endless()
    trainer.step(batches, sync=False)  # one untimed: the loader restarts here
    marks = [clock.mark()]
    for _ in range(count):
        trainer.step(batches, sync=False)
        marks.append(clock.mark())
    return [clock.seconds(a, b) for a, b in itertools.pairwise(marks)]


def observe_steps(trainer: Trainer, batches: Iterator[Batch], count: int, clock: StepClock,
                  observer: StepObserver) -> None:
    """``count`` steps told to ``observer``, timed like training steps, printing nothing."""
    _timed_steps(trainer, batches, count, clock, LoopResult(), _Silent(), "probe", observer)


class _Silent(Progress):
    def __init__(self) -> None:
        self.enabled = False


@torch.no_grad()
def evaluate(model: nn.Module, data: DataBundle, ctx: DistContext, precision: Precision
             ) -> tuple[float | None, float | None]:
    """(loss, accuracy) over the whole test split, summed across ranks. The sums stay on
    the device until the end: one sync for the whole split, not one per batch."""
    if data.eval is None:
        return None, None
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=ctx.device)  # loss, correct, count
    for batch in data.eval:
        images, labels = data.to_device(batch)
        with precision.autocast():
            logits = model(images)
        totals[0] += nn.functional.cross_entropy(logits.float(), labels, reduction="sum")
        totals[1] += (logits.argmax(1) == labels).sum()
        totals[2] += labels.numel()
    model.train()
    loss_sum, correct, count = sum_across_ranks(ctx, totals.tolist())
    return loss_sum / max(count, 1), correct / max(count, 1)


def run_epochs(trainer: Trainer, eval_model: nn.Module, data: DataBundle, ctx: DistContext,
               cfg: ScheduleConfig, clock: StepClock, samples_per_step: int,
               observer: StepObserver | None = None, parts: StepParts | None = None
               ) -> LoopResult:
    """``cfg.epochs`` epochs, each followed by a full evaluation; the wall time counts all."""
    assert data.train is not None and cfg.epochs is not None
    result = LoopResult()
    steps_per_epoch = len(data.train) // trainer.grad_accum
    start = clock.now()
    for epoch in range(cfg.epochs):
        data.set_epoch(epoch)
        epoch_start = clock.now()
        progress = Progress(ctx, cfg.log_every, steps_per_epoch, samples_per_step)
        _timed_steps(trainer, iter(data.train), steps_per_epoch, clock, result, progress,
                     f"epoch {epoch + 1}/{cfg.epochs} step", observer, parts)
        train_end = clock.now()
        if epoch == 0:
            result.first_epoch_steps = len(result.step_times)
            result.first_epoch_seconds = result.train_seconds
        loss, accuracy = evaluate(eval_model, data, ctx, trainer.precision)
        end = clock.now()
        result.epochs.append({"epoch": epoch + 1, "train_s": train_end - epoch_start,
                              "eval_s": end - train_end, "elapsed_s": end - start,
                              "eval_loss": loss, "eval_accuracy": accuracy})
        result.eval_loss, result.eval_accuracy = loss, accuracy
        if ctx.is_leader:
            shown = "n/a" if accuracy is None else f"{accuracy:.4f}"
            print(f"[bench] epoch {epoch + 1}/{cfg.epochs} done in {end - epoch_start:.2f} s, "
                  f"eval accuracy {shown}", file=sys.stderr, flush=True)
        if (cfg.target_accuracy is not None and result.time_to_target is None
                and accuracy is not None and accuracy >= cfg.target_accuracy):
            result.time_to_target = end - start
    result.timed_seconds = clock.now() - start
    return result
