"""``python -m bench dataset``: stage a dataset into the NFS export with a SHA-256 manifest.

  python -m bench dataset stage fashion-mnist [--src DIR] [--export nfs/export]
  python -m bench dataset stage imagefolder --src DIR [--name NAME]
  python -m bench dataset stage cifar10 [--src DIR | --download]
  python -m bench dataset verify DIR [--sample N]
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from bench import manifest
from bench.config import FASHION_MNIST_FILES, OneLineErrorParser, find_idx_file
from bench.options import ConfigError, require_range
from bench.paths import child, remove_tree_inside

DEFAULT_SOURCES = {"fashion-mnist": Path("/usr/share/datasets/fashion-mnist")}
DATASETS = ("fashion-mnist", "cifar10", "imagefolder")


def _fail(prog: str, message: str) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def _remove(path: Path, export: Path) -> None:
    """Remove an entry of the export: a link is unlinked, never followed; a directory only
    once it is proven to resolve inside the export (``child`` checked the name before)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        remove_tree_inside(path, export, "--name")


def _copy_tree(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, dirs_exist_ok=True)


def _check_source(dataset: str, src: Path | None, download: bool) -> Path | None:
    """The source directory, checked before anything is created; ConfigError if unusable."""
    if dataset == "fashion-mnist":
        src = src or DEFAULT_SOURCES[dataset]
        if not all(find_idx_file(src, name) for name in FASHION_MNIST_FILES):
            raise ConfigError("--src", src, "Fashion-MNIST idx files not found; install "
                              "Debian's dataset-fashion-mnist or point --src at the four "
                              "idx files")
    elif dataset == "cifar10" and not download:
        if src is None or not (src / "cifar-10-batches-py").is_dir():
            raise ConfigError("--src", src, "needs a directory holding cifar-10-batches-py "
                              "(or --download)")
    elif dataset == "imagefolder":
        if src is None or not (src / "train").is_dir():
            raise ConfigError("--src", src, "needs a directory with train/<class>/<image> "
                              "(and val/)")
    return src


def _stage_files(dataset: str, src: Path | None, dest: Path, download: bool) -> None:
    """Copy the dataset from its checked source into ``dest``."""
    if dataset == "fashion-mnist":
        for name in FASHION_MNIST_FILES:
            path = find_idx_file(src, name)
            shutil.copy2(path, dest / path.name)
    elif dataset == "cifar10" and download:
        from torchvision.datasets import CIFAR10

        CIFAR10(dest, train=True, download=True)
        (dest / "cifar-10-python.tar.gz").unlink(missing_ok=True)
    elif dataset == "cifar10":
        _copy_tree(src / "cifar-10-batches-py", dest / "cifar-10-batches-py")
    elif dataset == "imagefolder":
        for split in ("train", "val"):
            if (src / split).is_dir():
                _copy_tree(src / split, dest / split)


def stage(args: argparse.Namespace, prog: str) -> int:
    if args.export.exists() and not args.export.is_dir():
        raise ConfigError("--export", args.export, "is not a directory: give the export "
                          "directory, e.g. nfs/export")
    # The destination is removed and replaced below: its name must be one plain component
    # that resolves inside the export, never ../x, . or /abs/dir.
    dest = child(args.export, args.dataset if args.name is None else args.name, "--name")
    src = _check_source(args.dataset, args.src, args.download)
    # Staged beside the destination and renamed into place only when complete: a bad
    # --src or a failed copy leaves neither a half-filled directory nor a damaged old copy.
    staging = args.export / f".{dest.name}.staging"
    _remove(staging, args.export)
    staging.mkdir(parents=True)
    try:
        _stage_files(args.dataset, src, staging, args.download)
        # The export is root-squashed: clients read as nobody, so everything is world-readable.
        for path in [staging, *staging.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        manifest.write(staging)
        _remove(dest, args.export)
        staging.rename(dest)
    finally:
        _remove(staging, args.export)
    written = dest / manifest.MANIFEST_NAME
    print(f"staged {args.dataset} in {dest}: {len(manifest.parse(written))} files, manifest "
          f"{written} (sha256 {manifest.sha256_file(written)[:16]})")
    return 0


def verify(args: argparse.Namespace, prog: str) -> int:
    require_range(args.sample, "sample", 0, 10_000_000)
    if not (args.directory / manifest.MANIFEST_NAME).is_file():
        return _fail(prog, f"{args.directory}: no {manifest.MANIFEST_NAME}; stage it first")
    try:
        digest = manifest.verify(args.directory, "sample" if args.sample else "all",
                                 args.sample or 1)
    except manifest.ManifestMismatch as mismatch:
        print(f"{prog}: FAILED: {mismatch}", file=sys.stderr)
        return 1
    print(f"{args.directory}: matches its manifest (sha256 {digest[:16]})")
    return 0


def main(argv: list[str] | None = None, prog: str = "bench dataset") -> int:
    parser = OneLineErrorParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    p_stage = sub.add_parser("stage", help="copy a dataset into the export and write its manifest")
    p_stage.add_argument("dataset", choices=DATASETS)
    p_stage.add_argument("--src", type=Path, help="where the dataset is now "
                         "(default for fashion-mnist: /usr/share/datasets/fashion-mnist)")
    p_stage.add_argument("--export", type=Path, default=Path("nfs/export"),
                         help="the export directory (default: %(default)s)")
    p_stage.add_argument("--name", help="directory name in the export (default: the dataset)")
    p_stage.add_argument("--download", action="store_true", help="cifar10: download it")
    p_verify = sub.add_parser("verify", help="check a staged dataset against its manifest")
    p_verify.add_argument("directory", type=Path)
    p_verify.add_argument("--sample", type=int, default=0, help="check N random files only")
    args = parser.parse_args(argv)
    try:
        return stage(args, prog) if args.action == "stage" else verify(args, prog)
    except ConfigError as error:
        return _fail(prog, str(error))


if __name__ == "__main__":
    sys.exit(main())
