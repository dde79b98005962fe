"""Kubernetes quantities as kdispatch integers: cpu in millicores, everything else in units
(bytes for memory), rounded up, the way ``Quantity.Value()``/``MilliValue()`` do."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


def parse_quantity(resource: str, value: Any) -> int:
    """``"500m"`` cpu -> 500; ``"2Gi"`` memory -> 2147483648; ints are taken as given units."""
    if isinstance(value, bool):
        raise ValueError(f"{resource}: {value!r} is not a quantity")
    if isinstance(value, int):
        return value * 1000 if resource == "cpu" else value
    text = str(value).strip()
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(f"{resource}: {value!r} is not a quantity (e.g. 500m, 2, 4Gi)")
    try:
        amount = Decimal(m.group(1)) * Decimal(str(_SUFFIX[m.group(2) or ""]))
    except InvalidOperation:
        raise ValueError(f"{resource}: {value!r} is not a quantity") from None
    if resource == "cpu":
        amount *= 1000
    return math.ceil(amount)


def parse_resources(raw: Mapping[str, Any] | None) -> dict[str, int]:
    return {name: parse_quantity(name, v) for name, v in (raw or {}).items()}


def add_into(total: dict[str, int], more: Mapping[str, int], times: int = 1) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, 0) + amount * times
