"""The one percentile: nearest rank through numpy, equal to the hand-written ones it replaced."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.edge.percentile import percentile


def nearest_rank_before(sorted_values: list[int], p: float) -> int | None:
    """simulate/metrics.py's percentile before the redesign (the tables' figures)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def outcomes_before(sorted_ms: list[int], p: int) -> int | None:
    """shell/outcomes.py's _pct_s before the redesign (the what-if summary), before its /1000."""
    if not sorted_ms:
        return None
    return sorted_ms[min(len(sorted_ms) - 1, max(0, (len(sorted_ms) * p + 99) // 100 - 1))]


waits = st.lists(st.integers(min_value=0, max_value=10**12), max_size=300)


@given(waits, st.floats(min_value=0, max_value=100, allow_nan=False))
def test_equals_the_simulate_tables_nearest_rank(values: list[int], p: float) -> None:
    assert percentile(values, p) == nearest_rank_before(sorted(values), p)


@given(waits, st.integers(min_value=0, max_value=100))
def test_equals_the_whatif_summary_percentile(values: list[int], p: int) -> None:
    assert percentile(values, p) == outcomes_before(sorted(values), p)


def test_is_a_value_that_occurred_of_the_same_type() -> None:
    values = list(range(100, 0, -1))  # any order
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == (50, 95, 99)
    assert percentile(values, 0) == 1 and percentile(values, 100) == 100
    assert type(percentile([3, 1, 2], 50)) is int and percentile([0.5, 2.5], 50) == 0.5
    assert percentile([7], 99) == 7 and percentile([], 50) is None


def test_a_fraction_instead_of_a_percent_is_refused() -> None:
    with pytest.raises(ValueError, match=r"outside 0\.\.100"):
        percentile([1, 2], 101)
