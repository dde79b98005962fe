"""ClusterPinning: ``cluster-names`` restricts a job to the clusters it names."""

from __future__ import annotations

import numpy as np

from reconciler.core.framework.interface import CycleInput, FilterPlugin, FilterResult
from reconciler.core.framework.registry import register
from reconciler.core.framework.status import Code, Reason

NAME = "ClusterPinning"
REASON_NOT_PINNED = "not in the job's cluster-names"


@register
class ClusterPinning(FilterPlugin):
    name = NAME
    static = True

    def filter(self, inp: CycleInput) -> FilterResult:
        names = inp.job.placement.cluster_names
        n = len(inp.clusters)
        if not names:
            return FilterResult.passing(n)
        ok = np.zeros(n, dtype=np.bool_)
        slots = [inp.clusters.index[c] for c in names if c in inp.clusters.index]
        ok[slots] = True
        return FilterResult.from_mask(ok, Reason(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_NOT_PINNED))
