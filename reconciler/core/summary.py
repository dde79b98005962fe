"""``summary(state)``: the state as one JSON-able document (``replay --json``, tests, people)."""

from __future__ import annotations

from typing import Any

from reconciler.core.queues.facts import queues_summary
from reconciler.core.state import State


def summary(state: State, *, jobs: bool = True) -> dict[str, Any]:
    """``jobs=False``: without the per-job section (empty), which at fleet size is most of the
    document and a transient of about a kB per job (metrics and the web's queue rows need the rest)."""
    per_job: dict[str, Any] = {}
    for key in sorted(state.jobs) if jobs else ():
        job = state.jobs[key]
        entry: dict[str, Any] = {
            "phase": job.phase,
            "cluster": job.cluster,
            "attempt": job.attempt,
            "priority": job.priority,
            "nominated": list(job.nominated),
            "evictions": job.evictions,
            "requeues": job.requeues,
            "reason": job.last_reason,
            "uid": job.ref.uid,
        }
        if job.succeeded is not None:
            entry["succeeded"] = job.succeeded
        if job.unschedulable:
            entry["unschedulable"] = dict(sorted(job.unschedulable.items()))
        if job.not_before_ms is not None:
            entry["not_before_ms"] = job.not_before_ms
        if job.charge is not None:
            entry["cluster_queue"] = job.charge.cluster_queue
            entry["flavors"] = dict(sorted(job.charge.flavors.items()))
        per_job[key] = entry
    clusters: dict[str, Any] = {}
    for record in sorted(state.clusters.records, key=lambda r: r.name):
        clusters[record.name] = {
            "health": record.health,
            "labels": dict(sorted(record.labels.items())),
            "taints": [f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in record.taints],
            "capacity": dict(sorted(record.capacity.items())),
            "reported": dict(sorted(record.reported.items())),
            "assumed": dict(sorted((k, v) for k, v in record.assumed.items() if v)),
            "last_seen_ms": record.last_seen_ms,
            "jobs": sorted(
                k for k in state.by_cluster.get(record.name, {}) if state.jobs[k].cluster == record.name
            ),
        }
    claims = [
        {
            "preemptor": c.preemptor,
            "cluster": c.cluster,
            "victims": list(c.victims),
            "expires_ms": c.expires_ms,
            "priority": c.priority,
        }
        for _, c in sorted(state.claims.items())
    ]
    out: dict[str, Any] = {
        "seq": state.seq,
        "now_ms": state.now_ms,
        "jobs": per_job,
        "clusters": clusters,
        "claims": claims,
        "unsubmitted": sorted(state.unsubmitted),
    }
    if state.tree is not None:  # tenancy on: per ClusterQueue (read by status and metrics)
        out["queues"] = queues_summary(state)
    return out
