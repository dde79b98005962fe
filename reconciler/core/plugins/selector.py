"""ClusterSelector: every ``key=value`` of the job's cluster-selector must be a cluster label."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from reconciler.core.framework.interface import CycleInput, FilterPlugin, FilterResult, JobView, Slots
from reconciler.core.framework.status import Code, Reason

NAME = "ClusterSelector"


def reason_label(key: str, value: str) -> str:
    return f"label {key}={value} missing"


class ClusterSelector(FilterPlugin):
    name = NAME
    static = True

    def cache_key(self, job: JobView) -> Hashable:
        return tuple(sorted(job.placement.cluster_selector.items()))

    def filter(self, inp: CycleInput, slots: Slots) -> FilterResult:
        selector = inp.job.placement.cluster_selector
        if not selector:
            return FilterResult.passing(len(slots))
        verdict = np.zeros(len(slots), dtype=np.int32)
        reasons = []
        for key in sorted(selector):
            value = selector[key]
            ok = inp.clusters.label(key).matching([value], slots)
            reasons.append(Reason(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reason_label(key, value)))
            verdict[(verdict == 0) & ~ok] = len(reasons)
        return FilterResult(verdict=verdict, reasons=reasons)
