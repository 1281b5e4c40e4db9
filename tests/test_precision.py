"""Issue 28: the precision a job trains in. ``--precision auto`` is bf16 autocast where every
GPU of the job has native bf16, else fp16 with its GradScaler, and fp32 on CPU; ``bf16``
asked where a GPU lacks it fails the job in one line with the fix. No GPU is needed: the
torch.cuda functions the ranks ask are replaced by a GPU of each kind."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from bench import record
from bench.analysis.table import FIELDS, render
from bench.config import TrainConfig
from bench.rank import job, precision, train
from bench.rank.distributed import DistContext
from bench.rank.loop import Precision
from conftest import REPO, validate

ON_GPU = DistContext(rank=0, local_rank=0, world_size=1, local_world_size=1, node_rank=0,
                     device=torch.device("cuda", 0), backend="nccl")
ON_CPU = dataclasses.replace(ON_GPU, device=torch.device("cpu"), backend="gloo")
# What torch.cuda reports for each: its name and compute capability.
GPUS = {"a100": ("NVIDIA A100-SXM4-80GB", (8, 0)), "h100": ("NVIDIA H100 80GB HBM3", (9, 0)),
        "v100": ("Tesla V100-SXM2-32GB", (7, 0)), "t4": ("Tesla T4", (7, 5))}


@pytest.fixture
def gpu(monkeypatch):
    """``gpu("v100")``: torch.cuda answers as on that GPU, is_bf16_supported as torch's
    does: True on any CUDA GPU unless emulation is left out (it emulates bf16 on a V100)."""
    def use(kind: str) -> list:
        """Returns the list of each is_bf16_supported call's including_emulation."""
        name, capability = GPUS[kind]
        asked: list[bool] = []
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)

        def is_bf16_supported(including_emulation: bool = True) -> bool:
            asked.append(including_emulation)
            return capability >= (8, 0) or including_emulation

        monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
        return asked
    return use


@pytest.mark.parametrize("kind,resolved", [("a100", "bf16"), ("h100", "bf16"),
                                           ("v100", "fp16"), ("t4", "fp16")])
def test_auto_is_bf16_where_the_gpu_has_it_natively_else_fp16(gpu, kind, resolved, capsys):
    asked = gpu(kind)
    assert precision.resolve_precision("auto", ON_GPU) == resolved
    assert asked == [False], "native bf16 only: torch's emulation would say yes on a V100"
    note = capsys.readouterr().err
    assert ("GradScaler" in note and GPUS[kind][0] in note) if resolved == "fp16" else not note


@pytest.mark.parametrize("kind", ["v100", "t4"])
def test_bf16_on_a_gpu_without_it_is_refused_in_one_line_with_the_fix(gpu, kind):
    gpu(kind)
    with pytest.raises(precision.PrecisionUnsupported) as refused:
        precision.resolve_precision("bf16", ON_GPU)
    message = str(refused.value)
    assert "\n" not in message
    name, (major, minor) = GPUS[kind]
    assert message.startswith("--precision=bf16: rank 0's GPU")
    assert name in message and f"compute capability {major}.{minor}" in message
    assert "use --precision fp16, or auto" in message and "PRECISION=fp16" in message
    assert isinstance(refused.value, job.ExpectedFailure), "recorded without a stack trace"


def test_bf16_on_a_gpu_with_it_and_every_other_precision_stay_as_asked(gpu):
    gpu("a100")
    assert precision.resolve_precision("bf16", ON_GPU) == "bf16"
    asked = gpu("v100")
    for name in ("fp32", "tf32", "fp16"):
        assert precision.resolve_precision(name, ON_GPU) == name
    assert asked == [], "no GPU is asked about what it cannot refuse"


def test_on_cpu_auto_is_fp32_as_cpu_runs_always_were(gpu):
    asked = gpu("v100")
    assert precision.resolve_precision("auto", ON_CPU) == "fp32"
    assert precision.resolve_precision("bf16", ON_CPU) == "bf16"   # CPU autocast, as before
    assert asked == []


def test_one_gpu_without_bf16_decides_for_the_whole_job(gpu, monkeypatch):
    """Every rank gets every rank's report, so all choose alike: a job trains in one
    precision, and the refusal names the first rank that lacks it."""
    gpu("a100")
    reports = [{"bf16": True, "gpu": "NVIDIA A100-SXM4-80GB", "capability": "8.0",
                "host": "node0"}] + \
        [{"bf16": False, "gpu": "Tesla T4", "capability": "7.5", "host": "node1"}] * 2
    monkeypatch.setattr(precision, "all_gather_objects", lambda ctx, mine: reports)
    job_ctx = dataclasses.replace(ON_GPU, world_size=3, local_world_size=1)
    assert precision.resolve_precision("auto", job_ctx) == "fp16"
    with pytest.raises(precision.PrecisionUnsupported,
                       match=r"rank 1's GPU \(Tesla T4 on node1, compute capability 7\.5\).*"
                             r"so do 1 more of the job's 3 ranks"):
        precision.resolve_precision("bf16", job_ctx)


def test_the_job_record_says_so_not_a_traceback(gpu, tmp_path, capsys):
    """The real job: a one-rank group, rank 0's record appended; only the device the
    trainer sees is a V100's."""
    gpu("v100")
    results = tmp_path / "runs.jsonl"
    cfg = TrainConfig.from_args(["--steps", "1", "--model", "smallcnn", "--precision", "bf16",
                                 "--device", "cpu", "--results", str(results)])
    code = job.run(train.PROG, record.train_skeleton(cfg), results, cfg.distributed,
                   lambda ctx, rec: train.measure(
                       cfg, dataclasses.replace(ctx, device=torch.device("cuda", 0)), rec),
                   record.training_headline)
    assert code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    (failed,) = [line for line in err.splitlines() if "FAILED" in line]
    assert "FAILED (error): PrecisionUnsupported: --precision=bf16" in failed
    (rec,) = record.read(results)
    validate(rec)
    assert rec["status"] == "error" and rec["precision"] is None
    assert "Tesla V100-SXM2-32GB" in rec["error"] and "use --precision fp16, or auto" in \
        rec["error"]
    assert rec["config"]["precision"]["precision"] == "bf16"


@pytest.mark.e2e
def test_auto_on_cpu_trains_fp32_and_the_record_keeps_what_was_asked(tmp_path):
    results = tmp_path / "runs.jsonl"
    argv = ["--steps", "2", "--warmup-steps", "0", "--model", "smallcnn", "--batch-size", "4",
            "--device", "cpu", "--comm-probe-steps", "0", "--no-telemetry"]
    assert train.main([*argv, "--precision", "auto", "--results", str(results)]) == 0
    (rec,) = record.read(results)
    validate(rec)
    assert rec["precision"] == "fp32" and rec["config"]["precision"]["precision"] == "auto"
    # config_hash is what was asked: auto and fp32 are two settings, one measurement here.
    asked = TrainConfig.from_args([*argv, "--precision", "auto"])
    assert rec["config_hash"] == asked.hash() != \
        TrainConfig.from_args([*argv, "--precision", "fp32"]).hash()
    assert FIELDS["precision"](rec) == "fp32", "tables show what ran"
    assert record.training_headline(rec).endswith(" samples/s (auto: fp32)")
    rec["config"]["precision"]["precision"] = "fp32"
    assert record.training_headline(rec).endswith(" samples/s"), "as asked: nothing to say"


@pytest.mark.parametrize("name,dtype,scaled", [("fp32", None, False), ("tf32", None, False),
                                               ("bf16", torch.bfloat16, False),
                                               ("fp16", torch.float16, True)])
def test_each_precision_sets_up_its_autocast_and_scaler(name, dtype, scaled):
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        setup = Precision.setup(name, torch.device("cpu"))
        assert setup.dtype == dtype and setup.scaler.is_enabled() == scaled
        assert torch.backends.cuda.matmul.allow_tf32 == (name == "tf32")
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def test_tables_group_by_the_precision_that_ran():
    records = [json.loads(line) for line in (REPO / "tests" / "fixtures" /
                                             "table-fixture.jsonl").read_text().splitlines()]
    records = [r for r in records if r["batch_size_per_device"] == 64]
    for rec in records:
        rec["config"]["precision"]["precision"] = "auto"
        rec["precision"] = "bf16"
    text = render(records)
    assert "precision bf16" in text and "precision auto" not in text
    older = dict(records[0], precision=None)
    assert FIELDS["precision"](older) == "auto", "as asked, where no rank chose"
