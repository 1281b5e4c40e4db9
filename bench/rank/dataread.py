"""How fast a node reads its dataset: through its mount, or over NFS from user space.

``bench accept``'s data stage reads the dataset the way a loader would, files in name
order, each from the start, until a byte budget (``--data-max-size``) per repeat; the whole
dataset's size is listed first, so what training needs per sample is known however little
is read. Two sources:

- a directory (``--data-dir``): the dataset as this node mounts it; each file is dropped
  from the page cache before it is read, so a repeat reads from the server, not memory;
- an ``nfs://`` URL (``--data-url``): read with libnfs's user-space client (``nfs-ls``,
  ``nfs-cat`` from libnfs-utils), for a node with no NFS client in its kernel, or to judge
  the server and its link apart from the node's mount. Nothing is cached between reads:
  each file is a new client.

Torch-free; every command is an argv list (no shell).
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

CHUNK = 1 << 20
# nfs-ls -R: "-rw-r--r--  1 65534 65534      5000000 fashion-mnist/b.bin"
_LISTED = re.compile(r"(?P<mode>[-dlcbps][-rwxsStT]{9})\s+\d+\s+\d+\s+\d+\s+(?P<size>\d+)\s"
                     r"(?P<name>.+)")  # matched whole (fullmatch), line by line
# A name that goes into a URL's path whole: no query, fragment, control character or "..".
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.+=,@/-]+")
NFS_TIMEOUT_S = 600


class ReadError(RuntimeError):
    """The dataset could not be listed or read; the message names the source and the fix."""


def files_under(root: Path) -> list[tuple[str, int]]:
    """(path, size) of the regular files under ``root`` (links not followed), in name
    order."""
    out = []
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder) / name
            try:
                info = path.lstat()
            except OSError:
                continue
            if not path.is_symlink() and path.is_file():
                out.append((str(path), info.st_size))
    return out


def read_local(files: list[tuple[str, int]], limit: int) -> tuple[float, int, int]:
    """(seconds, bytes, files begun) to read ``files`` in order until ``limit`` bytes,
    each dropped from the page cache first."""
    start = time.perf_counter()
    done = begun = 0
    for path, _ in files:
        if done >= limit:
            break
        begun += 1
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            while done < limit and (chunk := os.read(fd, min(CHUNK, limit - done))):
                done += len(chunk)
        finally:
            os.close(fd)
    return time.perf_counter() - start, done, begun


def split_url(url: str) -> tuple[str, str]:
    """``nfs://host/path?query`` -> (``nfs://host/path``, ``?query`` or "")."""
    base, _, query = url.partition("?")
    return base.rstrip("/"), f"?{query}" if query else ""


def nfs_files(url: str) -> list[tuple[str, int]]:
    """(file URL, size) of the regular files under the ``nfs://`` URL, in name order."""
    try:
        listing = subprocess.run(["nfs-ls", "-R", url], capture_output=True, text=True,
                                 timeout=NFS_TIMEOUT_S, errors="replace")
    except FileNotFoundError:
        raise ReadError("--data-url needs nfs-ls and nfs-cat on the node (Debian: "
                        "libnfs-utils)") from None
    except subprocess.TimeoutExpired:
        raise ReadError(f"nfs-ls {url} did not answer in {NFS_TIMEOUT_S} s: is the "
                        "server up and reachable from this node?") from None
    if listing.returncode != 0:
        detail = (listing.stderr.strip().splitlines() or ["no message"])[-1][:300]
        raise ReadError(f"nfs-ls {url} failed ({detail}): check the server, the export's "
                        "path and that this node is among its clients")
    base, query = split_url(url)
    out = []
    for line in listing.stdout.splitlines():
        match = _LISTED.fullmatch(line)
        if not match or match["mode"][0] != "-":
            continue
        name = match["name"].strip()
        if not _SAFE_NAME.fullmatch(name) or ".." in name.split("/"):
            continue  # a name that cannot travel in a URL is not read
        out.append((f"{base}/{name}{query}", int(match["size"])))
    return sorted(out)


def read_nfs(files: list[tuple[str, int]], limit: int) -> tuple[float, int, int]:
    """(seconds, bytes, files read) to read ``files`` over NFS in order, each whole through
    its own nfs-cat, until ``limit`` bytes. Whole files, unlike a mount's read: the client
    asks for a file in reads of the server's size (up to 1 MiB), so stopping inside one
    would leave bytes on the wire that no figure counts (measured: a tenth of the link)."""
    start = time.perf_counter()
    done = begun = 0
    for url, _ in files:
        if done >= limit:
            break
        begun += 1
        with subprocess.Popen(["nfs-cat", url], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL) as cat:
            assert cat.stdout is not None
            while chunk := cat.stdout.read1(CHUNK):
                done += len(chunk)
            if cat.wait(timeout=NFS_TIMEOUT_S) != 0:
                raise ReadError(f"nfs-cat {url} failed (exit {cat.returncode})")
    return time.perf_counter() - start, done, begun
