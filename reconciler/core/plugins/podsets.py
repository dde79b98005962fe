"""What the capacity plugins share about pod sets against node groups: which groups a pod set may
use (node selector, required affinity, tolerations) and how many of its pods each bin row holds.

Everything is over all clusters' rows at once (``reconciler.core.nodes``); the per-pod-set loops
here run over a job's few pod sets, never over clusters.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from eventlog.events import PodSet
from reconciler.core.clusters import Mask
from reconciler.core.framework.interface import JobView
from reconciler.core.framework.selectors import terms_mask
from reconciler.core.framework.tolerations import tolerated
from reconciler.core.nodes import NodeArrays

Ints = npt.NDArray[np.int64]

# Pods per row are capped here: enough for any pod set, small enough that count * pods never
# overflows.
_MANY = 1 << 30


def minimum(ps: PodSet) -> int:
    """Pods the set must have room for: its ``min_count`` (a PodGroup's minCount), else all."""
    return max(0, min(ps.count, ps.min_count if ps.min_count is not None else ps.count))


def selected_groups(arrays: NodeArrays, ps: PodSet) -> Mask:
    """Groups whose labels match the pod set's node selector and required node affinity."""
    every = np.arange(arrays.n_groups, dtype=np.intp)
    ok = np.ones(arrays.n_groups, dtype=np.bool_)
    for key in sorted(ps.node_selector):
        ok &= arrays.label(key).matching([ps.node_selector[key]], every)
    if ps.node_affinity:
        ok &= terms_mask(arrays, ps.node_affinity, slots=every)
    return ok


def untolerated_taints(arrays: NodeArrays, ps: PodSet) -> list[int]:
    """Columns of distinct node taints (NoSchedule, NoExecute) the pod set does not tolerate. A
    NoExecute toleration with tolerationSeconds still lets the pod be scheduled there."""
    return [
        i
        for i, taint in enumerate(arrays.taints)
        if taint.effect != "PreferNoSchedule"
        and not tolerated(ps.tolerations, taint, for_new_placement=False)
    ]


def usable_groups(arrays: NodeArrays, ps: PodSet) -> tuple[Mask, Mask]:
    """(groups matching the selector, those of them whose taints the pod set tolerates)."""
    selected = selected_groups(arrays, ps)
    cols = untolerated_taints(arrays, ps)
    if not cols:
        return selected, selected
    blocked = arrays.taint_matrix[:, np.array(cols, dtype=np.intp)].any(axis=1)
    return selected, selected & ~blocked


def pods_per_node(arrays: NodeArrays, request: Ints, usable: Mask) -> Ints:
    """Per bin row: how many pods with this request one of its nodes holds (0 if unusable)."""
    cols = np.flatnonzero(request > 0)
    rows = len(arrays.row_slot)
    if len(cols) == 0:
        k: Ints = np.full(rows, _MANY, dtype=np.int64)
    else:
        free = np.maximum(arrays.free_vectors[:, cols], 0)
        per_vector = (free // request[cols]).min(axis=1)
        np.minimum(per_vector, _MANY, out=per_vector)
        k = per_vector[arrays.row_vector]
    if not usable.all():
        k[~usable[arrays.row_group]] = 0
    return k


def order_largest_first(job: JobView, arrays: NodeArrays) -> list[int]:
    """Pod sets by size per pod, largest first (each resource weighed by the largest amount a
    node has free of it), so the hardest pods pick nodes before the easy ones take them."""
    if len(job.pod_sets) <= 1:
        return list(range(len(job.pod_sets)))
    scale = (
        arrays.row_free.max(axis=0) if len(arrays.row_slot) else np.zeros(arrays.n_resources, dtype=np.int64)
    )
    scale = np.maximum(scale, 1).astype(np.float64)
    size = (job.pod_vecs / scale).sum(axis=1) if job.pod_vecs.size else np.zeros(len(job.pod_sets))
    return sorted(range(len(job.pod_sets)), key=lambda i: (-float(size[i]), i))
