"""Run records: one JSON object per run, appended atomically and echoed after a marker.

The fields are documented in results/README.md and checked by ``record.schema.json``.
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

SCHEMA_VERSION = 1
# A launcher captures the record from stdout: the line after this marker is the JSON.
MARKER = "==> bench-record <=="
SCHEMA_PATH = Path(__file__).with_name("record.schema.json")
ALLREDUCE_SCHEMA_PATH = Path(__file__).with_name("allreduce.schema.json")
TRAINING_MODES = ("steps", "epochs")
STATUSES = ("ok", "oom", "error", "timeout")


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:8]


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def append(path: Path, record: dict) -> None:
    """Append ``record`` as one line, so concurrent writers never interleave.

    An exclusive lock serialises writers; the line goes out in one write(). If an earlier
    writer was killed mid-line, the file does not end in a newline: ours starts with one,
    so the torn fragment stays on its own (skipped) line and this record stays whole.
    """
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        written = 0
        while written < len(line):  # write() may be partial on signals or full disks
            written += os.write(fd, line[written:])
        os.fsync(fd)
    finally:
        os.close(fd)  # also releases the lock


def emit(record: dict, stream=None) -> None:
    """Print the record after the marker line, for a launcher to capture."""
    stream = stream or sys.stdout
    stream.write(f"{MARKER}\n{json.dumps(record, sort_keys=True)}\n")
    stream.flush()


def parse_stdout(text: str) -> list[dict]:
    """Every record printed after a marker in a captured stdout."""
    lines = text.splitlines()
    return [json.loads(lines[i + 1]) for i, line in enumerate(lines[:-1]) if line == MARKER]


def read(path: Path) -> Iterator[dict]:
    """The records in a results file, skipping (and reporting) torn lines."""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                print(f"warning: {path}:{number}: skipping a torn or invalid line",
                      file=sys.stderr)


def is_training(record: dict) -> bool:
    """Training records (steps or epochs), as opposed to all-reduce sweeps."""
    return record.get("mode") in TRAINING_MODES


def training(records) -> list[dict]:
    return [r for r in records if is_training(r)]


def schema(mode: str = "steps") -> dict:
    """The JSON schema of a record of ``mode``. The all-reduce schema shares the training
    record's env block, so the provenance fields are defined once."""
    training_schema = json.loads(SCHEMA_PATH.read_text())
    if mode in TRAINING_MODES:
        return training_schema
    sweep = json.loads(ALLREDUCE_SCHEMA_PATH.read_text())
    sweep["properties"]["env"] = training_schema["properties"]["env"]
    return sweep
