"""Rows for queues, clusters and jobs, from a folded core state and its ``core.summary``.

The summary is passed in (computed once per request) rather than recomputed here: it is the
documented, stable shape of the state, and the per-ClusterQueue facts the core adds to it when
queues are configured (``queues``: pending, admitted, usage and nominal quota per flavor/resource,
share, weight; ``reconciler.core.queues.facts``) are read as the core gives them. A log without
queue configuration has every job in one implicit queue, ``default``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import Struct, field

from reconciler import core
from reconciler.core import phases
from reconciler.core.jobs import JobRecord
from reconciler.core.queues.admit import queue_of
from reconciler.forecast import Estimate

DEFAULT_QUEUE = "default"
ADMITTED = (phases.NOMINATED, phases.PLACED)


class QueueRow(Struct, kw_only=True):
    name: str
    pending: int = 0  # waiting to be dispatched (Queued, Unschedulable)
    admitted: int = 0  # nominated or placed: holding capacity somewhere
    suspended: int = 0
    finished: int = 0
    # demand of its admitted jobs: per resource, or per "flavor/resource" with queues configured
    usage: dict[str, int] = field(default_factory=dict)
    quota: dict[str, int] | None = None  # nominal quota per "flavor/resource", with queues configured
    fair_share: float | None = None  # dominant share of the fleet divided by the weight (lower goes first)
    weight: float | None = None  # fairSharing.weight
    cohort: str | None = None
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


def job_queue(state: core.State, job: JobRecord) -> str:
    """The ClusterQueue the job is in: the one it is charged to, else the one the webhook resolved
    or its LocalQueue names (a job whose queue does not resolve is shown under the name it asked
    for); without queue configuration, the one default queue."""
    if job.charge is not None:
        return job.charge.cluster_queue
    if state.tree is None:
        return DEFAULT_QUEUE
    node = queue_of(state.tree, job)
    if isinstance(node, int):
        return state.tree.nodes[node].name
    return job.cluster_queue or f"{job.ref.namespace}/{job.queue or 'default'}"


def dispatch_order(state: core.State, job: JobRecord) -> tuple[int, int, int, str]:
    """The order ``decide`` dispatches waiting jobs in within a queue (``reconciler.core.dispatch.order_key``):
    priority, claim holders first, then submission order."""
    return (-job.priority, 0 if job.key in state.claims else 1, job.submitted_seq, job.key)


def positions(state: core.State, summary: dict[str, Any]) -> dict[str, int]:
    """Each waiting job's 1-based place in its queue's dispatch order."""
    waiting = sorted(
        (state.jobs[k] for k in state.waiting if k in state.jobs), key=lambda j: dispatch_order(state, j)
    )
    out: dict[str, int] = {}
    seen: dict[str, int] = {}
    for job in waiting:
        queue = job_queue(state, job)
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
        queue=job_queue(state, job),
        priority=job.priority,
        attempt=job.attempt,
        submitted_seq=job.submitted_seq,
        position=position,
        reason=job.last_reason,
        cluster=job.cluster,
        nominated=list(job.nominated),
        demand=job.demand,  # shared with the record and every job of its spec: replaced, never edited
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
    for job in state.jobs.values():
        name = job_queue(state, job)
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
    """The core's figures for a ClusterQueue (``reconciler.core.queues.facts.queues_summary``) win
    over what is counted here from the jobs; everything it says is kept in ``facts``."""
    row.facts = dict(given)
    for name in ("pending", "admitted"):
        if isinstance(given.get(name), int):
            setattr(row, name, given[name])
    usage, nominal = given.get("usage"), given.get("nominal")
    if isinstance(usage, dict):
        row.usage = {k: int(v) for k, v in usage.items()}
    if isinstance(nominal, dict):
        row.quota = {k: int(v) for k, v in nominal.items()}
    share = given.get("weighted_share")
    row.fair_share = float(share) if isinstance(share, int | float) else None
    weight = given.get("weight")
    row.weight = float(weight) if isinstance(weight, int | float) else None
    cohort = given.get("cohort")
    row.cohort = cohort if isinstance(cohort, str) else None


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
