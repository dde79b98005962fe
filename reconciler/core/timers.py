"""``next_deadline``: when the sequencer must append a Tick for the core to act on time."""

from __future__ import annotations

from reconciler.core.state import State


def next_deadline(state: State) -> int | None:
    """The earliest pending timer after now: round timeout, back-off, claim expiry, toleration
    seconds (the timer heap) or a cluster going silent for its worker-lost timeout."""
    best: int | None = None
    for at_ms, _ in state.timers[:1]:
        best = at_ms
    table = state.clusters
    if len(table):
        table.build()
        if table.ready.any():
            lost_at = int(table.lost_deadlines(state.worker_lost_timeout_ms)[table.ready].min())
            best = lost_at if best is None else min(best, lost_at)
    return best
