"""ClusterAffinity (required terms, a filter) and ClusterAffinityScore (preferred terms)."""

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
)
from reconciler.core.framework.selectors import term_mask, terms_mask
from reconciler.core.framework.status import Code, Reason

NAME = "ClusterAffinity"
SCORE_NAME = "ClusterAffinityScore"
REASON_NO_TERM = "no required cluster-affinity term matches"

_encoder = msgspec.msgpack.Encoder()


class ClusterAffinity(FilterPlugin):
    name = NAME
    static = True

    def cache_key(self, job: JobView) -> Hashable:
        return _encoder.encode(job.placement.cluster_affinity.required)

    def filter(self, inp: CycleInput, slots: Slots) -> FilterResult:
        required = inp.job.placement.cluster_affinity.required
        if not required:
            return FilterResult.passing(len(slots))
        ok = terms_mask(inp.clusters, required, slots=slots)
        return FilterResult.from_mask(ok, Reason(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_NO_TERM))


class ClusterAffinityScore(ScorePlugin):
    """Sum of the weights of the preferred terms a cluster matches, normalized by the best."""

    name = SCORE_NAME

    def cache_key(self, job: JobView) -> Hashable:
        return _encoder.encode(job.placement.cluster_affinity.preferred)

    def score(self, inp: CycleInput, candidates: Slots) -> Scores:
        total = np.zeros(len(candidates), dtype=np.int64)
        for weighted in inp.job.placement.cluster_affinity.preferred:
            mask = term_mask(inp.clusters, weighted.term, slots=candidates)
            total += mask.astype(np.int64) * weighted.weight
        return total
