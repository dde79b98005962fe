"""TopologyFit and TopologyScore: Kueue TAS requests on pod sets, against the node groups' labels.

A topology level is a node label key (``cloud.provider.com/rack``); a domain is one value of it
on one worker. ``kubernetes.io/hostname`` is the implicit tightest level: a bin row is a node,
so "one host holds the set" is "one node holds all its pods".

- TopologyFit: a pod set with a *required* level goes only where one domain of that level holds
  all of its (``min_count``) pods. Each pod set is judged on its own, so different pod sets (a
  Workload API job's groups) may use different domains; that sets share nodes is NodeFit's.
- TopologyScore: per pod set with a request, the tightest level of the worker at which one
  domain holds the set (tighter scores higher); reaching the *preferred* level scores full.
  Averaged over the job's pod sets with a request; jobs without one score 0 everywhere.

Workers that reported no nodes pass the filter and score 0.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from eventlog.events import PodSet
from reconciler.core.clusters import ClusterTable
from reconciler.core.framework.interface import (
    MAX_SCORE,
    CycleInput,
    FilterPlugin,
    FilterResult,
    JobView,
    ScorePlugin,
    Scores,
    Slots,
)
from reconciler.core.framework.status import Code, Reason
from reconciler.core.nodes import HOSTNAME, NodeArrays, node_arrays
from reconciler.core.plugins.nodefit import Verdicts
from reconciler.core.plugins.podsets import Ints, minimum, pods_per_node, usable_groups

FIT = "TopologyFit"
SCORE = "TopologyScore"

Mask = npt.NDArray[np.bool_]


def _pods_per_row(arrays: NodeArrays, job: JobView, i: int) -> Ints:
    _, usable = usable_groups(arrays, job.pod_sets[i])
    return pods_per_node(arrays, job.pod_vecs[i], usable)


def largest_domain(arrays: NodeArrays, level: str, k: Ints) -> tuple[Ints, Mask]:
    """Per cluster: the most pods (``k`` per node of each row) one domain of ``level`` holds,
    and whether the cluster has that level on any node at all."""
    if level == HOSTNAME:
        return arrays.per_cluster_max(k * (arrays.row_count > 0)), arrays.has_nodes
    group_domain, domain_slot = arrays.domains(level)
    row_domain = group_domain[arrays.row_group]
    has = row_domain >= 0
    per_domain = np.zeros(len(domain_slot), dtype=np.int64)
    np.add.at(per_domain, row_domain[has], (arrays.row_count * k)[has])
    best = np.zeros(arrays.n_clusters, dtype=np.int64)
    np.maximum.at(best, domain_slot, per_domain)
    labelled = np.zeros(arrays.n_clusters, dtype=np.bool_)
    labelled[domain_slot] = True
    return best, labelled


def _requests(job: JobView) -> list[tuple[int, PodSet]]:
    return [(i, ps) for i, ps in enumerate(job.pod_sets) if ps.topology is not None and minimum(ps) > 0]


def topology_fit(job: JobView, arrays: NodeArrays) -> tuple[npt.NDArray[np.int32], list[Reason]]:
    out = Verdicts(arrays.n_clusters)
    for i, ps in _requests(job):
        level = ps.topology.required if ps.topology else None
        if level is None:
            continue
        need = minimum(ps)
        best, labelled = largest_domain(arrays, level, _pods_per_row(arrays, job, i))
        out.reject(
            arrays.has_nodes & ~labelled,
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            f"no node has topology level {level} (pod set {ps.name} requires one domain of it)",
        )
        short = arrays.has_nodes & (best < need) & out.open()
        for value in np.unique(best[short]):
            out.reject(
                short & (best == value),
                Code.UNSCHEDULABLE,
                f"no {level} domain holds the {need} pods of pod set {ps.name} (most: {int(value)})",
            )
    return out.verdict, out.reasons


def topology_score(job: JobView, arrays: NodeArrays) -> Ints:
    """Per cluster 0..100, averaged over the pod sets with a topology request."""
    requests = _requests(job)
    total = np.zeros(arrays.n_clusters, dtype=np.int64)
    if not requests:
        return total
    depth = arrays.host_pos + 1  # levels of each cluster, the host level included
    for i, ps in requests:
        need = minimum(ps)
        k = _pods_per_row(arrays, job, i)
        tightest = np.full(arrays.n_clusters, -1, dtype=np.int64)
        holds_at: dict[str, Mask] = {}
        for level in [*arrays.level_keys, HOSTNAME]:
            best, _ = largest_domain(arrays, level, k)
            holds = arrays.has_nodes & (best >= need)
            holds_at[level] = holds
            pos = arrays.host_pos if level == HOSTNAME else arrays.level_pos[level]
            better = holds & (pos >= 0) & (pos > tightest)
            tightest[better] = pos[better]
        score = np.where(tightest >= 0, (tightest + 1) * MAX_SCORE // depth, 0)
        preferred = ps.topology.preferred if ps.topology else None
        if preferred is not None:
            if preferred == HOSTNAME:
                reached = tightest >= arrays.host_pos
            elif preferred in arrays.level_pos:
                pos = arrays.level_pos[preferred]
                reached = (pos >= 0) & (tightest >= pos)
            else:
                reached = np.zeros(arrays.n_clusters, dtype=np.bool_)
            if preferred not in holds_at:
                best, _ = largest_domain(arrays, preferred, k)
                reached |= arrays.has_nodes & (best >= need)
            score = np.where(reached, MAX_SCORE, score // 2)
        total += score
    out: Ints = total // len(requests)
    return out


def _memo(arrays: NodeArrays, name: str, job: JobView) -> object:
    return arrays.memo.get((name, job.pods_key)) if job.pods_key else None


class TopologyFit(FilterPlugin):
    name = FIT
    per_cluster = True
    preemptible = False  # victims' pods/quota are not located in the facts (docs/capacity.md)

    def idle(self, clusters: ClusterTable) -> bool:
        return not node_arrays(clusters).has_nodes.any()

    def filter(self, inp: CycleInput, slots: Slots) -> FilterResult:
        job = inp.job
        if not any(ps.topology is not None and ps.topology.required for ps in job.pod_sets):
            return FilterResult.passing(len(slots))
        arrays = node_arrays(inp.clusters)
        if not arrays.has_nodes.any():
            return FilterResult.passing(len(slots))
        cached = _memo(arrays, FIT, job)
        if cached is None:
            cached = topology_fit(job, arrays)
            if job.pods_key:
                arrays.remember((FIT, job.pods_key), cached)
        verdict: npt.NDArray[np.int32] = cached[0]  # type: ignore[index]
        reasons: list[Reason] = cached[1]  # type: ignore[index]
        return FilterResult(verdict=verdict[slots], reasons=reasons)


class TopologyScore(ScorePlugin):
    name = SCORE

    def idle(self, clusters: ClusterTable) -> bool:
        return not node_arrays(clusters).has_nodes.any()

    def score(self, inp: CycleInput, candidates: Slots) -> Scores:
        job = inp.job
        if not any(ps.topology is not None for ps in job.pod_sets):
            return np.zeros(len(candidates), dtype=np.int64)
        arrays = node_arrays(inp.clusters)
        cached = _memo(arrays, SCORE, job)
        if cached is None:
            cached = topology_score(job, arrays)
            if job.pods_key:
                arrays.remember((SCORE, job.pods_key), cached)
        scores: Scores = cached[candidates]  # type: ignore[index]
        return scores

    def normalize(self, scores: Scores) -> Scores:
        return scores  # already 0..100 and comparable across jobs
