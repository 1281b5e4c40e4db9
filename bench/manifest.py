"""SHA-256 manifests of dataset directories: written when a dataset is staged, checked before
training, so every node provably trains on the same bytes.

The format is ``sha256sum``'s (``<hex>  <relative path>``), so ``sha256sum -c`` reads it too.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import stat
import typing
import unicodedata
from pathlib import Path, PurePosixPath

MANIFEST_NAME = "MANIFEST.sha256"
CHUNK = 1 << 20


class ManifestMismatch(RuntimeError):
    """A dataset file is missing or differs from its manifest entry."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# A dataset holds regular files and directories, nothing else: a link would pull in whatever
# it points at (a key, a whole directory), a FIFO or a device would block or never end.
_NOT_ALLOWED = {stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a FIFO",
                stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
                stat.S_IFBLK: "a block device"}
# Characters a name must not hold: control characters (C0, DEL, C1), the line and paragraph
# separators (str.splitlines breaks at each: one name would become two manifest lines) and
# lone surrogates (bytes that are not UTF-8, which a text manifest cannot hold).
_ODD_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """A regular file or directory found by ``scan``, with its lstat mode."""

    path: Path
    relative: PurePosixPath
    mode: int


@dataclasses.dataclass(slots=True)
class Tree:
    """What ``scan`` found: directories (parents first), regular files, and one line per
    entry that is neither or whose name is odd."""

    dirs: list[Entry] = dataclasses.field(default_factory=list)
    files: list[Entry] = dataclasses.field(default_factory=list)
    refused: list[str] = dataclasses.field(default_factory=list)


def odd_name(name: str) -> bool:
    """Whether a name holds a character no dataset name should: see _ODD_CATEGORIES."""
    return any(unicodedata.category(char) in _ODD_CATEGORIES for char in name)


def shown(relative: PurePosixPath | str) -> str:
    """A path as it can be printed on one line: as is, or escaped (ascii()) if it is odd."""
    text = str(relative)
    return ascii(text) if odd_name(text) or not text.isprintable() else text


def scan(root: Path, relative: PurePosixPath) -> Tree:
    """Walk ``root`` (named ``relative`` in the result) without following any link: every
    entry is lstat'ed, and only real directories are entered."""
    tree = Tree()
    pending = [(root, relative)]
    while pending:
        path, rel = pending.pop()
        if rel != relative and odd_name(path.name):  # the root's name is the caller's
            tree.refused.append(f"{shown(rel)} has a control character in its name")
            continue
        try:
            mode = path.lstat().st_mode
        except OSError as error:
            tree.refused.append(f"{shown(rel)} cannot be read ({error.strerror})")
            continue
        if stat.S_ISREG(mode):
            tree.files.append(Entry(path, rel, mode))
        elif stat.S_ISDIR(mode):
            tree.dirs.append(Entry(path, rel, mode))
            try:
                names = sorted(os.listdir(path), reverse=True)
            except OSError as error:
                tree.refused.append(f"{shown(rel)} cannot be listed ({error.strerror})")
                continue
            pending.extend((path / name, rel / name) for name in names)
        else:
            kind = _NOT_ALLOWED.get(stat.S_IFMT(mode), "not a regular file")
            tree.refused.append(f"{shown(rel)} is {kind}")
    return tree


def _is_regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def dataset_files(directory: Path) -> list[Path]:
    """Every regular file under ``directory`` but its manifest, in a stable order; links
    are neither listed nor followed."""
    return sorted(entry.path for entry in scan(directory, PurePosixPath(".")).files
                  if entry.path != directory / MANIFEST_NAME)


def write(directory: Path) -> Path:
    lines = [f"{sha256_file(p)}  {p.relative_to(directory).as_posix()}\n"
             for p in dataset_files(directory)]
    manifest = directory / MANIFEST_NAME
    manifest.write_text("".join(lines))
    return manifest


def parse(manifest: Path) -> dict[str, str]:
    entries = {}
    for number, line in enumerate(manifest.read_text().splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            raise ManifestMismatch(f"{manifest}:{number}: not a sha256sum line: {line!r}")
        # A listed name is read as data_dir / name: it must stay inside the dataset.
        parts = PurePosixPath(name).parts
        if not parts or name.startswith("/") or ".." in parts:
            raise ManifestMismatch(f"{manifest}:{number}: {name!r} is not a path inside the "
                                   "dataset")
        entries[name] = digest
    return entries


# A check that runs (mode all or sample) always returns the digest; only "off" returns None.
@typing.overload
def verify(data_dir: Path, mode: typing.Literal["all", "sample"], sample: int,
           seed: int = 0) -> str: ...


@typing.overload
def verify(data_dir: Path, mode: str, sample: int, seed: int = 0) -> str | None: ...


def verify(data_dir: Path, mode: str, sample: int, seed: int = 0) -> str | None:
    """Check the files against the manifest; returns the manifest's own SHA-256.

    ``mode`` is ``all``, ``sample`` (``sample`` files drawn with ``seed``) or ``off``.
    Returns None when checking is off; a missing manifest is refused earlier, by the config
    (``DataConfig``), and here raises ManifestMismatch. Raises ManifestMismatch
    naming the first file that is missing or differs.
    """
    manifest = data_dir / MANIFEST_NAME
    if mode == "off":
        return None
    if not manifest.is_file():
        raise ManifestMismatch(f"{manifest} is missing: stage the dataset with `bench dataset "
                               "stage`, or pass --manifest-check off")
    entries = sorted(parse(manifest).items())
    if mode == "all":
        # A file the manifest does not list (an added image, a planted batch) would be read
        # by the dataset loader all the same.
        listed = {name for name, _ in entries}
        tree = scan(data_dir, PurePosixPath("."))
        if tree.refused:
            raise ManifestMismatch(f"dataset entry {data_dir}: {tree.refused[0]}, which a "
                                   f"dataset must not hold ({len(tree.refused)} such "
                                   "entries): restage the dataset")
        extra = [p for p in dataset_files(data_dir)
                 if p.relative_to(data_dir).as_posix() not in listed]
        if extra:
            raise ManifestMismatch(f"dataset file {extra[0]} is not listed in {manifest} "
                                   f"({len(extra)} unlisted): restage the dataset")
    if mode == "sample" and len(entries) > sample:
        entries = sorted(random.Random(seed).sample(entries, sample))
    for name, expected in entries:
        path = data_dir / name
        if not _is_regular_file(path):  # a link put in a listed file's place is not read
            raise ManifestMismatch(f"dataset file {path} is listed in {manifest} but missing "
                                   "(or not a regular file)")
        actual = sha256_file(path)
        if actual != expected:
            raise ManifestMismatch(f"dataset file {path} does not match {manifest}: "
                                   f"sha256 {actual[:12]}..., expected {expected[:12]}...")
    return sha256_file(manifest)
