"""bench.spread: the deciles a record keeps of a measured time."""
from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from bench.spread import deciles

times = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


def test_deciles_of_eleven_evenly_spaced_times_are_the_inner_nine():
    assert deciles([float(k) for k in range(11)]) == [float(k) for k in range(1, 10)]


def test_under_two_samples_there_is_no_spread():
    assert deciles([]) is None and deciles([0.5]) is None


def test_dust_under_a_nanosecond_reads_as_none():
    assert deciles([0.0, 1e-12, 1e-12, 2e-12]) == [0.0] * 9


@given(st.lists(times, min_size=2, max_size=300))
def test_deciles_are_nine_ascending_figures_within_the_samples(values):
    cuts = deciles(values)
    assert cuts is not None and len(cuts) == 9
    assert all(a <= b or math.isclose(a, b, rel_tol=1e-12) for a, b in
               zip(cuts, cuts[1:], strict=False))
    assert all(min(values) - 1e-9 <= cut <= max(values) + 1e-9 for cut in cuts)
    # What a record may hold: the schemas refuse a positive figure under a nanosecond.
    assert all(cut == 0.0 or cut >= 1e-9 for cut in cuts)
