"""Sizes and link rates as people write them: ``512MiB``, ``1gbit``.

One parser each, so the all-reduce sweep, the emulated links and the predictor read the
same spellings the same way. Rates are bits per second (links are sold in bits); sizes and
bandwidth figures are bytes (what a tensor holds), GB/s meaning 1e9 bytes per second as in
nccl-tests.
"""
from __future__ import annotations

import re

from bench.options import ConfigError

_SIZE_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30,
               "kb": 10**3, "mb": 10**6, "gb": 10**9}
_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
_NUMBER = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")


def _parse(text: str, flag: str, units: dict[str, int], examples: str, least: int,
           least_text: str, most: int, most_text: str) -> int:
    match = _NUMBER.fullmatch(str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in units:
        raise ConfigError(flag, text, f"a {examples}")
    value = int(float(match.group(1)) * units[unit])
    if value < least:
        raise ConfigError(flag, text, f"must be at least {least_text}")
    if value > most:
        raise ConfigError(flag, text, f"must be at most {most_text}")
    return value


def parse_size(text: str, flag: str) -> int:
    """``"512MiB"`` -> 536870912. Raises ConfigError naming ``flag``."""
    return _parse(text, flag, _SIZE_UNITS, "size such as 1KiB, 64MiB or 1GiB", 1, "1 byte",
                  1 << 40, "1TiB")


def parse_rate(text: str, flag: str) -> int:
    """``"1gbit"`` -> 1e9 bits per second (tc's spelling). Raises ConfigError naming ``flag``."""
    return _parse(text, flag, _RATE_UNITS, "link rate such as 1gbit, 5gbit or 100mbit",
                  1000, "1kbit", 10**12, "1000gbit")


def format_size(size: float) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            value = size / factor
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size:.0f} B"


def format_rate(bits_per_s: float) -> str:
    for unit, factor in (("Gbit", 1e9), ("Mbit", 1e6), ("kbit", 1e3)):
        if bits_per_s >= factor:
            return f"{bits_per_s / factor:g} {unit}/s"
    return f"{bits_per_s:g} bit/s"


def tc_rate(bits_per_s: int) -> str:
    """The rate in tc's spelling, as short as exact: 1000000000 -> ``1gbit``."""
    for unit, factor in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bits_per_s % factor == 0:
            return f"{bits_per_s // factor}{unit}"
    return f"{bits_per_s}bit"
