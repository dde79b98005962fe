"""Dispatch strategies: which of the ranked feasible clusters get a copy this round.

- AllAtOnce: every feasible cluster (MultiKueue's default); the round never times out.
- Incremental: the next ``step_size`` clusters by score, skipping those tried earlier in this
  attempt; a round without admission times out and moves on.
- TopK: the K best (K from the job's ``nominate`` or the profile's ``k``); K=1 is the KEP's top-1.
"""

from __future__ import annotations

from eventlog.events import Placement, StrategySpec


def width(strategy: StrategySpec, *, placement: Placement, available: int) -> int:
    """How many of the ranked, not-yet-tried clusters get a copy this round."""
    if strategy.type == "AllAtOnce":
        return available
    if strategy.type == "Incremental":
        return min(max(strategy.step_size, 1), available)
    k = placement.nominate if placement.nominate else strategy.k
    return min(max(k, 1), available)


def choose(strategy: StrategySpec, *, placement: Placement, ranked: list[str], tried: list[str]) -> list[str]:
    """The clusters for this round, from names ranked best first (used by tests and docs)."""
    fresh = [c for c in ranked if c not in tried] if tried else ranked
    return fresh[: width(strategy, placement=placement, available=len(fresh))]


def round_deadline(strategy: StrategySpec, *, now_ms: int, timeout_ms: int) -> int | None:
    if strategy.type == "AllAtOnce":
        return None  # copies wait everywhere until one admits, as MultiKueue does
    return now_ms + timeout_ms
