"""Victim selection (issue 5), vectorised over the running pool.

On each candidate cluster (fails only for lack of free capacity) take strictly lower-priority
victims in order — lowest priority first, then most recently started, then name — until the
freed capacity covers the preemptor's whole gang. Choose the cluster whose victim set is
cheapest: lowest highest-victim-priority, then fewest victims, then least running time lost,
then cluster name. Victims already held by another claim (or being evicted) are never chosen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from reconciler.core.framework.cycle import Evaluation
from reconciler.core.jobs import JobRecord
from reconciler.core.pool import RunningPool
from reconciler.core.scratch import Scratch


@dataclass(frozen=True)
class Choice:
    cluster: str
    victims: list[str]  # job keys, in eviction order
    max_priority: int
    lost_ms: int


def select_victims(s: Scratch, job: JobRecord, evaluation: Evaluation) -> Choice | None:
    state = s.state
    table = state.clusters
    pool = state.pool
    assert evaluation.resolvable is not None, "preemption needs a full evaluation"
    candidates = np.flatnonzero(evaluation.resolvable & s.ready)
    if len(candidates) == 0 or len(pool) == 0:
        return None
    n = pool.size
    is_candidate = np.zeros(len(table), dtype=np.bool_)
    is_candidate[candidates] = True
    eligible = pool.alive[:n] & ~pool.evicting[:n] & (pool.priority[:n] < job.priority)
    eligible &= is_candidate[pool.cluster[:n]]
    for claim in s.claims.values():  # a victim is never in two claims
        for victim in claim.victims:
            row = pool.row_of.get(victim)
            if row is not None:
                eligible[row] = False
    ordered = pool.victim_order()
    ordered = ordered[eligible[ordered]]
    if len(ordered) == 0:
        return None
    demand_vec = table.vector(job.demand)
    cols = np.flatnonzero(demand_vec > 0)
    if len(cols) == 0:
        return None
    # Phase 1, every candidate cluster at once: order victims by integers only (submission order
    # stands in for the name, for speed) and find each cluster's cheapest sufficient prefix.
    free = s.free_for(job)
    found = _prefixes(s, pool, ordered, free=free, demand=demand_vec[cols], cols=cols)
    if found is None:
        return None
    slots, starts, _, counts, lost, top_priority, ordered = found
    best = int(np.lexsort((table.name_rank[slots], lost, counts, top_priority))[0])
    slot = int(slots[best])
    # Phase 2, the chosen cluster only: the exact order (lowest priority, most recently started,
    # then name) decides which victims go.
    mine = ordered[starts[best] : ordered.size][pool.cluster[ordered[starts[best] :]] == slot]
    exact = mine[np.lexsort((pool.names[mine], -pool.started[mine], pool.priority[mine]))]
    again = _prefixes(s, pool, exact, free=free, demand=demand_vec[cols], cols=cols)
    assert again is not None
    _, _, ends2, _, lost2, top2, _ = again
    return Choice(
        cluster=table.names[slot],
        victims=[pool.keys[int(r)] for r in exact[: int(ends2[0]) + 1]],
        max_priority=int(top2[0]),
        lost_ms=int(lost2[0]),
    )


Prefixes = tuple[
    npt.NDArray[np.int64],
    npt.NDArray[np.intp],
    npt.NDArray[np.intp],
    npt.NDArray[np.intp],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.intp],
]


def _prefixes(
    s: Scratch,
    pool: RunningPool,
    rows: npt.NDArray[np.intp],
    *,
    free: npt.NDArray[np.int64],
    demand: npt.NDArray[np.int64],
    cols: npt.NDArray[np.intp],
) -> Prefixes | None:
    """For rows sorted by (cluster, victim order): per cluster with enough, the shortest prefix
    whose freed capacity covers the demand. Returns (cluster slots, prefix starts, prefix ends,
    counts, running time lost, highest victim priority, rows)."""
    cluster = pool.cluster[rows]
    boundary = np.r_[True, cluster[1:] != cluster[:-1]]
    starts_all = np.flatnonzero(boundary)
    group = np.cumsum(boundary) - 1
    cum = np.cumsum(pool.matrix()[rows][:, cols], axis=0)
    base = np.where((starts_all[group] > 0)[:, None], cum[np.maximum(starts_all[group] - 1, 0)], 0)
    need = demand - free[cluster][:, cols]
    enough = (cum - base >= need).all(axis=1)
    if not enough.any():
        return None
    hits = np.flatnonzero(enough)
    groups, first = np.unique(group[hits], return_index=True)
    ends = hits[first]
    starts = starts_all[groups]
    counts = ends - starts + 1
    lost_cum = np.cumsum(np.maximum(s.now - pool.started[rows], 0))
    lost = lost_cum[ends] - np.where(starts > 0, lost_cum[np.maximum(starts - 1, 0)], 0)
    return cluster[ends], starts, ends, counts, lost, pool.priority[rows][ends], rows
