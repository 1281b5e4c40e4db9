"""Where a number came from: git state, CPU, the link, and the shape of the record's
environment block. Torch-free: a rank adds what only a running torch knows
(``bench.rank.environment``); the head writes a row's block without it (``collect_head``).
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import re
import socket
import subprocess
import threading
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from bench.units import parse_rate

# Environment prefixes whose values change communication behaviour.
COMM_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_")
# The communication settings a record names: documented NCCL, gloo and torch-NCCL variables
# (NCCL's environment documentation; gloo's and TORCH_NCCL_'s as torch 2.14 reads them).
# Only these reach a record and its logs: any other variable under the prefixes (a site's
# NCCL_FOO_TOKEN, a plugin's credentials) stays out, whatever it holds.
COMM_SETTINGS = frozenset("""
    NCCL_ALGO NCCL_PROTO NCCL_BUFFSIZE NCCL_NTHREADS NCCL_MIN_NCHANNELS NCCL_MAX_NCHANNELS
    NCCL_MIN_CTAS NCCL_MAX_CTAS NCCL_CGA_CLUSTER_SIZE NCCL_LL128_BUFFSIZE NCCL_LL_BUFFSIZE
    NCCL_LL128_NTHREADS NCCL_NCHANNELS_PER_NET_PEER NCCL_MIN_P2P_NCHANNELS
    NCCL_MAX_P2P_NCHANNELS NCCL_TUNER_PLUGIN NCCL_PAT_ENABLE NCCL_CTA_POLICY
    NCCL_SOCKET_IFNAME NCCL_SOCKET_FAMILY NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD
    NCCL_SOCKET_RETRY_CNT NCCL_SOCKET_RETRY_SLEEP_MSEC NCCL_CROSS_NIC NCCL_NET
    NCCL_NET_PLUGIN NCCL_NET_GDR_LEVEL NCCL_NET_GDR_READ NCCL_NET_GDR_C2C
    NCCL_NET_DISABLE_INTRA NCCL_NET_SHARED_BUFFERS NCCL_NET_SHARED_COMMS
    NCCL_NET_FORCE_FLUSH NCCL_NET_MERGE_LEVEL NCCL_NET_OVERHEAD NCCL_OOB_NET_ENABLE
    NCCL_OOB_NET_IFNAME NCCL_IB_DISABLE NCCL_IB_HCA NCCL_IB_GID_INDEX
    NCCL_IB_ROCE_VERSION_NUM NCCL_IB_TIMEOUT NCCL_IB_RETRY_CNT NCCL_IB_SL NCCL_IB_TC
    NCCL_IB_FIFO_TC NCCL_IB_PKEY NCCL_IB_USE_INLINE NCCL_IB_QPS_PER_CONNECTION
    NCCL_IB_SPLIT_DATA_ON_QPS NCCL_IB_PCI_RELAXED_ORDERING NCCL_IB_ADAPTIVE_ROUTING
    NCCL_IB_AR_THRESHOLD NCCL_IB_ADDR_FAMILY NCCL_IB_ADDR_RANGE NCCL_IB_MERGE_VFS
    NCCL_IB_MERGE_NICS NCCL_IB_ECE_ENABLE NCCL_IB_DATA_DIRECT NCCL_IB_RETURN_ASYNC_EVENTS
    NCCL_GDRCOPY_ENABLE NCCL_DMABUF_ENABLE NCCL_P2P_DISABLE NCCL_P2P_LEVEL
    NCCL_P2P_DIRECT_DISABLE NCCL_P2P_READ_ENABLE NCCL_P2P_USE_CUDA_MEMCPY
    NCCL_P2P_NET_CHUNKSIZE NCCL_P2P_NVL_CHUNKSIZE NCCL_P2P_PCI_CHUNKSIZE
    NCCL_P2P_LL_THRESHOLD NCCL_P2P_PXN_LEVEL NCCL_PXN_DISABLE NCCL_SHM_DISABLE
    NCCL_SHM_LOCALITY NCCL_NVB_DISABLE NCCL_NVLS_ENABLE NCCL_NVLS_NCHANNELS
    NCCL_NVLS_CHUNKSIZE NCCL_MNNVL_ENABLE NCCL_COLLNET_ENABLE NCCL_COLLNET_NODE_THRESHOLD
    NCCL_TOPO_FILE NCCL_TOPO_DUMP_FILE NCCL_GRAPH_FILE NCCL_GRAPH_DUMP_FILE
    NCCL_IGNORE_CPU_AFFINITY NCCL_CUMEM_ENABLE NCCL_CUMEM_HOST_ENABLE NCCL_LOCAL_REGISTER
    NCCL_GRAPH_REGISTER NCCL_GRAPH_MIXING_SUPPORT NCCL_LAUNCH_MODE NCCL_COMM_BLOCKING
    NCCL_RUNTIME_CONNECT NCCL_WORK_FIFO_BYTES NCCL_CHECK_POINTERS NCCL_SET_STACK_SIZE
    NCCL_SET_THREAD_NAME NCCL_CONF_FILE NCCL_HOSTID NCCL_DEBUG NCCL_DEBUG_SUBSYS
    NCCL_DEBUG_FILE NCCL_DEBUG_TIMESTAMP_FORMAT NCCL_RAS_ENABLE NCCL_NVTX_DISABLE
    GLOO_SOCKET_IFNAME GLOO_DEVICE_TRANSPORT GLOO_LOG_LEVEL
    TORCH_NCCL_ASYNC_ERROR_HANDLING TORCH_NCCL_BLOCKING_WAIT TORCH_NCCL_AVOID_RECORD_STREAMS
    TORCH_NCCL_USE_COMM_NONBLOCKING TORCH_NCCL_NONBLOCKING_TIMEOUT TORCH_NCCL_HIGH_PRIORITY
    TORCH_NCCL_ENABLE_MONITORING TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC TORCH_NCCL_DUMP_ON_TIMEOUT
    TORCH_NCCL_TRACE_BUFFER_SIZE TORCH_NCCL_DESYNC_DEBUG TORCH_NCCL_NAN_CHECK
    TORCH_NCCL_CUDA_EVENT_CACHE TORCH_NCCL_PROPAGATE_ERROR TORCH_NCCL_RETHROW_CUDA_ERRORS
    TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK TORCH_NCCL_BCAST_UNIQUEID
    TORCH_NCCL_RANKS_PER_ROOT
""".split())
# A value shaped like a credential: a run of 24 or more letters and digits (both), as API
# tokens and keys are, or a URL carrying a user name. Recorded as "<redacted>", even for a
# known setting (a path, a list of HCAs or a number never looks like this).
_TOKEN_RUN = re.compile(r"[A-Za-z0-9+=]{24,}")
_URL_USER = re.compile(r"://[^/@\s]*@")
REDACTED = "<redacted>"
# The NCCL_DEBUG* names the trainer set itself to capture NCCL's transport
# (bench.rank.nccl_capture), comma separated: not the user's settings, so not comm_env's.
CAPTURE_SET = "BENCH_NCCL_DEBUG_SET"
# The settings torchrun gives every rank where the user gave none (torch's
# local_elastic_agent: TORCH_NCCL_ASYNC_ERROR_HANDLING=1). bench.rank.torchrun names those
# it is about to add in LAUNCHER_SET, so comm_env leaves them out as not the user's; under a
# plain torchrun they are recorded as before.
TORCHRUN_DEFAULTS = ("TORCH_NCCL_ASYNC_ERROR_HANDLING",)
LAUNCHER_SET = "BENCH_TORCHRUN_SET"
# How long hashing the uncommitted change may take before the record says null instead.
DIFF_TIMEOUT_S = 10.0
_SHA256 = re.compile(r"[0-9a-f]{64}")
_PACKAGE_DIR = Path(__file__).resolve().parent


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state() -> tuple[str | None, bool | None, str | None]:
    """(commit, dirty, diff_sha256): the commit, whether tracked files differ from it, and
    the sha256 of that difference (``git diff HEAD --binary``; None when clean or unknown).
    The hash tells two dirty trees apart: a working tree copied beside a stale ``.git``
    says "<commit>+dirty" whatever it holds. Inside the image the build passes all three
    in BENCH_GIT_COMMIT, BENCH_GIT_DIRTY and BENCH_GIT_DIFF_SHA256; a device session that
    copies a tree without its ``.git`` may set them too."""
    baked = os.environ.get("BENCH_GIT_COMMIT")
    if baked:
        dirty = os.environ.get("BENCH_GIT_DIRTY")
        diff = os.environ.get("BENCH_GIT_DIFF_SHA256", "").strip().lower()
        return (baked, None if dirty is None else dirty == "1",
                diff if _SHA256.fullmatch(diff) else None)
    commit = _run(["git", "rev-parse", "HEAD"], cwd=_PACKAGE_DIR)
    if commit is None:
        return None, None, None
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_PACKAGE_DIR)
    return commit, bool(status), diff_sha256(_PACKAGE_DIR) if status else None


DIFF_COMMAND = ["git", "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff",
                "--no-textconv"]


def diff_sha256(cwd: Path, timeout_s: float = DIFF_TIMEOUT_S) -> str | None:
    """The sha256 of ``git diff HEAD --binary`` in ``cwd``'s repository (what
    scripts/build-image.sh computes with the same command), streamed: however large the
    change, memory stays small, and past ``timeout_s`` git is killed and the answer is
    None, as it is where git fails or the tree is clean."""
    try:
        proc = subprocess.Popen(DIFF_COMMAND, cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    except OSError:
        return None
    stdout = proc.stdout
    assert stdout is not None
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    digest, size = hashlib.sha256(), 0
    try:
        for chunk in iter(lambda: stdout.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
        code = proc.wait()
    finally:
        timer.cancel()
        stdout.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return digest.hexdigest() if code == 0 and size else None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def link() -> dict | None:
    """The link between the nodes, when the launcher knows it (the emulated-link harness
    shapes it, so it sets BENCH_LINK_RATE in tc's spelling, e.g. 1gbit)."""
    rate = os.environ.get("BENCH_LINK_RATE")
    if not rate:
        return None
    found = {"rate": rate, "rate_bps": parse_rate(rate, "BENCH_LINK_RATE"),
             "kind": os.environ.get("BENCH_LINK_KIND", "stated")}
    share = _cpu_share(os.environ.get("BENCH_LINK_CPU_SHARE"))
    if share is not None:
        found["cpu_share"] = share
    quota = _cpu_quota(os.environ.get("BENCH_LINK_CPU_QUOTA"))
    if quota is not None:   # the host was held to it on purpose (a straggler made slow)
        found["cpu_quota"] = quota
    return found


def _cpu_quota(value: str | None) -> float | None:
    """The emulated host's CPU quota in CPUs (0 < quota <= 1024), or None where unset or
    not such a number."""
    try:
        quota = float(value) if value else None
    except ValueError:
        return None
    return quota if quota is not None and 0 < quota <= 1024 else None


def _cpu_share(value: str | None) -> float | None:
    """The emulated host's share of its CPUs (0 < share <= 1), or None where unset or not
    such a number (a record is still written; the predictor then takes a whole CPU)."""
    try:
        share = float(value) if value else None
    except ValueError:
        return None
    return share if share is not None and 0 < share <= 1 else None


def _installed(package: str) -> str | None:
    """A package's installed version, read without importing it."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


HEAD_RANKS = [{"rank": None, "local_rank": None, "node_rank": None, "device": None}]


def environment(ranks: list[dict], versions: dict, nproc_per_node: int | None,
                world_size: int | None) -> dict:
    """The record's environment block from what the caller knows about the ranks and the
    software (``bench.rank.environment`` on a rank, ``collect_head`` on the head)."""
    commit, dirty, diff = git_state()
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "git_diff_sha256": diff,
        "image_id": os.environ.get("BENCH_IMAGE_ID") or None,
        "image_digest": os.environ.get("BENCH_IMAGE_DIGEST") or None,
        "ranks": ranks,
        "hostnames": sorted({r["hostname"] for r in ranks}),
        "nnodes": len({r["node_rank"] for r in ranks}),
        "nproc_per_node": nproc_per_node,
        "world_size": world_size,
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        **versions,
        "link": link(),
        "comm_env": comm_env(os.environ),
    }


def comm_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The communication settings of ``environ`` a record may name: known ones only
    (``COMM_SETTINGS``: a base image's NCCL_VERSION or CUDA_VERSION is no setting, and the
    NCCL torch loaded is the env block's ``nccl``), not those the trainer or torchrun set
    (``CAPTURE_SET``, ``LAUNCHER_SET``), a value that looks like a secret redacted."""
    own = set(environ.get(CAPTURE_SET, "").split(",")) | \
        set(environ.get(LAUNCHER_SET, "").split(","))
    return {name: REDACTED if looks_secret(value) else value
            for name, value in sorted(environ.items())
            if name in COMM_SETTINGS and name not in own}


def mark_torchrun_defaults(environ: MutableMapping[str, str]) -> None:
    """Before torchrun starts: name in LAUNCHER_SET the defaults it will add because the
    user set none (``TORCHRUN_DEFAULTS``), so the ranks' comm_env leaves them out."""
    environ[LAUNCHER_SET] = ",".join(name for name in TORCHRUN_DEFAULTS
                                     if name not in environ)


def looks_secret(value: str) -> bool:
    """Whether a value has a credential's shape (see _TOKEN_RUN); linear in its length."""
    return bool(_URL_USER.search(value)) or any(
        any(c.isdigit() for c in run) and any(c.isalpha() for c in run)
        for run in _TOKEN_RUN.findall(value))


def no_rank() -> list[dict]:
    """The ranks of a job whose process group never formed: this host, nothing more."""
    return [{**HEAD_RANKS[0], "hostname": socket.gethostname()}]


def collect_head() -> dict:
    """The environment of a row the head writes (no node wrote one), without torch:
    versions from the installed packages; what only a running torch knows is null."""
    return environment(no_rank(), {
        "torch": _installed("torch"), "torchvision": _installed("torchvision"), "cuda": None,
        "cudnn": None, "nccl": None, "driver": None, "torch_threads": None}, None, None)
