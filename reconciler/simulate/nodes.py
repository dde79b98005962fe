"""Workers with real nodes: the trace's node list (the Alibaba trace's GPU nodes) split into
``--workers N`` clusters, so that fragmentation is real.

- **Which nodes**: ``--capacity-scale F`` keeps a share F of the nodes, evenly spaced in the
  file's order (node ``i`` is kept when ``floor((i + 1) F) > floor(i F)``), rather than shrinking
  every node: a node keeps its real shape, which is what fragmentation is about. The file's order
  mixes GPU models, so a sample is a fair mix of them.
- **Which worker**: the kept nodes, in order, in ``N`` contiguous runs of ``K // N`` or
  ``K // N + 1`` nodes (``worker-01`` ... ``worker-N``); a worker's capacity is its nodes' sum.
- **Constraints**: a job's required cluster affinity on the GPU model (``gpu_spec``) becomes the
  same required node affinity of its pod sets: a worker mixes models, its nodes carry the label.
- **Capacity model**: ``nodes``: the workers report their node groups (``ClusterCapacityReported``)
  and the core's node-aware filters see them; ``totals``: the same workers report only their usage,
  as before node facts existed (the core sees one pool per worker). Either way pods are bound to
  nodes (``reconciler.simworker.NodePool``), so a copy the totals send where no node has room
  waits there.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec

from eventlog.events import ClusterAffinity, PodSet, Resources
from reconciler.simulate.trace import Trace, TraceCluster, TraceJob
from reconciler.simworker import SimNode

CapacityModel = Literal["nodes", "totals"]
CAPACITY_MODELS: tuple[CapacityModel, ...] = ("nodes", "totals")
WORKER_LABEL = "kdispatch.io/nodes"


class NodeSplitError(ValueError):
    """``--workers`` cannot be applied to this trace (the message says what to change)."""


def sample_nodes(nodes: list[SimNode], scale: float) -> list[SimNode]:
    """A share ``scale`` of the nodes, evenly spaced in order (all of them at 1)."""
    if scale >= 1:
        return list(nodes)
    return [n for i, n in enumerate(nodes) if math.floor((i + 1) * scale) > math.floor(i * scale)]


def split(nodes: list[SimNode], workers: int) -> list[list[SimNode]]:
    """``workers`` contiguous runs, sizes differing by at most one (the first ones smaller)."""
    k = len(nodes)
    return [nodes[w * k // workers : (w + 1) * k // workers] for w in range(workers)]


def _capacity(nodes: list[SimNode]) -> Resources:
    total: dict[str, int] = {}
    for n in nodes:
        for res, amount in n.allocatable.items():
            total[res] = total.get(res, 0) + amount
    return dict(sorted(total.items()))


def _on_nodes(job: TraceJob) -> TraceJob:
    """A required cluster affinity becomes the pod sets' required node affinity."""
    affinity = job.placement.cluster_affinity
    if affinity is None or not affinity.required:
        return job
    pod_sets: list[PodSet] = [msgspec.structs.replace(ps, node_affinity=list(affinity.required)) for ps in job.pod_sets]
    rest = msgspec.structs.replace(affinity, required=[])
    placement = msgspec.structs.replace(
        job.placement, cluster_affinity=None if rest == ClusterAffinity() else rest
    )
    return msgspec.structs.replace(job, pod_sets=pod_sets, placement=placement)


def node_workers(trace: Trace, *, workers: int, scale: float, admission_latency_ms: int = 1000) -> Trace:
    """The trace with its clusters replaced by ``workers`` workers made of its nodes."""
    if not trace.nodes:
        raise NodeSplitError(
            f"{trace.source}: --workers splits the trace's node list into workers, and this trace has none "
            "(the Alibaba trace has one: openb_node_list_gpu_node.csv beside the pod list); drop --workers"
        )
    if workers < 1:
        raise NodeSplitError(f"--workers must be at least 1, got {workers}")
    kept = sample_nodes(trace.nodes, scale)
    if len(kept) < workers:
        raise NodeSplitError(
            f"--capacity-scale {scale:g} keeps {len(kept)} of the {len(trace.nodes)} nodes, fewer than --workers "
            f"{workers}; give at most --workers {max(len(kept), 1)} or a --capacity-scale of at least "
            f"{workers / len(trace.nodes):.4g}"
        )
    width = len(str(workers))
    clusters = [
        TraceCluster(
            name=f"worker-{w + 1:0{width}d}",
            capacity=_capacity(part),
            labels={WORKER_LABEL: str(len(part))},
            admission_latency_ms=admission_latency_ms,
            nodes=part,
        )
        for w, part in enumerate(split(kept, workers))
    ]
    return msgspec.structs.replace(trace, clusters=clusters, jobs=[_on_nodes(j) for j in trace.jobs])


def with_capacity_model(trace: Trace, model: CapacityModel) -> Trace:
    """The same workers, reporting their nodes (``nodes``) or only their usage (``totals``)."""
    clusters = [msgspec.structs.replace(c, report_nodes=model == "nodes") for c in trace.clusters]
    return msgspec.structs.replace(trace, clusters=clusters)


def node_count(trace: Trace) -> int:
    return sum(len(c.nodes) for c in trace.clusters)
