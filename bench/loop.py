"""The train loop: timed steps (throughput) or timed epochs (time to train).

It receives a ready model and data; it does not know how the processes were launched.
On CUDA every clock read is preceded by ``torch.cuda.synchronize()``: kernels run
asynchronously, so a clock read without it would time the launch, not the work.
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable, Iterator

import torch
from torch import nn

from bench.config import PrecisionConfig, ScheduleConfig
from bench.data import Batch, DataBundle
from bench.distributed import DistContext, sum_across_ranks


@dataclasses.dataclass(slots=True)
class Precision:
    """Autocast and loss scaling for the configured precision."""

    device_type: str
    dtype: torch.dtype | None          # None: no autocast
    scaler: torch.amp.GradScaler

    @classmethod
    def setup(cls, cfg: PrecisionConfig, device: torch.device) -> Precision:
        tf32 = cfg.precision == "tf32"
        # fp32 means true fp32: tf32 tensor-core math is opted into, never implied.
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        # Every step has the same shapes: let cuDNN time its algorithms once and keep the
        # fastest (the warm-up steps absorb the search). Recorded as cudnn_benchmark.
        torch.backends.cudnn.benchmark = device.type == "cuda"
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision)
        scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")
        return cls(device.type, dtype, scaler)

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)


def make_clock(device: torch.device) -> Callable[[], float]:
    if device.type == "cuda":
        def clock() -> float:
            torch.cuda.synchronize()  # note: a CPU-GPU sync point, on purpose
            return time.perf_counter()
        return clock
    return time.perf_counter


class Trainer:
    """One optimizer step over ``grad_accum`` micro-batches."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer,
                 precision: Precision, device: torch.device, grad_accum: int,
                 channels_last: bool):
        self.model, self.optimizer, self.precision = model, optimizer, precision
        self.device, self.grad_accum = device, grad_accum
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.criterion = nn.CrossEntropyLoss()
        # A bare model (one process) has no gradient sync to skip.
        self.can_skip_sync = hasattr(model, "no_sync")

    def step(self, batches: Iterator[Batch], *, sync: bool = True) -> tuple[torch.Tensor, float]:
        """Returns the step's loss (a device tensor: no sync here) and seconds spent
        blocked on the data loader and host-to-device copy. ``sync=False`` skips the
        gradient all-reduce on every micro-batch (the communication probe)."""
        waited, loss_sum = 0.0, None
        for micro in range(self.grad_accum):
            start = time.perf_counter()
            images, labels = next(batches)
            images = images.to(self.device, non_blocking=True, memory_format=self.memory_format)
            labels = labels.to(self.device, non_blocking=True)
            waited += time.perf_counter() - start
            last = micro == self.grad_accum - 1 and sync
            # Gradients all-reduce only on the last micro-batch of the step.
            skip = self.model.no_sync() if self.can_skip_sync and not last \
                else contextlib.nullcontext()
            with skip:
                with self.precision.autocast():
                    loss = self.criterion(self.model(images), labels) / self.grad_accum
                self.precision.scaler.scale(loss).backward()
            loss_sum = loss.detach() if loss_sum is None else loss_sum + loss.detach()
        self.precision.scaler.step(self.optimizer)
        self.precision.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_sum, waited


@dataclasses.dataclass(slots=True)
class LoopResult:
    """Raw per-rank timings; ``bench.summary`` turns them into the record's figures."""

    step_times: list[float] = dataclasses.field(default_factory=list)
    data_waits: list[float] = dataclasses.field(default_factory=list)
    losses: list[float] = dataclasses.field(default_factory=list)  # every step, warm-up too
    timed_seconds: float = 0.0       # steps mode: the timed steps; epochs: all epochs + evals
    train_seconds: float = 0.0       # time inside training steps only
    epochs: list[dict] = dataclasses.field(default_factory=list)
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
    """Told when each timed step starts and ends (clock times); ``GradientTraffic`` is one."""

    def begin_step(self, now: float) -> None: ...

    def end_step(self, now: float) -> None: ...


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


def _timed_steps(trainer: Trainer, batches: Iterator[Batch], count: int, clock,
                 result: LoopResult, progress: Progress, label: str,
                 observer: StepObserver | None = None) -> None:
    losses: list[torch.Tensor] = []
    observer = observer or StepObserver()
    previous = clock()
    for done in range(1, count + 1):
        observer.begin_step(previous)
        loss, waited = trainer.step(batches)
        now = clock()
        observer.end_step(now)
        result.step_times.append(now - previous)
        result.data_waits.append(waited)
        losses.append(loss)
        previous = now
        if result.first_step_done is None:
            result.first_step_done = time.time()
        progress.update(done, loss, label)
    if count:
        result.last_step_done = time.time()  # the last step already synced (clock() above)
    # Converted after the loop: .item() inside it would add a sync on every step.
    result.losses.extend(float(x) for x in losses)
    result.train_seconds += sum(result.step_times[-count:])


def run_steps(trainer: Trainer, data: DataBundle, ctx: DistContext, cfg: ScheduleConfig,
              clock, samples_per_step: int, on_timing_start: Callable[[], None],
              observer: StepObserver | None = None) -> LoopResult:
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
    _timed_steps(trainer, batches, cfg.steps, clock, result, progress, "step", observer)
    result.timed_seconds = result.train_seconds
    return result


def comm_probe(trainer: Trainer, data: DataBundle, ctx: DistContext, count: int,
               clock) -> list[float]:
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
    times = []
    previous = clock()
    for _ in range(count):
        trainer.step(batches, sync=False)
        now = clock()
        times.append(now - previous)
        previous = now
    return times


def observe_steps(trainer: Trainer, batches: Iterator[Batch], count: int, clock,
                  observer: StepObserver) -> None:
    """``count`` steps told to ``observer``, timed like training steps, printing nothing."""
    _timed_steps(trainer, batches, count, clock, LoopResult(), _Silent(), "probe", observer)


class _Silent(Progress):
    def __init__(self) -> None:
        self.enabled = False


@torch.no_grad()
def evaluate(model: nn.Module, data: DataBundle, ctx: DistContext, precision: Precision,
             trainer: Trainer) -> tuple[float | None, float | None]:
    """(loss, accuracy) over the whole test split, summed across ranks."""
    if data.eval is None:
        return None, None
    model.eval()
    loss_sum = correct = count = 0.0
    for images, labels in data.eval:
        images = images.to(ctx.device, non_blocking=True, memory_format=trainer.memory_format)
        labels = labels.to(ctx.device, non_blocking=True)
        with precision.autocast():
            logits = model(images)
        loss_sum += float(nn.functional.cross_entropy(logits.float(), labels, reduction="sum"))
        correct += float((logits.argmax(1) == labels).sum())
        count += labels.numel()
    model.train()
    loss_sum, correct, count = sum_across_ranks(ctx, [loss_sum, correct, count])
    return loss_sum / max(count, 1), correct / max(count, 1)


def run_epochs(trainer: Trainer, eval_model: nn.Module, data: DataBundle, ctx: DistContext,
               cfg: ScheduleConfig, clock, samples_per_step: int,
               observer: StepObserver | None = None) -> LoopResult:
    """``cfg.epochs`` epochs, each followed by a full evaluation; the wall time counts all."""
    assert data.train is not None and cfg.epochs is not None
    result = LoopResult()
    steps_per_epoch = len(data.train) // trainer.grad_accum
    start = clock()
    for epoch in range(cfg.epochs):
        data.set_epoch(epoch)
        epoch_start = clock()
        progress = Progress(ctx, cfg.log_every, steps_per_epoch, samples_per_step)
        _timed_steps(trainer, iter(data.train), steps_per_epoch, clock, result, progress,
                     f"epoch {epoch + 1}/{cfg.epochs} step", observer)
        train_end = clock()
        loss, accuracy = evaluate(eval_model, data, ctx, trainer.precision, trainer)
        end = clock()
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
    result.timed_seconds = clock() - start
    return result
