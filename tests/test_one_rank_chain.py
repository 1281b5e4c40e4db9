"""A one-rank probe of PowerSGD on gloo completes the hook's first all-reduce on a thread of
its own, as gloo does over N ranks, so the chain PowerSGD attaches to it (two matmuls, the
orthogonalisation, two more all-reduces) runs beside backward, where N ranks run it, and
not inline on backward's thread (issue 29)."""
from __future__ import annotations

import threading

import pytest
import torch
import torch.distributed as dist

from bench.rank import traffic
from tests.conftest import launch, validate


@pytest.fixture
def deferring():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    counter = traffic._CountingCollectives()
    counter.defer = True
    yield counter
    dist.destroy_process_group()


def test_the_first_all_reduce_completes_after_the_hook_returns_on_its_own_thread(deferring):
    ran_on, nested = [], []

    def chain(future):
        ran_on.append(threading.current_thread().name)
        # The chain's next all-reduce, issued from the completing thread, completes there.
        inner = deferring.all_reduce(torch.ones(2), async_op=True).get_future()
        nested.append(inner.wait()[0])
        return future.value()[0] * 2

    future = deferring.all_reduce(torch.ones(3), async_op=True).get_future().then(chain)
    assert not future.done(), "held until the hook has returned"
    deferring.release()
    assert torch.equal(future.wait(), torch.full((3,), 2.0))
    assert ran_on == ["one-rank-completer"] and torch.equal(nested[0], torch.ones(2))


def test_without_defer_or_a_blocking_call_the_work_is_torchs_own(deferring):
    assert not isinstance(deferring.all_reduce(torch.ones(1)), traffic._DeferredWork)
    deferring.defer = False
    work = deferring.all_reduce(torch.ones(1), async_op=True)
    assert not isinstance(work, traffic._DeferredWork) and work.wait()


def test_a_failed_all_reduce_fails_the_hooks_future(deferring):
    class Broken:
        def wait(self):
            raise RuntimeError("peer gone")

    held = traffic._DeferredWork(Broken(), torch.ones(1))
    held.released.set()
    held.complete()
    with pytest.raises(RuntimeError, match="peer gone"):
        held.get_future().wait()


def test_a_one_process_powersgd_run_sees_the_chain_after_the_hand_over(tmp_path):
    """Over one rank the timeline now shows the chain after the first bucket's hand-over
    (done after issued), as over two, instead of done at the hand-over."""
    mlp = ["--model", "mlp", "--mlp-width", "256", "--mlp-depth", "4", "--image-size", "28",
           "--num-classes", "10", "--batch-size", "8", "--steps", "4", "--warmup-steps", "3",
           "--comm-probe-steps", "4", "--device", "cpu", "--bucket-cap-mb", "0.1",
           "--log-every", "0", "--comm-hook", "powersgd", "--powersgd-warmup", "2"]
    run = launch(mlp, tmp_path / "r.jsonl", torchrun=False)
    assert run.returncode == 0, run.stderr
    (rec,) = run.records
    validate(rec)
    timeline = rec["bucket_timeline"]
    assert timeline["serialized"] is True and len(timeline["issued_s"]) > 1
    assert all(done > issued for issued, done
               in zip(timeline["issued_s"], timeline["done_s"], strict=True))
    # And how its steps spread, bucket by bucket: the race's inputs (bench.analysis.race).
    buckets = len(timeline["ready_s"])
    assert timeline["steps"] >= 2
    for spread in ("stretch_deciles_s", "chain_deciles_s"):
        assert len(timeline[spread]) == buckets
        for cuts in timeline[spread]:
            assert len(cuts) == 9 and cuts == sorted(cuts) and cuts[0] >= 0
    # The chain after the hand-over took time in every step: its deciles are all above 0.
    assert all(cuts[0] > 0 for cuts in timeline["chain_deciles_s"])
    # Gloo's worker threads, which the prediction lets sync as many buckets at once:
    # torch's default, as the job set none.
    assert timeline["collective_threads"] == 2
