"""ClusterHealth: only Ready clusters take new work (Lost and removed ones do not)."""

from __future__ import annotations

import numpy as np

from reconciler.core.framework.interface import CycleInput, FilterPlugin, FilterResult, Slots
from reconciler.core.framework.status import Code, Reason

NAME = "ClusterHealth"
REASON_NOT_READY = "cluster not ready (lost or removed)"


class ClusterHealth(FilterPlugin):
    name = NAME

    def filter(self, inp: CycleInput, slots: Slots) -> FilterResult:
        ok = np.asarray(inp.ready[slots])
        return FilterResult.from_mask(ok, Reason(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_NOT_READY))
