"""Workers with real nodes: the trace's node list (the Alibaba trace's GPU nodes) split into
``--workers N`` clusters, so that fragmentation is real.

- **Which nodes**: ``--capacity-scale F`` keeps a share F of the nodes, evenly spaced in the
  file's order (node ``i`` is kept when ``floor((i + 1) F) > floor(i F)``), rather than shrinking
  every node: a node keeps its real shape, which is what fragmentation is about. The file's order
  mixes GPU models, so a sample is a fair mix of them.
- **Which worker**: the kept nodes, in order, in ``N`` contiguous runs of ``K // N`` or
  ``K // N + 1`` nodes (``worker-01`` ... ``worker-N``); a worker's capacity is its nodes' sum.
- **Constraints**: a job's required cluster affinity on the GPU model (``gpu_spec``) becomes the
  same required node affinity of its pod sets (a worker mixes models; its nodes carry the label),
  and, as an operator would label clusters without node facts, a cluster affinity on the models a
  worker has: each worker is labelled ``kdispatch.io/gpu-model.<MODEL>: "true"`` for every model
  among its nodes, and ``In [A, B]`` becomes the terms ``Exists gpu-model.A`` OR ``Exists
  gpu-model.B``. So even without node facts a job is only sent to workers with its GPU model.
- **Jobs no worker can ever hold** (a pod larger than every kept node, a GPU model none of them
  has) are left out, with a warning: they could never run under either model, and without node
  facts the core would send them round the workers for the whole run.
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

from eventlog.events import MatchExpression, PodSet, Resources, SelectorTerm
from reconciler.simulate.readers.alibaba import MODEL_LABEL
from reconciler.simulate.trace import Trace, TraceCluster, TraceJob
from reconciler.simworker import NodePool, SimNode, node_shape

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


def _model_label(model: str) -> str:
    return f"{MODEL_LABEL}.{model}"


def _worker_labels(nodes: list[SimNode]) -> dict[str, str]:
    models = sorted({n.labels[MODEL_LABEL] for n in nodes if MODEL_LABEL in n.labels})
    return {WORKER_LABEL: str(len(nodes))} | {_model_label(m): "true" for m in models}


def _cluster_term(expr: MatchExpression) -> list[SelectorTerm]:
    """``gpu-model In [A, B]`` as terms on the workers' per-model labels (one term per model)."""
    if expr.key != MODEL_LABEL or expr.operator != "In":
        return [SelectorTerm(match_expressions=[expr])]
    return [
        SelectorTerm(match_expressions=[MatchExpression(key=_model_label(v), operator="Exists")]) for v in expr.values
    ]


def _on_nodes(job: TraceJob) -> TraceJob:
    """A required cluster affinity on the GPU model becomes the pod sets' node affinity, and a
    cluster affinity on the workers' per-model labels."""
    affinity = job.placement.cluster_affinity
    if not affinity.required:
        return job
    pod_sets: list[PodSet] = [msgspec.structs.replace(ps, node_affinity=list(affinity.required)) for ps in job.pod_sets]
    # The reader writes one term of one expression; a worker label per model turns it into an OR.
    terms = [t for term in affinity.required for e in term.match_expressions for t in _cluster_term(e)]
    placement = msgspec.structs.replace(job.placement, cluster_affinity=msgspec.structs.replace(affinity, required=terms))
    return msgspec.structs.replace(job, pod_sets=pod_sets, placement=placement)


def _holdable(jobs: list[TraceJob], clusters: list[TraceCluster]) -> tuple[list[TraceJob], int]:
    """The jobs some worker could hold when empty, and how many others there were."""
    pools = [NodePool(c.nodes) for c in clusters]
    known: dict[tuple[object, ...], bool] = {}
    kept = []
    for job in jobs:
        shape = node_shape(job.pod_sets)
        ok = known.get(shape)
        if ok is None:
            ok = known[shape] = any(pool.fits(job.pod_sets) for pool in pools)
        if ok:
            kept.append(job)
    return kept, len(jobs) - len(kept)


def node_workers(
    trace: Trace, *, workers: int, scale: float, admission_latency_ms: int = 1000
) -> tuple[Trace, int]:
    """The trace with its clusters replaced by ``workers`` workers made of its nodes, and how
    many jobs were left out because no worker could ever hold them."""
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
            labels=_worker_labels(part),
            admission_latency_ms=admission_latency_ms,
            nodes=part,
        )
        for w, part in enumerate(split(kept, workers))
    ]
    jobs, left_out = _holdable([_on_nodes(j) for j in trace.jobs], clusters)
    return msgspec.structs.replace(trace, clusters=clusters, jobs=jobs), left_out


def with_capacity_model(trace: Trace, model: CapacityModel) -> Trace:
    """The same workers, reporting their nodes (``nodes``) or only their usage (``totals``)."""
    clusters = [msgspec.structs.replace(c, report_nodes=model == "nodes") for c in trace.clusters]
    return msgspec.structs.replace(trace, clusters=clusters)


def node_count(trace: Trace) -> int:
    return sum(len(c.nodes) for c in trace.clusters)
