"""Capacity plugins, over every resource of the whole gang (all pod sets on one cluster).

- ClusterFeasibility: the gang fits the cluster's total capacity (could ever run there).
- ClusterHeadroom: the gang fits what is free now: capacity - max(reported usage, our assumed
  usage) - capacity claimed by preemptions for other jobs of equal or higher priority.
- CapacityScore: most headroom left after placing (spreads load).
- BinPack: least headroom left after placing (packs, keeps big holes for big jobs).
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import numpy.typing as npt

from reconciler.core.clusters import ClusterTable
from reconciler.core.framework.interface import (
    MAX_SCORE,
    CycleInput,
    FilterPlugin,
    FilterResult,
    JobView,
    ScorePlugin,
    Scores,
    Slots,
    first_failure,
)
from reconciler.core.framework.status import Code, Reason

FEASIBILITY = "ClusterFeasibility"
HEADROOM = "ClusterHeadroom"
CAPACITY_SCORE = "CapacityScore"
BINPACK = "BinPack"


def reason_total(resource: str) -> str:
    return f"insufficient {resource}"


def reason_free(resource: str) -> str:
    return f"insufficient free {resource}"


def _fit(inp: CycleInput, slots: Slots, *, available: npt.NDArray[np.int64], code: Code) -> FilterResult:
    n = len(slots)
    job = inp.job
    if job.missing:
        # Nobody declared this resource at all: fail everywhere, naming it.
        reason = Reason(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reason_total(job.missing[0]))
        return FilterResult(verdict=np.ones(n, dtype=np.int32), reasons=[reason])
    cols = np.flatnonzero(job.demand_vec > 0)
    if len(cols) == 0:
        return FilterResult.passing(n)
    reasons = _reasons(inp.clusters, cols, code)
    # One gather of the demanded columns; the per-resource loop only where a cluster falls short.
    rows = available.take(slots, axis=0)  # take: the fastest gather of whole rows
    every = len(cols) == available.shape[1]
    short = rows < job.demand_vec if every else rows[:, cols] < job.demand_vec[cols]
    if not short.any():
        return FilterResult(verdict=np.zeros(n, dtype=np.int32), reasons=reasons)
    return FilterResult(verdict=first_failure(short), reasons=reasons)


def _reasons(table: ClusterTable, cols: Slots, code: Code) -> list[Reason]:
    """The reasons for these resource columns, made once per table version (not per job)."""
    version = (table.version, table.facts_version)
    cached = table.derived.get(FEASIBILITY)
    if cached is None or cached[0] != version:
        cached = (version, {})
        table.derived[FEASIBILITY] = cached
    memo: dict[tuple[Code, bytes], list[Reason]] = cached[1]
    key = (code, cols.tobytes())
    reasons = memo.get(key)
    if reasons is None:
        describe = reason_total if code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE else reason_free
        names = table.resources.names
        reasons = memo[key] = [Reason(code, describe(names[c])) for c in cols]
    return list(reasons)  # each result its own list: callers may extend theirs


class ClusterFeasibility(FilterPlugin):
    name = FEASIBILITY
    static = True

    def cache_key(self, job: JobView) -> Hashable:
        return (job.demand_vec.tobytes(), job.missing)

    def filter(self, inp: CycleInput, slots: Slots) -> FilterResult:
        return _fit(inp, slots, available=inp.clusters.capacity, code=Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


class ClusterHeadroom(FilterPlugin):
    name = HEADROOM
    per_cluster = True

    def survivors(self, inp: CycleInput, slots: Slots) -> Slots | None:
        job = inp.job
        if job.missing:
            return None
        columns = _demanded(inp.clusters, job.demand_vec)
        if columns is None:
            return slots  # demands nothing: fits everywhere
        cols, demand, _, needs = columns
        if len(slots) <= FEW:
            return _fitting(inp.free, slots, needs)
        rows = inp.free.take(slots, axis=0)
        if cols is not None:
            rows = rows[:, cols]
        fits = rows >= demand
        kept: Slots = slots[fits.reshape(-1) if demand.shape[0] == 1 else np.logical_and.reduce(fits, axis=1)]
        return kept

    def filter(self, inp: CycleInput, slots: Slots) -> FilterResult:
        return _fit(inp, slots, available=inp.free, code=Code.UNSCHEDULABLE)


def headroom_after(inp: CycleInput, candidates: Slots) -> Scores:
    """Per candidate, 0..100: mean over the demanded resources of (free - demand) / capacity."""
    job = inp.job
    columns = _demanded(inp.clusters, job.demand_vec)
    if columns is None:  # no demand: every resource a candidate has counts
        return _headroom_plain(inp, candidates)
    cols, demand, denominators, needs = columns
    if len(candidates) <= FEW:
        scores = _headroom_few(inp.free, denominators, candidates, needs)
        if scores is not None:
            return scores
    # All demanded columns at once (rows gathered once): the same integer arithmetic per column,
    # in place (each ufunc on these small arrays costs its call, not its arithmetic).
    frac = inp.free.take(candidates, axis=0)
    if cols is not None:
        frac = frac[:, cols]
    frac -= demand
    frac *= MAX_SCORE
    frac //= denominators.take(candidates, axis=0)
    np.maximum(frac, 0, out=frac)
    np.minimum(frac, MAX_SCORE, out=frac)
    k = demand.shape[0]
    if k == 1:  # the mean of one column is that column
        return frac.reshape(-1)
    out: Scores = np.add.reduce(frac, axis=1)
    out //= k
    return out


# (demanded columns or None: every one, the demand there, max(capacity, 1) there, ``_needs``)
_Columns = tuple[Slots | None, npt.NDArray[np.int64], npt.NDArray[np.int64], list[tuple[int, int, int]]]

# Up to this many clusters (one a nomination touched, for the next job of its spec class:
# ``reconciler.core.spec_classes``), plain integers: numpy's cost per call outweighs its speed.
FEW = 4
# Beyond this, (free - demand) * MAX_SCORE might overflow int64 as numpy computes it.
_SAFE = 1 << 55


def _needs(cols: Slots | None, demand: npt.NDArray[np.int64]) -> list[tuple[int, int, int]]:
    """(column in the table, demand, column in the denominators) per demanded column."""
    table_cols: list[int] = list(range(len(demand))) if cols is None else cols.tolist()
    return [(c, d, j) for j, (c, d) in enumerate(zip(table_cols, demand.tolist(), strict=True))]


def _fitting(free: npt.NDArray[np.int64], slots: Slots, needs: list[tuple[int, int, int]]) -> Slots:
    """``ClusterHeadroom.survivors`` for a few clusters."""
    kept = []
    item = free.item
    for slot in slots.tolist():  # (loops, not all() over a generator: its frame costs more here)
        for c, d, _ in needs:
            if item(slot, c) < d:
                break
        else:
            kept.append(slot)
    return np.array(kept, dtype=np.intp)


def _headroom_few(
    free: npt.NDArray[np.int64], denominators: npt.NDArray[np.int64], candidates: Slots, needs: list[tuple[int, int, int]]
) -> Scores | None:
    """``headroom_after`` for a few clusters, the same integer arithmetic (None: numbers so
    large that numpy's would overflow, which it then does as before)."""
    out = []
    for slot in candidates.tolist():
        total = 0
        for c, d, j in needs:
            left = free.item(slot, c) - d
            if not -_SAFE < left < _SAFE:
                return None
            total += min(max(left * MAX_SCORE // denominators.item(slot, j), 0), MAX_SCORE)
        out.append(total // len(needs))
    return np.array(out, dtype=np.int64)


_DEMANDS = 4_096  # demand vectors remembered per table version (cleared when full)


def _demanded(table: ClusterTable, demand_vec: npt.NDArray[np.int64]) -> _Columns | None:
    """The demanded columns (None: every column), the demand there and max(capacity, 1) of
    every cluster there: made once per table version and demand vector (the capacities once
    per set of columns), not per job. None when the job demands nothing."""
    version = (table.version, 0)
    cached = table.derived.get(CAPACITY_SCORE)
    if cached is None or cached[0] != version:
        cached = (version, ({}, {}))
        table.derived[CAPACITY_SCORE] = cached
    by_demand: dict[bytes, _Columns | None] = cached[1][0]
    key = demand_vec.tobytes()
    if key in by_demand:
        return by_demand[key]
    cols = np.flatnonzero(demand_vec > 0)
    got: _Columns | None = None
    if len(cols):
        every = len(cols) == table.capacity.shape[1]
        by_columns: dict[bytes, npt.NDArray[np.int64]] = cached[1][1]
        denominators = by_columns.get(cols.tobytes())
        if denominators is None:
            denominators = np.maximum(table.capacity if every else table.capacity[:, cols], 1)
            by_columns[cols.tobytes()] = denominators
        demand = demand_vec[cols].copy()
        got = (None if every else cols, demand, denominators, _needs(None if every else cols, demand))
    if len(by_demand) >= _DEMANDS:
        by_demand.clear()
    by_demand[key] = got
    return got


def _headroom_plain(inp: CycleInput, candidates: Slots) -> Scores:
    """``headroom_after`` without the memo of columns (and for a job that demands nothing)."""
    job = inp.job
    cols = np.flatnonzero(job.demand_vec > 0)
    cap = inp.clusters.capacity.take(candidates, axis=0)
    if len(cols) == 0:
        cols = np.flatnonzero(cap.sum(axis=0) > 0)
    if len(cols) == 0:
        return np.full(len(candidates), MAX_SCORE, dtype=np.int64)
    free = inp.free.take(candidates, axis=0)
    if len(cols) < cap.shape[1]:
        cap, free = cap[:, cols], free[:, cols]
    frac = (free - job.demand_vec[cols]) * MAX_SCORE // np.maximum(cap, 1)
    out: Scores = np.clip(frac, 0, MAX_SCORE).sum(axis=1) // len(cols)
    return out


class CapacityScore(ScorePlugin):
    name = CAPACITY_SCORE
    per_cluster = True  # (headroom on each cluster's own row; normalize leaves each score as is)

    def score(self, inp: CycleInput, candidates: Slots) -> Scores:
        return headroom_after(inp, candidates)

    def normalize(self, scores: Scores) -> Scores:
        return scores  # already 0..100 and comparable across jobs


class BinPack(ScorePlugin):
    name = BINPACK
    per_cluster = True  # (headroom on each cluster's own row; normalize leaves each score as is)

    def score(self, inp: CycleInput, candidates: Slots) -> Scores:
        return MAX_SCORE - headroom_after(inp, candidates)

    def normalize(self, scores: Scores) -> Scores:
        return scores
