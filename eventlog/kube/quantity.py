"""Kubernetes resource quantities, parsed exactly (``k8s.io/apimachinery/pkg/api/resource``).

Grammar: ``<sign>?<digits>(.<digits>)?<suffix>`` where the suffix is a binary SI one (Ki … Ei),
a decimal SI one (n u m "" k M G T P E) or a decimal exponent (``e3``, ``E-2``). Values are kept
as ``Fraction`` while they are summed and maxed, and turned into integers only at the end, the
way Kueue does: CPU in millicores, everything else ``Value()``; both round up. Pod-set arithmetic
uses ``parse_nanos`` (integers in nano-units, Kubernetes' finest precision).
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from webhook.quote import short

_QUANTITY = re.compile(r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# Kubernetes keeps quantities within int64 nano-units in practice; a bound keeps a hostile
# "1e999999999" from turning into a number with a billion digits.
_MAX_EXPONENT = 40
_MAX_LENGTH = 64


class QuantityError(ValueError):
    pass


def parse_quantity(value: object) -> Fraction:
    """An exact value in base units (cores, bytes, devices). Accepts str, int and float (YAML)."""
    if isinstance(value, bool):
        raise QuantityError(f"{short(value)} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{short(value)} is not a quantity")
        text = repr(value)
    elif isinstance(value, str):
        if len(value) > _MAX_LENGTH:  # before the cache: it keeps only short keys
            raise QuantityError(f"{value.strip()[:20]!r}… is not a quantity: longer than {_MAX_LENGTH} characters")
        return _parse_text(value)
    else:
        raise QuantityError(f"{short(value)} is not a quantity (expected a string like '500m', '2Gi', '1')")
    return _parse_text(text)


@functools.lru_cache(maxsize=4096)
def _parse_text(raw: str) -> Fraction:
    # A cluster's jobs use a few dozen distinct quantities; Fraction is immutable, so sharing is safe.
    text = raw.strip()
    if len(text) > _MAX_LENGTH:
        raise QuantityError(f"{text[:20]!r}… is not a quantity: longer than {_MAX_LENGTH} characters")
    m = _QUANTITY.match(text)
    if not m:
        raise QuantityError(f"{text!r} is not a quantity (expected e.g. '500m', '2Gi', '1.5', '1e3')")
    sign, number, suffix = m.group(1), m.group(2), m.group(3) or ""
    amount = Fraction(number)
    if suffix in _BINARY:
        amount *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        amount *= _DECIMAL[suffix]
    else:
        exponent = int(suffix[1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"{text!r}: exponent {exponent} is out of range")
        amount *= Fraction(10) ** exponent
    return -amount if sign == "-" else amount


NANO = 10**9


def parse_nanos(value: object) -> int:
    """The quantity in nano-units, an integer: Kubernetes keeps no precision below nano and rounds
    finer values up, and integers make sums and maxima cheap."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value * NANO
    if isinstance(value, str) and len(value) <= _MAX_LENGTH:
        return _nanos_of_text(value)
    return math.ceil(parse_quantity(value) * NANO)


@functools.lru_cache(maxsize=4096)
def _nanos_of_text(text: str) -> int:
    return math.ceil(_parse_text(text) * NANO)


def to_integer(resource: str, nanos: int) -> int:
    """CPU → millicores, anything else → units; both rounded up; negatives floored to 0."""
    if nanos <= 0:
        return 0
    if resource == "cpu":
        return -(-nanos // 10**6)
    return -(-nanos // NANO)
