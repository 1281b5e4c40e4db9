"""Paths that come from the user, checked before anything is created, written or removed.

Three rules from the project's safety promises live here and only here:
- a results file must be writable before a measurement starts, or the measurement is lost;
- a name that becomes a path is one component and resolves inside its parent, so that
  ``--name ../x`` can never make a command remove a directory outside the one it manages;
- every report, page and plot is written by ``write_output``: never over its input, a file
  the stack did not make, or through a symbolic link, and atomically (a temporary file
  beside it, then a rename), so no run can turn a records file or a user's notes into a
  report.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.options import ConfigError

# A name safe to use as one directory entry: no separators, no leading dot or dash (no
# hidden entries, no option look-alikes), printable ASCII only.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")


def path_arg(text: str) -> Path:
    """A path flag's value (argparse's ``type`` for every one): refused when empty, since
    ``Path("")`` is the current directory and a flag a Makefile variable left empty would
    read or write there, and when it holds a control character (a newline splits every
    line that names the file)."""
    if not text:
        raise argparse.ArgumentTypeError("'' is an empty path: give a file or directory "
                                         "(. for the current one)")
    if not text.isprintable():
        raise argparse.ArgumentTypeError(f"{ascii(text)[:80]} holds a control character: "
                                         "give a path of printable characters")
    return Path(text)


def child(parent: Path, name: str, setting: str) -> Path:
    """``parent / name``, where ``name`` must be a single plain component that stays inside
    ``parent`` once resolved (symbolic links included)."""
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigError(setting, name or "''", "must be one plain name (letters, digits, "
                          "_ . + -; not starting with . or -), e.g. fashion-mnist")
    path = parent / name
    resolved_parent = parent.resolve()
    if path.resolve().parent != resolved_parent:  # a symlink that leaves the parent
        raise ConfigError(setting, name, f"resolves outside {parent} (a symbolic link?): "
                          "remove the link or choose another name")
    return path


def _not_inside(path: Path, resolved: Path, resolved_parent: Path) -> str:
    """Why ``path`` (resolved: ``resolved``) may not be removed as a tree inside
    ``resolved_parent``."""
    if resolved == resolved_parent:
        return (f"{path} resolves to {resolved_parent} itself, not to a directory inside it: "
                "nothing was removed")
    return f"{path} resolves to {resolved}, not inside {resolved_parent}: nothing was removed"


def remove_tree_inside(path: Path, parent: Path, setting: str) -> None:
    """Remove the directory ``path``, once it is proven, resolved (symbolic links followed),
    to lie strictly inside ``parent`` resolved; ConfigError otherwise, and nothing removed.
    The proof and the removal are one function on one resolved path, so no caller can
    remove what was not checked."""
    resolved, resolved_parent = path.resolve(), parent.resolve()
    if resolved == resolved_parent or not resolved.is_relative_to(resolved_parent):
        raise ConfigError(setting, path.name or str(path),
                          _not_inside(path, resolved, resolved_parent))
    shutil.rmtree(resolved)   # proven just above: resolved, strictly inside the parent


@contextlib.contextmanager
def temporary_tree(prefix: str, what: str) -> Iterator[Path]:
    """A new directory in the temp dir, removed on leaving however the block ends (short of
    SIGKILL), through ``remove_tree_inside``. A removal that fails is a warning on stderr
    naming ``what``, never the block's error: the work's outcome matters more than its
    litter."""
    parent = Path(tempfile.gettempdir())
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        try:
            remove_tree_inside(path, parent, "TMPDIR")
        except (OSError, ConfigError) as error:
            print(f"warning: could not remove {what} {path} ({error})", file=sys.stderr)


def check_writable_file(path: Path, setting: str) -> None:
    """Raise ConfigError unless ``path`` can be appended to (or created) by this process.
    Nothing is created: missing parent directories are fine when the nearest existing
    ancestor is a writable directory. A symbolic link is refused, not followed: the link
    could be changed between this check and the append (which opens with O_NOFOLLOW)."""
    if path.is_symlink():
        raise ConfigError(setting, path, f"is a symbolic link (to {os.readlink(path)}): "
                          "give the file itself, e.g. its resolved path "
                          f"{path.resolve()}")
    if path.is_dir():
        raise ConfigError(setting, path, "is a directory: give a file path such as "
                          "results/runs.jsonl")
    if path.exists():
        if not path.is_file():
            raise ConfigError(setting, path, "is not a regular file: give a file path such "
                              "as results/runs.jsonl")
        if not os.access(path, os.W_OK):
            raise ConfigError(setting, path, "is not writable: fix its permissions or choose "
                              "another file")
        return
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(setting, path, f"{ancestor} is a file, not a directory: choose "
                          "another path")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(setting, path, f"cannot create files under {ancestor}: fix its "
                          "permissions or choose another path")


RESULTS_SUFFIX = ".jsonl"


def check_results_beside_reports(path: Path, setting: str) -> None:
    """Raise ConfigError unless ``path`` can be the results file of a run that writes its
    report beside it: not a symbolic link (refused, not followed: the link could be
    changed between this check and the last append), and named ``*.jsonl``, so the
    report's names (``.md``, ``.html``, ``-*.png``) can never be the results file itself;
    and writable (``check_writable_file``)."""
    check_writable_file(path, setting)
    if path.suffix != RESULTS_SUFFIX:
        raise ConfigError(setting, path, f"must end in {RESULTS_SUFFIX}: the report is "
                          "written beside it (.md, .html) and must never replace the records; "
                          f"e.g. {path.with_suffix(RESULTS_SUFFIX)}")


# What makes a file the stack's own: every report, page and plot it writes carries this
# mark near its start, and an existing file is replaced only when it carries it too. A
# user's notes.md beside notes.jsonl lacks it, so it is never written over.
OWNED_MARK = "written by python -m bench; replaced on every run"
MARK_COMMENT = f"<!-- {OWNED_MARK} -->"   # the first line of every .md and .html made
HASH_MARK = f"# {OWNED_MARK}"             # ... of a text file whose comments start with #
PNG_MARK_KEY = "bench"                     # a PNG tEXt chunk: key, then OWNED_MARK
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_HEAD = 4096  # the mark lies within a file's first bytes (a PNG's text chunks come first)


# A JSON file the stack made opens with the mark as its first member: {"written_by": MARK.
_JSON_MARK = re.compile(rb'\{\s*"written_by"\s*:\s*"' + re.escape(OWNED_MARK.encode()) + rb'"')


def owned_json(data: dict) -> str:
    """``data`` as a JSON document that ``write_output`` accepts: the mark first."""
    return json.dumps({"written_by": OWNED_MARK, **data}, indent=1, allow_nan=False) + "\n"


def _is_owned(head: bytes) -> bool:
    """Whether the first bytes of a file are those of a file the stack made."""
    if head.startswith(_PNG_SIGNATURE):
        return b"tEXt" + PNG_MARK_KEY.encode() + b"\0" + OWNED_MARK.encode() in head
    return (head.startswith(MARK_COMMENT.encode()) or head.startswith(HASH_MARK.encode())
            or bool(_JSON_MARK.match(head)))


OUTPUT_FIX = "choose another output path"


def check_output(path: Path, setting: str, inputs: tuple[Path, ...] = (),
                 fix: str = OUTPUT_FIX) -> None:
    """Raise ConfigError unless ``path`` may be written by ``write_output``: it is not a
    symbolic link, not one of ``inputs`` (same file, or same path once resolved), and
    either absent or a regular file the stack made (its mark). Nothing is created.
    ``fix`` ends each message: how the caller's user chooses another path."""
    for source in inputs:
        same = path.resolve() == source.resolve()
        try:
            same = same or os.path.samefile(path, source)
        except OSError:  # one of them does not exist: not the same file
            pass
        if same:
            raise ConfigError(setting, path, f"is the input {source}: a report never writes "
                              f"over what it reads; {fix}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        if path.is_symlink():  # a dangling link: writing would create its target
            raise ConfigError(setting, path, "is a symbolic link: nothing was written; "
                              f"remove the link or {fix}") from None
        return
    except OSError as error:
        if path.is_symlink():
            raise ConfigError(setting, path, "is a symbolic link: nothing was written; "
                              f"remove the link or {fix}") from None
        raise ConfigError(setting, path, f"cannot be checked ({error.strerror}): nothing "
                          f"was written; move it away or {fix}") from None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        head = os.read(fd, _HEAD) if regular else b""
    finally:
        os.close(fd)
    if not regular:
        raise ConfigError(setting, path, "exists and is not a regular file: nothing was "
                          f"written; move it away or {fix}")
    if not _is_owned(head):
        raise ConfigError(setting, path, "exists and was not written by bench (it lacks the "
                          "mark of the stack's reports): nothing was written; move it away "
                          f"or {fix}")


def write_output(path: Path, data: bytes | str, *, setting: str,
                 inputs: tuple[Path, ...] = (), fix: str = OUTPUT_FIX) -> Path:
    """Write a report, page or plot to ``path``, atomically, after ``check_output``: a
    temporary file is created beside it (O_EXCL, never through a link), written, synced,
    then renamed onto ``path``; on any failure it is removed and ``path`` is untouched.
    ``data`` must carry the stack's mark (MARK_COMMENT first, or a PNG's PNG_MARK_KEY
    chunk), so that what is written now may be replaced by the next run."""
    payload = data.encode("utf-8", errors="replace") if isinstance(data, str) else data
    if not _is_owned(payload[:_HEAD]):
        raise ValueError(f"{path}: output without the stack's mark would be refused by the "
                         "next run; start it with paths.MARK_COMMENT")
    check_output(path, setting, inputs, fix)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), 0o666 & ~_umask())  # what open() would have given
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)  # the rename replaces a link planted since, never follows
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return path


def _umask() -> int:
    """This process's umask, read without changing it: os.umask(0) would open a window in
    which another thread's files (the matrix's log pumps) are created world-writable."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
