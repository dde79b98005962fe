"""Exponential back-off with full jitter (the AWS architecture blog's variant), as a small value."""

from __future__ import annotations

import random

_SHARED = random.Random()  # seeding a Random per Backoff costs more than the back-off itself


class Backoff:
    def __init__(self, *, base_s: float = 0.2, cap_s: float = 30.0, rng: random.Random | None = None) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.failures = 0
        self._rng = rng or _SHARED

    def next_delay(self) -> float:
        """The wait before the next try: uniform in [0, min(cap, base * 2**failures)]."""
        ceiling = min(self.cap_s, self.base_s * (2**self.failures))
        self.failures = min(self.failures + 1, 32)
        return self._rng.uniform(0, ceiling)

    def reset(self) -> None:
        self.failures = 0
