"""Queue facts for people and tools: per ClusterQueue (``summary``: what ``kdispatch status``
and metrics read) and for one job (``explain``: why it waits, in quota terms)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from msgspec import Struct, field

from eventlog.events import Resources
from reconciler.core import phases
from reconciler.core.jobs import JobRecord
from reconciler.core.queues.admit import Wait, assign, hold_reason, queue_of
from reconciler.core.queues.order import share, weighted
from reconciler.core.queues.tree import QueueTree
from reconciler.core.queues.usage import Usage
from reconciler.core.state import State


class QuotaLine(Struct, frozen=True, kw_only=True, omit_defaults=True):
    flavor: str
    resource: str
    used: int
    nominal: int
    borrowed: int  # used beyond nominal
    available: int  # what the queue may still take now (own quota and what its cohort lends)
    borrowing_limit: int | None = None
    lending_limit: int | None = None


class QueueFacts(Struct, frozen=True, kw_only=True, omit_defaults=True):
    cluster_queue: str
    cohort: str | None = None
    weight_milli: int = 1000
    share: float = 0.0  # dominant share of the fleet, unweighted
    weighted_share: float | None = None  # divided by the weight: lower goes first (None: weight 0)
    strategy: str = "BestEffortFIFO"
    stop_policy: str = "None"
    usage: list[QuotaLine] = field(default_factory=list)
    position: int | None = None  # 1 = next in its queue (waiting jobs only)
    ahead: list[str] = field(default_factory=list)  # queues with waiting jobs that go first
    reason: str = ""  # why its queue does not admit it now ("" if it would)


def fleet(state: State) -> Resources:
    table = state.clusters
    table.build()
    if len(table) == 0:
        return {}
    totals = table.capacity[table.ready].sum(axis=0)
    return {name: int(totals[i]) for i, name in enumerate(table.resources.names)}


def _lines(tree: QueueTree, usage: Usage, node: int) -> list[QuotaLine]:
    n = tree.nodes[node]
    out = []
    for col, (flavor, resource) in enumerate(tree.columns):
        if not n.nominal[col] and not usage.usage[node][col] and (flavor, resource) not in _listed(n.spec):
            continue
        used = usage.usage[node][col]
        out.append(
            QuotaLine(
                flavor=flavor,
                resource=resource,
                used=used,
                nominal=n.nominal[col],
                borrowed=max(0, used - n.nominal[col]),
                available=max(0, usage.available(node, col)),
                borrowing_limit=n.borrowing_limit[col],
                lending_limit=n.lending_limit[col],
            )
        )
    return out


def _listed(spec: Any) -> list[tuple[str, str]]:
    if spec is None:
        return []
    return [(f.name, q.name) for g in spec.resource_groups for f in g.flavors for q in f.resources]


def _line_key(job: JobRecord) -> tuple[int, int, str]:
    return (-job.priority, job.submitted_seq, job.key)


def _waiting_by_queue(state: State, tree: QueueTree) -> dict[int, list[JobRecord]]:
    out: dict[int, list[JobRecord]] = {}
    for key in sorted(state.waiting):
        job = state.jobs[key]
        q = queue_of(tree, job)
        if isinstance(q, int):
            out.setdefault(q, []).append(job)
    for jobs in out.values():
        jobs.sort(key=_line_key)
    return out


def queue_facts(state: State, job: JobRecord) -> QueueFacts | None:
    tree, usage = state.tree, state.usage
    if tree is None or usage is None:
        return None
    q = queue_of(tree, job)
    if isinstance(q, Wait):
        name = job.cluster_queue or "?"
        return QueueFacts(cluster_queue=name, reason=q.message)
    n = tree.nodes[q]
    spec = n.spec
    assert spec is not None
    caps = fleet(state)
    key = weighted(usage, q, caps)
    waiting = _waiting_by_queue(state, tree)
    position = None
    if job.key in state.waiting:
        position = [j.key for j in waiting.get(q, [])].index(job.key) + 1
    root = tree.root_of(q)
    ahead = sorted(
        (weighted(usage, other, caps), tree.nodes[other].name)
        for other in tree.queues_under(root)
        if other != q and waiting.get(other)
    )
    reason = ""
    if job.phase in phases.WAITING:
        why = hold_reason(tree, job, q)
        if why is None:
            charged = job.charge
            fit = assign(usage, q, job.demand) if charged is None else None
            why = fit if isinstance(fit, Wait) else None
        reason = why.message if why else ""
    return QueueFacts(
        cluster_queue=n.name,
        cohort=tree.nodes[n.parent].name if n.parent is not None else None,
        weight_milli=n.weight_milli,
        share=float(share(usage, q, caps)),
        weighted_share=None if key[0] else float(key[1]),
        strategy=spec.queueing_strategy,
        stop_policy=spec.stop_policy,
        usage=_lines(tree, usage, q),
        position=position,
        ahead=[name for k, name in ahead if (k[0], k[1]) < (key[0], key[1])],
        reason=reason,
    )


def queues_summary(state: State) -> dict[str, Any]:
    """Per ClusterQueue: usage, nominal and borrowed per flavor/resource, share, weight, and
    how many jobs wait in it and hold its quota."""
    tree, usage = state.tree, state.usage
    if tree is None or usage is None:
        return {}
    caps = fleet(state)
    # Counted, not listed and sorted: /metrics reads this at every refresh, at fleet size over a
    # million waiting jobs (a list and a sort key each would be about 100 B per job).
    waiting: dict[int, int] = {}
    for key in state.waiting:
        q = queue_of(tree, state.jobs[key])
        if isinstance(q, int):
            waiting[q] = waiting.get(q, 0) + 1
    admitted: dict[str, int] = {}
    for job in state.jobs.values():
        charge = job.charge
        if charge is not None:
            admitted[charge.cluster_queue] = admitted.get(charge.cluster_queue, 0) + 1
    out: dict[str, Any] = {}
    for name in sorted(tree.queue):
        q = tree.queue[name]
        n = tree.nodes[q]
        lines = _lines(tree, usage, q)
        raw: Fraction = share(usage, q, caps)
        out[name] = {
            "cohort": tree.nodes[n.parent].name if n.parent is not None else None,
            "weight": n.weight_milli / 1000,
            "share": float(raw),
            "weighted_share": float(raw * 1000 / n.weight_milli) if n.weight_milli > 0 else None,
            "usage": {f"{ln.flavor}/{ln.resource}": ln.used for ln in lines},
            "nominal": {f"{ln.flavor}/{ln.resource}": ln.nominal for ln in lines},
            "borrowed": {f"{ln.flavor}/{ln.resource}": ln.borrowed for ln in lines},
            "pending": waiting.get(q, 0),
            "admitted": admitted.get(name, 0),
            "stop_policy": n.spec.stop_policy if n.spec else "None",
        }
    return out
