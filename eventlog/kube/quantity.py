"""Kubernetes resource quantities, parsed exactly as ``resource.Quantity`` (k8s.io/apimachinery).

Grammar: ``<sign>? <number> <suffix>?`` where the number is ``1``, ``1.5``, ``1.`` or ``.5`` and
the one suffix is a binary SI one (Ki Mi Gi Ti Pi Ei), a decimal SI one (n u m k M G T P E) or a
decimal exponent (``e3``, ``E-2``, ``e+6``); ``1e3Ki`` has two and is refused, as Kubernetes does.
Spaces around the text are ignored (Quantity's JSON decoding trims them), spaces inside are not.

The value is what the API server keeps: its magnitude rounded up to a whole nano-unit ("if you
want some resources, you should get some": ``1e-12`` is ``1n``, ``-1e-12`` is ``-1n``), and a
binary-suffixed value capped at 2^63-1. Values are exact (integers of nano-units, or ``Fraction``)
so sums and maxima lose nothing; they become the integers of the event contract only at the end,
as Kueue does: cpu in millicores (``MilliValue()``), everything else in units, bytes or devices
(``Value()``), both rounded up.

Two refusals Kubernetes does not make, to keep a hostile text from costing memory: texts longer
than 64 characters and exponents beyond ±40. Kubernetes' scanner also reads ``.``, ``+`` and
``-`` alone as 0; they are not in its documented grammar and are refused here.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from fractions import Fraction

NANO = 10**9
"""Nano-units per unit: Kubernetes' finest precision."""

_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_MAX_BINARY_NANOS = (2**63 - 1) * NANO  # Kubernetes' cap on binary-suffixed values (bytes, in practice)
_MAX_EXPONENT = 40
_MAX_LENGTH = 64
_MILLI_RESOURCES = frozenset({"cpu"})
_UNIT_SLIP = re.compile(r"([kmgtpe])(i?)b?", re.IGNORECASE)  # 1K, 1kb, 1GB, 1gi, 1MiB

ACCEPTED = (
    "a number with at most one suffix: n u m k M G T P E (powers of 10), Ki Mi Gi Ti Pi Ei "
    "(powers of 2) or an exponent such as e3 or E-2, e.g. '500m', '2Gi', '1.5', '1e3'"
)


class QuantityError(ValueError):
    pass


def parse_quantity(value: object) -> Fraction:
    """The exact value in base units (cores, bytes, devices). Accepts str, int and float (YAML
    and JSON numbers are quantities too)."""
    return Fraction(parse_nanos(value), NANO)


def parse_nanos(value: object) -> int:
    """The value in nano-units, an integer (cheap to sum and compare)."""
    if isinstance(value, bool):  # bool is an int to Python, not to Kubernetes
        raise QuantityError(f"{_short(value)} is not a quantity: expected {ACCEPTED}")
    if isinstance(value, int):
        return value * NANO
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{_short(value)} is not a quantity: expected {ACCEPTED}")
        return _nanos_of_text(repr(value))
    if isinstance(value, str):
        if len(value) > _MAX_LENGTH:  # before the cache: it keeps only short keys
            raise QuantityError(
                f"{value.strip()[:20]!r}… is not a quantity: longer than {_MAX_LENGTH} characters"
            )
        return _nanos_of_text(value)
    raise QuantityError(f"{_short(value)} is not a quantity: expected a string, {ACCEPTED}")


@functools.lru_cache(maxsize=4096)
def _nanos_of_text(raw: str) -> int:
    # A cluster's jobs use a few dozen distinct quantities: most parses are cache hits.
    text = raw.strip()
    m = _QUANTITY.fullmatch(text)
    if m is None or not (m.group(2) or m.group(3)):
        raise QuantityError(f"{text!r} is not a quantity: {_hint(text)}expected {ACCEPTED}")
    sign, whole, fraction, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4) or ""
    mantissa = int(whole + fraction or "0")
    power_of_ten = 9 - len(fraction)  # nano-units
    power_of_two = 0
    if suffix in _BINARY:
        power_of_two = _BINARY[suffix]
    elif suffix in _DECIMAL:
        power_of_ten += _DECIMAL[suffix]
    else:
        exponent = int(suffix[1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(
                f"{text!r}: exponent {exponent} is out of range (at most ±{_MAX_EXPONENT} here)"
            )
        power_of_ten += exponent
    mantissa <<= power_of_two
    # Finer than a nano-unit: the magnitude is rounded up, as Kubernetes rounds it.
    nanos: int = mantissa * 10**power_of_ten if power_of_ten >= 0 else -(-mantissa // 10**-power_of_ten)
    if power_of_two:
        nanos = min(nanos, _MAX_BINARY_NANOS)
    return -nanos if sign == "-" else nanos


def _hint(text: str) -> str:
    """A guess at what was meant, for the usual slips (ending in "; "), else ''."""
    if m := re.fullmatch(r"([+-]?[0-9.]+)\s+(\S+)", text):
        return f"did you mean {m[1] + m[2]!r}? (no space before the suffix); "
    if re.fullmatch(r"[+-]?[0-9]+,[0-9]+", text):
        return f"did you mean {text.replace(',', '.')!r}? (the decimal mark is '.'); "
    if m := re.fullmatch(r"[+-]?[0-9.]+([eE][+-]?[0-9]+)([a-zA-Z]+)", text):
        return f"one suffix at most, an exponent ({m[1]}) or a unit ({m[2]}); "
    m = re.fullmatch(r"([+-]?[0-9.]+)([a-zA-Z]{1,3})", text)
    unit = _UNIT_SLIP.fullmatch(m[2]) if m and m[2] not in ("e", "E") else None
    if m is None or unit is None:
        return ""
    letter = unit[1].upper()
    binary = f"{m[1]}{letter}i"
    if unit[2]:  # "ki", "GiB": a power of 2 was meant
        return f"did you mean {binary!r}? "
    decimal = f"{m[1]}{'k' if letter == 'K' else letter}"
    return f"did you mean {decimal!r} (powers of 10) or {binary!r} (powers of 2)? "


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---- the integers kdispatch stores ------------------------------------------------------------


def to_integer(resource: str, nanos: int) -> int:
    """Nano-units → the stored integer: millicores for cpu, units for anything else, rounded up;
    a negative total (the webhook sums what it was sent, before the API server validates it) is 0."""
    if nanos <= 0:
        return 0
    return -(-nanos // (10**6 if resource in _MILLI_RESOURCES else NANO))


def to_units(resource: str, value: object) -> int:
    """One quantity → the stored integer (``"500m"`` cpu → 500, ``"2Gi"`` memory → 2147483648).
    A negative one is refused: no capacity, usage or request is below zero."""
    try:
        nanos = parse_nanos(value)
    except QuantityError as err:
        raise QuantityError(f"{resource}: {err}") from None
    if nanos < 0:
        raise QuantityError(f"{resource}: {_short(value)} is negative: a resource amount is 0 or more")
    return to_integer(resource, nanos)


def parse_resources(raw: Mapping[str, object] | None) -> dict[str, int]:
    """A resource list (``{"cpu": "500m", "memory": "1Gi"}``) → stored integers, by name."""
    return {name: to_units(name, value) for name, value in sorted((raw or {}).items())}
