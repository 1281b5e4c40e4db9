"""SHA-256 manifests of dataset directories: written when a dataset is staged, checked before
training, so every node provably trains on the same bytes.

The format is ``sha256sum``'s (``<hex>  <relative path>``), so ``sha256sum -c`` reads it too.
"""
from __future__ import annotations

import hashlib
import random
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


def dataset_files(directory: Path) -> list[Path]:
    """Every file under ``directory`` but the manifest, in a stable order."""
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)


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
        extra = [p for p in dataset_files(data_dir)
                 if p.relative_to(data_dir).as_posix() not in listed]
        if extra:
            raise ManifestMismatch(f"dataset file {extra[0]} is not listed in {manifest} "
                                   f"({len(extra)} unlisted): restage the dataset")
    if mode == "sample" and len(entries) > sample:
        entries = sorted(random.Random(seed).sample(entries, sample))
    for name, expected in entries:
        path = data_dir / name
        if not path.is_file():
            raise ManifestMismatch(f"dataset file {path} is listed in {manifest} but missing")
        actual = sha256_file(path)
        if actual != expected:
            raise ManifestMismatch(f"dataset file {path} does not match {manifest}: "
                                   f"sha256 {actual[:12]}..., expected {expected[:12]}...")
    return sha256_file(manifest)
