"""GangScore: prefer workers where every pod set has room for all its replicas, not only for the
``min_count`` NodeFit requires (a Workload API PodGroup's minCount, Kueue partial admission).

Per candidate, the share of the job's partial pod sets (``min_count`` below ``count``) whose full
count fits the worker's usable nodes, each set judged on its own. A worker that reported no
nodes counts as fitting: its totals already hold the whole gang (``ClusterHeadroom`` checks the
full count). Jobs without partial pod sets score the same everywhere.
"""

from __future__ import annotations

import numpy as np

from reconciler.core.framework.interface import MAX_SCORE, CycleInput, ScorePlugin, Scores, Slots
from reconciler.core.nodes import node_arrays
from reconciler.core.plugins.nodefit import room_for
from reconciler.core.plugins.podsets import minimum, usable_groups

NAME = "GangScore"


class GangScore(ScorePlugin):
    name = NAME

    def score(self, inp: CycleInput, candidates: Slots) -> Scores:
        job = inp.job
        partial = [i for i, ps in enumerate(job.pod_sets) if minimum(ps) < ps.count]
        if not partial:
            return np.zeros(len(candidates), dtype=np.int64)
        arrays = node_arrays(inp.clusters)
        full = np.zeros(len(candidates), dtype=np.int64)
        has_nodes = arrays.has_nodes[candidates]
        for i in partial:
            _, usable = usable_groups(arrays, job.pod_sets[i])
            room, _ = room_for(arrays, job.pod_vecs[i], usable)
            full += (~has_nodes | (room[candidates] >= job.pod_sets[i].count)).astype(np.int64)
        out: Scores = full * MAX_SCORE // len(partial)
        return out

    def normalize(self, scores: Scores) -> Scores:
        return scores  # already 0..100 and comparable across jobs
