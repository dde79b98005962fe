"""ClusterHealth: only Ready clusters take new work (Lost, removed and draining ones do not).

A draining cluster (the ``kdispatch.io/draining`` taint, docs/clusters.md) is Ready for what already
runs there, so it is kept off here, in the one filter every profile has, not by ClusterTaints."""

from __future__ import annotations

import numpy as np

from eventlog.kube.names import DRAINING_TAINT
from reconciler.core.clusters import ClusterTable
from reconciler.core.framework.interface import CycleInput, FilterPlugin, FilterResult, Slots
from reconciler.core.framework.status import Code, Reason

NAME = "ClusterHealth"
REASON_NOT_READY = "cluster not ready (lost or removed)"
REASON_DRAINING = "cluster draining (its WorkerCluster was deleted)"


# Up to this many clusters, the survivors in plain Python (``capacity.FEW``'s reason).
FEW = 4


def _draining_columns(table: ClusterTable) -> list[int]:
    """The table's draining taint columns, found once per table version (not per job)."""
    key = (table.version, table.facts_version)
    cached = table.derived.get(NAME)
    if cached is None or cached[0] != key:
        cached = (key, [i for i, t in enumerate(table.taints) if t.key == DRAINING_TAINT])
        table.derived[NAME] = cached
    columns: list[int] = cached[1]
    return columns


class ClusterHealth(FilterPlugin):
    name = NAME
    per_cluster = True

    def survivors(self, inp: CycleInput, slots: Slots) -> Slots | None:
        if _draining_columns(inp.clusters):
            return None
        if len(slots) <= FEW:  # (a cluster a nomination touched: numpy's calls cost more)
            ready = inp.ready
            return np.array([slot for slot in slots.tolist() if ready.item(slot)], dtype=np.intp)
        kept: Slots = slots[inp.ready[slots]]
        return kept

    def filter(self, inp: CycleInput, slots: Slots) -> FilterResult:
        ok = np.asarray(inp.ready[slots])
        table = inp.clusters
        columns = _draining_columns(table)
        if not columns:
            return FilterResult.from_mask(ok, Reason(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_NOT_READY))
        draining = table.taint_matrix[slots][:, columns].any(axis=1)
        verdict = np.where(ok, np.where(draining, 2, 0), 1).astype(np.int32)
        reasons = [
            Reason(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_NOT_READY),
            Reason(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_DRAINING),
        ]
        return FilterResult(verdict=verdict, reasons=reasons)
