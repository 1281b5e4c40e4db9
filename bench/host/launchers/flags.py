"""A launcher's options as flags: the field metadata each options class declares, and the
one context of values the matrix derives for them.

An options field made with ``launcher_flag`` is a user setting: ``--flag-name`` on the
command line (or the ``flag=`` it names), with its help text and choices, and the
environment variable ``BENCH_LAUNCHER_FLAG_NAME`` as an ambient default (see
``bench.host.launchers.registry``). A field made with ``derived`` is no flag: the registry
fills it from the ``LaunchContext`` attribute it names (this host's GPUs, the most nodes of
any cell, the results directory). Everything else (poll intervals, grace periods) keeps its
default. The classes check their own values in ``__post_init__``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.options import ConfigError
from bench.topology import Topology

ENV_PREFIX = "BENCH_LAUNCHER_"
REMOTE_DIR_HELP = "this checkout's path on the hosts (default: the same path as here)"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LaunchContext:
    """What the matrix knows that a launcher's options derive from, never a user flag."""

    visible_gpus: tuple[str, ...] = ()        # this host's GPUs (bench.host.gpus)
    topologies: tuple[Topology, ...] = ()     # every cell's, for the checks that need them
    results_root: Path = Path("results")      # the directory of --results

    @property
    def most_nodes(self) -> int:
        """The most nodes of any cell (1 where no topology is known)."""
        return max((t.nodes for t in self.topologies), default=1)

    @property
    def gpu_profile(self) -> str:
        """The trainer service where none is given: gpu where this host has a GPU."""
        return "gpu" if self.visible_gpus else "cpu"


def launcher_flag(default: Any = dataclasses.MISSING, help: str = "", *,
                  flag: str | None = None, choices: Sequence[str] | None = None,
                  parse: Callable[[str, str], Any] | None = None,
                  default_factory: Callable[[], Any] | None = None,
                  context_default: str | None = None) -> Any:
    """An options field that is a user flag. ``flag``: its name where it is not the field's
    (``--link`` for ``link_bps``); ``parse(text, flag)``: the value from the flag's text
    (raises ConfigError); ``context_default``: the ``LaunchContext`` attribute that is its
    value when the flag is not given."""
    metadata = {"help": help, "flag": flag, "choices": tuple(choices) if choices else None,
                "parse": parse, "context_default": context_default}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def derived(attribute: str, default: Any = dataclasses.MISSING) -> Any:
    """An options field that is no flag: the registry fills it from ``LaunchContext``'s
    ``attribute``."""
    return dataclasses.field(default=default, metadata={"derived": attribute})


def flag_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of an options class that are user flags, in declaration order."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def derived_fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if "derived" in f.metadata]


def flag_name(field: dataclasses.Field) -> str:
    """``--partition`` for ``partition``; the field's own ``flag=`` where it has one."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def env_name(field: dataclasses.Field) -> str:
    """The environment variable of a flag: ``--partition`` -> BENCH_LAUNCHER_PARTITION."""
    return ENV_PREFIX + flag_name(field)[2:].replace("-", "_").upper()


def absolute_remote_dir(text: str, setting: str) -> str:
    """``text`` if it is an absolute path (this checkout on the other hosts) of printable
    characters with no ',' or ':', else ConfigError naming ``setting``: the directory is
    mounted by its name (pyxis's --container-mounts and Docker's -v split a mount at ','
    and ':', so /a,/:/host would add a mount of the host's root)."""
    if not text.startswith("/"):
        raise ConfigError(setting, text, "must be an absolute path on the hosts, e.g. "
                          "/srv/bench")
    if not text.isprintable() or "," in text or ":" in text:
        raise ConfigError(setting, text, "must be a path of printable characters with no "
                          "',' or ':' (a mount's separators), e.g. /srv/bench")
    return text
