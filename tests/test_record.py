"""Records: atomic appends, torn-line recovery, the stdout marker, the summary arithmetic."""
from __future__ import annotations

import json
import multiprocessing

import pytest

from bench import record
from bench.devices import NO_PEAK, device_key, peak_tflops
from bench.summary import percentile

PER_WRITER = 300


def _writer(path: str, writer: int) -> None:
    from pathlib import Path

    # Large lines make an interleaving visible if appends were not atomic.
    for i in range(PER_WRITER):
        record.append(Path(path), {"writer": writer, "i": i, "pad": "x" * 20000})


def test_concurrent_appends_leave_every_line_parseable(tmp_path):
    path = tmp_path / "runs.jsonl"
    procs = [multiprocessing.Process(target=_writer, args=(str(path), w)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    lines = path.read_text().splitlines()
    assert len(lines) == 2 * PER_WRITER
    parsed = [json.loads(line) for line in lines]  # raises on any torn line
    for w in range(2):
        assert sorted(r["i"] for r in parsed if r["writer"] == w) == list(range(PER_WRITER))


def test_append_after_a_torn_line_keeps_the_new_record_whole(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    record.append(path, {"n": 1})
    with open(path, "a") as f:
        f.write('{"n": 2, "half wri')  # a writer killed mid-line
    record.append(path, {"n": 3})
    # Not schema-valid records: validate=False reads any object (test_readers.py has the
    # schema's side).
    assert [r["n"] for r in record.read(path, validate=False)] == [1, 3]
    assert f"{path}:2: skipped: not JSON, a torn or corrupt line" in capsys.readouterr().err


def test_marker_round_trip(capsys):
    record.emit({"a": 1})
    record.emit({"b": 2})
    out = "noise\n" + capsys.readouterr().out + "more noise\n"
    assert record.parse_stdout(out) == [{"a": 1}, {"b": 2}]


@pytest.mark.parametrize("values,q,expected", [
    ([1.0], 50, 1.0),
    ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
    ([4.0, 1.0, 3.0, 2.0], 90, 3.7),      # 1 + 0.9 * 3 = position 2.7 -> 3 + 0.7
    ([10.0, 20.0], 100, 20.0),
    ([], 50, None),
])
def test_percentile_matches_hand_values(values, q, expected):
    result = percentile(values, q)
    assert result == pytest.approx(expected) if expected is not None else result is None


def test_device_peaks_table():
    assert device_key("NVIDIA H100 80GB HBM3") == "H100"
    assert device_key("NVIDIA H100 PCIe") == "H100 PCIe"
    assert device_key("NVIDIA GeForce RTX 3060") == "RTX 3060"
    assert device_key("AMD EPYC 7B13") == NO_PEAK
    assert peak_tflops("NVIDIA H200", "bf16") == pytest.approx(989.4)
    assert peak_tflops("AMD EPYC", "fp32") is None
