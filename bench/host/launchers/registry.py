"""The launchers by name: one table from each name to its options class and launcher class.

Everything a command knows about launchers comes from here: the names (``LAUNCHERS``),
the launcher built from its options (``build``), the user flags (each options class
declares its own, ``bench.host.launchers.flags``) and the options built from them
(``options_from``).

- A flag several launchers take (``--image``, ``--env-file``, ``--profile``, ``--runtime``,
  ``--remote-dir``) is one argparse flag whose help names each launcher's use of it; its
  choices are all of theirs, and each options class refuses what it cannot use.
- A flag the chosen launcher does not take is refused, naming the launchers that do:
  ``--partition=gpu: only with --launcher slurm``.
- Settings from the environment: every flag can also be given as the variable named by it,
  ``BENCH_LAUNCHER_`` + the flag in capitals (``BENCH_LAUNCHER_PARTITION`` for
  ``--partition``, ``BENCH_LAUNCHER_K8S_KIND`` for ``--k8s-kind``). A flag on the command
  line wins; an empty variable is unset; a variable of an option the chosen launcher does
  not take is ignored (an ambient setting, not a user flag). This is how the Makefile
  passes its settings (PARTITION, IMAGE, ...) without restating which launcher takes which.
- Values the matrix derives (this host's GPUs, the most nodes of any cell, the results
  directory) reach the options through one ``LaunchContext``.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from bench.host.launchers.base import Launcher
from bench.host.launchers.compose import ComposeLauncher, ComposeOptions
from bench.host.launchers.flags import (
    ENV_PREFIX,
    LaunchContext,
    derived_fields,
    env_name,
    flag_fields,
    flag_name,
)
from bench.host.launchers.k8s import K8sLauncher, K8sOptions
from bench.host.launchers.native import NativeLauncher, NativeOptions
from bench.host.launchers.netns import NetnsLauncher, NetnsOptions
from bench.host.launchers.slurm import SlurmLauncher, SlurmOptions
from bench.host.launchers.ssh import SshLauncher, SshOptions
from bench.options import ConfigError
from bench.topology import shown


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One launcher: the options class its flags build, and the class that launches."""

    options: type
    launcher: Callable[[Any], Launcher]


TABLE: dict[str, Entry] = {
    "native": Entry(NativeOptions, NativeLauncher),
    "compose": Entry(ComposeOptions, ComposeLauncher),
    "ssh": Entry(SshOptions, SshLauncher),
    "netns": Entry(NetnsOptions, NetnsLauncher),
    "slurm": Entry(SlurmOptions, SlurmLauncher),
    "k8s": Entry(K8sOptions, K8sLauncher),
}
LAUNCHERS = tuple(TABLE)
FLAGS_TITLE = "launcher options"
_WHOLE = re.compile(r"-?[0-9]{1,9}")   # a whole number as a flag's text; bounds are the class's
FLAGS_DESCRIPTION = (
    "Each only with the launchers it names (another is refused). Each can also be set by "
    f"the environment variable {ENV_PREFIX}<FLAG> (e.g. {ENV_PREFIX}PARTITION for "
    "--partition): a flag given wins, an empty variable is unset, and a variable of an "
    "option the chosen launcher does not take is ignored.")


def build(name: str, options: object) -> Launcher:
    """The launcher called ``name``, from its options section (checked where it was built).
    Checks that need the host (an image present, root for namespaces) run in its
    ``preflight``, before any job starts."""
    if name not in TABLE:
        raise ValueError(f"unknown launcher {name!r}")
    return TABLE[name].launcher(options)


@dataclasses.dataclass(frozen=True, slots=True)
class SharedFlag:
    """One command-line flag and the launchers that declare it, each with its field."""

    flag: str
    fields: dict[str, dataclasses.Field]   # launcher name -> its field

    @property
    def launchers(self) -> list[str]:
        return list(self.fields)

    def help(self) -> str:
        texts = {name: field.metadata["help"] for name, field in self.fields.items()}
        if len(set(texts.values())) == 1:
            return f"{', '.join(texts)}: {next(iter(texts.values()))}"
        return "; ".join(f"{name}: {text}" for name, text in texts.items())

    def choices(self) -> list[str] | None:
        every = [c for f in self.fields.values() for c in f.metadata.get("choices") or ()]
        return list(dict.fromkeys(every)) or None

    def argparse_type(self) -> Callable[[str], Any]:
        """int or Path where every launcher's field is one and none parses its own text;
        else the text, converted per launcher (``_convert``)."""
        kinds = {None if f.metadata.get("parse") else _base_type(name, f)
                 for name, f in self.fields.items()}
        kind = kinds.pop() if len(kinds) == 1 else None
        return kind if kind in (int, Path) else str


def shared_flags() -> dict[str, SharedFlag]:
    """Every launcher flag, in the order the table declares them."""
    flags: dict[str, SharedFlag] = {}
    for name, entry in TABLE.items():
        for field in flag_fields(entry.options):
            flags.setdefault(flag_name(field), SharedFlag(flag_name(field), {})).fields[name] \
                = field
    return flags


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Every launcher's flags, once each, in one group; an absent flag is absent from the
    parsed namespace (``given``), so that it can be told apart from a default."""
    group = parser.add_argument_group(FLAGS_TITLE, FLAGS_DESCRIPTION)
    for shared in shared_flags().values():
        choices = shared.choices()
        # The dest is the flag itself: argparse would name the value --IMAGE after it.
        metavar = None if choices else shared.flag[2:].upper().replace("-", "_")
        group.add_argument(shared.flag, dest=shared.flag, default=argparse.SUPPRESS,
                           type=shared.argparse_type(), choices=choices, metavar=metavar,
                           help=shared.help())


def given(namespace: argparse.Namespace) -> dict[str, Any]:
    """The launcher flags given on the command line, by flag (``--partition``)."""
    flags = shared_flags()
    return {key: value for key, value in vars(namespace).items() if key in flags}


def refuse_foreign(name: str, flags: Mapping[str, Any]) -> None:
    """ConfigError for the first flag given that launcher ``name`` does not take."""
    shared = shared_flags()
    for flag, value in flags.items():
        if name not in shared[flag].fields:
            raise ConfigError(flag, value, f"only with --launcher {_or(shared[flag].launchers)}")


def from_environment(name: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings of launcher ``name`` from the environment (``BENCH_LAUNCHER_*``), by
    flag: empty ones are unset, values outside the flag's choices are refused naming the
    variable."""
    settings: dict[str, Any] = {}
    for field in flag_fields(TABLE[name].options):
        variable = env_name(field)
        value = environ.get(variable, "")
        if not value:
            continue
        choices = field.metadata.get("choices")
        if choices and value not in choices:
            raise ConfigError(variable, shown(value), f"one of {', '.join(choices)}")
        settings[flag_name(field)] = _convert(name, field, value, variable)
    return settings


def options_from(name: str, flags: Mapping[str, Any], context: LaunchContext | None = None,
                 environ: Mapping[str, str] | None = None) -> Any:
    """Launcher ``name``'s options: the flags given (by flag, as text or as argparse typed
    them; None is not given), else its settings from ``environ`` (default: this
    process's), else each field's default; derived fields from ``context``. Refuses, with
    ConfigError, a flag the launcher does not take and any value its options class does
    not accept."""
    if name not in TABLE:
        raise ConfigError("--launcher", name, f"one of {', '.join(LAUNCHERS)}")
    flags = {flag: value for flag, value in flags.items() if value is not None}
    refuse_foreign(name, flags)
    cls, context = TABLE[name].options, context or LaunchContext()
    settings = from_environment(name, os.environ if environ is None else environ)
    values: dict[str, Any] = {}
    for field in flag_fields(cls):
        flag = flag_name(field)
        if flag in flags:
            values[field.name] = _convert(name, field, flags[flag], flag)
        elif flag in settings:
            values[field.name] = settings[flag]
        elif field.metadata.get("context_default"):
            values[field.name] = getattr(context, field.metadata["context_default"])
    for field in derived_fields(cls):
        values[field.name] = getattr(context, field.metadata["derived"])
    return cls(**values)


def _convert(name: str, field: dataclasses.Field, value: Any, setting: str) -> Any:
    """A flag's value for its field: its own ``parse`` of the text, else the text as the
    field's type. ConfigError names ``setting`` (the flag, or the environment variable)."""
    if not isinstance(value, str):
        return value   # argparse typed it already (int, Path)
    parse = field.metadata.get("parse")
    if parse is not None:
        return parse(value, setting)
    kind = _base_type(name, field)
    if kind is int:
        if not _WHOLE.fullmatch(value.strip()):
            raise ConfigError(setting, shown(value) or "''", "must be a whole number")
        return int(value)
    return Path(value) if kind is Path else value


def _base_type(name: str, field: dataclasses.Field) -> type:
    """``int | None`` -> int, ``Path`` -> Path: the type a flag's text becomes."""
    hint = typing.get_type_hints(TABLE[name].options)[field.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def _or(names: Iterable[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
