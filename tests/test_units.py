"""Sizes and link rates as people write them."""
from __future__ import annotations

import pytest

from bench.options import ConfigError
from bench.units import format_rate, format_size, parse_rate, parse_size, tc_rate


@pytest.mark.parametrize("text, expected", [
    ("512MiB", 512 * 2**20), ("1.5KiB", 1536), ("64", 64), ("2 GB", 2 * 10**9), ("8b", 8)])
def test_sizes(text, expected):
    assert parse_size(text, "--max-size") == expected


@pytest.mark.parametrize("text, expected", [
    ("1gbit", 10**9), ("5Gbit", 5 * 10**9), ("100mbit", 10**8), ("2.5gbit", 25 * 10**8)])
def test_rates(text, expected):
    assert parse_rate(text, "--link") == expected


@pytest.mark.parametrize("parse, text, hint", [
    (parse_size, "12 parsecs", "a size such as"), (parse_size, "0.1", "at least 1 byte"),
    (parse_rate, "fast", "a link rate such as"), (parse_rate, "5gb", "a link rate such as"),
    (parse_rate, "999bit", "at least 1kbit")])
def test_bad_spellings_name_the_flag_and_the_fix(parse, text, hint):
    with pytest.raises(ConfigError) as error:
        parse(text, "--flag")
    assert str(error.value).startswith(f"--flag={text}: ") and hint in str(error.value)


def test_formats_read_back():
    assert format_size(64 * 2**20) == "64 MiB" and format_size(1536) == "1.5 KiB"
    assert format_rate(5 * 10**9) == "5 Gbit/s" and tc_rate(5 * 10**9) == "5gbit"
