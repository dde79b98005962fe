"""Prometheus metrics of the reconciler, served on ``/metrics`` by a small aiohttp app.

One registry per process (not the global default) so tests and two loops in one process do not
collide. What a person watches: is this replica the leader, is it keeping up (inbox lag, batch
latency), and what is it deciding (decisions by type).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)


class ReconcilerMetrics:
    def __init__(self) -> None:
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
        self.lag_ms = Gauge(
            "kdispatch_sequencing_lag_ms",
            "Wall-clock ms between a batch being pulled and its decisions being appended (last batch)",
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

    def render(self) -> bytes:
        return generate_latest(self.registry)


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
