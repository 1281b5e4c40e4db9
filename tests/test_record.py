"""Records: atomic appends, torn-line recovery, the stdout marker, the summary arithmetic."""
from __future__ import annotations

import json
import multiprocessing

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import record
from bench.devices import DEVICES, NO_PEAK, device_key, job_peak, peak_tflops
from bench.rank.summary import percentile

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


# What torch.cuda.get_device_name() reports -> the table row and its dense bf16 peak.
DEVICE_NAMES = {
    "NVIDIA H100 80GB HBM3": ("H100 SXM", 989.4),
    "NVIDIA H100 PCIe": ("H100 PCIe", 756.0),
    "NVIDIA H100 NVL": ("H100 NVL", 835.0),
    "NVIDIA H200": ("H200", 989.4),
    "NVIDIA H200 NVL": ("H200 NVL", 835.0),
    "NVIDIA GH200 480GB": ("GH200", 989.4),
    "NVIDIA A100-SXM4-80GB": ("A100", 312.0),
    "NVIDIA A100-SXM4-40GB": ("A100", 312.0),
    "NVIDIA A100 80GB PCIe": ("A100", 312.0),
    "NVIDIA A100-PCIE-40GB": ("A100", 312.0),
    "NVIDIA L40S": ("L40S", 362.0),
    "NVIDIA GeForce RTX 4090": ("RTX 4090", 165.2),
    "NVIDIA GeForce RTX 4090 D": ("RTX 4090 D", 147.0),
    "NVIDIA GeForce RTX 4080": ("RTX 4080", 97.5),
    "NVIDIA GeForce RTX 4080 SUPER": ("RTX 4080 SUPER", 104.4),
    "NVIDIA GeForce RTX 3060": ("RTX 3060", 25.5),
    "NVIDIA GeForce RTX 3060 Ti": ("RTX 3060 Ti", 32.4),
    # Variants the table does not list get no peak, never the base card's.
    "NVIDIA GeForce RTX 4090 Laptop GPU": (NO_PEAK, None),
    "NVIDIA GeForce RTX 3060 Laptop GPU": (NO_PEAK, None),
    "NVIDIA H100 80GB HBM3 MIG 1g.10gb": (NO_PEAK, None),
    "NVIDIA GeForce RTX 5090": (NO_PEAK, None),
    "AMD EPYC 7B13": (NO_PEAK, None),
}


@pytest.mark.parametrize("name", DEVICE_NAMES)
def test_device_peaks_match_exact_names(name):
    key, bf16 = DEVICE_NAMES[name]
    assert device_key(name) == key
    assert peak_tflops(name, "bf16") == (pytest.approx(bf16) if bf16 else None)


def test_every_row_is_reachable_and_complete():
    for key, (peaks, names) in DEVICES.items():
        assert set(peaks) == {"fp32", "tf32", "bf16", "fp16"}
        assert all(device_key(name) == key for name in names)


def test_a_mixed_job_takes_the_slowest_devices_peak():
    assert job_peak(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"], "bf16") == \
        ("A100+H100 SXM", pytest.approx(312.0))
    assert job_peak(["NVIDIA H100 PCIe", "NVIDIA H100 PCIe"], "fp32") == \
        ("H100 PCIe", pytest.approx(51.2))
    assert job_peak(["NVIDIA H100 NVL", "NVIDIA GeForce RTX 4090 Laptop GPU"], "bf16") == \
        (NO_PEAK, None)


def test_append_never_writes_through_a_link_planted_at_the_path(tmp_path):
    """A link put in the results file's place after the up-front check (which refuses one)
    is not followed: its target is left as it was."""
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    (tmp_path / "runs.jsonl").symlink_to(target)
    with pytest.raises(OSError):
        record.append(tmp_path / "runs.jsonl", {"status": "ok"})
    assert target.read_text() == "mine\n"


@pytest.mark.parametrize("mode", record.MODES)
def test_every_reference_in_the_schemas_resolves(mode):
    """A $ref to a definition that does not exist (a merge can leave one) would make the
    field it guards accept, or reject, anything."""
    import re

    schema = record.schema(mode)
    refs = set(re.findall(r'"#/\$defs/([^"]+)"', json.dumps(schema)))
    assert refs and refs <= set(schema["$defs"]), refs - set(schema["$defs"])


# --- the record on stdout: whole through a collector that splices stderr in --------------

@given(st.dictionaries(st.text(max_size=30), st.text(max_size=5000), max_size=8),
       st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80),
                max_size=12), st.randoms(use_true_random=False))
def test_a_printed_record_survives_lines_spliced_between_its_parts(rec, noise, rng):
    """kubectl logs and docker run merge stdout with stderr line by line: any lines may
    come between the record's lines, and it is read back whole; each of its lines is
    short enough to be written whole (under PIPE_BUF)."""
    import io

    out = io.StringIO()
    record.emit(rec, out)
    lines = out.getvalue().splitlines()
    assert all(len(line.encode()) < 4096 for line in lines)
    merged = list(lines)
    for line in noise:
        merged.insert(rng.randrange(len(merged) + 1), line.replace("\n", " ").replace("\r", " "))
    assert record.parse_stdout("\n".join(merged)) == [json.loads(record.dumps(rec))]


def test_a_record_missing_a_part_is_not_read_and_the_old_form_still_is():
    import io

    out = io.StringIO()
    record.emit({"x": "y" * 7000}, out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert record.parse_stdout("\n".join(lines[:1] + lines[2:])) == []
    assert record.parse_stdout(f"noise\n{record.MARKER}\n{{\"a\": 1}}\n") == [{"a": 1}]
    assert all(record.is_record_line(line) for line in lines)
    assert not record.is_record_line("==> bench-record <==x")
