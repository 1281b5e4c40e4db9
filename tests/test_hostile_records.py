"""A record the schema accepts cannot crash a reader.

The property: records built from real ones, with any field the schema allows set to a
hostile value it still accepts (quotes, ``$``, ``$...$``, backticks, ``|``, newlines where
text may hold them, unicode, lone surrogates, the longest allowed strings; the largest,
smallest, zero and negative numbers allowed), are read by every reading verb (table,
compare, predict, accuracy, report, plot) without a traceback, each verb in bounded time
and memory. The values come from the schema itself (``_values``), so every bound the schema
sets is explored right at its edge, and each record is checked against the schema first:
the strategy explores accepted records only.

Then one regression test per case of issue 24 that crashed or stalled the readers: each is
now refused by the schema with a warning naming the file and line.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import resource
import signal
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import record
from bench.analysis import accuracy, compare, plot, predict, report, table
from bench.paths import OWNED_MARK, PNG_MARK_KEY
from bench.schemacheck import compile_schema
from tests.conftest import REPO
from tests.helpers.step_breakdown import with_breakdown

REFERENCE = REPO / "results" / "reference"


def _line(name: str, index: int = 0) -> dict:
    return json.loads((REFERENCE / name).read_text().splitlines()[index])


ONE_NODE = _line("emulated-cpu/1gbit.jsonl", 0)      # ok, 1 node, with a bucket timeline
TWO_NODES = _line("emulated-cpu/1gbit.jsonl", 5)     # ok, 2 nodes on the same 1 Gbit link
SWEEP = _line("emulated-cpu/1gbit-comm.jsonl")       # an all-reduce sweep over 2 ranks


def _one_rank(sweep: dict) -> dict:
    """A sweep as one rank records it: nothing crossed a link, so no bandwidth (null)."""
    rec = json.loads(json.dumps(sweep))
    rec.update(world_size=1, nnodes=1, nproc_per_node=1, procs_per_node=[1],
               busbw_peak_GBps=None, busbw_largest_GBps=None)
    rec["env"].update(world_size=1, nnodes=1, nproc_per_node=1, ranks=rec["env"]["ranks"][:1])
    for row in rec["sizes"]:
        row.update(algbw_GBps=None, busbw_GBps=None)
    return rec


ONE_RANK_SWEEP = _one_rank(SWEEP)


def _with_lockstep(sweep: dict) -> dict:
    """A sweep with both lockstep probes, the workload's being ONE_NODE's own (resnet18 at
    32 px, batch 16, fp32), so that a mutation reaches the charge it makes."""
    rec = json.loads(json.dumps(sweep))
    rec["lockstep"] = [{"compute_s": 0.01, "wait_s": 0.0004, "syncs": 40,
                        "sync_call_s": 0.0011},
                       {"compute_s": 0.16, "wait_s": 0.006, "syncs": 20}]
    rec["lockstep_workload"] = {"model": "resnet18", "image_size": 32, "batch_size": 16,
                                "mlp_width": None, "mlp_depth": None, "compute_s": 0.2,
                                "wait_s": 0.025, "syncs": 25, "sync_call_s": 0.002,
                                "phase_pairs": [[0.21, 0.2], [0.2, 0.2]],
                                "optimizer_phase_pairs": [[0.03, 0.02], [0.02, 0.02]]}
    return rec


def _with_rank_settings(base: dict) -> dict:
    """Each rank's versions and GPU settings (issue 28), the ranks disagreeing: every
    field of an entry is a path the mutations reach."""
    rec = json.loads(json.dumps(base))
    settings = {"reason": None, "power_limit_w": 700.0, "enforced_power_limit_w": 700.0,
                "default_power_limit_w": 700.0, "sm_app_clock_mhz": 1980,
                "memory_app_clock_mhz": 3201, "sm_default_app_clock_mhz": 1980,
                "memory_default_app_clock_mhz": 3201, "sm_max_clock_mhz": 1980,
                "memory_max_clock_mhz": 3201, "clock_event_reasons": ["gpu_idle"],
                "ecc_enabled": True, "ecc_pending": True, "mig_enabled": False,
                "mig_pending": False, "persistence_mode": True, "pcie_gen": 5,
                "pcie_max_gen": 5, "pcie_width": 16, "pcie_max_width": 16,
                "topology": "\tGPU0\tNIC0\nGPU0\t X \tSYS\n"}
    rec["env"]["ranks"] = [
        {**rank, "torch": f"2.1{4 - i}.1", "cuda": "13.0", "nccl": "2.28.9",
         "driver": "580.159.04",
         "gpu_settings": {**settings, "enforced_power_limit_w": 700.0 - 100 * i}}
        for i, rank in enumerate(rec["env"]["ranks"] * 2)]
    return rec
BASES = {
    "one-node": ONE_NODE,
    "two-nodes": TWO_NODES,
    "gpu-telemetry": _line("gpu-h100/telemetry/telemetry.jsonl"),
    "oom-failed-node": _line("gpu-h100/telemetry/oom.jsonl"),
    "epochs": _line("gpu-h100/real-data.jsonl"),
    "sweep": SWEEP,
    "one-rank-sweep": ONE_RANK_SWEEP,
    "lockstep-sweep": _with_lockstep(SWEEP),
    "rank-settings": _with_rank_settings(TWO_NODES),
    # Issue 26's step breakdown, straggler and prediction as the contract lays them out (no
    # committed run has them yet): their every field is a path the mutations reach.
    "straggler": with_breakdown(TWO_NODES),
}

# Strings a hostile user would try: shell, Markdown and matplotlib syntax, terminal
# escapes, right-to-left overrides, a lone surrogate, other scripts.
HOSTILE_TEXT = ['"', "'", "$", "$x^2$", r"$\frac{$", "`id`", "$(touch pwned)", "|", "a|b\n|c",
                "\n", "\r\n", "\t", "\\", "<b>x</b>", "\x1b[31mred", "\u202eevil", "\udc80",
                "é", "漢字", "🎉", "%s%n{0}", "-", ".", "..", "/", "0", "nan", "inf", " "]


@st.composite
def _sized_text(draw, schema: dict):
    """A string at or near the longest the schema allows, of hostile characters."""
    longest = min(schema.get("maxLength", 4096), 70_000)
    piece = draw(st.sampled_from(HOSTILE_TEXT + ["A", "a1", "x-"]))
    length = draw(st.sampled_from([longest, longest - 1, max(1, longest // 2)]))
    return (piece * (length // len(piece) + 1))[:length]


def _numbers(schema: dict, integer: bool):
    """The edges of a number's range and any value inside it."""
    low = schema.get("minimum", schema.get("exclusiveMinimum", -1e308))
    high = schema.get("maximum", schema.get("exclusiveMaximum", 1e308))
    edges = [low, high, 0, 1, -1, 5e-324, -5e-324, 1e-9, 1.1e-9, 0.5, high / 3, high - 1,
             1.7e308, -1.7e308, 2 ** 53 + 1, 65536, 2e8]
    if integer:
        edges = [math.floor(e) if math.isfinite(e) and abs(e) < 2 ** 63 else 0 for e in edges]
        inside = st.integers(int(max(low, -2 ** 63)), int(min(high, 2 ** 64)))
    else:
        inside = st.floats(low, high, allow_nan=False, allow_infinity=False)
    return st.sampled_from(edges) | inside


class SchemaValues:
    """Hostile values for any part of one schema, each checked against that part."""

    def __init__(self, root: dict):
        self.root = root
        self.defs = root.get("$defs", {})
        self._made: dict[tuple[int, int], tuple] = {}   # (part, its strategy), built once

    def resolve(self, schema: dict) -> dict:
        while "$ref" in schema:
            schema = self.defs[schema["$ref"].rsplit("/", 1)[1]]
        return schema

    def check(self, schema: dict):
        checker = compile_schema({**schema, "$defs": self.defs}, strict=False)
        return lambda value: checker(value) is None

    def values(self, schema: dict, depth: int = 0):
        schema = self.resolve(schema)
        key = (id(schema), depth)
        made = self._made.get(key)
        if made is None or made[0] is not schema:   # held, so its id is never reused
            made = self._made[key] = (schema, self._values(schema, depth))
        return made[1]

    def _values(self, schema: dict, depth: int):
        if "const" in schema:
            return st.just(schema["const"])
        if "enum" in schema:
            return st.sampled_from(schema["enum"])
        kinds = schema.get("type", ["string", "number", "null", "boolean"])
        kinds = kinds if isinstance(kinds, list) else [kinds]
        options = [self._of_kind(kind, schema, depth) for kind in kinds]
        return st.one_of(options).filter(self.check(schema))

    def _of_kind(self, kind: str, schema: dict, depth: int):
        if kind == "null":
            return st.none()
        if kind == "boolean":
            return st.booleans()
        if kind in ("number", "integer"):
            return _numbers(schema, kind == "integer")
        if kind == "string":
            pattern = schema.get("pattern")
            generated = st.from_regex(pattern, fullmatch=True) if pattern else st.text()
            return st.sampled_from(HOSTILE_TEXT) | generated | _sized_text(schema)
        if kind == "array":
            items = self.values(schema.get("items", {"type": "null"}), depth + 1)
            return st.lists(items, min_size=schema.get("minItems", 0),
                            max_size=min(schema.get("maxItems", 3), 3))
        return self._object(schema, depth)

    def _object(self, schema: dict, depth: int):
        properties = schema.get("properties", {})
        if depth > 3 or not properties:
            extra = schema.get("additionalProperties")
            if extra is None or depth > 3:
                return st.just({})
            names = st.from_regex(self.resolve(schema["propertyNames"])["pattern"],
                                  fullmatch=True) if "propertyNames" in schema else st.text()
            return st.dictionaries(names.filter(lambda n: len(n) <= 128),
                                   self.values(extra, depth + 1), max_size=3)
        required = schema.get("required", [])
        return st.fixed_dictionaries(
            {name: self.values(properties[name], depth + 1) for name in required},
            optional={name: self.values(sub, depth + 1) for name, sub in properties.items()
                      if name not in required})

    def at(self, path: tuple):
        """The schema of the value at ``path`` (keys and list indexes) of a record."""
        schema = self.resolve(self.root)
        for step in path:
            schema = self.resolve(schema)
            if isinstance(step, int):
                schema = schema.get("items", {})
            else:
                schema = schema.get("properties", {}).get(step) or \
                    schema.get("additionalProperties") or {}
        return self.resolve(schema)


TRAINING_VALUES = SchemaValues(record.schema("steps"))
SWEEP_VALUES = SchemaValues(record.schema("allreduce"))


def _paths(value, prefix: tuple = ()) -> list[tuple]:
    """Every place in a record a value sits (the first item of each list)."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*prefix, key))
    elif isinstance(value, list) and value:
        found += _paths(value[0], (*prefix, 0))
    return found


def _mutable_paths(base: dict, values: SchemaValues) -> list[tuple]:
    """What a hostile record may change: every field of the base record, and every
    top-level field the schema knows that the base lacks (its optional sections)."""
    known = values.resolve(values.root).get("properties", {})
    paths = _paths(base) + [(name,) for name in known if name not in base]
    # status and error are drawn together (ok has no error, a failure has one).
    return [p for p in paths if p[0] not in ("status", "error", "mode", "schema_version")]


def _set(target, path: tuple, value) -> None:
    """Set ``value`` at ``path``, where index 0 stands for every item of its list: one
    hostile value in every message size of a sweep, every bucket of a timeline (a tiny
    busbw in the largest size alone is what breaks the arithmetic)."""
    step, rest = path[0], path[1:]
    for place in range(len(target)) if isinstance(step, int) else [step]:
        if rest:
            _set(target[place], rest, value)
        else:
            target[place] = value


# Where every number of a record sits at one edge of its own range at once: the ratios
# readers take of two figures (busbw of each size, a step over its buckets) meet their
# extremes only when both ends are hostile together.
EDGES = {"least": lambda s: s.get("minimum", s.get("exclusiveMinimum")),
         "most": lambda s: s.get("maximum"), "tiny": lambda s: 5e-324,
         "smallest": lambda s: 1e-9,   # the least positive figure the schema takes
         "zero": lambda s: 0, "huge": lambda s: 1.7e308}


def _at_edge(rec: dict, values: SchemaValues, edge: str, chosen: list[bool]) -> None:
    numbers = [p for p in _mutable_paths(rec, values)
               if _number_at(rec, p)]
    for path, pick in zip(numbers, chosen * (len(numbers) // max(1, len(chosen)) + 1),
                          strict=False):
        schema = values.at(path)
        value = EDGES[edge](schema)
        if pick and value is not None and values.check(schema)(value):
            _set(rec, path, value)


def _number_at(rec: dict, path: tuple) -> bool:
    value = rec
    for step in path:
        value = value[step] if isinstance(value, dict | list) and \
            (isinstance(value, dict) and step in value or
             isinstance(value, list) and len(value) > step) else None
    return isinstance(value, int | float) and not isinstance(value, bool)


@st.composite
def hostile_records(draw) -> dict:
    name = draw(st.sampled_from(sorted(BASES)))
    rec = json.loads(json.dumps(BASES[name]))
    values = SWEEP_VALUES if rec["mode"] == "allreduce" else TRAINING_VALUES
    paths = _mutable_paths(rec, values)
    edge = draw(st.sampled_from([None, *EDGES]))
    if edge:
        _at_edge(rec, values, edge, draw(st.lists(st.booleans(), min_size=1, max_size=8)))
    for path in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=6, unique=True)):
        try:
            _set(rec, path, draw(values.values(values.at(path))))
        except (KeyError, IndexError, TypeError):   # an earlier change replaced its parent
            continue
    if draw(st.booleans()):
        # A failure may become any status but ok, which requires the measured figures.
        statuses = values.at(("status",))["enum"]
        status = draw(st.sampled_from([s for s in statuses
                                       if s != "ok" or rec["status"] == "ok"]))
        rec["status"] = status
        rec["error"] = None if status == "ok" else draw(values.values(values.at(("error",)))
                                                         .filter(bool))
    return rec


# --- running every reading verb in-process --------------------------------------------------

VERB_SECONDS = 10          # each verb, on a loaded 2-CPU machine
MAX_GROWTH_BYTES = 512 << 20


class _Stalled(Exception):
    pass


def _alarm(signum, frame):
    raise _Stalled("a reading verb ran past its time")


def _run(main, argv: list) -> tuple[int, str]:
    """``main(argv)`` with output captured: its exit code (SystemExit's too) and stderr.
    Any other exception fails the test; so does a verb that runs past VERB_SECONDS."""
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(VERB_SECONDS * 3)   # a stall ends here instead of hanging the suite
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in argv])
            except SystemExit as leave:
                code = leave.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    elapsed = time.perf_counter() - started
    assert elapsed < VERB_SECONDS, f"{main.__module__} {argv}: {elapsed:.1f} s"
    assert code in (0, 1, 2), (main.__module__, argv, code, err.getvalue()[-2000:])
    assert "Traceback" not in err.getvalue()
    # What the verb printed is text a UTF-8 terminal or file can take.
    out.getvalue().encode("utf-8")
    err.getvalue().encode("utf-8")
    return code, err.getvalue()


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Workspace:
    """Files for one example: the hostile record beside real ones, so that every verb
    has something to compare, predict from and measure against."""

    def __init__(self, root: Path, rec: dict, beside: tuple[dict, ...] = (ONE_NODE, TWO_NODES)):
        root.mkdir()
        self.runs, self.comm, self.base = root / "runs.jsonl", root / "comm.jsonl", \
            root / "base.jsonl"
        self.out = root / "plots"
        self.out.mkdir()
        rows = [rec, *beside]
        self.runs.write_text("".join(json.dumps(r) + "\n" for r in rows))
        sweeps = [SWEEP] + ([rec] if rec["mode"] == "allreduce" else [])
        self.comm.write_text("".join(json.dumps(r) + "\n" for r in sweeps))
        self.base.write_text(json.dumps(ONE_NODE) + "\n" + json.dumps(TWO_NODES) + "\n")


_EVERY_FIELD = ",".join(table.FIELDS)
_EVERY_COLUMN = ",".join(table.EXTRA_COLUMNS)


def _read_without_plotting(space: Workspace) -> None:
    """table, compare, predict, accuracy and report (its plots stubbed: plot has its own
    property below, and costs ~50x the rest)."""
    for argv in ([space.runs], [space.runs, "--format", "csv", "--columns", _EVERY_COLUMN],
                 [space.runs, "--format", "github", "--group-by", _EVERY_FIELD,
                  "--columns", _EVERY_COLUMN]):
        _run(table.main, argv)
    _run(compare.main, [space.base, space.runs])
    _run(compare.main, [space.runs, space.runs, "--match", _EVERY_FIELD])
    _run(predict.main, [space.runs, "--link", "1gbit", "--nodes", "2,4"])
    _run(predict.main, [space.runs, "--link-from", space.comm, "--nodes", "2"])
    _run(predict.main, [space.runs, "--link-from", space.comm, "--link", "5gbit"])
    _run(accuracy.main, [space.runs, "--link-from", space.comm])
    with mock.patch.object(plot, "charts", lambda *args, **kwargs: []):
        code, _ = _run(report.main, [space.runs])
    assert code == 0
    assert space.runs.with_suffix(".md").is_file() and space.runs.with_suffix(".html").is_file()


class Examples:
    """Per property: a fresh directory per example, and the process's peak memory."""

    def __init__(self, root: Path):
        self.root, self.count = root, 0
        self.rss_before = _peak_rss_bytes()

    def workspace(self, rec: dict, **kwargs) -> Workspace:
        self.count += 1
        return Workspace(self.root / f"example-{self.count}", rec, **kwargs)

    def check_memory(self) -> None:
        grown = _peak_rss_bytes() - self.rss_before
        assert grown < MAX_GROWTH_BYTES, f"peak memory grew by {grown >> 20} MiB"


def _accepted(rec: dict) -> dict:
    """The record as the readers see it (read back from a file), and it is accepted."""
    problem = record.problem_of(rec)
    assert problem is None, problem    # the strategy explores accepted records only
    return rec


def test_the_strategy_reaches_every_field_and_the_edges():
    """The mutations draw from every field of every base and from the schema's optional
    sections; the longest strings and the largest numbers are among the values."""
    for name, base in BASES.items():
        values = SWEEP_VALUES if base["mode"] == "allreduce" else TRAINING_VALUES
        paths = _mutable_paths(base, values)
        assert ("config",) in paths and ("env", "hostnames", 0) in paths, name
    assert ("telemetry", "power_w", "median") in _mutable_paths(BASES["gpu-telemetry"],
                                                                TRAINING_VALUES)
    assert ("matrix",) in _mutable_paths(BASES["epochs"], TRAINING_VALUES)
    straggler = _mutable_paths(BASES["straggler"], TRAINING_VALUES)
    for path in [("step_breakdown", "ranks", 0, "parts", "forward", "mean"),
                 ("step_breakdown", "ranks", 0, "remainder_s"), ("straggler", "summary"),
                 ("straggler", "host"), ("without_slowest", "speedup"),
                 ("straggler_check", "note"), ("link_probe", "links", 0, "GBps")]:
        assert path in straggler, path
    assert ("step_breakdown",) in _mutable_paths(ONE_NODE, TRAINING_VALUES)
    settings = _mutable_paths(BASES["rank-settings"], TRAINING_VALUES)
    for path in [("env", "ranks", 0, "torch"), ("env", "ranks", 0, "driver"),
                 ("env", "ranks", 0, "gpu_settings", "enforced_power_limit_w"),
                 ("env", "ranks", 0, "gpu_settings", "topology"),
                 ("env", "ranks", 0, "gpu_settings", "clock_event_reasons", 0)]:
        assert path in settings, path
    lockstep = _mutable_paths(BASES["lockstep-sweep"], SWEEP_VALUES)
    for path in [("lockstep", 0, "wait_s"), ("lockstep_workload", "wait_s"),
                 ("lockstep_workload", "compute_s"), ("lockstep_workload", "model"),
                 ("lockstep_workload", "mlp_width"), ("lockstep_workload", "sync_call_s"),
                 ("lockstep_workload", "phase_pairs", 0, 0), ("lockstep", 0, "sync_call_s"),
                 ("lockstep_workload", "optimizer_phase_pairs", 0, 0)]:
        assert path in lockstep, path


@given(rec=hostile_records())
def test_every_reading_verb_but_plot_reads_any_accepted_record(rec, tmp_path_factory):
    examples = _examples(tmp_path_factory, "readers")
    space = examples.workspace(_accepted(rec))
    _read_without_plotting(space)
    examples.check_memory()


def _laid_out(fig) -> bytes:
    """plot's ``_png`` less the PNG encoding, which costs most of the time and depends on
    no record: every text is laid out (where matplotlib parses ``$...$`` as mathtext), every
    axis limit computed; the bytes are a stand-in carrying the stack's mark, so the file is
    still written through ``paths.write_output`` under its name."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    plt.close(fig)
    return (b"\x89PNG\r\n\x1a\n" + b"tEXt" + PNG_MARK_KEY.encode() + b"\0"
            + OWNED_MARK.encode())


@given(rec=hostile_records())
def test_plot_draws_any_accepted_record(rec, tmp_path_factory):
    """Beside a real 1-node run of the same setup, so speedups are computed against it.
    (The issue's cases below run plot with its real ``_png``.)"""
    examples = _examples(tmp_path_factory, "plot")
    # The real run only where the hostile one is drawn too (else it draws alone, the same
    # three figures every time: the cost of this property).
    field = table.metric_of(rec.get("mode", "steps"))[0]
    drawn = record.is_training(rec) and rec.get("status") == "ok" and rec.get(field)
    space = examples.workspace(_accepted(rec), beside=(ONE_NODE,) if drawn else ())
    with mock.patch.object(plot, "_png", _laid_out):
        code, _ = _run(plot.main, [space.runs, "--out-dir", space.out])
    assert code in (0, 1)
    examples.check_memory()


_EXAMPLES: dict[str, Examples] = {}


def _examples(factory, name: str) -> Examples:
    """One directory per property (function-scoped fixtures are not reset per example)."""
    if name not in _EXAMPLES:
        _EXAMPLES[name] = Examples(factory.mktemp(f"hostile-{name}"))
    return _EXAMPLES[name]


@pytest.mark.filterwarnings("ignore:Tight layout not applied")  # a 2K-character name
def test_the_longest_arrays_the_schema_allows_are_read_in_bounded_time(tmp_path):
    """The property draws short arrays; the work of some verbs grows with their length
    (predict simulates every bucket against every other, an uneven topology is named
    node by node): at the schema's longest they still end in VERB_SECONDS."""
    buckets = TRAINING_VALUES.at(("bucket_timeline", "ready_s"))["maxItems"]
    nodes = TRAINING_VALUES.at(("procs_per_node",))["maxItems"]

    def longest(rec: dict) -> None:
        rec["bucket_timeline"].update(
            ready_s=[i * 1e-4 for i in range(buckets)],
            issued_s=[i * 1e-4 + 5e-5 for i in range(buckets)],
            done_s=[i * 1e-4 + 9e-5 for i in range(buckets)],
            sent_bytes=[1e6] * buckets, buffer_bytes=[10 ** 6] * buckets, step_s=0.2)
        rec.update(allreduce_calls_per_step=3 * buckets, comm_hook="powersgd")

    rec = _with(longest)
    uneven = _with(lambda r: r.update(procs_per_node=[1, 2] * (nodes // 2)))
    # Every rank of the largest job the breakdown may describe: the report draws a bar per
    # rank of it (at most plot.MAX_RANK_BARS) and a mean over all of them.
    ranks = TRAINING_VALUES.at(("step_breakdown", "ranks"))["maxItems"]
    many = with_breakdown(TWO_NODES)
    many["step_breakdown"]["ranks"] = [dict(many["step_breakdown"]["ranks"][i % 4], rank=i)
                                       for i in range(ranks)]
    many["without_slowest"]["ranks"] = list(range(ranks))
    space = Workspace(tmp_path / "longest", _accepted(rec), beside=(_accepted(uneven),
                                                                    ONE_NODE, TWO_NODES))
    for main, argv in [(table.main, [space.runs]), (compare.main, [space.runs, space.runs]),
                       (predict.main, [space.runs, "--link", "1gbit", "--nodes", "2,4"]),
                       (predict.main, [space.runs, "--link-from", space.comm]),
                       (plot.main, [space.runs, "--out-dir", space.out])]:
        assert _run(main, argv)[0] == 0
    # Apart: its verbs' time is its own.
    space = Workspace(tmp_path / "ranks", _accepted(many), beside=())
    for main, argv in [(table.main, [space.runs]), (plot.main, [space.runs, "--out-dir",
                                                                space.out])]:
        assert _run(main, argv)[0] == 0
    with mock.patch.object(plot, "charts", lambda *args, **kwargs: []):
        assert _run(report.main, [space.runs])[0] == 0


# --- the cases of issue 24: each refused, with a warning naming the file and line ----------

def _with(change) -> dict:
    rec = json.loads(json.dumps(ONE_NODE))
    change(rec)
    return rec


ISSUE_CASES = {
    "string-config-model": _with(lambda r: r["config"].update(model="resnet18")),
    "400-character-model-name": _with(lambda r: r["config"]["model"].update(model="m" * 400)),
    "mathtext-model-name": _with(lambda r: r["config"]["model"].update(model="$x^2$")),
    "broken-mathtext-model-name": _with(lambda r: r["config"]["model"].update(
        model=r"$\frac{$")),
    "string-telemetry-figure": _with(lambda r: r.update(
        telemetry={"source": "nvml", "reason": None, "power_w": "high"})),
    "samples-per-s-1.7e308": _with(lambda r: r.update(samples_per_s=1.7e308)),
    "nnodes-2e8": _with(lambda r: r.update(nnodes=200_000_000)),
}


@pytest.mark.parametrize("case", ISSUE_CASES)
def test_each_case_of_the_issue_is_refused_with_file_and_line(case, tmp_path):
    """The hostile record is line 2, after a good one: every verb reads the good one,
    warns ``FILE:2: skipped``, and ends normally. The old schema accepted each, and then:
    the string config.model was an AttributeError in every verb; the 400-character name
    ENAMETOOLONG in plot and report; ``$\\frac{$`` a mathtext ParseException in plot;
    the string figure a ValueError in ``table --columns``; 1.7e308 samples/s a ValueError
    (arange) in plot and report; 2e8 nodes a tuple of 2e8 counts, 12 s in table and 100 s
    in report. ``$x^2$`` rendered as mathtext, a name no model has."""
    space = Workspace(tmp_path / "case", ONE_NODE)
    space.runs.write_text(json.dumps(ONE_NODE) + "\n" + json.dumps(ISSUE_CASES[case]) + "\n")
    warning = f"{space.runs}:2: skipped: not a valid steps record"
    verbs = [(table.main, [space.runs, "--columns", _EVERY_COLUMN]),
             (compare.main, [space.base, space.runs]),
             (predict.main, [space.runs, "--link", "1gbit"]),
             (plot.main, [space.runs, "--out-dir", space.out]), (report.main, [space.runs])]
    for main, argv in verbs:
        code, err = _run(main, argv)
        assert warning in err, (main.__module__, err)
        assert code in (0, 1), (main.__module__, err)


def test_a_denormal_figure_is_refused(tmp_path):
    """A busbw of 5e-324 GB/s in every message size was a valid sweep; predict divided by
    it (a ZeroDivisionError, or a wire time of inf and a simulation that never ended). A
    positive figure is now at least 1e-9."""
    sweep = json.loads(json.dumps(SWEEP))
    for row in sweep["sizes"]:
        row["busbw_GBps"] = 5e-324
    space = Workspace(tmp_path / "case", ONE_NODE)
    space.comm.write_text(json.dumps(SWEEP) + "\n" + json.dumps(sweep) + "\n")
    for main, argv in [(predict.main, [space.runs, "--link-from", space.comm]),
                       (predict.main, [space.runs, "--link-from", space.comm, "--link", "5gbit"]),
                       (accuracy.main, [space.runs, "--link-from", space.comm])]:
        code, err = _run(main, argv)
        assert f"{space.comm}:2: skipped: not a valid allreduce record" in err
        assert code == 0


def test_a_sweep_without_bandwidth_is_read_by_every_verb(tmp_path):
    """A one-rank sweep stores no bandwidth (null), and a sweep over 2 ranks may lack it at
    some sizes: every verb reads them beside a real sweep (plot with its real PNG); none
    takes them for a measured link, and --link-from a file of them alone is refused."""
    gappy = json.loads(json.dumps(SWEEP))
    for row in gappy["sizes"][::2]:
        row.update(algbw_GBps=None, busbw_GBps=None)
    gappy["sizes"][-1].update(algbw_GBps=None, busbw_GBps=None)
    for rec in (ONE_RANK_SWEEP, gappy):
        _accepted(rec)
    space = Workspace(tmp_path / "case", ONE_RANK_SWEEP)
    space.comm.write_text("".join(json.dumps(r) + "\n" for r in (SWEEP, ONE_RANK_SWEEP, gappy)))
    space.runs.write_text("".join(json.dumps(r) + "\n"
                                  for r in (ONE_RANK_SWEEP, gappy, ONE_NODE, TWO_NODES)))
    _read_without_plotting(space)
    assert _run(plot.main, [space.runs, "--out-dir", space.out])[0] == 0
    assert _run(report.main, [space.runs])[0] == 0
    assert "all-reduce over" not in space.runs.with_suffix(".md").read_text()
    alone = tmp_path / "alone.jsonl"
    alone.write_text(json.dumps(ONE_RANK_SWEEP) + "\n" + json.dumps(gappy) + "\n")
    for main, argv in [(predict.main, [space.runs, "--link-from", alone]),
                       (accuracy.main, [space.runs, "--link-from", alone])]:
        code, err = _run(main, argv)
        assert code in (1, 2) and "Traceback" not in err


def test_a_lone_surrogate_is_read_as_a_replacement_character(tmp_path):
    """JSON can spell a lone surrogate, which no UTF-8 output takes: it is read as U+FFFD,
    so the report writes and the table prints UTF-8 (before, the report raised
    UnicodeEncodeError and the table wrote a byte that is not UTF-8)."""
    rec = _with(lambda r: r.update(status="error", error="boom \udc80",
                                   env={**r["env"], "cpu_model": "\ud800 cpu"}))
    space = Workspace(tmp_path / "case", rec)
    (loaded, *_) = record.load(space.runs)
    assert loaded["error"] == "boom \ufffd" and loaded["env"]["cpu_model"] == "\ufffd cpu"
    with mock.patch.object(plot, "charts", lambda *args, **kwargs: []):
        assert _run(report.main, [space.runs])[0] == 0
    space.runs.with_suffix(".md").read_text(encoding="utf-8")
    assert _run(table.main, [space.runs])[0] == 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
