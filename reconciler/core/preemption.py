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
from reconciler.core.queues.rules import keep_priority_victims
from reconciler.core.scratch import Scratch


@dataclass(frozen=True)
class Choice:
    cluster: str
    victims: list[str]  # job keys, in eviction order
    max_priority: int
    lost_ms: int


def any_victims(s: Scratch, job: JobRecord) -> bool:
    """Whether ``select_victims`` could find victims for ``job`` on some cluster: False only when
    it certainly finds none, whatever the evaluation, so callers skip the full evaluation it
    needs. A look at a waiting job that has nothing below it, or whose queue lets it take only
    its own queue's jobs and they could not make room anywhere, ends here: most looks for
    preemption, as placements of other queues' jobs (``victims_below``) send every job of a
    higher priority to look. A superset of what ``select_victims`` considers: every cluster
    Ready (not only those the job fails for capacity alone), every job it may take there."""
    pool = s.running()
    if len(pool) == 0:
        return False
    n = pool.size
    eligible = pool.alive[:n] & ~pool.evicting[:n] & (pool.priority[:n] < job.priority)
    if not eligible.any():
        return False
    table = s.state.clusters
    demand_vec = table.vector(job.demand)
    cols = np.flatnonzero(demand_vec > 0)
    if len(cols) == 0:
        return False
    need = demand_vec[cols] - s.free_for(job)[:, cols]
    matrix = pool.matrix()

    def enough(rows: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
        """Ready clusters where these rows, all taken, would free what the job needs."""
        cluster = pool.cluster[rows]
        out = s.ready & (np.bincount(cluster, minlength=len(table)) > 0)
        for j, col in enumerate(cols):
            out &= np.bincount(cluster, weights=matrix[rows, col], minlength=len(table)) >= need[:, j]
        return out

    # Every job of lower priority first (plain numpy); the queue rules, a Python loop, only
    # for the jobs on clusters where even all of them would be enough.
    where = enough(np.flatnonzero(eligible))
    if not where.any():
        return False
    if s.usage is None:
        return True
    eligible &= where[pool.cluster[:n]]
    keep_priority_victims(s, job, pool, eligible)
    return bool(enough(np.flatnonzero(eligible)).any())


def select_victims(s: Scratch, job: JobRecord, *, evaluation: Evaluation) -> Choice | None:
    state = s.state
    table = state.clusters
    pool = s.running()
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
    if s.usage is not None:  # tenancy: other queues' jobs only per Kueue's cohort rules
        keep_priority_victims(s, job, pool, eligible)
    for key in s.gone_jobs:  # requeued or finished earlier in this pass: not running any more
        row = pool.row_of.get(key)
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
    free = s.free_for(job)
    need = demand_vec[cols] - free[:, cols]  # per cluster: what the victims must free
    # Phase 1, every candidate cluster at once. Per (cluster, priority level) totals give each
    # cluster's highest victim priority; only clusters where that is lowest compete, and only
    # their victims at that level need a row-by-row look (all lower levels go anyway).
    # Submission order stands in for the name here, for speed.
    found = _cheapest(s, pool=pool, ordered=ordered, need=need, cols=cols)
    if found is None:
        return None
    slot = found
    # Phase 2, the chosen cluster only: the exact order (lowest priority, most recently started,
    # then name) decides which victims go. With queues, the same order with the victims'
    # evictions before (fewest first, within a priority) decides instead when its set costs no
    # more (highest victim priority, count): a restarted job is not the victim every time.
    mine = ordered[pool.cluster[ordered] == slot]
    by_start = mine[np.lexsort((pool.names[mine], -pool.started[mine], pool.priority[mine]))]
    taken = _prefix(s, pool=pool, rows=by_start, need=need, cols=cols)
    by_history = mine[np.lexsort((pool.names[mine], -pool.started[mine], pool.evicted[mine], pool.priority[mine]))]
    if s.usage is not None and not np.array_equal(by_history, by_start):
        spared = _prefix(s, pool=pool, rows=by_history, need=need, cols=cols)
        if (pool.priority[spared[-1]], len(spared)) <= (pool.priority[taken[-1]], len(taken)):
            taken = spared
    return Choice(
        cluster=table.names[slot],
        victims=[pool.keys[int(r)] for r in taken],
        max_priority=int(pool.priority[taken[-1]]),
        lost_ms=int(np.maximum(s.now - pool.started[taken], 0).sum()),
    )


def _prefix(
    s: Scratch,
    *,
    pool: RunningPool,
    rows: npt.NDArray[np.intp],
    need: npt.NDArray[np.int64],
    cols: npt.NDArray[np.intp],
) -> npt.NDArray[np.intp]:
    """The shortest prefix of one cluster's ordered rows that frees what the preemptor needs."""
    found = _prefixes(s, pool=pool, rows=rows, need=need, cols=cols)
    assert found is not None, "phase 1 chose a cluster where the victims suffice"
    return rows[: int(found[2][0]) + 1]


def _cheapest(
    s: Scratch,
    *,
    pool: RunningPool,
    ordered: npt.NDArray[np.intp],
    need: npt.NDArray[np.int64],
    cols: npt.NDArray[np.intp],
) -> int | None:
    """The cluster whose sufficient victim prefix is cheapest: (highest victim priority, count,
    running time lost, cluster name)."""
    table = s.state.clusters
    n_clusters = len(table)
    cluster = pool.cluster[ordered]
    levels, level = np.unique(pool.priority[ordered], return_inverse=True)
    n_levels = len(levels)
    cell = cluster * n_levels + level
    enough = np.ones((n_clusters, n_levels), dtype=np.bool_)
    below = []
    for j, col in enumerate(cols):
        freed = np.bincount(cell, weights=pool.demand[ordered, col], minlength=n_clusters * n_levels)
        cum = np.cumsum(freed.reshape(n_clusters, n_levels), axis=1)
        enough &= cum >= need[:, j][:, None]
        below.append(cum)
    present = np.bincount(cluster, minlength=n_clusters) > 0
    enough &= present[:, None]
    if not enough.any():
        return None
    top = np.where(enough.any(axis=1), enough.argmax(axis=1), n_levels)
    star = int(top.min())
    contenders = top == star
    # Offsets from the levels below ``star`` (taken whole) for the row-by-row part.
    shifted = need.copy()
    if star > 0:
        for j in range(len(cols)):
            shifted[:, j] -= below[j][:, star - 1].astype(np.int64)
    lower = level < star
    count_below = np.bincount(cluster[lower], minlength=n_clusters)
    lost_below = np.bincount(
        cluster[lower], weights=np.maximum(s.now - pool.started[ordered[lower]], 0), minlength=n_clusters
    )
    at_star = ordered[(level == star) & contenders[cluster]]
    found = _prefixes(s, pool=pool, rows=at_star, need=shifted, cols=cols)
    if found is None:  # only possible if the levels below already suffice, which top rules out
        return None
    slots, _, _, counts, lost, _, _ = found
    counts = counts + count_below[slots]
    lost = lost + lost_below[slots].astype(np.int64)
    best = int(np.lexsort((table.name_rank[slots], lost, counts))[0])
    return int(slots[best])


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
    *,
    pool: RunningPool,
    rows: npt.NDArray[np.intp],
    need: npt.NDArray[np.int64],
    cols: npt.NDArray[np.intp],
) -> Prefixes | None:
    """For rows sorted by (cluster, victim order): per cluster with enough, the shortest prefix
    whose freed capacity covers the demand. Returns (cluster slots, prefix starts, prefix ends,
    counts, running time lost, highest victim priority, rows)."""
    if len(rows) == 0:
        return None
    cluster = pool.cluster[rows]
    boundary = np.r_[True, cluster[1:] != cluster[:-1]]
    starts_all = np.flatnonzero(boundary)
    group = np.cumsum(boundary) - 1
    matrix = pool.matrix()
    cum = np.empty((len(rows), len(cols)), dtype=np.int64)
    for j, col in enumerate(cols):  # a few resources: gather one column at a time
        np.cumsum(matrix[:, col].take(rows), out=cum[:, j])
    base = np.where((starts_all[group] > 0)[:, None], cum[np.maximum(starts_all[group] - 1, 0)], 0)
    enough = (cum - base >= need[cluster]).all(axis=1)
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
