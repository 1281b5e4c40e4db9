"""The one way a command line reaches a shell or a line-based file.

Every line the stack hands to a shell (ssh remote lines, sbatch scripts, Compose and torchrun
lines, the Kubernetes container command) is rendered here from an argv: each word quoted
with ``shlex.quote``, so the line splits back (``shlex.split``) to exactly that argv and no
word can become shell syntax. Values that go into a line-based format (an ``#SBATCH``
directive, an env file) are checked by ``single_line`` first: no newline, no control
character, whatever the rest of the value is.

No torch here: this is the shared core.
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path

from bench.options import ConfigError

# An environment variable's name, as POSIX shells accept it on the left of '='.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# C0 controls (newline and tab included), DEL and the C1 controls.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def words(argv: Iterable[object]) -> str:
    """``argv`` as one shell line: every word quoted, nothing else."""
    return shlex.join(str(word) for word in argv)


def command_line(argv: Iterable[object], *, env: Mapping[str, str] | None = None,
                 cwd: str | Path | None = None) -> str:
    """One shell line that runs ``argv`` in ``cwd`` with ``env`` added: ``cd DIR && env
    K=V ... argv``, every word quoted. The env names are checked (a name is not quoted, so
    it must be a plain identifier)."""
    line = []
    if env:
        line += ["env", *(assignment(name, value) for name, value in sorted(env.items()))]
    line += [str(word) for word in argv]
    rendered = words(line)
    if cwd is not None:
        rendered = f"cd {shlex.quote(str(cwd))} && {rendered}"
    return rendered


def assignment(name: str, value: object) -> str:
    """``NAME=value`` as one word for ``env``; the name must be an identifier."""
    if not _ENV_NAME.fullmatch(name):
        raise ConfigError("environment variable name", name or "''",
                          "must be letters, digits and _ (not starting with a digit)")
    return f"{name}={value}"


def single_line(setting: str, value: object) -> str:
    """``value`` as text, refused (ConfigError naming ``setting``) when it holds a newline
    or any other control character: what goes into a line-based file must stay one line."""
    text = str(value)
    bad = _CONTROL.search(text)
    if bad:
        raise ConfigError(setting, text.encode("unicode_escape").decode("ascii")[:120],
                          f"holds the control character {bad.group()!r}: give it on one "
                          "line, without control characters")
    return text
