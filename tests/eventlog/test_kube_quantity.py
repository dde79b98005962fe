"""Kubernetes quantities (eventlog/kube/quantity.py): Kubernetes' own examples, every kind of input
on which kdispatch's three former parsers disagreed (webhook/quantity.py, the reconciler's
shell/clusters/quantity.py and simulate/quantity.py), and the integers each side stores."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventlog.kube.quantity import (
    NANO,
    QuantityError,
    parse_nanos,
    parse_quantity,
    parse_resources,
    to_integer,
    to_units,
)

MAX = 2**63 - 1  # Kubernetes' cap on binary-suffixed values
GI = 2**30

# ---- Kubernetes' own examples (apimachinery resource/quantity_test.go, TestQuantityParse) ------

KUBERNETES_EXAMPLES = [
    ("0", 0),
    ("0n", 0),
    ("0Ki", 0),
    ("1", 1),
    ("1Ki", 1024),
    ("7Mi", 7 * 2**20),
    ("6Gi", 6 * GI),
    ("5Ti", 5 * 2**40),
    ("4Pi", 4 * 2**50),
    ("3Ei", 3 * 2**60),
    ("5n", Fraction(5, 10**9)),
    ("4u", Fraction(4, 10**6)),
    ("3m", Fraction(3, 1000)),
    ("8k", 8000),
    ("50k", 50_000),
    ("7M", 7 * 10**6),
    ("6G", 6 * 10**9),
    ("300T", 300 * 10**12),
    ("2P", 2 * 10**15),
    ("1E", 10**18),
    ("12E", 12 * 10**18),
    ("1E-3", Fraction(1, 1000)),
    ("1e3", 1000),
    ("1E18", 10**18),
    ("100.035k", 100_035),
    ("0.0005k", Fraction(1, 2)),
    ("0.5e-2", Fraction(5, 1000)),
    ("1.3E+6", 1_300_000),
    ("1.53E12", 1_530_000_000_000),
    ("6.987654321G", 6_987_654_321),
    ("1.01E", 101 * 10**16),
    # Finer than a nano-unit: rounded up to the next one.
    ("3.001n", Fraction(4, 10**9)),
    ("1.1E-9", Fraction(2, 10**9)),
    ("0.0000000001", Fraction(1, 10**9)),
    ("0.9n", Fraction(1, 10**9)),
    ("0.00000012345", Fraction(124, 10**9)),
    ("0.000000000001Ki", Fraction(2, 10**9)),
    # Binary-suffixed values are capped at 2^63-1.
    ("9Ei", MAX),
    ("9223372036854775807Ki", MAX),
    ("100.035Ki", Fraction(10243584, 100)),
    ("0.5Mi", 2**19),
    ("0.05Gi", Fraction(536870912, 10)),
    (".001", Fraction(1, 1000)),
    (".0001k", Fraction(1, 10)),
    ("1.", 1),
    ("1.G", 10**9),
]


@pytest.mark.parametrize(("text", "value"), KUBERNETES_EXAMPLES)
def test_kubernetes_examples(text: str, value: int | Fraction) -> None:
    assert parse_quantity(text) == value
    # As Kubernetes tests them too: with a sign in front (rounding and the cap act on the magnitude).
    assert parse_quantity("+" + text) == value
    assert parse_quantity("-" + text) == -value


@pytest.mark.parametrize(
    "text", ["1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-"]
)
def test_kubernetes_refusals(text: str) -> None:
    with pytest.raises(QuantityError, match="is not a quantity"):
        parse_quantity(text)


def test_spaces_around_are_ignored_as_quantitys_json_decoding_trims_them() -> None:
    assert parse_quantity(" 1") == parse_quantity("1 ") == parse_quantity(" 2Gi ") / (2 * GI) == 1


@pytest.mark.parametrize(
    ("value", "exact"), [(3, 3), (0.25, Fraction(1, 4)), (1e16, 10**16), (1e-05, Fraction(1, 10**5))]
)
def test_yaml_and_json_numbers_are_quantities(value: float, exact: int | Fraction) -> None:
    assert parse_quantity(value) == exact


# ---- where the three former parsers disagreed, and what Kubernetes says -------------------------


@pytest.mark.parametrize(
    ("resource", "text", "stored"),
    [
        ("cpu", "1n", 1),
        ("cpu", "1u", 1),
        ("memory", "0.5n", 1),
        ("cpu", "5.u", 1),
        ("cpu", "+1n", 1),
        ("cpu", "12345678901234567890n", 12_345_678_901_235),
        ("memory", "12345678901234567890u", 12_345_678_901_235),
    ],
)
def test_nano_and_micro_suffixes(resource: str, text: str, stored: int) -> None:
    """The simulator's parser refused ``n`` and ``u``; Kubernetes accepts them (``1n`` of cpu
    is 1 millicore: ``MilliValue()`` rounds up)."""
    assert to_units(resource, text) == stored


@pytest.mark.parametrize(
    ("text", "meant"),
    [("1 Gi", "1Gi"), ("1.5 Gi", "1.5Gi"), ("0 Gi", "0Gi"), ("1 m", "1m"), ("5. Gi", "5.Gi")],
)
def test_no_space_between_number_and_suffix(text: str, meant: str) -> None:
    """The simulator's parser accepted ``1 Gi``; Kubernetes refuses it."""
    with pytest.raises(QuantityError, match=f"did you mean '{meant}'"):
        parse_quantity(text)


@pytest.mark.parametrize(
    "text", ["1e3Ki", "1E-3m", "1e+3G", "1.5e3u", "0.5e3Ki", "5.e3Ki", "1e3n", "1E3E", "0e3Ki"]
)
def test_an_exponent_and_a_suffix_together_are_refused(text: str) -> None:
    """The reconciler's parser read ``1e3Ki`` as 1024000 (and the simulator's too, except with
    n and u); Kubernetes takes one suffix at most."""
    with pytest.raises(QuantityError, match="one suffix at most"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("-1", -1),
        ("-0.5", Fraction(-1, 2)),
        ("-1Gi", -GI),
        (-1, -1),
        ("-0.5m", Fraction(-1, 2000)),
        ("-1e-12", Fraction(-1, 10**9)),
    ],
)
def test_negative_quantities(text: object, value: Fraction) -> None:
    """Kubernetes parses them (its validation refuses negative requests later; ``-1e-12`` is
    ``-1n``: the magnitude is rounded up, where the webhook's parser rounded to 0). As stored
    integers the three parsers disagreed: the webhook floored to 0, the reconciler's parser kept
    a negative (-1000 millicores for ``-1``), the simulator's refused. Now: a single amount
    below 0 is refused, the webhook's sums (sent before the API server validates) floor at 0."""
    assert parse_quantity(text) == value
    with pytest.raises(QuantityError, match="is negative"):
        to_units("cpu", text)
    assert to_integer("cpu", parse_nanos(text)) == 0


@pytest.mark.parametrize("suffix", ["Ki", "Ti", "Ei"])
def test_binary_values_are_capped_as_kubernetes_caps_them(suffix: str) -> None:
    """``12345678901234567890Ti`` is 2^63-1 bytes to Kubernetes. The webhook's parser kept the
    exact value; the reconciler's and the simulator's lost digits past Decimal's 28 (…1710000
    instead of …1712640), so no two of them agreed."""
    assert to_units("memory", f"12345678901234567890{suffix}") == MAX
    assert to_units("cpu", f"12345678901234567890{suffix}") == MAX * 1000
    assert parse_quantity(f"-12345678901234567890{suffix}") == -MAX
    assert parse_quantity("12345678901234567890e3") == 12345678901234567890 * 1000  # decimal: no cap


@pytest.mark.parametrize("text", ["1e999", "1e-999", "1E41"])
def test_exponents_beyond_40_are_refused(text: str) -> None:
    """A deliberate refusal: Kubernetes reads ``1e999`` as 10^999 and ``1e-999`` as 1n, and the
    reconciler's and simulator's parsers built the 1000-digit number; no real quantity needs it,
    and a hostile ``1e999999999`` would cost a billion digits. The webhook's parser refused too."""
    with pytest.raises(QuantityError, match="out of range"):
        parse_quantity(text)


# ---- the integers kdispatch stores ------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "text", "expected"),
    [
        ("cpu", "1", 1000),
        ("cpu", "250m", 250),
        ("cpu", "0.1", 100),
        ("cpu", "1n", 1),  # MilliValue rounds up
        ("cpu", "1500u", 2),
        ("cpu", 3, 3000),
        ("memory", "1Gi", GI),
        ("memory", "1.5", 2),  # Value() rounds up
        ("memory", "100m", 1),
        ("nvidia.com/gpu", "2", 2),
        ("nvidia.com/gpu", 8, 8),
    ],
)
def test_stored_integers(resource: str, text: object, expected: int) -> None:
    """cpu in millicores, everything else in units; the webhook sums nano-units first, the
    reconciler converts each amount: both the same for one amount."""
    assert to_integer(resource, parse_nanos(text)) == expected
    assert to_units(resource, text) == expected


def test_resource_lists() -> None:
    assert parse_resources({"memory": "1Gi", "cpu": "500m"}) == {"cpu": 500, "memory": GI}
    assert list(parse_resources({"memory": "1", "cpu": "1"})) == ["cpu", "memory"]
    assert parse_resources(None) == {}
    with pytest.raises(QuantityError, match=r"^memory: 'lots' is not a quantity"):
        parse_resources({"cpu": "1", "memory": "lots"})


@pytest.mark.parametrize(
    ("value", "nanos"),
    [
        ("1", NANO),
        ("1n", 1),
        ("1e-12", 1),
        ("-1e-12", -1),
        (2, 2 * NANO),
        (0.5, NANO // 2),
        ("1Ki", 1024 * NANO),
    ],
)
def test_nano_units(value: object, nanos: int) -> None:
    assert parse_nanos(value) == nanos


# ---- errors a person can act on ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("", "'' is not a quantity: expected a number"),
        ("m", "'m' is not a quantity"),
        ("1x", "'1x' is not a quantity: expected a number with at most one suffix: n u m k M G T P E"),
        ("1K", "did you mean '1k' (powers of 10) or '1Ki' (powers of 2)?"),
        ("4GB", "did you mean '4G' (powers of 10) or '4Gi' (powers of 2)?"),
        ("2gi", "did you mean '2Gi'?"),
        ("1MiB", "did you mean '1Mi'?"),
        ("1,5", "did you mean '1.5'?"),
        ("1e", "'1e' is not a quantity"),
        ("e3", "'e3' is not a quantity"),
        (".", "'.' is not a quantity"),  # Kubernetes' scanner reads it as 0; not in its grammar
        ("-", "'-' is not a quantity"),
        ("--1", "'--1' is not a quantity"),
        ("NaN", "'NaN' is not a quantity"),
        ("\u0661", "is not a quantity"),  # an Arabic-Indic digit one
        (float("inf"), "inf is not a quantity"),
        (True, "True is not a quantity"),
        (None, "None is not a quantity: expected a string"),
        ([1], "[1] is not a quantity: expected a string"),
        (" " * 100 + "1", "longer than 64 characters"),
    ],
)
def test_refusals_say_what_was_wrong_and_what_is_accepted(value: object, says: str) -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity(value)
    assert says in str(err.value)


def test_errors_of_one_amount_name_the_resource() -> None:
    with pytest.raises(QuantityError, match=r"^cpu: '2 cores' is not a quantity"):
        to_units("cpu", "2 cores")


@given(
    st.integers(min_value=0, max_value=10**12), st.sampled_from(["", "m", "k", "Ki", "Mi", "Gi", "M", "G"])
)
def test_integer_with_suffix_round_trips(number: int, suffix: str) -> None:
    scale = {
        "": 1,
        "m": Fraction(1, 1000),
        "k": 1000,
        "Ki": 1024,
        "Mi": 2**20,
        "Gi": 2**30,
        "M": 10**6,
        "G": 10**9,
    }
    exact = number * Fraction(scale[suffix])
    assert parse_quantity(f"{number}{suffix}") == (min(exact, MAX) if suffix.endswith("i") else exact)


@given(st.text(max_size=30))
def test_any_text_parses_or_raises_quantity_error(text: str) -> None:
    """Only QuantityError escapes, and whatever parses is a whole number of nano-units."""
    try:
        value = parse_quantity(text)
    except QuantityError:
        return
    assert (value * NANO).denominator == 1
    assert text.strip()[:1] in set("+-.0123456789")
