"""Dataclass fields that double as command-line flags.

Each config field carries its flag's help text in its metadata, so the default, the type
and the help live in one place; ``add_flags`` turns a config class into argparse flags and
``from_namespace`` builds the instance back, which runs its validation.
"""
from __future__ import annotations

import argparse
import contextlib
import contextvars
import dataclasses
import hashlib
import json
import math
import re
import typing
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar


class _Dataclass(Protocol):
    """Any dataclass (what ``dataclasses.fields`` accepts)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


T = TypeVar("T", bound=_Dataclass)

# Unprivileged TCP ports: a benchmark has no business binding below 1024.
MIN_PORT, MAX_PORT = 1024, 65535
# A Docker image reference: [registry[:port]/]name[/name...][:tag][@sha256:digest], lower-case
# path components. Never starts with "-", so it cannot become an option of docker or compose.
_IMAGE_REF = re.compile(
    r"^(?:[a-zA-Z0-9][a-zA-Z0-9.-]*(?::[0-9]{1,5})?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$")


def one_line(text: str) -> str:
    """``text`` with every character a terminal line does not show as itself (a newline, a
    control character, a lone surrogate) written as its Python escape: a message holding a
    user's value stays the one line it is meant to be."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


class ConfigError(ValueError):
    """A user error in the configuration: names the flag, the bad value and what is allowed,
    on one line whatever the value holds (``one_line``)."""

    def __init__(self, flag: str, value: object, allowed: str):
        self.flag, self.value, self.allowed = flag, value, allowed
        super().__init__(one_line(f"{flag}={value!s}: {allowed}"))


def option(default: Any = None, help: str = "", *, choices: typing.Sequence[str] | None = None,
           metavar: str | None = None) -> Any:
    """A config field that is also a CLI flag (``--field-name``) with this help text."""
    return dataclasses.field(
        default=default, metadata={"help": help, "choices": choices, "metavar": metavar}
    )


def flag_of(field_name: str) -> str:
    """The CLI flag for a config field, used in error messages."""
    return "--" + field_name.replace("_", "-")


def finite_float(text: str) -> float:
    """argparse type for real-valued flags: ``nan`` and ``inf`` parse as floats but would
    disable a deadline or poison a record, so they are refused where they enter."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


finite_float.__name__ = "finite number"  # argparse names the type in its error


def _base_type(hint: Any) -> type:
    """``int | None`` -> ``int``; ``Path`` -> ``Path``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def add_flags(parser: argparse.ArgumentParser, cls: type, title: str) -> None:
    """Add one flag per field of the dataclass ``cls`` to ``parser``, under ``title``."""
    group = parser.add_argument_group(title)
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        meta = field.metadata
        if "help" not in meta:
            continue  # a derived field, not a flag
        kind = _base_type(hints[field.name])
        default_text = "" if field.default is None else " (default: %(default)s)"
        kwargs: dict[str, Any] = {"dest": field.name, "default": field.default,
                                  "help": meta["help"] + default_text}
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = {int: int, float: finite_float, Path: Path}.get(kind, str)
            if meta.get("choices"):
                kwargs["choices"] = list(meta["choices"])
            if meta.get("metavar"):
                kwargs["metavar"] = meta["metavar"]
        group.add_argument(flag_of(field.name), **kwargs)


def from_namespace(cls: type[T], namespace: argparse.Namespace) -> T:
    """Build ``cls`` from the parsed flags; its ``__post_init__`` validates."""
    names = [f.name for f in dataclasses.fields(cls) if "help" in f.metadata]
    return cls(**{name: getattr(namespace, name) for name in names})


def require(condition: bool, field_name: str, value: object, allowed: str) -> None:
    """Raise ConfigError for ``field_name`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(flag_of(field_name), value, allowed)


def require_range(value: float | None, field_name: str, low: float, high: float, *,
                  low_open: bool = False, optional: bool = False) -> None:
    """``value`` is a finite number in [low, high] (or (low, high] with ``low_open``); None
    passes where ``optional``. Every number that enters gets a bound: a huge value is as
    sure a typo as a negative one, and nan or inf would slip past ``<`` comparisons."""
    if value is None and optional:
        return
    in_range = isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and (value > low if low_open else value >= low) \
        and value <= high
    if isinstance(value, int) and not low_open and low in (0, 1):
        allowed = f"must be {'a positive integer' if low else '0 or more'}, at most {high:,}"
    else:
        allowed = (f"must be a number in ({low:g}, {high:,.10g}]" if low_open
                   else f"must be in {low:,.10g}-{high:,.10g}")
    require(in_range, field_name, value, allowed)


def check_image(reference: str, setting: str) -> str:
    """``reference`` if it is a well-formed image reference, else ConfigError."""
    if len(reference) > 255 or not _IMAGE_REF.fullmatch(reference):
        raise ConfigError(setting, reference or "''", "is not an image reference such as "
                          "bench-trainer:cpu or registry.example:5000/lab/trainer:1.0")
    return reference


_ON_HEAD = contextvars.ContextVar("bench_config_on_head", default=False)


@contextlib.contextmanager
def on_head():
    """Parse a rank's config where the job is launched from, not where it runs: only the
    pure checks (types, ranges, combinations) apply, because the data directory, the
    results path and the devices are the node's, not this host's."""
    token = _ON_HEAD.set(True)
    try:
        yield
    finally:
        _ON_HEAD.reset(token)


def checks_environment() -> bool:
    """Whether config validation may look at files and devices (False under ``on_head``)."""
    return not _ON_HEAD.get()


def settings_dict(cfg: Any) -> dict:
    """A workload config's fields as JSON values (paths as text): its record's ``config``."""
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))


def settings_hash(cfg: Any) -> str:
    """The hash of a workload config's fields but where its record goes (``results``): two
    runs of the same workload share it wherever they write."""
    resolved = settings_dict(cfg)
    resolved.pop("results")
    return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:16]
