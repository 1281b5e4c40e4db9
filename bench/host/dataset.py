"""``python -m bench dataset``: stage a dataset into the NFS export with a SHA-256 manifest.

  python -m bench dataset stage fashion-mnist [--src DIR] [--export nfs/export]
  python -m bench dataset stage imagefolder --src DIR [--name NAME]
  python -m bench dataset stage cifar10 [--src DIR | --download]
  python -m bench dataset verify DIR [--sample N]
"""
from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
from pathlib import Path, PurePosixPath

from bench import manifest
from bench.config import FASHION_MNIST_FILES, OneLineErrorParser, find_idx_file
from bench.options import ConfigError, require_range
from bench.paths import child, path_arg, remove_tree_inside

DEFAULT_SOURCES = {"fashion-mnist": Path("/usr/share/datasets/fashion-mnist")}
DATASETS = ("fashion-mnist", "cifar10", "imagefolder")
_OTHERS_READ, _OTHERS_LIST = stat.S_IROTH, stat.S_IROTH | stat.S_IXOTH


def _fail(prog: str, message: str) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def _remove(path: Path, export: Path) -> None:
    """Remove an entry of the export: a link is unlinked, never followed; a directory only
    once it is proven to resolve inside the export (``child`` checked the name before)."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        remove_tree_inside(path, export, "--name")


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


def _sources(dataset: str, src: Path | None, download: bool) -> list[tuple[Path, str]]:
    """What staging copies: each source (a file or a directory tree) and its name in the
    export. Nothing for a download."""
    if src is None or (dataset == "cifar10" and download):
        return []  # a download: _check_source found a source for every other dataset
    if dataset == "fashion-mnist":
        paths = [find_idx_file(src, name) for name in FASHION_MNIST_FILES]
        return [(path, path.name) for path in paths if path is not None]
    if dataset == "cifar10":
        return [(src / "cifar-10-batches-py", "cifar-10-batches-py")]
    if dataset == "imagefolder":
        return [(src / split, split) for split in ("train", "val")
                if os.path.lexists(src / split)]
    return []


def _not_exportable(tree: manifest.Tree) -> list[str]:
    """Entries the export must not serve: the export is read by every client as nobody, so
    a file or directory that others cannot read was not meant to be shared, and its mode
    is never widened to make it so."""
    return ([f"{manifest.shown(e.relative)} is not readable by others (mode "
             f"{stat.S_IMODE(e.mode):04o})" for e in tree.files if not e.mode & _OTHERS_READ]
            + [f"{manifest.shown(e.relative)} is not readable by others (mode "
               f"{stat.S_IMODE(e.mode):04o})" for e in tree.dirs
               if e.mode & _OTHERS_LIST != _OTHERS_LIST])


def _scan_sources(sources: list[tuple[Path, str]], src: Path | None) -> list[manifest.Tree]:
    """Every source scanned without following links; ConfigError naming each entry that is
    not a regular file or directory, has an odd name or is private, before anything is
    copied."""
    trees = [manifest.scan(path, PurePosixPath(name)) for path, name in sources]
    refused = [line for tree in trees for line in tree.refused + _not_exportable(tree)]
    if refused:
        raise ConfigError("--src", manifest.shown(str(src)),
                          f"holds {len(refused)} entries staging does not copy: "
                          f"{'; '.join(refused)}. Only regular files and directories that "
                          "others can read are staged: replace a link by a copy of its "
                          "target, remove the rest (chmod o+r what is meant to be shared); "
                          "nothing was copied")
    return trees


def _copy_file(entry: manifest.Entry, dest: Path) -> None:
    """Copy one regular file, never through a link (the source may have changed since the
    scan), with the source's mode narrowed to 0644: never wider than it was."""
    source_fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(source_fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(source_fd).st_mode):
            raise ConfigError("--src", manifest.shown(str(entry.path)), "changed into something "
                              "other than a regular file while staging: stage again")
        with open(dest, "xb") as target:
            shutil.copyfileobj(source, target, manifest.CHUNK)
            os.fchmod(target.fileno(), stat.S_IMODE(entry.mode) & 0o644)


def _copy_trees(trees: list[manifest.Tree], dest: Path) -> None:
    """Create the scanned directories and copy the scanned files, nothing else."""
    for tree in trees:
        for entry in tree.dirs:  # parents first
            (dest / entry.relative).mkdir()
        for entry in tree.files:
            _copy_file(entry, dest / entry.relative)
        # The owner keeps full access (the next staging removes this copy); group and
        # others keep what they had, at most read and list.
        for entry in tree.dirs:
            (dest / entry.relative).chmod(0o700 | stat.S_IMODE(entry.mode) & 0o055)


def _download(dest: Path) -> None:
    """cifar10 --download into ``dest``; what the archive unpacked is checked like a source
    (regular files and directories only) and made readable by the export's clients."""
    # Deferred: torchvision (and torch under it) only for a download, never on the head else.
    from torchvision.datasets import CIFAR10

    CIFAR10(dest, train=True, download=True)
    (dest / "cifar-10-python.tar.gz").unlink(missing_ok=True)
    tree = manifest.scan(dest, PurePosixPath("."))
    if tree.refused:
        raise ConfigError("--download", "cifar10", f"the archive held entries staging does "
                          f"not copy: {'; '.join(tree.refused)}; nothing was staged")
    for entry in tree.files:
        entry.path.chmod(0o644)
    for entry in tree.dirs:
        entry.path.chmod(0o755)


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
    trees = _scan_sources(_sources(args.dataset, src, args.download), src)
    staging = args.export / f".{dest.name}.staging"
    _remove(staging, args.export)
    staging.mkdir(parents=True)
    try:
        # The export is root-squashed: clients read as nobody, hence a listable top.
        staging.chmod(0o755)
        if args.download:
            _download(staging)
        _copy_trees(trees, staging)
        manifest.write(staging)
        (staging / manifest.MANIFEST_NAME).chmod(0o644)
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
    p_stage.add_argument("--src", type=path_arg, help="where the dataset is now "
                         "(default for fashion-mnist: /usr/share/datasets/fashion-mnist)")
    p_stage.add_argument("--export", type=path_arg, default=Path("nfs/export"),
                         help="the export directory (default: %(default)s)")
    p_stage.add_argument("--name", help="directory name in the export (default: the dataset)")
    p_stage.add_argument("--download", action="store_true", help="cifar10: download it")
    p_verify = sub.add_parser("verify", help="check a staged dataset against its manifest")
    p_verify.add_argument("directory", type=path_arg)
    p_verify.add_argument("--sample", type=int, default=0, help="check N random files only")
    args = parser.parse_args(argv)
    try:
        return stage(args, prog) if args.action == "stage" else verify(args, prog)
    except ConfigError as error:
        return _fail(prog, str(error))


if __name__ == "__main__":
    sys.exit(main())
