"""Prometheus metrics of the reconciler, served on ``/metrics`` by a small aiohttp app.

One registry per process (not the global default) so tests and two loops in one process do not
collide. What a person watches: is this replica the leader, is it keeping up (inbox lag, batch
latency), what is it deciding (decisions by type, preemptions, requeues, how long jobs wait), and
what the fleet looks like to it (pending and admitted jobs and quota per ClusterQueue, capacity,
usage and health per cluster). Every figure is derived from the log: counters from the decisions
the leader appends, gauges from the state it folded, so they agree with ``replay`` and
``explain``. Names are in base units (seconds, bytes, cores) and stable: docs/operations.md lists
them, and deploy/monitoring/grafana-dashboard.json and the alerts there depend on them.

Labels are bounded: decision and reason vocabularies of the core, cluster and queue names; never
a job's name.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from eventlog import events as ev
from reconciler import core
from reconciler.core import phases
from reconciler.view.rows import DEFAULT_QUEUE, job_queue

ADMITTED = (phases.NOMINATED, phases.PLACED)  # holding capacity (and, with tenancy, quota)
HEALTH_STATES = ("Ready", "Lost", "Removed")
FLEET_REFRESH_S = 15.0

# The log carries cpu in millicores (the event contract); Prometheus wants cores.
_MILLI_RESOURCES = frozenset({"cpu"})

# Submit -> placement: seconds when a cluster is free, hours when the fleet is full.
WAIT_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)

# A reason label is the leading CamelCase word of a decision's reason ("Preempted by team/x
# (priority 5 > 1)" -> "Preempted"): the free text names jobs, the word is the core's vocabulary.
_REASON_WORD = re.compile(r"[A-Z][A-Za-z]*")


def base_units(resource: str, amount: float) -> float:
    """An amount as the log carries it, in the resource's base unit (cores, bytes, devices)."""
    return amount / 1000 if resource in _MILLI_RESOURCES else float(amount)


def reason_label(text: str) -> str:
    found = _REASON_WORD.match(text)
    return found.group(0) if found else "Other"


class ReconcilerMetrics:
    def __init__(self, *, fleet_refresh_s: float = FLEET_REFRESH_S) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.leader = Gauge("kdispatch_leader", "1 while this replica is the sequencing leader", registry=r)
        self.terms = Counter("kdispatch_leader_terms_total", "Leader terms started by this replica", registry=r)
        self.step_downs = Counter(
            "kdispatch_leader_step_downs_total", "Times this replica stopped leading, by reason", ["reason"], registry=r
        )
        self.batches = Counter("kdispatch_batches_total", "Input batches sequenced into the log", registry=r)
        self.inputs = Counter("kdispatch_inputs_total", "Input entries appended, by event type", ["type"], registry=r)
        self.decisions = Counter(
            "kdispatch_decisions_total", "Decision entries appended, by event type", ["type"], registry=r
        )
        self.log_seq = Gauge("kdispatch_log_last_seq", "Last log sequence folded by this replica", registry=r)
        self.inbox_lag = Gauge(
            "kdispatch_inbox_lag", "Inbox messages published but not yet sequenced (when known)", registry=r
        )
        self.sequencing_lag = Gauge(
            "kdispatch_sequencing_lag_seconds",
            "Seconds between a batch being pulled and its decisions being appended (last batch)",
            registry=r,
        )
        self.batch_seconds = Histogram(
            "kdispatch_batch_seconds",
            "Pull -> inputs appended -> decide -> decisions appended, per batch",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
        self.decide_seconds = Histogram(
            "kdispatch_decide_seconds",
            "Time spent in the core's decide() per batch",
            buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=r,
        )
        self.snapshots = Counter("kdispatch_snapshots_total", "State snapshots saved", registry=r)
        self.webhook_restarts = Counter(
            "kdispatch_webhook_restarts_total", "Times the supervised webhook child was restarted", registry=r
        )
        # -- what the leader decided (counted as its decisions are appended) ----------------------
        self.wait_seconds = Histogram(
            "kdispatch_job_wait_seconds",
            "Sequencing time from a job's submission to its placement, per ClusterQueue (one per Placed)",
            ["cluster_queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.preemptions = Counter(
            "kdispatch_preemptions_total", "Running jobs chosen for eviction (Evict decisions), by reason", ["reason"],
            registry=r,
        )
        self.requeues = Counter(
            "kdispatch_requeues_total", "Jobs put back in their queue (Requeued decisions), by reason", ["reason"],
            registry=r,
        )
        # -- Kubernetes Events on the user's job (incremented by the Events writer) --------------
        self.events_emitted = Counter(
            "kdispatch_events_emitted_total",
            "Kubernetes Events written on users' jobs (a new Event or a series count bumped), by reason",
            ["reason"],
            registry=r,
        )
        self.events_suppressed = Counter(
            "kdispatch_events_suppressed_total",
            "Event occurrences not written: folded into a series, rate-limited, or already reported",
            ["reason"],
            registry=r,
        )
        # -- the fleet as the leader's state has it (computed when scraped) ----------------------
        self.fleet = FleetGauges(refresh_s=fleet_refresh_s)
        r.register(self.fleet)
        self._waits: dict[str, Any] = {}

    def decided(self, entry: ev.LogEntry, state: core.State) -> None:
        """Count one appended decision of the kinds in ``OBSERVED``, after it was folded."""
        event = entry.event
        if isinstance(event, ev.Placed):
            job = state.jobs.get(event.job.key)
            if job is None or job.submitted_at_ms is None:
                return
            queue = job_queue(state, job)
            child = self._waits.get(queue)
            if child is None:
                child = self._waits[queue] = self.wait_seconds.labels(cluster_queue=queue)
            child.observe(max(entry.at_ms - job.submitted_at_ms, 0) / 1000)
        elif isinstance(event, ev.Evict):
            self.preemptions.labels(reason=reason_label(event.reason)).inc()
        elif isinstance(event, ev.Requeued):
            self.requeues.labels(reason=event.reason).inc()

    def event_written(self, reason: str, *, suppressed: bool = False) -> None:
        """For the Events writer: one occurrence of an Event ``reason`` (CamelCase, e.g. "Placed"),
        written or (``suppressed``) folded into a series / already reported."""
        (self.events_suppressed if suppressed else self.events_emitted).labels(reason=reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


# Decisions ``ReconcilerMetrics.decided`` looks at (the loop checks membership per entry).
OBSERVED: frozenset[type] = frozenset({ev.Placed, ev.Evict, ev.Requeued})


class FleetGauges(Collector):
    """Per-ClusterQueue and per-cluster gauges from the leader's folded state.

    Computed when scraped, not after every batch: they need a pass over the jobs and the leader
    loop is hot. At most once per ``refresh_s`` (scrapes in between get the same figures, and
    ``kdispatch_fleet_seq`` says which log sequence they are as of); no samples while this replica
    does not lead, since a standby's state is stale. Scrapes run on the event loop, between the
    loop's steps, so the state is never seen half-folded.
    """

    def __init__(self, *, refresh_s: float = FLEET_REFRESH_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.refresh_s = refresh_s
        self._clock = clock
        self._source: Callable[[], core.State | None] = lambda: None
        self._cached: list[Metric] | None = None
        self._cached_at = -math.inf

    def follow(self, source: Callable[[], core.State | None]) -> None:
        """Read the state from ``source`` (None: not leading now)."""
        self._source = source
        self._cached = None

    def collect(self) -> Iterator[Metric]:
        state = self._source()
        if state is None:
            self._cached = None
            yield from fleet_families(None)
            return
        now = self._clock()
        if self._cached is None or now - self._cached_at >= self.refresh_s:
            self._cached = fleet_families(state)
            self._cached_at = now
        yield from self._cached


def fleet_families(state: core.State | None) -> list[Metric]:
    """The fleet gauges of ``state`` (every family, empty when ``state`` is None, so the names are
    always exposed and dashboards and alerts never point at a metric that is not there)."""
    seq = GaugeMetricFamily("kdispatch_fleet_seq", "Log sequence the fleet gauges were computed at (leader only)")
    pending = GaugeMetricFamily(
        "kdispatch_queue_pending_jobs", "Jobs waiting to be dispatched (Queued, Unschedulable), per ClusterQueue",
        labels=["cluster_queue"],
    )
    admitted = GaugeMetricFamily(
        "kdispatch_queue_admitted_jobs", "Jobs holding capacity (Nominated, Placed), per ClusterQueue",
        labels=["cluster_queue"],
    )
    usage = GaugeMetricFamily(
        "kdispatch_queue_resource_usage",
        "Demand of a ClusterQueue's admitted jobs, per resource, in base units (cores, bytes, devices)",
        labels=["cluster_queue", "resource"],
    )
    quota = GaugeMetricFamily(
        "kdispatch_queue_nominal_quota",
        "A ClusterQueue's nominal quota per resource, in base units (only with queues configured)",
        labels=["cluster_queue", "resource"],
    )
    share = GaugeMetricFamily(
        "kdispatch_queue_fair_share",
        "A ClusterQueue's fair share (dominant resource share / weight; only with queues configured)",
        labels=["cluster_queue"],
    )
    capacity = GaugeMetricFamily(
        "kdispatch_cluster_capacity", "A worker cluster's capacity per resource, in base units",
        labels=["cluster", "resource"],
    )
    used = GaugeMetricFamily(
        "kdispatch_cluster_usage",
        "A worker cluster's usage per resource in base units: the larger of what it reports and what"
        " kdispatch placed there (what the capacity filters use)",
        labels=["cluster", "resource"],
    )
    health = GaugeMetricFamily(
        "kdispatch_cluster_health", "1 for the health state a worker cluster is in (Ready, Lost, Removed)",
        labels=["cluster", "state"],
    )
    placed = GaugeMetricFamily("kdispatch_cluster_placed_jobs", "Jobs placed on a worker cluster", labels=["cluster"])
    families: list[Metric] = [seq, pending, admitted, usage, quota, share, capacity, used, health, placed]
    if state is None:
        return families
    seq.add_metric([], state.seq)
    # Without the per-job section: at fleet size it is about a kB per job, built on every scrape.
    summary = core.summary(state, jobs=False)
    queues = _count_queues(state)
    for name, facts in (summary.get("queues") or {}).items():
        queues.setdefault(name, _QueueRow()).merge(facts)
    if not queues:  # no jobs and no queues configured: the one default queue, empty
        queues[DEFAULT_QUEUE] = _QueueRow()
    for name in sorted(queues):
        row = queues[name]
        pending.add_metric([name], row.pending)
        admitted.add_metric([name], row.admitted)
        for resource, amount in sorted(row.usage.items()):
            usage.add_metric([name, resource], base_units(resource, amount))
        for resource, amount in sorted(row.quota.items()):
            quota.add_metric([name, resource], base_units(resource, amount))
        if row.fair_share is not None:
            share.add_metric([name], row.fair_share)
    for name, cluster in summary["clusters"].items():
        for resource, amount in cluster["capacity"].items():
            capacity.add_metric([name, resource], base_units(resource, amount))
        reported, assumed = cluster["reported"], cluster["assumed"]
        for resource in sorted({*cluster["capacity"], *reported, *assumed}):
            amount = max(reported.get(resource, 0), assumed.get(resource, 0))
            used.add_metric([name, resource], base_units(resource, amount))
        for state_name in HEALTH_STATES:
            health.add_metric([name, state_name], 1.0 if cluster["health"] == state_name else 0.0)
        placed.add_metric([name], sum(1 for key in cluster["jobs"] if state.jobs[key].phase == phases.PLACED))
    return families


class _QueueRow:
    __slots__ = ("admitted", "fair_share", "pending", "quota", "usage")

    def __init__(self) -> None:
        self.pending = 0
        self.admitted = 0
        self.usage: dict[str, int] = {}
        self.quota: dict[str, int] = {}
        self.fair_share: float | None = None

    def merge(self, facts: dict[str, Any]) -> None:
        """The core's figures for a ClusterQueue (``reconciler.core.queues.facts.queues_summary``)
        win over what was counted from the jobs. Its usage and quota are per "flavor/resource";
        the gauges are per resource (summed over flavors), in base units."""
        for name in ("pending", "admitted"):
            if isinstance(facts.get(name), int):
                setattr(self, name, facts[name])
        if isinstance(facts.get("usage"), dict):
            self.usage = _per_resource(facts["usage"])
        if isinstance(facts.get("nominal"), dict):
            self.quota = _per_resource(facts["nominal"])
        value = facts.get("weighted_share")
        self.fair_share = float(value) if isinstance(value, int | float) else None


def _count_queues(state: core.State) -> dict[str, _QueueRow]:
    rows: dict[str, _QueueRow] = {}
    for job in state.jobs.values():
        name = job_queue(state, job)
        row = rows.get(name)
        if row is None:
            row = rows[name] = _QueueRow()
        if job.phase in phases.WAITING and not job.suspended:
            row.pending += 1
        elif job.phase in ADMITTED:
            row.admitted += 1
            for resource, amount in job.demand.items():
                row.usage[resource] = row.usage.get(resource, 0) + amount
    return rows


def _per_resource(given: dict[str, int]) -> dict[str, int]:
    """resource -> amount from "flavor/resource" -> amount, summed over flavors."""
    out: dict[str, int] = {}
    for key, amount in given.items():
        resource = key.partition("/")[2] or key
        out[resource] = out.get(resource, 0) + int(amount)
    return out


async def start_metrics_server(
    metrics: ReconcilerMetrics,
    *,
    host: str = "0.0.0.0",
    port: int,
    ready: Callable[[], bool] = lambda: True,
    routes: Callable[[web.Application], None] | None = None,
) -> web.AppRunner:
    """Serve ``/metrics``, ``/healthz`` (the process answers) and ``/readyz`` (``ready()``: e.g.
    connected to NATS; a standby replica is ready too), plus whatever ``routes`` adds (the API
    and the web page). Clean up with ``await runner.cleanup()``."""

    async def handle_metrics(_request: web.Request) -> web.Response:
        resp = web.Response(body=metrics.render())
        resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return resp

    async def handle_health(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def handle_ready(_request: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not connected to NATS\n")

    app = web.Application()
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/healthz", handle_health)
    app.router.add_get("/readyz", handle_ready)
    if routes is not None:
        routes(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host=host, port=port)
    await site.start()
    return runner
