"""The composition root: the running reconciler is put together here and nowhere else.

``kdispatch serve``, ``kdispatch demo``, the end-to-end tests and the benchmark all call it::

    system = await build(log, config, Settings(loop=LoopSettings(leader_id=..., policy=...)))
    await system.start()      # /metrics, then every component as a task
    code = await system.wait()  # until stop (0) or until a component fails (1)
    await system.stop()

``build`` only constructs (a bad cluster entry raises ``ConfigError`` before anything runs);
``start`` runs, each component as one named task, so a failure says which:

- ``leader-candidate``: waits for the lease, then sequences (``leader``, ``loop``);
- ``clusters``: registers the configured clusters, then runs the actuator, one observer per
  cluster and, with Kubernetes clusters, the manager watcher and status sync (``clusters``);
  left out with ``Settings.actuate=False``: several replicas may run it, it is idempotent;
- ``webhook``: ``python -m webhook`` as a supervised child process (never imported);
- ``/metrics`` (an aiohttp server, not a task) when ``Settings.metrics_port`` is given; the same
  port serves the read-only API (``/api/v1``) and the web page (``/``) from the leader's state.

The process around it (signals, logging, opening and closing the log) is the caller's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from eventlog import events as ev
from reconciler import core
from reconciler.config import Config, ConfigError
from reconciler.edge.logging import get_logger
from reconciler.forecast import DEFAULT_LIMIT as DEFAULT_FORECAST_LIMIT
from reconciler.service.child import Supervised
from reconciler.service.clusters.actuator import Actuator
from reconciler.service.clusters.declared import DeclaredClusters, Wiring
from reconciler.service.clusters.declaredstatus import DeclaredStatus
from reconciler.service.clusters.kube import KubeWorker
from reconciler.service.clusters.manager import ManagerSync, ManagerWatcher
from reconciler.service.clusters.metrics import ClusterMetrics
from reconciler.service.clusters.queues import QueuesWatcher
from reconciler.service.clusters.reporter import InboxReporter
from reconciler.service.clusters.setup import ClusterSet, registration
from reconciler.service.clusters.visibility import EventCounter, StatusReporter, uncounted
from reconciler.service.forecasts import DEFAULT_INTERVAL_MS as DEFAULT_FORECAST_INTERVAL_MS
from reconciler.service.forecasts import Forecasts
from reconciler.service.leader import run_candidate
from reconciler.service.loop import LeaderLoop, LoopSettings
from reconciler.service.metrics import ReconcilerMetrics, start_metrics_server
from reconciler.service.web import KubeAccess, ViewSource, add_routes
from reconciler.service.web.access import Reviews

if TYPE_CHECKING:
    from eventlog.jetstream import JetStreamLog

log = get_logger("reconciler.wiring")

SHUTDOWN_GRACE_S = 15.0


@dataclass(frozen=True)
class Settings:
    loop: LoopSettings  # who this replica is, the policy to record, snapshots, idle wait
    actuate: bool = True  # False: sequence and decide only, touch no cluster (serve --no-actuator)
    lease_ttl_s: float = 5.0
    metrics_port: int | None = None
    webhook_argv: Sequence[str] | None = None  # run the webhook as a child process with this argv
    backfill_after_s: float = 10.0  # manager watcher: how long an unknown object waits for the webhook
    # Follow the manager cluster's Kueue objects as the queue configuration (serve without --queues).
    watch_queues: bool = False
    # Start-time estimates (service.forecasts): remade at most this often in log time, for the first
    # this many waiting jobs in dispatch order; limit 0 turns them off.
    forecast_interval_ms: int = DEFAULT_FORECAST_INTERVAL_MS
    forecast_limit: int = DEFAULT_FORECAST_LIMIT


@dataclass
class Clusters:
    """The clusters side, connected: the adapters from the config file, the actuator that drives
    them from the log, and (Kubernetes only) the manager's watcher and status sync."""

    configured: ClusterSet
    actuator: Actuator
    reporter: InboxReporter
    watcher: ManagerWatcher | None = None
    status: StatusReporter | None = None  # Events and status on the user's job (leader only)
    queues: QueuesWatcher | None = None
    declared: DeclaredClusters | None = None  # WorkerCluster objects (clusters/declared.py)
    declared_status: DeclaredStatus | None = None

    async def run(self, stop: asyncio.Event) -> None:
        for cfg in self.configured.clusters:
            event, msg_id = registration(cfg, capacity=self.configured.capacities.get(cfg.name, {}))
            await self.reporter.report(event, msg_id=msg_id)
        tasks = [asyncio.create_task(self.actuator.run(stop), name="actuator")]
        tasks.append(asyncio.create_task(self._remove_unconfigured(), name="cluster-removal"))
        tasks += [
            asyncio.create_task(w.run(self.reporter, stop), name=f"observer-{n}")
            for n, w in self.configured.workers.items()
        ]
        if self.watcher is not None:
            tasks.append(asyncio.create_task(self.watcher.run(stop), name="manager-watcher"))
        if self.status is not None:
            tasks.append(asyncio.create_task(self.status.run(stop), name="status-reporter"))
        if self.queues is not None:
            tasks.append(asyncio.create_task(self.queues.run(stop), name="queues-watcher"))
        if self.declared is not None:
            tasks.append(asyncio.create_task(self.declared.run(stop), name="worker-clusters"))
        if self.declared_status is not None:
            tasks.append(asyncio.create_task(self.declared_status.run(stop), name="worker-cluster-status"))
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _remove_unconfigured(self) -> None:
        """Once the log is read: a cluster registered there but no longer in the config file (nor
        declared by a WorkerCluster) is recorded as ``ClusterRemoved`` (its jobs are requeued
        elsewhere by the core)."""
        await self.actuator.caught_up.wait()
        configured = {c.name for c in self.configured.clusters}
        if self.declared is not None:
            await self.declared.listed.wait()
            configured |= self.declared.names()
        for name, registered_at in sorted(self.actuator.desired.clusters.items()):
            if name not in configured:
                log.warning("cluster_removed_from_config", cluster=name)
                await self.reporter.report(
                    ev.ClusterRemoved(cluster=name), msg_id=f"{name}/removed/{registered_at}"
                )


def connect_clusters(
    configured: ClusterSet,
    log_: JetStreamLog,
    *,
    metrics: ClusterMetrics,
    backfill_after_s: float,
    leading: Callable[[], bool] = lambda: False,
    instance: str = "",
    watch_queues: bool = False,
    on_event: EventCounter = uncounted,
    state: Callable[[], core.State | None] = lambda: None,
) -> Clusters:
    reporter = InboxReporter(log_.inbox)
    actuator = Actuator(
        log_.reader, configured.workers, gc_interval_s=configured.gc_interval_s, metrics=metrics
    )
    out = Clusters(configured, actuator, reporter)
    if configured.manager_api is not None:
        sync = ManagerSync(configured.manager_api, actuator.desired)
        actuator.listeners = (sync,)
        out.watcher = ManagerWatcher(
            configured.manager_api,
            reporter,
            known=lambda uid: uid in actuator.desired.submitted,
            queues=lambda: actuator.desired.queues,
            resync_s=configured.resync_s,
            backfill_after_s=backfill_after_s,
            ready=actuator.caught_up,
        )
        out.status = StatusReporter(
            log_.reader, configured.manager_api, instance=instance, leading=leading, on_event=on_event
        )
        if watch_queues:
            desired = actuator.desired
            out.queues = QueuesWatcher(
                configured.manager_api,
                reporter,
                in_force=lambda: desired.queues,
                ready=actuator.caught_up,
                resync_s=configured.resync_s,
            )
        for name, worker in configured.workers.items():
            if isinstance(worker, KubeWorker):
                worker.wanted = _wanted(actuator, name)
                worker.status_listeners.append(sync.remote_status)
        out.declared = DeclaredClusters(
            configured.manager_api,
            Wiring(actuator, reporter, status_listeners=[sync.remote_status]),
            manager_id=configured.manager_id,
            configured=frozenset(c.name for c in configured.clusters),
            policy_lost_timeout_ms=configured.policy_lost_timeout_ms,
            resync_s=configured.resync_s,
        )
        out.declared_status = DeclaredStatus(configured.manager_api, out.declared, state)
    return out


def _wanted(actuator: Actuator, cluster: str) -> Callable[[str, int], bool]:
    def wanted(job_uid: str, attempt: int) -> bool:
        return actuator.desired.wanted(job_uid, cluster, attempt)

    return wanted


@dataclass
class System:
    """Handle on the running reconciler: its pieces (for the demo and tests to look at) and
    ``stop``. ``stopping`` is the event every component winds down on."""

    log: JetStreamLog
    settings: Settings
    loop: LeaderLoop
    metrics: ReconcilerMetrics
    stopping: asyncio.Event
    clusters: Clusters | None = None
    webhook: Supervised | None = None
    forecasts: Forecasts | None = None
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    access: KubeAccess | None = None  # who may read the API and the page (None: anyone)
    _metrics_server: web.AppRunner | None = None

    async def start(self) -> None:
        port = self.settings.metrics_port
        if port is not None:
            self._metrics_server = await start_metrics_server(
                self.metrics,
                port=port,
                ready=lambda: self.log.nc.is_connected,
                routes=lambda app: add_routes(
                    app,
                    ViewSource(
                        state=self.leading_state,
                        reader=self.log.reader,
                        forecast=self.forecasts.current if self.forecasts is not None else None,
                    ),
                    self.access,
                ),
            )
            log.info("metrics_listening", port=port, page=f"http://127.0.0.1:{self.http_port}/")
        self._spawn(
            run_candidate(self.log, self.loop, stop=self.stopping, ttl_s=self.settings.lease_ttl_s),
            "leader-candidate",
        )
        if self.clusters is not None:
            self._spawn(self.clusters.run(self.stopping), "clusters")
        if self.webhook is not None:
            self._spawn(self.webhook.run(self.stopping), "webhook")
        if self.forecasts is not None:
            self._spawn(self.forecasts.run(self.stopping), "forecasts")

    def leading_state(self) -> core.State | None:
        """The leader's folded state for the API and the page; None on a standby (or between
        terms), whose state would be stale: it does not follow the log."""
        return self.loop.state if self.loop.ready.is_set() else None

    @property
    def http_port(self) -> int | None:
        """The port ``/metrics``, ``/api/v1`` and the page are served on (the OS's pick for 0)."""
        if self._metrics_server is None or not self._metrics_server.addresses:
            return None
        port: int = self._metrics_server.addresses[0][1]
        return port

    def _spawn(self, work: Coroutine[Any, Any, Any], name: str) -> None:
        self.tasks.append(asyncio.create_task(work, name=name))

    async def wait(self) -> int:
        """Until stop (0), or until a component fails (1: a dead component is not a running server)."""
        stopper = asyncio.ensure_future(self.stopping.wait())
        try:
            done, _ = await asyncio.wait({*self.tasks, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        for task in done:
            if task is stopper or task.cancelled():
                continue
            err = task.exception()
            if err is not None:
                log.error("component_failed", component=task.get_name(), error=repr(err), exc_info=err)
                return 1
            if not self.stopping.is_set():
                log.error("component_exited", component=task.get_name())
                return 1
        return 0

    async def stop(self, *, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Components wind down on ``stopping`` (the lease is released so a standby takes over at
        once, the webhook is terminated); only one that does not within ``grace_s`` is cancelled.
        The log stays open: it is the caller's."""
        self.stopping.set()
        if self.tasks:
            _, late = await asyncio.wait(self.tasks, timeout=grace_s)
            for task in late:
                log.warning("component_cancelled", component=task.get_name(), grace_s=grace_s)
                task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self._metrics_server is not None:
            await self._metrics_server.cleanup()
        if self.clusters is not None:
            await self.clusters.configured.close()


async def build(
    log_: JetStreamLog, config: Config, settings: Settings, *, stop: asyncio.Event | None = None
) -> System:
    """Every component, connected, none running. The clusters are built first: a bad cluster
    entry (``ConfigError``, ``ValueError``) must not leave a half-started server behind."""
    metrics = ReconcilerMetrics()
    loop = LeaderLoop(log_, settings.loop, metrics=metrics)
    clusters = None
    if settings.actuate:
        configured = await ClusterSet.from_config(config)
        clusters = connect_clusters(
            configured,
            log_,
            metrics=ClusterMetrics(metrics.registry),
            backfill_after_s=settings.backfill_after_s,
            leading=loop.ready.is_set,  # set while this replica leads a term
            instance=settings.loop.leader_id,
            watch_queues=settings.watch_queues,
            on_event=metrics.event_written,
            state=lambda: loop.state if loop.ready.is_set() else None,
        )
    forecasts = None
    if settings.forecast_limit > 0:
        forecasts = Forecasts(
            log_.reader,
            lambda: loop.state if loop.ready.is_set() else None,
            interval_ms=settings.forecast_interval_ms,
            limit=settings.forecast_limit,
        )
        if clusters is not None:
            clusters.actuator.observers = (forecasts.observe,)  # one read of the log for both
            if clusters.status is not None:
                clusters.status.forecast = forecasts.current
    access = None
    if config.web.authorization == "kubernetes":
        reviews: Reviews = _NoManagerApi()  # --no-actuator: fail closed (503), never open
        if clusters is not None:
            if clusters.configured.manager_api is None:
                await clusters.configured.close()
                raise ConfigError(
                    "web.authorization: 'kubernetes' asks the manager cluster's API who may read "
                    "what; this config has no manager cluster (only simulated ones): set 'none'"
                )
            reviews = clusters.configured.manager_api
        access = KubeAccess(reviews, ttl_s=config.web.cache_ttl_ms / 1000)
    # This replica's followers (actuator, forecasts, status) take what its leader loop appended
    # from memory rather than from the server (eventlog.jetstream.recent). Turned on once the
    # config has passed every check above, so a refused config leaves the log as it was.
    recent = log_.keep_recent()
    if clusters is not None:
        clusters.actuator.wake = recent.decided  # reads the loop's decisions at once, not at its next poll
    webhook = None
    if settings.webhook_argv is not None:
        webhook = Supervised("webhook", list(settings.webhook_argv), on_restart=metrics.webhook_restarts.inc)
    return System(
        log=log_,
        settings=settings,
        loop=loop,
        metrics=metrics,
        stopping=stop if stop is not None else asyncio.Event(),
        clusters=clusters,
        webhook=webhook,
        forecasts=forecasts,
        access=access,
    )


class _NoManagerApi:
    async def review(self, group: str, version: str, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("serve --no-actuator does not connect to the manager cluster")


@asynccontextmanager
async def running(log_: JetStreamLog, config: Config, settings: Settings) -> AsyncIterator[System]:
    """``build`` and ``start``; ``stop`` on the way out (tests, benchmarks)."""
    system = await build(log_, config, settings)
    try:
        await system.start()
        yield system
    finally:
        await system.stop()
