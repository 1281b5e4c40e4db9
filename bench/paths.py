"""Paths that come from the user, checked before anything is created, written or removed.

Two rules from the project's safety promises live here and only here:
- a results file must be writable before a measurement starts, or the measurement is lost;
- a name that becomes a path is one component and resolves inside its parent, so that
  ``--name ../x`` can never make a command remove a directory outside the one it manages.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from bench.options import ConfigError

# A name safe to use as one directory entry: no separators, no leading dot or dash (no
# hidden entries, no option look-alikes), printable ASCII only.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")


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


def remove_tree_inside(path: Path, parent: Path, setting: str) -> None:
    """Remove the directory ``path``, once it is proven, resolved (symbolic links followed),
    to lie strictly inside ``parent`` resolved; ConfigError otherwise, and nothing removed.
    The proof and the removal are one function on one resolved path, so no caller can
    remove what was not checked."""
    resolved, resolved_parent = path.resolve(), parent.resolve()
    if not resolved.is_relative_to(resolved_parent):
        raise ConfigError(setting, path.name or str(path), f"{path} resolves to {resolved}, "
                          f"not inside {resolved_parent}: nothing was removed")
    if resolved == resolved_parent:
        raise ConfigError(setting, path.name or str(path), f"{path} resolves to "
                          f"{resolved_parent} itself, not to a directory inside it: nothing "
                          "was removed")
    shutil.rmtree(resolved)


def check_writable_file(path: Path, setting: str) -> None:
    """Raise ConfigError unless ``path`` can be appended to (or created) by this process.
    Nothing is created: missing parent directories are fine when the nearest existing
    ancestor is a writable directory."""
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
