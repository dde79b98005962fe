"""NodeFit: the gang fits the nodes of a worker that reported them, not only its totals.

Per pod set, the node groups it may use (node selector, required affinity, tolerations) and, per
free-capacity bin row, how many of its pods one node holds: ``min`` over the requested resources
of ``floor(free / request)``. A pod set fits when its rows hold at least its ``min_count`` pods
(default: all). Several pod sets are taken largest per pod first, each taking the nodes with the
most room for it and consuming them whole (a node half used by one set is not offered to the
next): it may reject a gang a smarter packing would fit, but every gang it accepts really packs
onto the reported nodes. Our own copies in flight are not subtracted here: they count against
the cluster totals (``ClusterHeadroom``), and the next report shows them on nodes.

Computed over every cluster's rows at once (no loop over clusters), once per pod-set shape and
facts version (memo on the node arrays). A cluster whose worker reported no nodes passes.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from eventlog.events import PodSet
from reconciler.core.clusters import ClusterTable
from reconciler.core.framework.interface import Codes, CycleInput, FilterPlugin, FilterResult, JobView, Slots
from reconciler.core.framework.status import Code, Reason
from reconciler.core.nodes import NodeArrays, node_arrays
from reconciler.core.plugins.amounts import amount
from reconciler.core.plugins.podsets import Ints, minimum, order_largest_first, pods_per_node, usable_groups

NAME = "NodeFit"

Mask = npt.NDArray[np.bool_]


class Verdicts:
    """Per-cluster verdicts with reasons numbered as they are first used."""

    def __init__(self, n: int) -> None:
        self.verdict: Codes = np.zeros(n, dtype=np.int32)
        self.reasons: list[Reason] = []
        self._ids: dict[Reason, int] = {}

    def reject(self, mask: Mask, code: Code, message: str) -> None:
        mask = mask & (self.verdict == 0)
        if not mask.any():
            return
        reason = Reason(code, message)
        rid = self._ids.get(reason)
        if rid is None:
            self.reasons.append(reason)
            rid = self._ids[reason] = len(self.reasons)
        self.verdict[mask] = rid

    def open(self) -> Mask:
        return np.asarray(self.verdict == 0)


def _groups_per_cluster(arrays: NodeArrays, groups: Mask) -> Mask:
    counts = np.bincount(arrays.group_slot[groups], minlength=arrays.n_clusters)
    return np.asarray(counts > 0)


def _take_nodes(arrays: NodeArrays, remaining: Ints, k: Ints, need: int) -> Ints:
    """Pods each cluster holds from ``remaining`` nodes, taking for ``need`` pods the rows with
    the most pods per node first; the nodes taken are removed from ``remaining`` (whole)."""
    avail = remaining * k
    total = arrays.per_cluster(avail)
    order = np.lexsort((-k, arrays.row_slot))  # rows stay grouped by cluster, best rows first
    a = avail[order]
    cum = np.cumsum(a)
    lengths = np.diff(np.append(arrays.seg_start, len(order)))
    start = np.repeat((cum - a)[arrays.seg_start], lengths)
    before = cum - a - start
    still = np.maximum(need - before, 0)
    kk = k[order]
    nodes = np.where(kk > 0, np.minimum(remaining[order], -(-still // np.maximum(kk, 1))), 0)
    remaining[order] -= nodes
    return total


def _largest_free(arrays: NodeArrays, usable: Mask) -> Ints:
    """Per cluster and resource: the most any one usable node has free (memo per usable set)."""
    key = ("largest", usable.tobytes())
    cached = arrays.memo.get(key)
    if cached is None:
        free = (
            arrays.row_free
            if usable.all()
            else np.where(usable[arrays.row_group][:, None], arrays.row_free, 0)
        )
        cached = arrays.per_cluster_max(free)
        arrays.remember(key, cached)
    out: Ints = cached
    return out


def _never(
    out: Verdicts, arrays: NodeArrays, names: list[str], ps: PodSet, request: Ints, usable: Mask, room: Ints
) -> None:
    """Clusters whose usable nodes could not hold the pod set even if they were empty (known
    only where every usable group reported its allocatable): waiting or preempting is no use."""
    known = usable & arrays.group_alloc_known
    unknown = _groups_per_cluster(arrays, usable & ~arrays.group_alloc_known)
    if not known.any():
        return
    cols = np.flatnonzero(request > 0)
    if len(cols) == 0:
        return
    per_node = (arrays.group_alloc[:, cols] // request[cols]).min(axis=1)
    per_node[~known] = 0
    total = np.zeros(arrays.n_clusters, dtype=np.int64)
    np.add.at(total, arrays.group_slot, np.minimum(per_node, 1 << 30) * arrays.group_nodes)
    most = np.zeros(arrays.n_clusters, dtype=np.int64)
    np.maximum.at(most, arrays.group_slot, per_node)
    need = minimum(ps)
    never = arrays.has_nodes & _groups_per_cluster(arrays, known) & ~unknown & (total < need) & (room < need)
    wanted = ", ".join(amount(names[c], int(request[c])) for c in cols)
    out.reject(
        never & (most == 0),
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        f"no node can hold a pod of pod set {ps.name} ({wanted}) even when empty",
    )
    for value in np.unique(total[never & (most > 0) & out.open()]):
        out.reject(
            never & (total == value),
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            f"the nodes pod set {ps.name} may use hold at most {int(value)} of its {need} pods even when empty",
        )


def _explain_short(
    out: Verdicts,
    arrays: NodeArrays,
    names: list[str],
    ps: PodSet,
    request: Ints,
    usable: Mask,
    most: Ints,
    room: Ints,
) -> None:
    """Reasons for the clusters still open where the pod set's usable nodes hold too few pods."""
    need = minimum(ps)
    bad = arrays.has_nodes & (room < need) & out.open()
    none_fit = bad & (most == 0)
    cols = np.flatnonzero(request > 0)
    if none_fit.any() and len(cols):
        largest = _largest_free(arrays, usable)
        for c in cols:
            short = none_fit & (largest[:, c] < request[c]) & out.open()
            for value in np.unique(largest[short, c]):
                out.reject(
                    short & (largest[:, c] == value),
                    Code.UNSCHEDULABLE,
                    f"no node with {amount(names[c], int(request[c]))} free "
                    f"(largest: {amount(names[c], int(value), bare=True)})",
                )
        wanted = ", ".join(amount(names[c], int(request[c])) for c in cols)
        out.reject(none_fit, Code.UNSCHEDULABLE, f"no node with {wanted} free at once")
    short = bad & out.open()
    for value in np.unique(room[short]):
        out.reject(
            short & (room == value),
            Code.UNSCHEDULABLE,
            f"nodes hold {int(value)} of the {need} pods pod set {ps.name} needs",
        )


def room_for(arrays: NodeArrays, request: Ints, usable: Mask) -> tuple[Ints, Ints]:
    """Per cluster: pods of this request its usable nodes hold, and the most one node holds.
    Shared by every pod set with the same request and usable groups, whatever its count."""
    key = ("room", request.tobytes(), usable.tobytes())
    cached = arrays.memo.get(key)
    if cached is None:
        k = pods_per_node(arrays, request, usable)
        cached = (arrays.per_cluster(arrays.row_count * k), arrays.per_cluster_max(k))
        arrays.remember(key, cached)
    out: tuple[Ints, Ints] = cached
    return out


def node_fit(job: JobView, arrays: NodeArrays, names: list[str]) -> tuple[Codes, list[Reason]]:
    """Verdicts over every cluster slot (0 = fits or no node facts) and their reasons."""
    out = Verdicts(arrays.n_clusters)
    order = order_largest_first(job, arrays)
    together = len([i for i in order if minimum(job.pod_sets[i]) > 0]) > 1
    remaining = arrays.row_count.copy() if together else arrays.row_count
    placed: list[str] = []
    for i in order:
        ps = job.pod_sets[i]
        need = minimum(ps)
        if need == 0:
            continue
        request = job.pod_vecs[i]
        selected, usable = usable_groups(arrays, ps)
        # Label and taint mismatches come first: nothing that runs or finishes changes them.
        matches = _groups_per_cluster(arrays, selected)
        if ps.node_selector or ps.node_affinity:
            out.reject(
                arrays.has_nodes & ~matches,
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                f"no node matches the node selector/affinity of pod set {ps.name}",
            )
        tolerated = _groups_per_cluster(arrays, usable)
        out.reject(
            arrays.has_nodes & matches & ~tolerated,
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            f"every node pod set {ps.name} could use has a taint it does not tolerate",
        )
        alone, most = room_for(arrays, request, usable)
        if (arrays.has_nodes & (alone < need) & out.open()).any():
            _never(out, arrays, names, ps, request, usable, alone)
            _explain_short(out, arrays, names, ps, request, usable, most, alone)
        if together:
            held = _take_nodes(arrays, remaining, pods_per_node(arrays, request, usable), need)
            crowded = arrays.has_nodes & (held < need)
            if placed:
                others = ", ".join(placed)
                out.reject(
                    crowded,
                    Code.UNSCHEDULABLE,
                    f"pod set {ps.name} has no room left on nodes once pod set(s) {others} have theirs",
                )
        placed.append(ps.name)
    return out.verdict, out.reasons


class NodeFit(FilterPlugin):
    name = NAME
    per_cluster = True
    preemptible = False  # victims' pods/quota are not located in the facts (docs/capacity.md)

    def idle(self, clusters: ClusterTable) -> bool:
        return not node_arrays(clusters).has_nodes.any()

    def filter(self, inp: CycleInput, slots: Slots) -> FilterResult:
        job = inp.job
        if not job.pod_sets:
            return FilterResult.passing(len(slots))
        arrays = node_arrays(inp.clusters)
        if not arrays.has_nodes.any():
            return FilterResult.passing(len(slots))
        key = (NAME, job.pods_key)
        cached = arrays.memo.get(key) if job.pods_key else None
        if cached is None:
            cached = node_fit(job, arrays, inp.clusters.resources.names)
            arrays.remember(key, cached)
        verdict, reasons = cached
        return FilterResult(verdict=verdict[slots], reasons=reasons)
