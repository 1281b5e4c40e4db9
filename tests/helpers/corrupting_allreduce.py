"""The all-reduce benchmark with a faulty collective: rank 1 gets one element wrong.

Run under torchrun by tests/test_allreduce.py. The sweep, the check and the record are the
real ones; only the collective under test is swapped for one that corrupts its result.
"""
import sys

import torch.distributed as dist

from bench.rank import allreduce, job

CORRUPT_RANK, CORRUPT_INDEX = 1, 5


def corrupting_all_reduce(tensor):
    work = dist.all_reduce(tensor)
    if dist.get_rank() == CORRUPT_RANK and tensor.numel() > CORRUPT_INDEX:
        tensor[CORRUPT_INDEX] += 1
    return work


if __name__ == "__main__":
    cfg = allreduce.AllreduceConfig.from_args(sys.argv[1:])
    job.exit_process(allreduce.run(cfg, collective=corrupting_all_reduce))
