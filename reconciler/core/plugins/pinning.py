"""ClusterPinning: ``cluster-names`` restricts a job to the clusters it names."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from reconciler.core.framework.interface import CycleInput, FilterPlugin, FilterResult, JobView, Slots
from reconciler.core.framework.status import Code, Reason

NAME = "ClusterPinning"
REASON_NOT_PINNED = "not in the job's cluster-names"


class ClusterPinning(FilterPlugin):
    name = NAME
    static = True

    def cache_key(self, job: JobView) -> Hashable:
        return tuple(job.placement.cluster_names)

    def filter(self, inp: CycleInput, slots: Slots) -> FilterResult:
        names = inp.job.placement.cluster_names
        if not names:
            return FilterResult.passing(len(slots))
        pinned = [inp.clusters.index[c] for c in names if c in inp.clusters.index]
        ok = np.isin(slots, np.array(pinned, dtype=np.intp))
        return FilterResult.from_mask(ok, Reason(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_NOT_PINNED))
