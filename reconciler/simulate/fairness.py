"""Fair share between teams, read off a simulated run's log (``kdispatch simulate --queues``).

``QueueRecorder`` follows every ClusterQueue through the log: what its jobs hold while they run
(from ``Placed`` until ``Finished``, ``Requeued`` or ``JobDeleted``), what its waiting jobs ask
for, waits and preemptions. It only reads the log, so it checks the core rather than repeating
its bookkeeping: a queue's ``max_usage`` is what was really running for it.

Definitions (docs/tenancy.md, "Fairness on a real trace"):

- A queue's **share** at a moment is its dominant share: the largest, over resources, of what its
  running jobs hold divided by the fleet's capacity (the core's fair-share currency).
- Its **demand** is the dominant share of its running jobs plus its waiting ones.
- A moment is **contended** when a queue has jobs waiting while another queue has demand (jobs
  running or waiting): what the other holds could be the waiting one's, so the split between
  them is the scheduler's choice. (Two queues both waiting is not required: a queue kept waiting
  while another runs on borrowed quota is the unfairness to catch.)
- Its **entitled share** then is its part of what all queues hold together (the total used at
  that moment), split by weight among the queues with demand and capped by each one's demand, the
  rest going to the others (water-filling).
- Over the contended periods, ``achieved_share`` and ``entitled_share`` are the time integrals of
  the two divided by the integral of the total used, so each adds up to 1 over the queues; the
  **Jain index** is ``(sum x)^2 / (n sum x^2)`` of ``x = achieved / entitled`` over the queues
  entitled to something: 1 when every queue got exactly its share, ``1/n`` when one got all.
- A queue becomes **newly active** when it has a waiting job after having had nothing running and
  nothing waiting. It has **reached its fair share** once its share is at least 90 % of its
  entitled share (of what all queues hold then) or nothing of it waits any more; the preemption
  **rounds** it took are the distinct times at which one of its jobs preempted in between.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from eventlog import events as ev
from eventlog.kube.queues import cluster_queue_of
from reconciler.edge.percentile import percentile
from reconciler.simulate.metrics import seconds

SERIES_BUCKETS = 200
FAIR_FRACTION = 0.9  # "reached its fair share": at least this much of its entitled share


@dataclass
class _Job:
    queue: str
    demand: dict[str, int]
    submitted_ms: int
    flavors: dict[str, str] = field(default_factory=dict)
    placed_ms: int | None = None
    running: bool = False
    waiting: bool = True
    done: bool = False
    deleted: bool = False


@dataclass
class _Queue:
    weight: float
    nominal: dict[str, int]  # "flavor/resource" -> nominal quota
    limit: dict[str, int | None]  # "flavor/resource" -> nominal + borrowingLimit (None: no limit)
    used: dict[str, int] = field(default_factory=dict)  # resource -> held by running jobs
    used_flavor: dict[str, int] = field(default_factory=dict)  # "flavor/resource" -> held
    max_usage: dict[str, int] = field(default_factory=dict)
    wanted: dict[str, int] = field(default_factory=dict)  # resource -> asked by waiting jobs
    waiting: int = 0
    preempted: int = 0  # its jobs evicted for a preemptor
    preempting: int = 0  # evictions its jobs caused
    preempt_times: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Segment:
    """The queues' state from ``at_ms`` until the next segment: dominant shares of the fleet."""

    at_ms: int
    used: tuple[float, ...]
    demand: tuple[float, ...]
    waiting: tuple[bool, ...]
    # Had a job waiting at some point at ``at_ms``: with no admission latency a job can arrive,
    # preempt and start within one instant, and its queue still became active then.
    arrived: tuple[bool, ...] = ()


def _limits(cq: ev.ClusterQueueSpec) -> tuple[dict[str, int], dict[str, int | None]]:
    nominal: dict[str, int] = {}
    limit: dict[str, int | None] = {}
    for group in cq.resource_groups:
        for flavor in group.flavors:
            for quota in flavor.resources:
                key = f"{flavor.name}/{quota.name}"
                nominal[key] = quota.nominal
                if cq.cohort is None:
                    limit[key] = quota.nominal  # no cohort: nobody to borrow from
                else:
                    limit[key] = None if quota.borrowing_limit is None else quota.nominal + quota.borrowing_limit
    return nominal, limit


class QueueRecorder:
    """An observer of the log entries, like ``Recorder``, per ClusterQueue."""

    def __init__(self, *, capacity: dict[str, int]) -> None:
        self.capacity = {r: c for r, c in sorted(capacity.items()) if c > 0}
        self.config: ev.QueuesConfigured | None = None
        self.queues: dict[str, _Queue] = {}
        self.names: list[str] = []
        self.jobs: dict[str, _Job] = {}
        self.segments: list[Segment] = []
        self.last_ms = 0

    # ------------------------------------------------------------------ observing

    def observe(self, entry: ev.LogEntry) -> None:
        event, at = entry.event, entry.at_ms
        self.last_ms = at
        match event:
            case ev.QueuesConfigured():
                self._configure(event)
            case ev.JobSubmitted():
                self._submitted(event, at)
            case ev.Nominated(job=ref, flavors=flavors):
                job = self.jobs.get(ref.uid)
                if job is not None:
                    job.flavors = dict(flavors)
            case ev.Placed(job=ref):
                self._placed(ref.uid, at)
            case ev.Finished(job=ref):
                self._end(ref.uid, at, deleted=False)
            case ev.JobDeleted(job=ref):
                self._end(ref.uid, at, deleted=True)
            case ev.Requeued(job=ref):
                self._requeued(ref.uid, at)
            case ev.Evict(job=ref, preemptor=preemptor) if preemptor is not None:
                self._evicted(ref.uid, preemptor, at)
            case _:
                pass

    def _configure(self, config: ev.QueuesConfigured) -> None:
        self.config = config
        for cq in sorted(config.cluster_queues, key=lambda c: c.name):
            nominal, limit = _limits(cq)
            old = self.queues.get(cq.name)
            if old is None:
                self.queues[cq.name] = _Queue(weight=cq.weight_milli / 1000, nominal=nominal, limit=limit)
            else:
                old.weight, old.nominal, old.limit = cq.weight_milli / 1000, nominal, limit
        self.names = sorted(self.queues)

    def _queue_of(self, event: ev.JobSubmitted) -> str | None:
        if event.cluster_queue is not None:
            return event.cluster_queue
        if self.config is None:
            return None
        return cluster_queue_of(self.config, namespace=event.job.namespace, queue_name=event.queue)

    def _submitted(self, event: ev.JobSubmitted, at: int) -> None:
        name = self._queue_of(event)
        if name is None or name not in self.queues:
            return
        demand: dict[str, int] = {}
        for ps in event.pod_sets:
            for r, amount in ps.requests.items():
                if amount:
                    demand[r] = demand.get(r, 0) + ps.count * amount
        job = self.jobs[event.job.uid] = _Job(queue=name, demand=demand, submitted_ms=at)
        self._wait(job, +1)
        self._mark(at)

    def _wait(self, job: _Job, sign: int) -> None:
        q = self.queues[job.queue]
        q.waiting += sign
        for r, amount in job.demand.items():
            q.wanted[r] = q.wanted.get(r, 0) + sign * amount
        job.waiting = sign > 0

    def _run(self, job: _Job, sign: int) -> None:
        q = self.queues[job.queue]
        for r, amount in job.demand.items():
            q.used[r] = q.used.get(r, 0) + sign * amount
            key = f"{job.flavors.get(r, '?')}/{r}"
            q.used_flavor[key] = q.used_flavor.get(key, 0) + sign * amount
            if sign > 0 and q.used_flavor[key] > q.max_usage.get(key, 0):
                q.max_usage[key] = q.used_flavor[key]
        job.running = sign > 0

    def _placed(self, uid: str, at: int) -> None:
        job = self.jobs.get(uid)
        if job is None or job.running or job.done:
            return
        if job.waiting:
            self._wait(job, -1)
        if job.placed_ms is None:
            job.placed_ms = at
        self._run(job, +1)
        self._mark(at)

    def _end(self, uid: str, at: int, *, deleted: bool) -> None:
        job = self.jobs.get(uid)
        if job is None or job.done:
            return
        if job.running:
            self._run(job, -1)
        if job.waiting:
            self._wait(job, -1)
        job.done = True
        job.deleted = deleted
        self._mark(at)

    def _requeued(self, uid: str, at: int) -> None:
        job = self.jobs.get(uid)
        if job is None or job.done:
            return
        if job.running:
            self._run(job, -1)
        if not job.waiting:
            self._wait(job, +1)
        self._mark(at)

    def _evicted(self, uid: str, preemptor: ev.JobRef, at: int) -> None:
        victim = self.jobs.get(uid)
        if victim is not None:
            self.queues[victim.queue].preempted += 1
        by = self.jobs.get(preemptor.uid)
        if by is not None:
            q = self.queues[by.queue]
            q.preempting += 1
            if not q.preempt_times or q.preempt_times[-1] != at:
                q.preempt_times.append(at)

    def _dominant(self, amounts: dict[str, int]) -> float:
        return max((amounts.get(r, 0) / cap for r, cap in self.capacity.items()), default=0.0)

    def _mark(self, at: int) -> None:
        qs = [self.queues[n] for n in self.names]
        used = tuple(self._dominant(q.used) for q in qs)
        demand = tuple(
            min(1.0, self._dominant({r: q.used.get(r, 0) + q.wanted.get(r, 0) for r in self.capacity})) for q in qs
        )
        waiting = tuple(q.waiting > 0 for q in qs)
        last = self.segments[-1] if self.segments else None
        if last is not None and last.at_ms == at:
            arrived = tuple(a or w for a, w in zip(last.arrived, waiting, strict=False))
            self.segments[-1] = Segment(at_ms=at, used=used, demand=demand, waiting=waiting, arrived=arrived)
        else:
            self.segments.append(Segment(at_ms=at, used=used, demand=demand, waiting=waiting, arrived=waiting))


# ------------------------------------------------------------------ the numbers


def water_fill(total: float, weights: list[float], caps: list[float]) -> list[float]:
    """``total`` split in proportion to ``weights``, no one above its cap; what a capped one
    cannot take goes to the others. Weight-0 entries only get what nobody else can take."""
    out = [0.0] * len(weights)
    open_ = [i for i, c in enumerate(caps) if c > 0]
    left = total
    for tier in ([i for i in open_ if weights[i] > 0], [i for i in open_ if weights[i] <= 0]):
        active = list(tier)
        while active and left > 1e-12:
            ws = [weights[i] if weights[i] > 0 else 1.0 for i in active]
            wsum = sum(ws)
            capped = [i for i, w in zip(active, ws, strict=True) if caps[i] - out[i] <= left * w / wsum]
            if not capped:
                for i, w in zip(active, ws, strict=True):
                    out[i] += left * w / wsum
                left = 0.0
                break
            for i in capped:
                left -= caps[i] - out[i]
                out[i] = caps[i]
            active = [i for i in active if i not in capped]
    return out


def jain(values: list[float]) -> float | None:
    if not values:
        return None
    square = sum(v * v for v in values)
    if square == 0:
        return None
    return sum(values) ** 2 / (len(values) * square)


@dataclass
class Fairness:
    names: list[str]
    achieved: list[float]  # integral of share over contended time
    entitled: list[float]
    total: float  # integral of the total used over contended time
    contended_ms: int
    span_ms: int
    activations: list[dict[str, Any]]
    series: list[list[float]]  # [t_s, share q0, ..., entitled q0, ..., contended fraction]


def fairness(rec: QueueRecorder, *, end_ms: int, buckets: int = SERIES_BUCKETS) -> Fairness:
    n = len(rec.names)
    weights = [rec.queues[name].weight for name in rec.names]
    achieved, entitled = [0.0] * n, [0.0] * n
    total = 0.0
    contended = 0
    segs = rec.segments
    start = segs[0].at_ms if segs else end_ms
    span = max(0, end_ms - start)
    # Buckets for the plot: mean share and mean entitled share per queue.
    edges = [start + span * i // buckets for i in range(buckets + 1)] if span else []
    area_used = [[0.0] * n for _ in range(buckets)]
    area_ent = [[0.0] * n for _ in range(buckets)]
    area_cont = [0] * buckets
    activations: list[dict[str, Any]] = []
    idle = [True] * n
    open_act: dict[int, dict[str, Any]] = {}
    for seg, nxt in itertools.pairwise([*segs, Segment(at_ms=end_ms, used=(), demand=(), waiting=())]):
        t0, t1 = seg.at_ms, min(nxt.at_ms, end_ms)
        used_total = sum(seg.used)
        ent = water_fill(used_total, weights, list(seg.demand))
        is_contended = any(seg.waiting) and sum(1 for d in seg.demand if d > 0) >= 2
        for i in range(n):  # newly active queues, and whether they reached their share
            if idle[i] and seg.arrived[i]:
                open_act[i] = {"queue": rec.names[i], "at_ms": t0, "others_waiting": sum(seg.waiting) >= 2}
            idle[i] = seg.demand[i] == 0
            act = open_act.get(i)
            if act is not None and (not seg.waiting[i] or seg.used[i] >= FAIR_FRACTION * ent[i]):
                del open_act[i]
                times = rec.queues[rec.names[i]].preempt_times
                act["reached_after_s"] = seconds(t0 - act["at_ms"])
                act["preemption_rounds"] = sum(1 for t in times if act["at_ms"] <= t <= t0)
                activations.append(act)
        if t1 <= t0:
            continue
        dt = t1 - t0
        if is_contended:
            contended += dt
            total += used_total * dt
            for i in range(n):
                achieved[i] += seg.used[i] * dt
                entitled[i] += ent[i] * dt
        if span:
            b = min(buckets - 1, (t0 - start) * buckets // span)
            while b < buckets and edges[b] < t1:
                a = min(t1, edges[b + 1]) - max(t0, edges[b])
                if a > 0:
                    area_cont[b] += a if is_contended else 0
                    for i in range(n):
                        area_used[b][i] += seg.used[i] * a
                        area_ent[b][i] += ent[i] * a
                b += 1
    for i, act in sorted(open_act.items()):
        times = rec.queues[rec.names[i]].preempt_times
        act["reached_after_s"] = None  # never, by the end of the run
        act["preemption_rounds"] = sum(1 for t in times if t >= act["at_ms"])
        activations.append(act)
    series = [
        [round((edges[b] - start) / 1000, 3)]
        + [round(a / (edges[b + 1] - edges[b]), 4) for a in area_used[b]]
        + [round(a / (edges[b + 1] - edges[b]), 4) for a in area_ent[b]]
        + [round(area_cont[b] / (edges[b + 1] - edges[b]), 4)]
        for b in range(buckets if span else 0)
        if edges[b + 1] > edges[b]
    ]
    for act in activations:
        act["at_s"] = seconds(act.pop("at_ms") - start)
    activations.sort(key=lambda a: (a["at_s"], a["queue"]))
    return Fairness(
        names=list(rec.names),
        achieved=achieved,
        entitled=entitled,
        total=total,
        contended_ms=contended,
        span_ms=span,
        activations=activations,
        series=series,
    )


def _wait_percentiles(jobs: list[_Job]) -> tuple[float | None, float | None]:
    waits = sorted(j.placed_ms - j.submitted_ms for j in jobs if j.placed_ms is not None)
    return seconds(percentile(waits, 50)), seconds(percentile(waits, 95))


def newly_active(acts: list[dict[str, Any]]) -> dict[str, Any]:
    """How long newly active queues took to reach their fair share, and in how many preemption
    rounds; the first activation of each queue and the slowest ones in full."""
    reached = sorted(a["reached_after_s"] for a in acts if a["reached_after_s"] is not None)
    first: dict[str, Any] = {}
    for a in acts:
        first.setdefault(a["queue"], a)
    slowest = sorted(acts, key=lambda a: (a["reached_after_s"] is not None, -(a["reached_after_s"] or 0), a["at_s"]))
    return {
        "count": len(acts),
        "with_others_waiting": sum(1 for a in acts if a["others_waiting"]),
        "never_reached": len(acts) - len(reached),
        "preemption_rounds_max": max((a["preemption_rounds"] for a in acts), default=0),
        "reached_after_p50_s": percentile(reached, 50),
        "reached_after_p95_s": percentile(reached, 95),
        "reached_after_max_s": reached[-1] if reached else None,
        "first": dict(sorted(first.items())),
        "slowest": slowest[:10],
    }


def queue_results(rec: QueueRecorder, *, end_ms: int) -> dict[str, Any]:
    """``queues``, ``jain_index`` and the rest of what a profile's results gain with ``--queues``."""
    if not rec.queues:
        return {}
    fair = fairness(rec, end_ms=end_ms)
    by_queue: dict[str, list[_Job]] = {name: [] for name in rec.names}
    for job in rec.jobs.values():
        by_queue[job.queue].append(job)
    queues: dict[str, Any] = {}
    ratios: list[float] = []
    for i, name in enumerate(fair.names):
        q = rec.queues[name]
        jobs = by_queue[name]
        achieved = fair.achieved[i] / fair.total if fair.total else None
        entitled = fair.entitled[i] / fair.total if fair.total else None
        if achieved is not None and entitled:
            ratios.append(achieved / entitled)
        p50, p95 = _wait_percentiles(jobs)
        over = sorted(
            key for key, used in q.max_usage.items() if (lim := q.limit.get(key)) is not None and used > lim
        )
        queues[name] = {
            "weight": q.weight,
            "entitled_share": None if entitled is None else round(entitled, 4),
            "achieved_share": None if achieved is None else round(achieved, 4),
            "wait_p50_s": p50,
            "wait_p95_s": p95,
            "preemptions": q.preempted,
            "preemptions_caused": q.preempting,
            "max_usage": dict(sorted(q.max_usage.items())),
            "nominal": dict(sorted(q.nominal.items())),
            "limit": dict(sorted(q.limit.items())),
            "over_limit": over,
            "jobs": len(jobs),
            "placed": sum(1 for j in jobs if j.placed_ms is not None),
            # Never placed, and its user did not delete it: it would still be waiting.
            "starved": sum(1 for j in jobs if j.placed_ms is None and not j.deleted),
        }
    index = jain(ratios)
    return {
        "queues": queues,
        "jain_index": None if index is None else round(index, 4),
        "contended_s": seconds(fair.contended_ms),
        "contended_fraction": round(fair.contended_ms / fair.span_ms, 4) if fair.span_ms else None,
        "newly_active": newly_active(fair.activations),
        "queue_share_series": {"queues": fair.names, "points": fair.series},
    }


def queues_table(profiles: dict[str, dict[str, Any]]) -> str:
    """One row per (profile, queue), for stdout."""
    from reconciler.simulate.report import text_table

    def cell(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    rows = [["profile", "queue", "weight", "entitled", "achieved", "wait p50 s", "p95 s", "preempted", "starved"]]
    for name, res in profiles.items():
        for q, st in res.get("queues", {}).items():
            rows.append(
                [
                    name,
                    q,
                    cell(st["weight"], "g"),
                    cell(st["entitled_share"], ".3f"),
                    cell(st["achieved_share"], ".3f"),
                    cell(st["wait_p50_s"], ".1f"),
                    cell(st["wait_p95_s"], ".1f"),
                    str(st["preemptions"]),
                    str(st["starved"]),
                ]
            )
    lines = [text_table(rows)]
    for name, res in profiles.items():
        if "jain_index" in res:
            lines.append(
                f"{name}: Jain index {cell(res['jain_index'], '.3f')} over the contended periods "
                f"({cell(res['contended_fraction'], '.1%')} of the run)"
            )
    return "\n".join(lines)
