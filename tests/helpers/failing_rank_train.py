"""The trainer with one rank that runs out of memory in the middle of a backward pass.

Run under torchrun by tests/test_oom_e2e.py. Everything is the real trainer; only the model
gets a gradient hook that, on rank 1's second backward pass, raises what a failed C++
allocation raises (std::bad_alloc), with a collective of its own still in flight that rank 0
never joins, as when gloo's allocation fails inside one bucket's all-reduce and the next
bucket's is already queued. Rank 0 meanwhile waits for the bucket rank 1 never sends. A
failed rank used to tear its process group down here, which waits for the collective in
flight until the 300 s timeout; rank 0 then recorded a time-out instead of rank 1's OOM.
"""
import os

import torch
import torch.distributed as dist

from bench.rank import job, train

FAILING_RANK, FAILING_BACKWARD = 1, 2
_build_model = train.build_model


def build_model_failing_on_one_rank(*args, **kwargs):
    model = _build_model(*args, **kwargs)
    side_group = dist.new_group(backend="gloo")   # every rank creates it; only rank 1 uses it
    if int(os.environ.get("RANK", "0")) == FAILING_RANK:
        backward_passes = []

        def fail(grad):   # the first layer's gradient is the last one backward computes
            backward_passes.append(1)
            if len(backward_passes) == FAILING_BACKWARD:
                dist.all_reduce(torch.zeros(1), group=side_group, async_op=True)
                raise RuntimeError("std::bad_alloc")
            return grad

        next(model.parameters()).register_hook(fail)
    return model


train.build_model = build_model_failing_on_one_rank

if __name__ == "__main__":
    job.exit_process(train.main())
