"""How the rank side times steps: marks resolved once per window, never one sync per step,
and DDP's own all-reduce kept when no compression hook replaces it."""
from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist
from torch import nn

from bench.config import DistributedConfig
from bench.rank import distributed, loop
from bench.rank import traffic as traffic_module
from bench.rank.clock import StepClock


class CountingClock(StepClock):
    """A CPU clock that remembers when marks were resolved, relative to the steps run."""

    def __init__(self, trainer: FakeTrainer) -> None:
        super().__init__(torch.device("cpu"))
        self.trainer = trainer
        self.resolved_after: list[int] = []
        self.waited_after: list[int] = []

    def seconds(self, start, end) -> float:
        self.resolved_after.append(self.trainer.steps)
        return super().seconds(start, end)

    def wait(self, mark) -> None:
        self.waited_after.append(self.trainer.steps)


class FakeTrainer:
    grad_accum = 1

    def __init__(self) -> None:
        self.steps = 0

    def step(self, batches, *, sync: bool = True, parts=None):
        next(batches)
        self.steps += 1
        time.sleep(0.002)
        return torch.tensor(1.0), 0.0


def test_marks_are_resolved_after_the_steps_not_during_them():
    trainer = FakeTrainer()
    clock = CountingClock(trainer)
    result = loop.LoopResult()
    loop._timed_steps(trainer, iter(range(100)), 6, clock, result, loop._Silent(), "step")
    assert trainer.steps == 6 and len(result.step_times) == 6
    assert clock.resolved_after == [6] * 6, "every step's time is read once all have run"
    assert clock.waited_after == [1], "only the first step is waited for (its wall time)"
    assert all(t >= 0.002 for t in result.step_times)
    assert result.train_seconds == pytest.approx(sum(result.step_times))


def test_a_cpu_clock_says_what_stamped_it():
    clock = StepClock(torch.device("cpu"))
    start = clock.mark()
    time.sleep(0.01)
    assert clock.seconds(start, clock.mark()) >= 0.01
    assert clock.stamped_by == "host_clock"


def test_the_timeline_is_resolved_from_marks_when_read():
    class TickClock(StepClock):
        """Marks are ticks of a counter: a timeline from them is exact."""

        def __init__(self) -> None:
            super().__init__(torch.device("cpu"))
            self.stamped_by, self.tick = "cuda_events", 0

        def mark(self) -> float:
            self.tick += 1
            return float(self.tick)

    clock = TickClock()
    traffic = traffic_module.GradientTraffic(clock)
    for _ in range(3):
        traffic.begin_step(clock.mark())           # t
        traffic.bucket_ready(100)                  # t+1
        traffic.bucket_issued()                    # t+2
        traffic.bucket_ready(300)                  # t+3
        traffic.bucket_issued()                    # t+4
        traffic.bucket_done()                      # t+5
        traffic.bucket_done()                      # t+6
        traffic.sent(torch.zeros(100))             # 400 bytes
        traffic.end_step(clock.mark())             # t+7
    timeline = traffic.timeline()
    assert timeline["ready_s"] == [1.0, 3.0] and timeline["issued_s"] == [2.0, 4.0]
    assert timeline["done_s"] == [5.0, 6.0] and timeline["serialized"] is False
    assert timeline["step_s"] == 7.0 and timeline["steps"] == 3
    assert timeline["buffer_bytes"] == [100, 300] and timeline["sent_bytes"] == [100.0, 300.0]
    assert timeline["stamped_by"] == "cuda_events"
    assert timeline["mean_step_s"] == 7.0


class TickClock(StepClock):
    """A CPU clock whose marks are ticks of a counter: a timeline from them is exact."""

    def __init__(self) -> None:
        super().__init__(torch.device("cpu"))
        self.tick = 0.0

    def mark(self) -> float:
        self.tick += 1
        return float(self.tick)


def test_the_timeline_keeps_the_mean_step_beside_the_median():
    """A timed window measures the mean step, slow ones and all; the median is a typical one."""
    clock = TickClock()
    traffic = traffic_module.GradientTraffic(clock)
    for slow in (0, 0, 0, 8):
        traffic.begin_step(clock.mark())
        traffic.bucket_ready(100)
        traffic.bucket_issued()
        traffic.bucket_done()
        clock.tick += slow                         # a step the VM held up
        traffic.end_step(clock.mark())
    timeline = traffic.timeline()
    assert timeline["step_s"] == 4.0 and timeline["mean_step_s"] == 6.0


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield distributed.DistContext(rank=0, local_rank=0, world_size=1, local_world_size=1,
                                  node_rank=0, device=torch.device("cpu"), backend="gloo")
    dist.destroy_process_group()


@pytest.mark.parametrize("hook, observe, hooked", [
    ("none", False, False),     # a job's timed steps: DDP's built-in C++ all-reduce
    ("none", True, True),       # the traffic probe: the plain hook, observed
    ("fp16", False, True),      # a compression hook replaces the all-reduce anyway
])
def test_ddp_keeps_its_own_all_reduce_unless_a_hook_is_needed(one_rank_group, hook, observe,
                                                             hooked):
    cfg = DistributedConfig(backend="gloo", device="cpu", comm_hook=hook)
    traffic = traffic_module.GradientTraffic(StepClock(torch.device("cpu")))
    ddp = traffic_module.wrap_model(nn.Linear(8, 4), one_rank_group, cfg, traffic,
                                 observe=observe)
    assert ddp.gradient_as_bucket_view, "gradients are views into the buckets: no copy"
    assert bool(ddp._comm_hooks) == hooked
    ddp(torch.randn(2, 8)).sum().backward()
    assert (traffic.bytes > 0) == hooked


@pytest.mark.parametrize("cap_mb, buckets", [
    (None, 2),      # DDP's own default: the last layer's 2 MiB fill a 1 MiB first bucket
    (25.0, 1),      # an explicit cap holds for the first bucket too: all 3 MiB in one
])
def test_the_default_bucket_cap_is_ddps_own(one_rank_group, cap_mb, buckets):
    """Users run DDP with its default buckets, where the first (the last layers' gradients,
    ready first) is capped at 1 MiB so that sending starts early in backward. Passing
    DDP's 25 MiB explicitly would silently turn that off, and a small model would send
    its whole gradient in one bucket after backward."""
    cfg = DistributedConfig(backend="gloo", device="cpu", bucket_cap_mb=cap_mb)
    traffic = traffic_module.GradientTraffic(StepClock(torch.device("cpu")))
    model = nn.Sequential(nn.Linear(512, 512, bias=False), nn.Linear(512, 1024, bias=False))
    ddp = traffic_module.wrap_model(model, one_rank_group, cfg, traffic, observe=True)
    for _ in range(2):  # DDP rebuilds its buckets in the order gradients came after step 1
        traffic.reset()
        ddp(torch.randn(2, 512)).sum().backward()
    assert traffic.calls == buckets, "one all-reduce per bucket"
    assert traffic.bytes == (512 * 512 + 512 * 1024) * 4


@pytest.mark.parametrize("hook, world_size, observed", [
    ("none", 1, False), ("none", 2, False), ("powersgd", 1, False), ("powersgd", 2, True),
    ("bf16", 4, True)])
def test_which_timed_steps_are_observed(hook, world_size, observed):
    cfg = DistributedConfig(backend="gloo", device="cpu", comm_hook=hook)
    assert traffic_module.observes_timed_steps(cfg, world_size) is observed


@pytest.mark.parametrize("name, kind, counted", [
    ("all_gather_single", "all_gather", "output"),
    ("all_gather_into_tensor", "all_gather", "output"),
    ("reduce_scatter_single", "reduce_scatter", "input"),
    ("reduce_scatter_tensor", "reduce_scatter", "input"),
])
def test_fsdp_collectives_are_counted_under_every_torch_name(monkeypatch, name, kind, counted):
    """FSDP2 calls its collectives by the 2.14 names or by the earlier ones (torch 2.11 on
    the lent GPUs had no all_gather_single, and importing the trainer failed there): each
    is counted by what crosses the wire and reaches torch.distributed's own function."""
    calls, sent = [], []
    monkeypatch.setattr(traffic_module.dist, name,
                        lambda output, input, **kw: calls.append((output, input)) or "work",
                        raising=False)

    class Seen:
        def sent(self, tensor, what):
            sent.append((tensor, what))

    counter = traffic_module._CountingFSDPCollectives()
    counter.traffic = Seen()
    output, input_ = torch.zeros(4), torch.ones(2)
    assert getattr(counter, name)(output, input_, async_op=True) == "work"
    assert calls == [(output, input_)]
    assert sent == [(output if counted == "output" else input_, kind)]
    assert counter.barrier is traffic_module.dist.barrier  # anything else passes through


class _Epochs:
    """A data bundle of ``steps`` batches per epoch and no eval split."""

    eval = None

    def __init__(self, steps: int) -> None:
        self.train = list(range(steps))

    def set_epoch(self, epoch: int) -> None:
        pass


class ColdTrainer(FakeTrainer):
    """The first step of the run is slow, as an un-warmed GPU step is (allocator, cuDNN
    autotuning, the loader's start: 2.25 s on the H100's real-data run)."""

    precision = None   # evaluate() passes it on; there is no eval split to use it

    def step(self, batches, *, sync: bool = True, parts=None):
        if self.steps == 0:
            time.sleep(0.2)
        return super().step(batches, sync=sync, parts=parts)


@pytest.mark.parametrize("epochs", [1, 3])
def test_the_steady_state_leaves_the_first_epoch_out(epochs):
    from bench.config import ScheduleConfig
    from bench.rank import summary

    ctx = distributed.DistContext(rank=0, local_rank=0, world_size=1, local_world_size=1,
                                  node_rank=0, device=torch.device("cpu"), backend="gloo")
    trainer = ColdTrainer()
    result = loop.run_epochs(trainer, nn.Identity(), _Epochs(5), ctx,
                             ScheduleConfig(epochs=epochs, log_every=0),
                             StepClock(torch.device("cpu")), samples_per_step=8)
    assert result.first_epoch_steps == 5
    assert result.first_epoch_seconds == pytest.approx(sum(result.step_times[:5]))
    figures = summary.figures(result, ctx, samples_per_step=8, grad_bytes_per_step=None,
                              allreduce_calls_per_step=None, flops_per_sample=None,
                              device_names=["cpu"], precision="fp32")
    steady = figures["samples_per_s_steady"]
    if epochs == 1:
        assert steady is None
        return
    later = result.step_times[5:]
    assert steady == pytest.approx(len(later) * 8 / sum(later))
    # The cold step weighs on the whole run's figure only: the steady state is faster.
    assert steady > 2 * figures["samples_per_s"]


@pytest.mark.parametrize("device, hook, powersgd_warmup, expected", [
    ("cuda", "none", 5, 3),       # a GPU's first steps after wrapping run slow: three
    ("cuda", "powersgd", 5, 8),   # then PowerSGD's plain steps, so compression is counted
    ("cpu", "none", 5, 1),        # CPU: as the accuracy check ran
    ("cpu", "powersgd", 4, 5),
    ("mps", "fp16", 5, 1),        # any other device: one, as before
])
def test_the_probe_warms_its_new_wrapper_up_before_it_observes(device, hook, powersgd_warmup,
                                                               expected):
    from bench.rank.train import probe_warmup_steps

    assert probe_warmup_steps(device, hook, powersgd_warmup) == expected


def test_the_timeline_keeps_each_buckets_spread_over_the_steps():
    """The race at a serialized hand-over is read from how backward's stretch to a bucket
    and the previous bucket's chain vary from step to step, not from their medians."""
    class SetClock(StepClock):
        def __init__(self) -> None:
            super().__init__(torch.device("cpu"))
            self.now = 0.0

        def mark(self) -> float:
            return self.now

    clock = SetClock()
    traffic = traffic_module.GradientTraffic(clock)

    def at(seconds: float, then) -> None:
        clock.now = seconds
        then()

    for k in range(11):                      # steps 0..10; bucket 1's stretch 2+k ms
        start = 100.0 * k
        at(start, lambda: traffic.begin_step(clock.mark()))
        at(start + 0.010, lambda: traffic.bucket_ready(100))
        at(start + 0.011, traffic.bucket_issued)
        ready_1 = start + 0.011 + 0.002 + k * 0.001
        at(ready_1, lambda: traffic.bucket_ready(100))
        at(start + 0.011 + 0.0003 * k, traffic.bucket_done)  # bucket 0's chain: 0.3k ms
        at(ready_1 + 0.001, traffic.bucket_issued)
        at(ready_1 + 0.001 + 0.004, traffic.bucket_done)     # bucket 1's chain: 4 ms
        at(start + 0.050, lambda: traffic.end_step(clock.mark()))
    timeline = traffic.timeline()
    first, second = timeline["stretch_deciles_s"]
    assert first == pytest.approx([0.010] * 9)
    assert second == pytest.approx([0.002 + 0.001 * d for d in range(1, 10)])
    chain_0, chain_1 = timeline["chain_deciles_s"]
    assert chain_0 == pytest.approx([0.0003 * d for d in range(1, 10)])
    assert chain_1 == pytest.approx([0.004] * 9)


def test_a_timeline_of_one_step_has_no_spread_and_one_without_hand_overs_no_chains():
    clock = TickClock()
    traffic = traffic_module.GradientTraffic(clock)
    traffic.begin_step(clock.mark())
    traffic.bucket_ready(100)
    traffic.end_step(clock.mark())
    timeline = traffic.timeline()
    assert timeline["stretch_deciles_s"] == [None]
    assert timeline["chain_deciles_s"] is None
