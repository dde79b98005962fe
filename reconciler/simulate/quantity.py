"""Kubernetes quantities ("500m", "4Gi", "1.5") as the integers of the event contract.

cpu → millicores; every other resource → units, rounded up like ``Quantity.Value()``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

_QUANTITY = re.compile(r"^\s*([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)\s*(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?\s*$")
_FACTOR: dict[str | None, Decimal] = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


class QuantityError(ValueError):
    pass


def parse_quantity(resource: str, value: int | float | str) -> int:
    """``parse_quantity("cpu", "1.5") == 1500``; ``parse_quantity("memory", "1Ki") == 1024``."""
    if isinstance(value, bool):
        raise QuantityError(f"{resource}: {value!r} is not a quantity")
    if isinstance(value, int | float):
        amount = Decimal(str(value))
    else:
        m = _QUANTITY.match(value)
        if not m:
            raise QuantityError(f"{resource}: {value!r} is not a quantity (e.g. 500m, 2, 4Gi)")
        try:
            amount = Decimal(m.group(1)) * _FACTOR[m.group(2)]
        except InvalidOperation:
            raise QuantityError(f"{resource}: {value!r} is not a quantity") from None
    if resource == "cpu":
        amount *= 1000
    if amount < 0:
        raise QuantityError(f"{resource}: {value!r} is negative")
    return math.ceil(amount)


def parse_resources(raw: Mapping[str, int | float | str]) -> dict[str, int]:
    return {name: parse_quantity(name, raw[name]) for name in sorted(raw)}
