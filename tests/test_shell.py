"""The one shell renderer: every word quoted, so the line splits back to its argv."""
from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.options import ConfigError
from bench.shell import command_line, single_line, words

# Hostile words: quotes, $(), backticks, newlines, control characters (no NUL: no argv
# can hold one), unicode, up to 4 KiB.
HOSTILE = st.one_of(
    st.text(st.characters(blacklist_characters="\x00"), max_size=64),
    st.sampled_from(["$(touch pwned)", "`touch pwned`", "a;b", "'", '"', "\n", "-rf", ""]),
    st.text(st.characters(blacklist_characters="\x00"), min_size=4096, max_size=4096),
)


@given(st.lists(HOSTILE, min_size=1, max_size=6))
def test_words_split_back_to_the_argv(argv):
    assert shlex.split(words(argv)) == argv


@given(st.lists(HOSTILE, min_size=1, max_size=4), st.dictionaries(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), HOSTILE, max_size=3),
    HOSTILE)
def test_command_line_splits_back(argv, env, cwd):
    line = command_line(argv, env=env, cwd=cwd)
    expected = (["env", *(f"{k}={v}" for k, v in sorted(env.items()))] if env else []) + argv
    assert shlex.split(line) == ["cd", cwd, "&&", *expected]


def test_an_env_name_that_is_not_an_identifier_is_refused():
    with pytest.raises(ConfigError, match="environment variable name"):
        command_line(["true"], env={"A;B": "x"})


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "tab\there", "bell\x07", "c1\x85", "x\x7f"])
def test_single_line_refuses_control_characters(value):
    with pytest.raises(ConfigError, match="--results"):
        single_line("--results", value)


def test_single_line_keeps_ordinary_text():
    assert single_line("--name", "résumé job-1 (α)") == "résumé job-1 (α)"
