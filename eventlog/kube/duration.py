"""Durations as Kubernetes writes them, in whole milliseconds: the one parser kdispatch has.

Accepted: Go's ``time.ParseDuration`` syntax, which is what ``metav1.Duration`` fields and
Kubernetes users write (``"250ms"``, ``"90s"``, ``"1h30m"``, ``"1.5h"``, ``"2h45m30s"``; units
``ns us µs ms s m h``), and, as kdispatch always has, integers of milliseconds (``1500`` or
``"1500"``: YAML numbers and annotation values).

The result is an ``int`` of milliseconds because every kdispatch timeout and event field counts
in them. A value with a sub-millisecond remainder (``"1500us"``, ``"0.5ms"``) is refused rather
than rounded: rounding would silently turn ``"400us"`` into ``0``, which for a timeout means
something else entirely. Negative durations are refused too (nothing kdispatch times runs
backwards), as are values past Go's limit (about 292 years).
"""

from __future__ import annotations

import re

ACCEPTED = "use e.g. 90s, 5m, 1h30m, 250ms or an integer of ms"

_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_NS_PER_MS = 1_000_000
_MAX_NS = 2**63 - 1  # Go's time.Duration is an int64 of nanoseconds
_MAX_LENGTH = 100  # far more than any real duration; keeps hostile input (annotations) cheap
_COMPONENT = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")
# Common ways of writing a unit that Go does not accept, for the did-you-mean.
_UNIT_WORDS = {
    "h": ("hr", "hrs", "hour", "hours"),
    "m": ("min", "mins", "minute", "minutes"),
    "s": ("sec", "secs", "second", "seconds"),
    "ms": ("msec", "msecs", "milli", "millis", "millisecond", "milliseconds"),
}
_WORD_TO_UNIT = {word: unit for unit, words in _UNIT_WORDS.items() for word in words}


class DurationError(ValueError):
    """A value that is not a duration: ``problem`` says why, ``suggestion`` (if any) is a
    nearby value that would be accepted, for a did-you-mean."""

    def __init__(self, value: object, problem: str, *, suggestion: str | None = None) -> None:
        self.value = value
        self.problem = problem
        self.suggestion = suggestion
        text = f"{value!r} {problem}"
        if suggestion is not None:
            text += f" (did you mean {suggestion!r}?)"
        super().__init__(text)


def parse_duration_ms(value: int | str) -> int:
    """``"1h30m"`` -> ``5_400_000``; ``1500`` and ``"1500"`` -> ``1500``. Raises ``DurationError``."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise DurationError(value, f"is not a duration; {ACCEPTED}")
    if isinstance(value, int):
        if value < 0:
            raise DurationError(value, "is negative; a duration here is 0 or more")
        return value
    text = value.strip()  # YAML block scalars and annotations often carry blanks around
    if len(text) > _MAX_LENGTH:
        raise DurationError(f"{text[:20]}...", f"is longer than {_MAX_LENGTH} characters; {ACCEPTED}")
    if text.isascii() and text.isdigit():
        return int(text)
    ns = _go_nanoseconds(text)
    if ns is None:
        raise DurationError(value, f"is not a duration; {ACCEPTED}", suggestion=_did_you_mean(text))
    if ns < 0:
        raise DurationError(value, "is negative; a duration here is 0 or more")
    if ns > _MAX_NS:
        raise DurationError(value, "is too large (the most is about 292 years)")
    ms, rest = divmod(ns, _NS_PER_MS)
    if rest:
        nearest = max(1, (ns + _NS_PER_MS // 2) // _NS_PER_MS)
        raise DurationError(
            value,
            "is not a whole number of milliseconds (kdispatch counts time in ms)",
            suggestion=f"{nearest}ms",
        )
    return ms


def _go_nanoseconds(text: str) -> int | None:
    """``time.ParseDuration``'s grammar, ``[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+`` or ``0``, in exact
    integer nanoseconds (fractions below a nanosecond truncated, as Go does); ``None`` if the text
    does not follow it. The sign is kept so the caller can say "negative" rather than "invalid"."""
    sign = 1
    if text[:1] in ("+", "-"):
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    if text == "0":
        return 0
    if not text:
        return None
    total, pos = 0, 0
    while pos < len(text):
        m = _COMPONENT.match(text, pos)
        if m is None or m.end() == pos:
            return None
        whole, fraction, unit = m.group(1), m.group(2), m.group(3)
        if not (whole or fraction) or unit not in _NS:
            return None
        scale = _NS[unit]
        total += int(whole or "0") * scale
        if fraction:
            total += int(fraction) * scale // 10 ** len(fraction)
        if total > _MAX_NS + 1:  # stop early; the caller reports the overflow
            return sign * total
        pos = m.end()
    return sign * total


def _did_you_mean(text: str) -> str | None:
    """A nearby spelling that parses: blanks removed, unit words (``min``, ``seconds``) or capitals
    turned into Go's units, days into hours."""
    squashed = "".join(text.split()).lower()

    def unit(m: re.Match[str]) -> str:
        number, word = m.group(1), m.group(2)
        if word in ("d", "day", "days"):
            try:
                return f"{float(number) * 24:g}h"
            except ValueError:
                return m.group(0)
        return number + _WORD_TO_UNIT.get(word, word)

    candidate = re.sub(r"([0-9.]+)([a-zµμ]+)", unit, squashed)
    if candidate == text:
        return None
    try:
        parse_duration_ms(candidate)
    except DurationError:
        return None
    return candidate
