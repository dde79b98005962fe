"""ClusterTaints (filter) and ClusterTaintScore (fewer untolerated PreferNoSchedule is better).

NoSchedule and NoExecute taints must be tolerated; PreferNoSchedule only lowers the score. The
job's tolerations are matched against each *distinct* taint once, then the cluster x taint matrix
answers for every cluster.
"""

from __future__ import annotations

from collections.abc import Hashable

import msgspec
import numpy as np

from reconciler.core.framework.interface import (
    CycleInput,
    FilterPlugin,
    FilterResult,
    JobView,
    ScorePlugin,
    Scores,
    Slots,
    normalize_by_max,
)
from reconciler.core.framework.status import Code, Reason
from reconciler.core.framework.tolerations import tolerated

NAME = "ClusterTaints"
SCORE_NAME = "ClusterTaintScore"

_encoder = msgspec.msgpack.Encoder()


def reason_taint(taint_id: str) -> str:
    return f"taint {taint_id} not tolerated"


class ClusterTaints(FilterPlugin):
    name = NAME
    static = True

    def cache_key(self, job: JobView) -> Hashable:
        return _encoder.encode(job.placement.cluster_tolerations)

    def filter(self, inp: CycleInput, slots: Slots) -> FilterResult:
        table = inp.clusters
        n = len(slots)
        tolerations = inp.job.placement.cluster_tolerations
        cols = [
            i
            for i, taint in enumerate(table.taints)
            if taint.effect != "PreferNoSchedule" and not tolerated(tolerations, taint, for_new_placement=True)
        ]
        if not cols:
            return FilterResult.passing(n) if not table.taints else FilterResult(np.zeros(n, dtype=np.int32))
        verdict = np.zeros(n, dtype=np.int32)
        for j in range(len(cols) - 1, -1, -1):  # a few distinct taints, many clusters
            verdict[table.taint_matrix[slots, cols[j]]] = j + 1
        reasons = [Reason(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reason_taint(table.taint_ids[c])) for c in cols]
        return FilterResult(verdict=verdict, reasons=reasons)


class ClusterTaintScore(ScorePlugin):
    name = SCORE_NAME

    def cache_key(self, job: JobView) -> Hashable:
        return _encoder.encode(job.placement.cluster_tolerations)

    def score(self, inp: CycleInput, candidates: Slots) -> Scores:
        table = inp.clusters
        tolerations = inp.job.placement.cluster_tolerations
        cols = [
            i
            for i, taint in enumerate(table.taints)
            if taint.effect == "PreferNoSchedule" and not tolerated(tolerations, taint, for_new_placement=True)
        ]
        if not cols:
            return np.zeros(len(candidates), dtype=np.int64)
        counts: Scores = table.taint_matrix[np.ix_(candidates, np.array(cols, dtype=np.intp))].sum(axis=1).astype(np.int64)
        return counts

    def normalize(self, scores: Scores) -> Scores:
        return normalize_by_max(scores, reverse=True)
