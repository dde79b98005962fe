"""The trace model: what every reader produces and the runner consumes.

Times are integer milliseconds relative to the start of the trace; the runner shifts them onto
a fixed epoch so the core sees ordinary ``at_ms`` values. Quantities follow the event contract:
cpu in millicores, memory in bytes, everything else in units.
"""

from __future__ import annotations

from collections import Counter

from msgspec import Struct, field

from eventlog.events import JobRef, Placement, PodSet, Resources, Taint
from reconciler.simworker import SimNode

SIM_NAMESPACE = "trace"
MIB = 1024 * 1024


class TraceJob(Struct, frozen=True, kw_only=True):
    """One job of a trace. ``delete_ms`` is when its user deleted it (e.g. gave up waiting)."""

    name: str
    submit_ms: int
    runtime_ms: int
    pod_sets: list[PodSet]
    priority: int = 0
    priority_class: str = "default"
    placement: Placement = field(default_factory=Placement)
    delete_ms: int | None = None
    kind: str = "Job"
    api_version: str = "batch/v1"
    # Tenancy (``--queues``): the trace's own team column, if it has one, and where
    # ``simulate.tenants`` put the job: its namespace, LocalQueue and that queue's ClusterQueue.
    tenant: str | None = None
    namespace: str = SIM_NAMESPACE
    queue: str | None = None
    cluster_queue: str | None = None

    @property
    def uid(self) -> str:
        return f"uid-{self.name}"

    def ref(self) -> JobRef:
        return JobRef(
            namespace=self.namespace, name=self.name, uid=self.uid, api_version=self.api_version, kind=self.kind
        )

    def total(self, resource: str) -> int:
        """Sum of count x per-pod request of one resource over the gang."""
        return sum(ps.count * ps.requests.get(resource, 0) for ps in self.pod_sets)


class TraceCluster(Struct, frozen=True, kw_only=True):
    name: str
    capacity: Resources
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    admission_latency_ms: int = 1000
    # Real nodes (``simulate.nodes``): pods are bound to them, and with ``report_nodes`` the
    # worker reports them to the core (``ClusterCapacityReported``); none: one quota pool.
    nodes: list[SimNode] = field(default_factory=list)
    report_nodes: bool = True


class Trace(Struct, frozen=True, kw_only=True):
    """Jobs sorted by (submit time, name); clusters sorted by name."""

    jobs: list[TraceJob]
    clusters: list[TraceCluster]
    gpu_resource: str = "nvidia.com/gpu"
    priority_classes: dict[str, int] = field(default_factory=dict)
    source: str = ""
    # The node list the trace came with (the Alibaba trace's), in its order; ``--workers``
    # splits it into clusters (``simulate.nodes``).
    nodes: list[SimNode] = field(default_factory=list)

    def total_capacity(self, resource: str) -> int:
        return sum(c.capacity.get(resource, 0) for c in self.clusters)

    def undeclared_resources(self) -> dict[str, int]:
        """Resources jobs request that no cluster declares -> how many jobs ask for each. The core
        counts an undeclared resource as zero capacity, so those jobs can never be placed."""
        declared = {name for c in self.clusters for name in c.capacity}
        out: dict[str, int] = {}
        for job in self.jobs:
            wanted = {name for ps in job.pod_sets for name, amount in ps.requests.items() if amount > 0}
            for name in sorted(wanted - declared):
                out[name] = out.get(name, 0) + 1
        return out


class TraceError(ValueError):
    """A trace or cluster file that cannot be read; the message names the file and line."""


def sorted_trace(
    *,
    jobs: list[TraceJob],
    clusters: list[TraceCluster],
    gpu_resource: str,
    priority_classes: dict[str, int] | None = None,
    source: str = "",
    nodes: list[SimNode] | None = None,
) -> Trace:
    names = [c.name for c in clusters]
    if len(set(names)) != len(names):
        raise TraceError(f"{source}: duplicate cluster names in {names}")
    counts = Counter(j.name for j in jobs)
    dup = sorted(n for n, c in counts.items() if c > 1)[:5]
    if dup:
        raise TraceError(f"{source}: duplicate job names, e.g. {dup}")
    return Trace(
        jobs=sorted(jobs, key=lambda j: (j.submit_ms, j.name)),
        clusters=sorted(clusters, key=lambda c: c.name),
        gpu_resource=gpu_resource,
        priority_classes=dict(sorted((priority_classes or {}).items())),
        source=source,
        nodes=list(nodes or []),
    )
