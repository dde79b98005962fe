"""Prometheus metrics of the actuator and the cluster observers (registered on a given registry,
normally the process's ``ReconcilerMetrics.registry``, so ``/metrics`` shows them)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class ClusterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry()
        self.registry = r
        self.applied = Counter(
            "kdispatch_actuator_applied_total",
            "Remote copies brought to their intent (create, delete, evict), by cluster",
            ["cluster", "intent"],
            registry=r,
        )
        self.retries = Counter(
            "kdispatch_actuator_retries_total",
            "Requests to a cluster that failed and will be retried, by cluster and why",
            ["cluster", "why"],
            registry=r,
        )
        self.collected = Counter(
            "kdispatch_actuator_gc_deleted_total",
            "Copies the garbage collector deleted, by cluster",
            ["cluster"],
            registry=r,
        )
        self.seq = Gauge("kdispatch_actuator_log_seq", "Last log sequence the actuator has read", registry=r)
        self.pending = Gauge(
            "kdispatch_actuator_pending", "Copies queued or in flight, by cluster", ["cluster"], registry=r
        )
