"""Rows for queues, clusters and jobs, from a folded core state and its ``core.summary``.

The summary is passed in (computed once per request) rather than recomputed here: it is the
documented, stable shape of the state, and per-queue facts the core adds to it (``queues``: quota,
usage, fair share per ClusterQueue) are read from it generically, so a richer core shows up here
without a change. Until the core knows queues, every job is in one implicit queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import Struct, field

from reconciler import core
from reconciler.core import phases
from reconciler.core.jobs import JobRecord
from reconciler.forecast import Estimate

DEFAULT_QUEUE = "default"
ADMITTED = (phases.NOMINATED, phases.PLACED)


class QueueRow(Struct, kw_only=True):
    name: str
    pending: int = 0  # waiting to be dispatched (Queued, Unschedulable)
    admitted: int = 0  # nominated or placed: holding capacity somewhere
    suspended: int = 0
    finished: int = 0
    usage: dict[str, int] = field(default_factory=dict)  # demand of its admitted jobs
    quota: dict[str, int] | None = None  # nominal quota, when the core knows one
    fair_share: float | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # everything the core's summary says of it


class ClusterRow(Struct, kw_only=True):
    name: str
    health: str
    capacity: dict[str, int]
    used: dict[str, int]  # the larger of reported and our assumed usage (what capacity filters use)
    reported: dict[str, int]
    assumed: dict[str, int]
    jobs: int  # jobs placed there now
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[str] = field(default_factory=list)
    last_seen_ms: int = 0


class JobRow(Struct, kw_only=True):
    key: str
    namespace: str
    name: str
    phase: str
    queue: str
    priority: int
    attempt: int
    submitted_seq: int
    position: int | None = None  # 1 = next in its queue's dispatch order; None unless waiting
    reason: str = ""
    cluster: str | None = None
    nominated: list[str] = field(default_factory=list)
    demand: dict[str, int] = field(default_factory=dict)
    # When it would start if nothing new came (``reconciler.forecast``); None: not estimated (not
    # pending, beyond the estimated first N, or not startable within the forecast's horizon).
    expected_start_ms: int | None = None
    expected_cluster: str | None = None


def job_queue(summary_job: dict[str, Any] | None) -> str:
    queue = (summary_job or {}).get("queue")
    return queue if isinstance(queue, str) and queue else DEFAULT_QUEUE


def dispatch_order(state: core.State, job: JobRecord) -> tuple[int, int, int, str]:
    """The order ``decide`` dispatches waiting jobs in (``reconciler.core.dispatch.order_key``):
    priority, claim holders first, then submission order."""
    return (-job.priority, 0 if job.key in state.claims else 1, job.submitted_seq, job.key)


def positions(state: core.State, summary: dict[str, Any]) -> dict[str, int]:
    """Each waiting job's 1-based place in its queue's dispatch order."""
    jobs = summary.get("jobs", {})
    waiting = sorted(
        (state.jobs[k] for k in state.waiting if k in state.jobs), key=lambda j: dispatch_order(state, j)
    )
    out: dict[str, int] = {}
    seen: dict[str, int] = {}
    for job in waiting:
        queue = job_queue(jobs.get(job.key))
        seen[queue] = seen.get(queue, 0) + 1
        out[job.key] = seen[queue]
    return out


def job_row(
    state: core.State,
    summary: dict[str, Any],
    key: str,
    *,
    position: int | None = None,
    estimate: Estimate | None = None,
) -> JobRow | None:
    job = state.jobs.get(key)
    if job is None:
        return None
    return JobRow(
        key=key,
        namespace=job.ref.namespace,
        name=job.ref.name,
        phase=job.phase,
        queue=job_queue(summary.get("jobs", {}).get(key)),
        priority=job.priority,
        attempt=job.attempt,
        submitted_seq=job.submitted_seq,
        position=position,
        reason=job.last_reason,
        cluster=job.cluster,
        nominated=list(job.nominated),
        demand=dict(job.demand),
        expected_start_ms=estimate.start_ms if estimate is not None else None,
        expected_cluster=estimate.cluster if estimate is not None else None,
    )


def job_rows(
    state: core.State,
    summary: dict[str, Any],
    *,
    queue: str | None = None,
    phase: str | None = None,
    waiting_only: bool = False,
    estimates: Mapping[str, Estimate] | None = None,
) -> list[JobRow]:
    """Jobs (filtered by queue and phase): waiting ones first in dispatch order, then by key;
    with their expected start where ``estimates`` (``reconciler.forecast``) has one."""
    where = positions(state, summary)
    found = estimates or {}
    rows = []
    for key in sorted(state.jobs):
        row = job_row(state, summary, key, position=where.get(key), estimate=found.get(key))
        assert row is not None
        if queue is not None and row.queue != queue:
            continue
        if phase is not None and row.phase != phase:
            continue
        if waiting_only and row.position is None:
            continue
        rows.append(row)
    rows.sort(key=lambda r: (r.position is None, r.queue, r.position or 0, r.key))
    return rows


def queue_rows(state: core.State, summary: dict[str, Any]) -> list[QueueRow]:
    facts: dict[str, Any] = summary.get("queues") or {}
    rows: dict[str, QueueRow] = {name: QueueRow(name=name) for name in facts}
    jobs = summary.get("jobs", {})
    for key, job in state.jobs.items():
        name = job_queue(jobs.get(key))
        row = rows.setdefault(name, QueueRow(name=name))
        if job.phase in phases.WAITING and not job.suspended:
            row.pending += 1
        elif job.phase in ADMITTED:
            row.admitted += 1
            for resource, amount in job.demand.items():
                row.usage[resource] = row.usage.get(resource, 0) + amount
        elif job.suspended or job.phase == phases.SUSPENDED:
            row.suspended += 1
        elif job.phase == phases.FINISHED:
            row.finished += 1
    if not rows:
        rows[DEFAULT_QUEUE] = QueueRow(name=DEFAULT_QUEUE)
    for name, given in facts.items():
        if isinstance(given, dict):
            _merge_facts(rows[name], given)
    for row in rows.values():
        row.usage = dict(sorted(row.usage.items()))
    return [rows[name] for name in sorted(rows)]


def _merge_facts(row: QueueRow, given: dict[str, Any]) -> None:
    """What the core says of a queue wins over what is counted here; names vary by design stage,
    so the usual spellings are accepted and everything is kept in ``facts``."""
    row.facts = dict(given)
    for name in ("pending", "admitted", "suspended", "finished"):
        if isinstance(given.get(name), int):
            setattr(row, name, given[name])
    usage = given.get("usage")
    if isinstance(usage, dict):
        row.usage = {k: int(v) for k, v in usage.items() if isinstance(v, int | float)}
    quota = given.get("quota", given.get("nominal_quota", given.get("nominalQuota")))
    if isinstance(quota, dict):
        row.quota = {k: int(v) for k, v in quota.items() if isinstance(v, int | float)}
    share = given.get("fair_share", given.get("share", given.get("fairShare")))
    if isinstance(share, int | float):
        row.fair_share = float(share)


def cluster_rows(state: core.State) -> list[ClusterRow]:
    counts: dict[str, int] = {}
    for job in state.jobs.values():
        if job.cluster is not None and job.phase == phases.PLACED:
            counts[job.cluster] = counts.get(job.cluster, 0) + 1
    rows = []
    for rec in sorted(state.clusters.records, key=lambda r: r.name):
        names = sorted({*rec.capacity, *rec.reported, *rec.assumed})
        used = {n: max(rec.reported.get(n, 0), rec.assumed.get(n, 0)) for n in names}
        rows.append(
            ClusterRow(
                name=rec.name,
                health=rec.health,
                capacity=dict(sorted(rec.capacity.items())),
                used={n: v for n, v in used.items() if v or n in rec.capacity},
                reported=dict(sorted(rec.reported.items())),
                assumed=dict(sorted((k, v) for k, v in rec.assumed.items() if v)),
                jobs=counts.get(rec.name, 0),
                labels=dict(sorted(rec.labels.items())),
                taints=[f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in rec.taints],
                last_seen_ms=rec.last_seen_ms,
            )
        )
    return rows


def explanation(state: core.State, key: str) -> dict[str, Any] | None:
    """``core.explain`` now (every cluster's verdict, scores by plugin), as JSON-able data."""
    try:
        found = core.explain(state, key)
    except core.UnknownJob:
        return None
    out: dict[str, Any] = msgspec.to_builtins(found)
    return out
