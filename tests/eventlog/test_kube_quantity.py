"""The Kubernetes quantity parser: exact values, Kueue's integer conversion (rounding up)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.quantity import NANO, QuantityError, parse_nanos, parse_quantity, to_integer


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Fraction(1)),
        ("500m", Fraction(1, 2)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("1.", Fraction(1)),
        ("2Ki", Fraction(2048)),
        ("1Mi", Fraction(2**20)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1Ei", Fraction(2**60)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("1G", Fraction(10**9)),
        ("1E", Fraction(10**18)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("1e-3", Fraction(1, 1000)),
        ("25n", Fraction(25, 10**9)),
        ("3u", Fraction(3, 10**6)),
        ("-1", Fraction(-1)),
        ("+2", Fraction(2)),
        (" 2Gi ", Fraction(2 * 2**30)),
        (3, Fraction(3)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_parses_exactly(text: object, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text", ["", "m", "1x", "1KiB", "1ki", "1 Gi", "1e", "e3", "1.2.3", "--1", "1e999", "NaN", True, None, [1], "\u0661", " " * 100 + "1"]
)
def test_rejects(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("resource", "text", "expected"),
    [
        ("cpu", "1", 1000),
        ("cpu", "250m", 250),
        ("cpu", "0.1", 100),
        ("cpu", "1n", 1),  # MilliValue rounds up
        ("cpu", "1500u", 2),
        ("memory", "1Gi", 2**30),
        ("memory", "1.5", 2),  # Value() rounds up
        ("memory", "100m", 1),
        ("nvidia.com/gpu", "2", 2),
        ("memory", "-1Gi", 0),  # negatives are floored to 0
    ],
)
def test_integer_conversion(resource: str, text: str, expected: int) -> None:
    assert to_integer(resource, parse_nanos(text)) == expected


@pytest.mark.parametrize(
    ("value", "nanos"),
    [("1", NANO), ("1n", 1), ("1e-12", 1), ("-1e-12", 0), (2, 2 * NANO), (0.5, NANO // 2), ("1Ki", 1024 * NANO)],
)
def test_nano_units_round_finer_values_up_as_kubernetes_does(value: object, nanos: int) -> None:
    assert parse_nanos(value) == nanos


@given(st.integers(min_value=0, max_value=10**12), st.sampled_from(["", "m", "k", "Ki", "Mi", "Gi", "M", "G"]))
def test_integer_with_suffix_round_trips(number: int, suffix: str) -> None:
    scale = {"": 1, "m": Fraction(1, 1000), "k": 1000, "Ki": 1024, "Mi": 2**20, "Gi": 2**30, "M": 10**6, "G": 10**9}
    assert parse_quantity(f"{number}{suffix}") == number * Fraction(scale[suffix])


@given(st.text(max_size=30))
def test_any_text_parses_or_raises_quantity_error(text: str) -> None:
    """Only QuantityError escapes, and whatever parses is a finite exact number."""
    try:
        value = parse_quantity(text)
    except QuantityError:
        return
    assert isinstance(value, Fraction)
    assert text.strip()[:1] in set("+-.0123456789")
