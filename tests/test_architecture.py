"""The three worlds, at run time: the host side, the analysis and the shared core import
(and run their verbs) with torch made unimportable. `make lint` checks the same statically
(lint-imports, pyproject.toml); this proves it where it matters, in a running process.
`make lint`'s type check (mypy, configured in pyproject.toml) is run here too, and shown to
catch what it is there to catch."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

from bench.__main__ import VERBS
from bench.rank import front
from conftest import NO_TORCH, NO_TORCH_END, REPO


def _modules(package: str) -> list[str]:
    """Every module of a package, by walking its files (importing it could import torch)."""
    root = REPO / "bench"
    names = []
    for path in (root / package).rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(names)


CORE = ["config", "options", "topology", "units", "record", "schemacheck", "paths", "catalog",
        "allreduce_config", "devices", "manifest", "provenance", "shell", "nccl_log",
        "nvidia_smi"]
HOST_AND_ANALYSIS = _modules("host") + _modules("analysis") + CORE


@pytest.mark.parametrize("module", HOST_AND_ANALYSIS)
def test_imports_without_torch(module):
    code = NO_TORCH + f"import bench.{module}" + NO_TORCH_END
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-1500:]


def test_the_blocker_catches_a_swallowed_import():
    """The check above fails a module that imports torch behind `except ImportError`."""
    code = NO_TORCH + "try:\n    import torch\nexcept ImportError:\n    pass" + NO_TORCH_END
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True)
    assert out.returncode != 0 and "tried to import ['torch']" in out.stderr, out.stderr


def _bench(*args: str) -> subprocess.CompletedProcess:
    code = NO_TORCH + ("from bench.__main__ import main\ntry:\n"
                       f"    rc = main({list(args)!r})\n"
                       "except SystemExit as exit:\n    rc = exit.code\n"
                       + NO_TORCH_END + "sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True)


# Every verb that runs on the head: `bench VERB --help` parses no argument and builds nothing.
HEAD_VERBS = [verb for verb, (module, _) in VERBS.items() if not module.startswith("bench.rank.")]


@pytest.mark.parametrize("verb", HEAD_VERBS)
def test_head_verbs_help_without_torch(verb):
    out = _bench(verb, "--help")
    assert out.returncode == 0 and "usage" in out.stdout.lower(), out.stderr[-1500:]


# The rank verbs import torch to run, not to read their command line (bench.rank.front).
RANK_VERBS = [verb for verb, (module, _) in VERBS.items() if module.startswith("bench.rank.")]


@pytest.mark.parametrize("verb", RANK_VERBS)
def test_rank_verbs_help_without_torch(verb):
    out = _bench(verb, "--help")
    assert out.returncode == 0 and "usage" in out.stdout.lower(), out.stderr[-1500:]


@pytest.mark.parametrize("verb, args, named", [
    ("train", ["--lr", "nan"], "--lr"),
    ("train", ["--steps", "2", "--epochs", "1"], "--steps"),
    ("allreduce", ["--min-size", "2", "--dtype", "float32"], "--min-size"),
    ("allreduce", ["--max-size", "32GiB"], "--max-size"),
])
def test_rank_verbs_refuse_a_wrong_value_without_torch(verb, args, named):
    out = _bench(verb, *args)
    assert out.returncode == 2, out.stderr[-1500:]
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"bench {verb}: error:") and named in line, line


def test_rank_verbs_are_checked_at_the_front_door():
    """Every rank verb the command line offers has its torch-free config in the front."""
    assert RANK_VERBS and {VERBS[verb][0] for verb in RANK_VERBS} <= set(front.CONFIGS)


def test_host_verbs_run_without_torch(tmp_path):
    results = REPO / "results" / "reference" / "gpu-h100" / "trainer.jsonl"
    assert _bench("table", str(results)).returncode == 0
    assert _bench("predict", str(results), "--link", "10gbit", "--nodes", "2").returncode == 0
    dry = _bench("matrix", "--launcher", "slurm", "--topologies", "2x1", "--dry-run",
                 "--results", str(tmp_path / "r.jsonl"), "--", "--steps", "2")
    assert dry.returncode == 0 and "#SBATCH --nodes=2" in dry.stdout, dry.stderr[-1500:]
    assert _bench("slurm", "script", "--topologies", "2x1", "--", "--steps", "2") \
        .returncode == 0


def test_the_head_writes_a_failure_row_without_torch(tmp_path):
    """A job no node recorded: the head builds its row (config, topology, environment)."""
    code = NO_TORCH + (
        "import json\nfrom bench.config import TrainConfig\nfrom bench.options import on_head\n"
        "from bench.host.failures import failure_record\nfrom bench.topology import Topology\n"
        "with on_head():\n    cfg = TrainConfig.from_args(['--steps', '2'])\n"
        "print(json.dumps(failure_record(cfg, Topology(2, 1))))" + NO_TORCH_END)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-1500:]
    row = json.loads(out.stdout)
    assert row["nnodes"] == 2 and row["status"] == "error"
    assert row["env"]["torch"], "the installed torch's version, read without importing it"


def _mypy(*args: str, cwd=REPO) -> subprocess.CompletedProcess:
    """mypy with the project's configuration (pyproject.toml), as `make lint` runs it."""
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                           str(REPO / "pyproject.toml"), *args], cwd=cwd, capture_output=True,
                          text=True)


def test_the_host_side_and_the_core_type_check():
    """No type error in the configured files, and they are all of the core, the host side and
    the analysis: a narrower `files` would pass by checking less."""
    out = _mypy()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1500:]
    expected = [*(REPO / "bench").glob("*.py"), *(REPO / "bench" / "host").rglob("*.py"),
                *(REPO / "bench" / "analysis").rglob("*.py")]
    checked = re.search(r"no issues found in (\d+) source files", out.stdout)
    assert checked and int(checked.group(1)) == len(expected), out.stdout


BADLY_TYPED = textwrap.dedent("""\
    import re


    def match_end(text: str) -> int:
        return re.match("a", text).end()  # no match is None


    def untyped():
        return "a" + 1
""")


def test_the_type_check_catches_a_none_and_checks_untyped_bodies(tmp_path):
    """The same configuration fails a module that ignores a possible None, and one whose
    error sits in a function without annotations (check_untyped_defs)."""
    bad = tmp_path / "badly_typed.py"
    bad.write_text(BADLY_TYPED)
    out = _mypy(str(bad), cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert 'Item "None" of "Match[str] | None" has no attribute "end"' in out.stdout, out.stdout
    assert 'Unsupported operand types for + ("str" and "int")' in out.stdout, out.stdout
