"""Run records: one JSON object per run, appended atomically and echoed after a marker.

The fields are documented in results/README.md and checked by ``record.schema.json``.

Writers never produce invalid JSON: a non-finite float (a diverged loss) is written as
``null``. Readers never trust a file: ``read`` yields only the lines that are UTF-8, strict
JSON (no ``NaN`` or ``Infinity``), an object, and valid against the schema of its ``mode``,
and warns ``FILE:LINE: skipped: why`` for every other line. The schemas are compiled once
each, by ``compile_schema`` (standard library only), so reading works the same on the host
and in the trainer image, which installs requirements.txt only (no jsonschema).
"""
from __future__ import annotations

import copy
import fcntl
import functools
import json
import math
import os
import re
import stat
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from bench.options import ConfigError
from bench.schemacheck import UnsupportedSchema, compile_schema

SCHEMA_VERSION = 1
# A launcher captures the record from stdout: the line after this marker is the JSON.
MARKER = "==> bench-record <=="
SCHEMA_PATH = Path(__file__).with_name("record.schema.json")
ALLREDUCE_SCHEMA_PATH = Path(__file__).with_name("allreduce.schema.json")
ACCEPT_SCHEMA_PATH = Path(__file__).with_name("accept.schema.json")
STEADINESS_SCHEMA_PATH = Path(__file__).with_name("steadiness.schema.json")
TRAINING_MODES = ("steps", "epochs")
# Each non-training mode's own schema file; they share the training record's env block.
OTHER_SCHEMAS = {"allreduce": ALLREDUCE_SCHEMA_PATH, "accept": ACCEPT_SCHEMA_PATH,
                 "steadiness": STEADINESS_SCHEMA_PATH}
MODES = (*TRAINING_MODES, *OTHER_SCHEMAS)
STATUSES = ("ok", "oom", "error", "timeout")
# Per file, the skipped lines warned about one by one; the rest are counted in one line.
MAX_WARNINGS = 20
_MAX_REASON = 200  # characters of a skipped line's reason: hostile values can be huge


class ResultsError(ConfigError):
    """A results file that cannot be read, or holds no valid record: names the file (as the
    setting it came from) and what to do."""

    def __init__(self, path: Path, problem: str, setting: str = "FILE"):
        self.path = path
        super().__init__(setting, path, problem)


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:8]


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- writing -------------------------------------------------------------------------------

def finite(value):
    """``value`` with every non-finite float (nan, inf) inside it replaced by None, tuples
    as lists: what JSON can hold. Other values are returned as they are."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def _jsonable(value):
    """json's fallback for what it cannot write: a numpy or torch scalar becomes its Python
    number (nan as null), anything else its text, so a record is never lost to a type."""
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return finite(item())
        except Exception:  # noqa: BLE001 - e.g. a tensor of more than one element
            pass
    if isinstance(value, set | frozenset):
        return finite(sorted(value, key=str))
    return str(value)


def dumps(record: dict) -> str:
    """One line of strict JSON: never ``NaN`` or ``Infinity`` (they are written as null)."""
    return json.dumps(finite(record), sort_keys=True, allow_nan=False, default=_jsonable)


def append(path: Path, record: dict) -> None:
    """Append ``record`` as one line, so concurrent writers never interleave.

    An exclusive lock serialises writers; the line goes out in one write(). If an earlier
    writer was killed mid-line, the file does not end in a newline: ours starts with one,
    so the torn fragment stays on its own (skipped) line and this record stays whole. A
    write that fails part-way (a full disk) is rolled back: the file is cut back to the
    size it had, so it never holds a torn line of ours, and the OSError is raised.
    """
    line = (dumps(record) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Never through a link planted at the path (the path was checked to be none).
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        try:
            _write_all(fd, line)
        except OSError:
            _truncate_quietly(fd, size)
            raise
    finally:
        os.close(fd)  # also releases the lock


def _write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data``, then fsync: write() may be partial on signals or full disks,
    and a full disk may only show at fsync."""
    written = 0
    while written < len(data):
        written += os.write(fd, data[written:])
    os.fsync(fd)


def _truncate_quietly(fd: int, size: int) -> None:
    """Cut the file back to ``size``: what a failed append wrote is taken back. Truncating
    frees blocks, so it works on a full disk; if it fails too, the torn line stays (readers
    skip it) and the append's own error is the one reported."""
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass


# JSON characters per printed line of a record: with its marker, a line stays under
# PIPE_BUF (4096 bytes, and the JSON is ASCII), so it reaches the pipe in one write, and
# under the 16 KiB at which Docker and container runtimes split a log line. A collector that
# merges stdout with stderr (kubectl logs, docker run) may then put another line between
# two lines of a record, never inside one: a record printed on one line of 20 KB came back
# with a stderr line spliced into its middle.
RECORD_CHUNK = 3000
_CHUNK_LINE = re.compile(re.escape(MARKER) + r" ([0-9a-f]{8}) ([0-9]{1,7})/([0-9]{1,7}) (.*)\Z")


def emit(record: dict, stream=None) -> None:
    """Print the record for a launcher to capture, in lines of ``MARKER TAG K/N PART``:
    the JSON cut into parts of RECORD_CHUNK characters, each line flushed on its own."""
    stream = stream or sys.stdout
    text = dumps(record)
    parts = [text[i:i + RECORD_CHUNK] for i in range(0, len(text), RECORD_CHUNK)]
    tag = uuid.uuid4().hex[:8]
    stream.flush()
    for number, part in enumerate(parts, 1):
        stream.write(f"{MARKER} {tag} {number}/{len(parts)} {part}\n")
        stream.flush()


def is_record_line(line: str) -> bool:
    """A line of a printed record, or the marker of the one-line form."""
    line = line.rstrip("\n")
    return line == MARKER or line.startswith(MARKER + " ")


def parse_stdout(text: str) -> list[dict]:
    """Every record printed in a captured output: its parts (``emit``) found by their tag
    whatever lines came between them, or, as earlier versions printed it, the line after
    a bare marker. A record whose parts are not all there, or that is not a JSON object
    (output cut off by a killed node), is left out."""
    lines = text.splitlines()
    found = []
    pending: dict[str, tuple[int, dict[int, str]]] = {}
    for i, line in enumerate(lines):
        if line == MARKER:
            if i + 1 < len(lines):
                found += _object(lines[i + 1])
            continue
        match = _CHUNK_LINE.match(line)
        if not match:
            continue
        tag, number, count = match.group(1), int(match.group(2)), int(match.group(3))
        total, parts = pending.setdefault(tag, (count, {}))
        if total != count or not 1 <= number <= count:
            continue
        parts[number] = match.group(4)
        if len(parts) == count:
            del pending[tag]
            found += _object("".join(parts[n] for n in range(1, count + 1)))
    return found


def _object(text: str) -> list[dict]:
    try:
        rec = document(text)
    except ValueError:
        return []
    return [rec] if isinstance(rec, dict) else []


# --- reading -------------------------------------------------------------------------------

class _Invalid(ValueError):
    """Why one line of a results file is not a record."""


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses as inf
        raise _Invalid(f"non-finite number {text[:40]} (JSON numbers are finite)")
    return value


def _constant(text: str):
    raise _Invalid(f"non-finite number {text} (JSON has no NaN or Infinity)")


def _object_of(pairs: list) -> dict:
    """A JSON object whose keys are each given once: with one given twice, which value a
    reader took would be json's choice (the last), not the writer's."""
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Invalid(f"key {_short(repr(key), 60)} given twice in one object")
            seen.add(key)
    return found


# parse_float costs a Python call per number: only lines that could hold a number too large
# for a float (an exponent of 3 digits, or 200 digits in a row) are parsed with it.
_STRICT_DECODER = json.JSONDecoder(parse_float=_float, parse_constant=_constant,
                                   object_pairs_hook=_object_of)
_DECODER = json.JSONDecoder(parse_constant=_constant, object_pairs_hook=_object_of)
_LENIENT_DECODER = json.JSONDecoder(object_pairs_hook=_object_of)
_MAYBE_HUGE = re.compile(r"[eE][+-]?[0-9]{3}|[0-9]{200}")
# A JSON string can spell a lone UTF-16 surrogate ("\udc80"), which no UTF-8 output holds:
# a reader printing it, or writing it into a report, would fail. Only lines with such an
# escape (a pair, e.g. an escaped emoji, decodes to one character) are searched for one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number",
          bool: "a boolean", type(None): "null"}


def _parse(raw: bytes, validate: bool) -> dict:
    """The record on one line, or _Invalid saying why it is none."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _Invalid(f"not valid UTF-8 (byte {error.start + 1})") from None
    try:
        rec = (_STRICT_DECODER if _MAYBE_HUGE.search(text) else _DECODER).decode(text)
    except json.JSONDecodeError as error:
        raise _Invalid(f"not JSON, a torn or corrupt line ({error.msg} at column "
                       f"{error.colno})") from None
    except RecursionError:
        raise _Invalid("JSON nested too deeply") from None
    except _Invalid:
        raise
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        raise _Invalid(f"not a usable JSON value ({_short(str(error), 80)})") from None
    if not isinstance(rec, dict):
        raise _Invalid(f"{_KINDS.get(type(rec), 'a value')}, not a record object")
    if _SURROGATE_ESCAPE.search(text):
        try:
            rec = _without_surrogates(rec)
        except RecursionError:
            raise _Invalid("JSON nested too deeply") from None
    if validate:
        problem = problem_of(rec)
        if problem:
            raise _Invalid(problem)
    return rec


def document(text: str, *, finite: bool = True):
    """One whole JSON document (an ``accept.json``, a reference table, a line another
    process appends), read as strictly as a results line: no key given twice, lone
    surrogates replaced (U+FFFD), and finite numbers only (``finite=False``: NaN and
    Infinity are read as floats, for a reader that skips each part holding one). ValueError
    saying why, whatever the text: nesting too deep for Python included."""
    try:
        value = (_STRICT_DECODER if finite else _LENIENT_DECODER).decode(text)
        return _without_surrogates(value) if _SURROGATE_ESCAPE.search(text) else value
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error.msg} at line {error.lineno} column "
                         f"{error.colno})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _without_surrogates(value):
    """``value`` with every lone surrogate in its strings (keys too) replaced by U+FFFD."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    return value


def problem_of(rec: dict) -> str | None:
    """Why ``rec`` is not a valid record of its mode, or None when it is one."""
    mode = rec.get("mode")
    if mode not in MODES:
        return (f"no mode field, so no record of {'/'.join(MODES)}" if "mode" not in rec
                else f"mode {_short(repr(mode), 60)} is none of {', '.join(MODES)}")
    try:
        problem = _validator(mode)(rec)
    except RecursionError:
        return "nested too deeply"
    return f"not a valid {mode} record: {problem}" if problem else None


def _short(text: str, limit: int = _MAX_REASON) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def read(path: Path, *, validate: bool = True) -> Iterator[dict]:
    """The records in a results file; every other line is skipped with a warning naming
    ``path:line`` and why (torn by a killed writer, not UTF-8, not JSON, not an object,
    not valid against the schema of its mode). ``validate=False`` skips only what is not
    a JSON object. A file that cannot be read raises ResultsError; one with no valid record
    yields nothing (its lines are warned about)."""
    yield from _read(Path(path), validate, "FILE", required=False)


def load(path: Path, setting: str = "FILE") -> list[dict]:
    """Every valid record of ``path`` (see ``read``), or ResultsError naming ``setting``
    when it is missing, unreadable, or holds no valid record. That error is then the one
    line printed: skipped lines are warned about only once a valid record is found."""
    return list(_read(Path(path), True, setting, required=True))


def _open(path: Path, setting: str):
    """``path`` opened for reading, or ResultsError saying why it cannot be. Checked before
    opening: a FIFO would block the open, a device would never end."""
    try:
        kind = path.stat().st_mode
        if stat.S_ISDIR(kind):
            raise ResultsError(path, "is a directory: give a results file in it, e.g. "
                               f"{path / 'runs.jsonl'}", setting)
        if not stat.S_ISREG(kind):
            raise ResultsError(path, "is not a regular file: give a results file (.jsonl)",
                               setting)
        return open(path, "rb")  # noqa: SIM115 - the caller closes it
    except (FileNotFoundError, NotADirectoryError):
        raise ResultsError(path, "no such file: give the path of a results file (.jsonl)",
                           setting) from None
    except OSError as error:
        raise ResultsError(path, f"cannot be read ({error.strerror or error}): fix its "
                           "permissions or give another file", setting) from None


def _read(path: Path, validate: bool, setting: str, required: bool) -> Iterator[dict]:
    held: list[str] = []   # warnings kept back until a valid record shows the file is one
    found = skipped = 0
    first_skipped = ""     # "line N: why", for the error of a file with no valid record
    with _open(path, setting) as f:
        lines = enumerate(f, 1)
        while True:
            try:
                number, raw = next(lines, (0, None))
            except OSError as error:  # e.g. EIO, or a file that is a directory over NFS
                raise ResultsError(path, f"cannot be read ({error.strerror or error}): "
                                   "give another file", setting) from None
            if raw is None:
                break
            if not raw.strip():
                continue
            try:
                rec = _parse(raw, validate)
            except _Invalid as why:
                skipped += 1
                reason = _short(str(why))
                first_skipped = first_skipped or f"line {number}: {reason}"
                if skipped <= MAX_WARNINGS:
                    problem = f"warning: {path}:{number}: skipped: {reason}"
                    if found:
                        print(problem, file=sys.stderr)
                    else:
                        held.append(problem)
                continue
            if not found:
                for problem in held:
                    print(problem, file=sys.stderr)
                held.clear()
            found += 1
            yield rec
    if not found and required:
        detail = (f"holds no valid record ({skipped} line{'s' * (skipped != 1)} skipped, "
                  f"first {first_skipped})" if skipped else "is empty")
        raise ResultsError(path, f"{detail}: give a results file written by bench "
                           "train, matrix or allreduce", setting)
    for problem in held:
        print(problem, file=sys.stderr)
    if skipped > MAX_WARNINGS:
        print(f"warning: {path}: {skipped - MAX_WARNINGS} more invalid lines skipped "
              f"({skipped} in all)", file=sys.stderr)


def is_training(record: dict) -> bool:
    """Training records (steps or epochs), as opposed to all-reduce sweeps."""
    return record.get("mode") in TRAINING_MODES


def training(records) -> list[dict]:
    return [r for r in records if is_training(r)]


def training_headline(rec: dict) -> str:
    """A training job's one line (the trainer's last, the matrix's): its samples/s, for
    2+ epochs the steady state after the first epoch, and what ``--precision auto`` chose."""
    rate, steady = rec.get("samples_per_s"), rec.get("samples_per_s_steady")
    text = "no samples/s measured" if rate is None else f"{rate:.1f} samples/s"
    asked = ((rec.get("config") or {}).get("precision") or {}).get("precision")
    chose = f" (auto: {rec['precision']})" if asked == "auto" and rec.get("precision") else ""
    return text + (f" ({steady:.1f} after the first epoch)" if steady is not None else "") \
        + chose + _decode_hint(rec)


# The share of the step a GPU may wait on its loader before the line suggests decoding
# on the device: past it, the CPUs, not the GPU, set the rate.
LOADER_BOUND_SHARE = 0.2


def _decode_hint(rec: dict) -> str:
    """Where PIL in the loader's workers kept GPUs waiting on an image folder, the offer of
    decoding on the device instead (``--decode device``, nvJPEG)."""
    data = (rec.get("config") or {}).get("data") or {}
    share = rec.get("data_wait_share")
    env = rec.get("env")
    env = env if isinstance(env, dict) else {}
    on_gpus = env.get("driver") is not None or env.get("cudnn") is not None  # set with a GPU
    if data.get("data") != "imagefolder" or data.get("decode", "loader") != "loader" or \
            not on_gpus or not isinstance(share, (int, float)) or share < LOADER_BOUND_SHARE:
        return ""
    return (f"; the GPUs waited on the loader's JPEG decoding {share:.0%} of the time: "
            "--decode device decodes on the GPU instead")


def link_sweeps(records) -> list[dict]:
    """The ok all-reduce sweeps that measured a link: over 2 or more ranks, with a busbw
    above 0 at the largest message. A one-rank sweep's bandwidths are null (nothing
    crosses a link; records from before said 0), so no reader divides by them."""
    return [r for r in records if r.get("mode") == "allreduce" and r.get("status") == "ok"
            and (r.get("world_size") or 0) > 1 and r.get("sizes")
            and (r["sizes"][-1].get("busbw_GBps") or 0) > 0]


def schema(mode: str = "steps") -> dict:
    """The JSON schema of a record of ``mode`` (a copy: the caller may change it). The
    all-reduce and acceptance schemas share the training record's env block, so the
    provenance fields are defined once."""
    return copy.deepcopy(_schema(_schema_name(mode)))


def _schema_name(mode: str) -> str:
    return mode if mode in OTHER_SCHEMAS else "steps"


@functools.cache
def _schema(name: str) -> dict:
    training_schema = json.loads(SCHEMA_PATH.read_text())
    if name not in OTHER_SCHEMAS:
        return training_schema
    other = json.loads(OTHER_SCHEMAS[name].read_text())
    other["properties"]["env"] = training_schema["properties"]["env"]
    # The env block refers to the training schema's definitions (bounded names, numbers).
    other["$defs"] = {**training_schema["$defs"], **other.get("$defs", {})}
    return other


# --- validation: bench.schemacheck compiles each schema once -------------------------------

@functools.cache
def _validator(mode: str):
    """record -> the first problem (one line) or None; built once per schema."""
    root = _schema(_schema_name(mode))
    try:
        check = compile_schema(root)
    except UnsupportedSchema:
        try:  # deferred and optional: a host tool (requirements-host.txt), not in the image
            import jsonschema
        except ImportError:
            check = compile_schema(root, strict=False)
        else:
            return _jsonschema_validator(jsonschema, root)

    def first_problem(rec: dict) -> str | None:
        problem = check(rec)
        if problem is None:
            return None
        path, message = problem
        where = ".".join(str(p) for p in reversed(path))
        return _short(f"{where}: {message}" if where else message)

    return first_problem


def _jsonschema_validator(jsonschema, root: dict):
    compiled = jsonschema.validators.validator_for(root)(root)

    def first_problem(rec: dict) -> str | None:
        error = jsonschema.exceptions.best_match(compiled.iter_errors(rec))
        if error is None:
            return None
        where = ".".join(str(p) for p in error.absolute_path)
        return _short(f"{where}: {error.message}" if where else error.message)

    return first_problem


def train_skeleton(cfg) -> dict:
    """The record's fields known before anything runs; topology comes once the job forms."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": new_run_id(),
        "utc_time": utc_now(),
        "status": "error",
        "error": None,
        "mode": "steps" if cfg.schedule.steps is not None else "epochs",
        "config_hash": cfg.hash(),
        "config": cfg.to_dict(),
        "seed": cfg.schedule.seed,
        "comm_hook": cfg.distributed.comm_hook,
        # Known from the start, so a row that ends before training (an OOM while building
        # the model, a node lost at start) still says which strategy it was.
        "strategy": cfg.distributed.strategy,
        # What the steps ran in, once the ranks have resolved it (--precision auto) and
        # checked that every GPU has it; null where the job ended before that.
        "precision": None,
        "world_size": None,
        "batch_size_per_device": cfg.data.batch_size,
        "global_batch_size": None,
        "dataset_manifest_sha256": None,
    }
