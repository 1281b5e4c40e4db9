"""Hostile or malformed input, across every verb and through the real make: each case exits
2 with one line naming the setting, prints no traceback, and changes no file.

Every case runs the real command line in a subprocess, in a scratch directory that holds a
valid results file, a settings file, a dataset without a manifest and a "victim" directory
beside the export (what ``--name ../victim`` would have removed). The whole scratch tree is
hashed before and after: nothing may be created, changed or removed. Around a make case,
which runs in the checkout, its results/ is compared entry by entry too, by kind, size and
modification time: it holds the reference records (over 11,000 files), which hashing twice
per case cost 1.7 s of CPU.

And no case imports torch: a wrong value is refused before anything starts, and on a
small machine importing torch alone takes 3 s (bench.rank.front).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import NO_TORCH, REPO

FIXTURE = REPO / "tests" / "fixtures" / "table-fixture.jsonl"
FMNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
PWNED = "pwned-marker"   # what an injected command would create, in the scratch directory


@pytest.fixture
def scratch(tmp_path) -> Path:
    (tmp_path / "results").mkdir()
    shutil.copy(FIXTURE, tmp_path / "results" / "good.jsonl")
    (tmp_path / "results" / "bad.jsonl").write_bytes(
        b'[1,2,3]\nnull\n"fast"\n{"samples_per_s": "fast"}\n\xff\xfe\n{"torn": \n')
    shutil.copy(REPO / "compose" / ".env.example", tmp_path / "node.env")
    (tmp_path / "fmnist").mkdir()          # the files, but no MANIFEST.sha256
    for name in FMNIST_FILES:
        (tmp_path / "fmnist" / name).write_bytes(b"\0" * 16)
    (tmp_path / "export").mkdir()
    (tmp_path / "victim").mkdir()          # beside the export: must survive --name ../victim
    (tmp_path / "victim" / "precious.txt").write_text("keep me")
    (tmp_path / "a-file").write_text("not a directory")
    return tmp_path


def tree_digest(root: Path) -> dict[str, str]:
    """Every entry under ``root``: files by content hash, directories and links by kind."""
    entries = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            entries[key] = "link:" + os.readlink(path)
        elif path.is_dir():
            entries[key] = "dir"
        else:
            entries[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return entries


def tree_state(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` by kind, size and modification time: a file written,
    created, removed or replaced changes it, without reading what is inside."""
    entries = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        entries[str(path.relative_to(root))] = (info.st_mode, info.st_size, info.st_mtime_ns,
                                                info.st_ino)
    return entries


# Installed in every case's Python (PYTHONPATH's sitecustomize, which site imports at start):
# conftest's blocker makes an import of torch fail, and one that was swallowed is reported on
# stderr at exit, so the case's one-line check fails either way.
TORCH_BLOCKER = NO_TORCH + """
import atexit
@atexit.register
def _report():
    if _NoTorch.tried:
        print(f"torch imported before the wrong value was refused: {_NoTorch.tried}",
              file=sys.stderr)
"""


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory) -> Path:
    """A directory whose sitecustomize blocks torch (TORCH_BLOCKER), for PYTHONPATH."""
    directory = tmp_path_factory.mktemp("no-torch")
    (directory / "sitecustomize.py").write_text(TORCH_BLOCKER)
    return directory


def bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench", *args]


def make(*args: str) -> list[str]:
    return ["make", "--no-print-directory", "-C", str(REPO), *args]


# id -> (argv, the setting the error line must name). "{s}" is the scratch directory.
CASES: dict[str, tuple[list[str], str]] = {
    # --- train: numbers out of range, paths, integrity
    "train lr inf": (bench("train", "--steps", "1", "--lr", "inf"), "--lr"),
    "train lr nan": (bench("train", "--steps", "1", "--lr", "nan"), "--lr"),
    "train lr negative": (bench("train", "--steps", "1", "--lr", "-1"), "--lr"),
    "train batch negative": (bench("train", "--steps", "1", "--batch-size", "-5"),
                             "--batch-size"),
    "train batch huge": (bench("train", "--steps", "1", "--batch-size", "99999999999"),
                         "--batch-size"),
    "train timeout nan": (bench("train", "--steps", "1", "--timeout", "nan"), "--timeout"),
    "train timeout negative": (bench("train", "--steps", "1", "--timeout", "-1"), "--timeout"),
    "train timeout huge": (bench("train", "--steps", "1", "--timeout", "1e12"), "--timeout"),
    "train bucket zero": (bench("train", "--steps", "1", "--bucket-cap-mb", "0"),
                          "--bucket-cap-mb"),
    "train bucket inf": (bench("train", "--steps", "1", "--bucket-cap-mb", "inf"),
                         "--bucket-cap-mb"),
    "train steps zero": (bench("train", "--steps", "0"), "--steps"),
    "train warmup negative": (bench("train", "--steps", "1", "--warmup-steps", "-1"),
                              "--warmup-steps"),
    "train image size zero": (bench("train", "--steps", "1", "--image-size", "0"),
                              "--image-size"),
    "train seed negative": (bench("train", "--steps", "1", "--seed", "-1"), "--seed"),
    "train grad accum zero": (bench("train", "--steps", "1", "--grad-accum", "0"),
                              "--grad-accum"),
    "train workers negative": (bench("train", "--steps", "1", "--workers", "-1"), "--workers"),
    "train probe negative": (bench("train", "--steps", "1", "--comm-probe-steps", "-1"),
                             "--comm-probe-steps"),
    "train target above 1": (bench("train", "--steps", "1", "--target-accuracy", "2"),
                             "--target-accuracy"),
    "train max samples zero": (bench("train", "--steps", "1", "--max-train-samples", "0"),
                               "--max-train-samples"),
    "train results a directory": (bench("train", "--steps", "1", "--results", "{s}/results"),
                                  "--results"),
    "train results under a file": (bench("train", "--steps", "1", "--results",
                                         "{s}/a-file/runs.jsonl"), "--results"),
    "train no manifest": (bench("train", "--epochs", "1", "--data", "fashion-mnist",
                                "--data-dir", "{s}/fmnist"), "--manifest-check"),
    "train sample check, no manifest": (bench("train", "--epochs", "1", "--data",
                                              "fashion-mnist", "--data-dir", "{s}/fmnist",
                                              "--manifest-check", "sample"),
                                        "--manifest-check"),
    # --- all-reduce sweep
    "allreduce size huge": (bench("allreduce", "--max-size", "99TiB"), "--max-size"),
    "allreduce iters zero": (bench("allreduce", "--iters", "0"), "--iters"),
    "allreduce min size zero": (bench("allreduce", "--min-size", "0"), "--min-size"),
    "allreduce timeout inf": (bench("allreduce", "--timeout", "inf"), "--timeout"),
    # --- matrix
    "matrix deadline nan": (bench("matrix", "--deadline", "nan"), "--deadline"),
    "matrix deadline negative": (bench("matrix", "--deadline", "-1"), "--deadline"),
    "matrix port privileged": (bench("matrix", "--master-port", "80"), "--master-port"),
    "matrix port too high": (bench("matrix", "--master-port", "70000"), "--master-port"),
    "matrix rdzv zero": (bench("matrix", "--rdzv-timeout", "0"), "--rdzv-timeout"),
    "matrix repeats zero": (bench("matrix", "--repeats", "0"), "--repeats"),
    "matrix repeats huge": (bench("matrix", "--repeats", "100000"), "--repeats"),
    "matrix topology huge": (bench("matrix", "--topologies", "99999999x1"), "--topologies"),
    "matrix topology zero": (bench("matrix", "--topologies", "0x1"), "--topologies"),
    "matrix topology quote": (bench("matrix", "--topologies", f"1x1'; touch {PWNED}; '"),
                              "--topologies"),
    "matrix batch zero": (bench("matrix", "--batch-sizes", "0"), "--batch-sizes"),
    "matrix batch words": (bench("matrix", "--batch-sizes", "fast"), "--batch-sizes"),
    "matrix results a directory": (bench("matrix", "--results", "{s}/results"), "--results"),
    "matrix host option": (bench("matrix", "--launcher", "ssh", "--runtime", "native",
                                 "--hosts", f"x,-oProxyCommand=touch {PWNED}"), "--hosts"),
    "matrix host semicolon": (bench("matrix", "--launcher", "ssh", "--runtime", "native",
                                    "--hosts", f"a;touch {PWNED}"), "--hosts"),
    "matrix link huge": (bench("matrix", "--launcher", "netns", "--link", "99999gbit"),
                         "--link"),
    "matrix link words": (bench("matrix", "--launcher", "netns", "--link", "fast"), "--link"),
    "matrix cpus zero": (bench("matrix", "--launcher", "netns", "--link", "1gbit",
                               "--cpus-per-node", "0"), "--cpus-per-node"),
    "matrix image option": (bench("matrix", "--launcher", "compose", "--env-file",
                                  "{s}/node.env", "--image=--privileged"), "--image"),
    "matrix image missing": (bench("matrix", "--launcher", "compose", "--env-file",
                                   "{s}/node.env", "--image", "bench-no-such:image", "--",
                                   "--steps", "1"), "--image"),
    "matrix trainer lr inf": (bench("matrix", "--", "--steps", "1", "--lr", "inf"), "--lr"),
    # --- compose
    "compose deadline nan": (bench("compose", "--env-file", "{s}/node.env", "--image",
                                   "bench-trainer:cpu", "--deadline", "nan"), "--deadline"),
    "compose image option": (bench("compose", "--env-file", "{s}/node.env",
                                   "--image=-v/:/host"), "--image"),
    "compose env file missing": (bench("compose", "--env-file", "{s}/missing.env", "--image",
                                       "bench-trainer:cpu"), "--env-file"),
    "compose results a directory": (bench("compose", "--env-file", "{s}/node.env", "--image",
                                          "bench-trainer:cpu", "--results", "{s}/results"),
                                    "--results"),
    "compose nnodes zero": (bench("compose", "--env-file", "{s}/node.env", "--image",
                                  "bench-trainer:cpu", "--nnodes", "0", "--", "--steps", "1"),
                            "NNODES"),
    "compose port privileged": (bench("compose", "--env-file", "{s}/node.env", "--image",
                                      "bench-trainer:cpu", "--master-port", "22", "--",
                                      "--steps", "1"), "MASTER_PORT"),
    "compose trainer lr inf": (bench("compose", "--env-file", "{s}/node.env", "--image",
                                     "bench-trainer:cpu", "--", "--steps", "1", "--lr", "inf"),
                               "--lr"),
    # --- dataset: a name that becomes a path
    "dataset name parent": (bench("dataset", "stage", "fashion-mnist", "--src", "{s}/fmnist",
                                  "--export", "{s}/export", "--name", "../victim"), "--name"),
    "dataset name dot": (bench("dataset", "stage", "fashion-mnist", "--src", "{s}/fmnist",
                               "--export", "{s}/export", "--name", "."), "--name"),
    "dataset name absolute": (bench("dataset", "stage", "fashion-mnist", "--src", "{s}/fmnist",
                                    "--export", "{s}/export", "--name", "{s}/victim"),
                              "--name"),
    "dataset name empty": (bench("dataset", "stage", "fashion-mnist", "--src", "{s}/fmnist",
                                 "--export", "{s}/export", "--name", ""), "--name"),
    "dataset name hidden": (bench("dataset", "stage", "fashion-mnist", "--src", "{s}/fmnist",
                                  "--export", "{s}/export", "--name", ".staging"), "--name"),
    "dataset export a file": (bench("dataset", "stage", "fashion-mnist", "--src", "{s}/fmnist",
                                    "--export", "{s}/a-file"), "--export"),
    "dataset verify sample negative": (bench("dataset", "verify", "{s}/fmnist", "--sample",
                                             "-1"), "--sample"),
    # --- readers of results files
    "table missing file": (bench("table", "{s}/results/missing.jsonl"), "missing.jsonl"),
    "table only bad lines": (bench("table", "{s}/results/bad.jsonl"), "bad.jsonl"),
    "table a directory": (bench("table", "{s}/results"), "results"),
    "compare missing side": (bench("compare", "{s}/results/good.jsonl",
                                   "{s}/results/missing.jsonl"), "missing.jsonl"),
    "compare bad side": (bench("compare", "{s}/results/bad.jsonl", "{s}/results/good.jsonl"),
                         "bad.jsonl"),
    "compare threshold nan": (bench("compare", "--threshold", "nan", "{s}/results/good.jsonl",
                                    "{s}/results/good.jsonl"), "--threshold"),
    "plot only bad lines": (bench("plot", "{s}/results/bad.jsonl"), "bad.jsonl"),
    "predict only bad lines": (bench("predict", "{s}/results/bad.jsonl"), "bad.jsonl"),
    "predict link-from missing": (bench("predict", "{s}/results/good.jsonl", "--link-from",
                                        "{s}/results/missing.jsonl"), "missing.jsonl"),
    "predict latency huge": (bench("predict", "{s}/results/good.jsonl", "--latency", "1e300"),
                             "--latency"),
    "compare format unknown": (bench("compare", "--format", "no-such", "{s}/results/good.jsonl",
                                     "{s}/results/good.jsonl"), "--format"),
    "predict latency nan": (bench("predict", "{s}/results/good.jsonl", "--latency", "nan"),
                            "--latency"),
    # --- a path flag left empty (Path("") is the current directory) or holding a newline
    "plot out-dir empty": (bench("plot", "{s}/results/good.jsonl", "--out-dir", ""),
                           "--out-dir"),
    "report results empty": (bench("report", ""), "results"),
    "matrix results empty": (bench("matrix", "--dry-run", "--results", "", "--", "--steps",
                                   "1"), "--results"),
    "accept out empty": (bench("accept", "--out", "", "--dry-run"), "--out"),
    "dataset export empty": (bench("dataset", "stage", "fashion-mnist", "--src", "{s}/fmnist",
                                   "--export", ""), "--export"),
    "predict link-from newline": (bench("predict", "{s}/results/good.jsonl", "--link-from",
                                        "{s}/results/a\nb.jsonl"), "--link-from"),
    # --- doctor and settings
    "doctor host option": (bench("doctor", "--hosts", f"x,-oProxyCommand=touch {PWNED}"),
                           "--hosts"),
    "doctor host semicolon": (bench("doctor", "--hosts", f"a;touch {PWNED}"), "--hosts"),
    "settings clients anywhere": (bench("settings", "--env-file", "{s}/node.env", "--profile",
                                        "nfs"), "NFS_CLIENTS"),
    "settings clients injected": (bench("settings", "--env-file", "{s}/node.env", "--profile",
                                        "nfs"), "NFS_CLIENTS"),
    "settings port zero": (bench("settings", "--env-file", "{s}/node.env", "--profile", "cpu"),
                           "MASTER_PORT"),
    "settings nnodes negative": (bench("settings", "--env-file", "{s}/node.env", "--profile",
                                       "cpu"), "NNODES"),
    # --- Makefile variables through the real make: never shell syntax
    "make doctor hosts": (make("doctor", f"HOSTS=a;touch {PWNED}"), "HOSTS"),
    "make table results": (make("table", f"RESULTS=x;touch {PWNED}"), "x;touch"),
    "make matrix topologies": (make("bench-matrix", f"TOPOLOGIES=1x1'; touch {PWNED}; '"),
                               "--topologies"),
    "make results an option": (make("report", "RESULTS=--help"), "RESULTS"),
    "make link-from an option": (make("bench-predict", "LINK_FROM=-x"), "LINK_FROM"),
    "make k8s dir empty": (make("k8s-manifests", "IMAGE=reg.example/bench:1", "K8S_DIR="),
                           "K8S_DIR"),
    "make matrix model": (make("bench-matrix", f"MODEL=$(touch {PWNED})"), "MODEL"),
    "make emulated link": (make("bench-emulated", f"LINK=`touch {PWNED}`"),
                           "BENCH_LAUNCHER_LINK"),
}

# Settings given through the environment, as a user's shell would (Compose reads them too).
ENVIRONMENT = {
    "settings clients anywhere": {"NFS_CLIENTS": "0.0.0.0/0"},
    "settings clients injected": {"NFS_CLIENTS": '127.0.0.1; } EXPORT { Path = "/"; '
                                                 "Access_Type = RW; Squash = no_root_squash; "
                                                 "CLIENT { Clients = *"},
    "settings port zero": {"MASTER_PORT": "0"},
    "settings nnodes negative": {"NNODES": "-1"},
}


def _is_make_noise(line: str) -> bool:
    """make's own trailer ("make: *** [Makefile:12: doctor] Error 2") is not the message."""
    return line.startswith(("make: ***", "make[1]: ***")) or "Error 2" in line


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_bad_input_is_one_line_exit_2_and_changes_nothing(case, scratch, no_torch):
    argv, setting = CASES[case]
    argv = [arg.replace("{s}", str(scratch)) for arg in argv]
    env = {**os.environ, **ENVIRONMENT.get(case, {}), "PYTHONPATH": f"{no_torch}:{REPO}"}
    # make runs in the repository; its own files are outside the scratch tree, so the
    # results directory make would write to is checked instead. A verb runs in the scratch
    # tree, where its default paths (results/runs.jsonl) lead, and is given no other.
    in_repo = argv[0] == "make"
    results_before = tree_state(REPO / "results") if in_repo else None
    before = tree_digest(scratch)
    proc = subprocess.run(argv, cwd=scratch, env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    lines = [line for line in proc.stderr.splitlines()
             if line.strip() and not _is_make_noise(line)]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1, proc.stderr
    assert setting in lines[0], lines[0]
    assert tree_digest(scratch) == before, "the scratch tree changed"
    if in_repo:
        assert tree_state(REPO / "results") == results_before, "results/ changed"
    assert not (scratch / PWNED).exists() and not (REPO / PWNED).exists()


def test_there_are_at_least_sixty_cases_across_every_verb():
    verbs = {argv[3] if argv[0] == sys.executable else "make" for argv, _ in CASES.values()}
    assert len(CASES) >= 60
    assert verbs >= {"train", "matrix", "table", "compare", "plot", "predict", "doctor",
                     "settings", "dataset", "compose", "allreduce", "make"}
