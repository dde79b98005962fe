"""The one percentile every figure kdispatch prints uses: nearest rank.

Nearest rank is numpy's ``inverted_cdf`` method: the smallest value with at least ``p`` % of the
values at or below it. It is always a value that occurred (no interpolation), so integer
milliseconds stay integers, a wait reported as p95 is a wait some job had, and the same run prints
the same figures on every machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np

N = TypeVar("N", int, float)


def percentile(values: Sequence[N], p: float) -> N | None:
    """Nearest-rank ``p``-th percentile (0 <= p <= 100) of ``values`` in any order; None when empty."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is outside 0..100")
    if not values:
        return None
    found: N = np.percentile(np.asarray(values), p, method="inverted_cdf").item()
    return found
