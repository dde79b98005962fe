"""The one duration parser: Go's ``time.ParseDuration`` examples, kdispatch's integers of ms, and
errors that say what is wrong and what would do."""

from __future__ import annotations

import pytest

from eventlog.kube.duration import DurationError, parse_duration_ms

# From Go's time/time_test.go (parseDurationTests), the ones that are whole milliseconds.
GO_EXAMPLES = {
    "0": 0,
    "5s": 5_000,
    "30s": 30_000,
    "1478s": 1_478_000,
    "+5s": 5_000,
    "-0": 0,
    "+0": 0,
    "5.0s": 5_000,
    "5.6s": 5_600,
    "5.s": 5_000,
    ".5s": 500,
    "1.0s": 1_000,
    "1.00s": 1_000,
    "1.004s": 1_004,
    "1.0040s": 1_004,
    "100.00100s": 100_001,
    "13ms": 13,
    "14s": 14_000,
    "15m": 900_000,
    "16h": 57_600_000,
    "3h30m": 12_600_000,
    "10.5s4m": 250_500,
    "39h9m14.425s": 140_954_425,
    "0.100000000000000000000h": 360_000,
    "1000us": 1,
    "1000µs": 1,  # U+00B5 micro sign
    "1000μs": 1,  # U+03BC Greek mu
    "1000000ns": 1,
    # the task's own
    "250ms": 250,
    "90s": 90_000,
    "5m": 300_000,
    "1h30m": 5_400_000,
    "1.5h": 5_400_000,
    "2h45m30s": 9_930_000,
    "2562047h": 2_562_047 * 3_600_000,  # near Go's limit, still whole
}


@pytest.mark.parametrize(("text", "ms"), GO_EXAMPLES.items())
def test_go_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


def test_integers_are_milliseconds_as_yaml_numbers_and_as_digit_strings() -> None:
    """Not Go (which wants a unit after anything but 0): what kdispatch configs and annotations
    have always accepted."""
    assert parse_duration_ms(1500) == 1500
    assert parse_duration_ms("1500") == 1500
    assert parse_duration_ms(" 90s\n") == 90_000  # a YAML block scalar's newline


# Go's own error cases (those not taken as milliseconds above) and kdispatch's limits.
NOT_DURATIONS = ["", "-", "s", ".", "-.", ".s", "+.s", "1.5", "\x85\x85", "\xffff", "hello \xffff world", "1e3s", "5 s s"]


@pytest.mark.parametrize("text", NOT_DURATIONS)
def test_not_durations_say_what_is_accepted(text: str) -> None:
    with pytest.raises(DurationError) as err:
        parse_duration_ms(text)
    assert str(err.value).startswith(f"{text!r} is not a duration; use e.g. 90s, 5m, 1h30m, 250ms or an integer of ms")


@pytest.mark.parametrize(
    ("value", "problem", "suggestion"),
    [
        ("5 min", "is not a duration", "5m"),
        ("30 seconds", "is not a duration", "30s"),
        ("2hours", "is not a duration", "2h"),
        ("90 s", "is not a duration", "90s"),
        ("5S", "is not a duration", "5s"),
        ("1d", "is not a duration", "24h"),
        ("1.5 days", "is not a duration", "36h"),
        ("a minute", "is not a duration", None),
        ("1500us", "is not a whole number of milliseconds", "2ms"),
        ("10ns", "is not a whole number of milliseconds", "1ms"),  # never 0: that is no timeout at all
        ("1h2m3s4ms5us6ns", "is not a whole number of milliseconds", "3723004ms"),
        ("0.3333333333333333333h", "is not a whole number of milliseconds", "1200000ms"),
        ("-5s", "is negative", None),
        ("-2m3.4s", "is negative", None),
        (-1, "is negative", None),
        ("9223372036854775808ns", "is too large", None),  # Go: overflow
        ("3000000h", "is too large", None),
        (True, "is not a duration", None),
        (1.5, "is not a duration", None),
        (None, "is not a duration", None),
    ],
)
def test_errors_say_why_and_suggest(value: object, problem: str, suggestion: str | None) -> None:
    with pytest.raises(DurationError) as err:
        parse_duration_ms(value)  # type: ignore[arg-type]
    assert err.value.problem.startswith(problem)
    assert err.value.suggestion == suggestion
    if suggestion is not None:
        assert str(err.value).endswith(f"(did you mean {suggestion!r}?)")
        assert parse_duration_ms(suggestion) >= 1  # what is suggested is accepted


def test_hostile_input_is_refused_cheaply() -> None:
    with pytest.raises(DurationError, match="longer than 100 characters"):
        parse_duration_ms("1" * 5000 + "h")
    with pytest.raises(DurationError, match="is too large"):
        parse_duration_ms("9" * 99 + "h")
