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

from reconciler.core.framework.cycle import Evaluation
from reconciler.core.jobs import JobRecord
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
    rows = np.flatnonzero(eligible)
    if len(rows) == 0:
        return None
    demand_vec = table.vector(job.demand)
    cols = np.flatnonzero(demand_vec > 0)
    if len(cols) == 0:
        return None
    cluster = pool.cluster[rows]
    priority = pool.priority[rows]
    started = pool.started[rows]
    names = np.array([pool.keys[r] for r in rows])
    order = np.lexsort((names, -started, priority, cluster))
    rows, cluster, priority, started = rows[order], cluster[order], priority[order], started[order]
    freed = pool.matrix()[rows][:, cols]
    cum = np.cumsum(freed, axis=0)
    starts = np.flatnonzero(np.r_[True, cluster[1:] != cluster[:-1]])
    group = np.cumsum(np.r_[True, cluster[1:] != cluster[:-1]]) - 1
    base = np.where(starts[group][:, None] > 0, cum[np.maximum(starts[group] - 1, 0)], 0)
    within = cum - base
    free = s.free_for(job)[cluster][:, cols]
    need = demand_vec[cols] - free
    enough = (within >= need).all(axis=1)
    if not enough.any():
        return None
    hits = np.flatnonzero(enough)
    first_groups, first_idx = np.unique(group[hits], return_index=True)
    ends = hits[first_idx]
    counts = ends - starts[first_groups] + 1
    lost_cum = np.cumsum(np.maximum(s.now - started, 0))
    lost_base = np.where(starts[first_groups] > 0, lost_cum[np.maximum(starts[first_groups] - 1, 0)], 0)
    lost = lost_cum[ends] - lost_base
    top_priority = priority[ends]
    slots = cluster[ends]
    best = np.lexsort((table.name_rank[slots], lost, counts, top_priority))[0]
    start, end = starts[first_groups[best]], ends[best]
    return Choice(
        cluster=table.names[int(slots[best])],
        victims=[pool.keys[int(r)] for r in rows[start : end + 1]],
        max_priority=int(top_priority[best]),
        lost_ms=int(lost[best]),
    )

