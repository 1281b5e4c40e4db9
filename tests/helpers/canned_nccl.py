"""``python tests/helpers/canned_nccl.py LOG ARGS...``: bench.rank.allreduce on gloo, with
NCCL's INFO log canned: the capture reads LOG as if NCCL had written it, so the job's
record and its BENCH_EXPECT_NET check run as on a GPU node (tests/test_nccl_capture.py)."""
import sys

from bench.rank import allreduce, job, nccl_capture

LOG = sys.argv.pop(1)


def canned_start(backend, environ=None):
    nccl_capture._current = nccl_capture.Capture(path=LOG)
    return nccl_capture._current


nccl_capture.start = canned_start
job.exit_process(allreduce.main())
