"""Dataclass fields that double as command-line flags.

Each config field carries its flag's help text in its metadata, so the default, the type
and the help live in one place; ``add_flags`` turns a config class into argparse flags and
``from_namespace`` builds the instance back, which runs its validation.
"""
from __future__ import annotations

import argparse
import dataclasses
import typing
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A user error in the configuration: names the flag, the bad value and what is allowed."""

    def __init__(self, flag: str, value: object, allowed: str):
        self.flag, self.value, self.allowed = flag, value, allowed
        super().__init__(f"{flag}={value!s}: {allowed}")


def option(default: Any = None, help: str = "", *, choices: typing.Sequence[str] | None = None,
           metavar: str | None = None) -> Any:
    """A config field that is also a CLI flag (``--field-name``) with this help text."""
    return dataclasses.field(
        default=default, metadata={"help": help, "choices": choices, "metavar": metavar}
    )


def flag_of(field_name: str) -> str:
    """The CLI flag for a config field, used in error messages."""
    return "--" + field_name.replace("_", "-")


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
            kwargs["type"] = kind if kind in (int, float, Path) else str
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
