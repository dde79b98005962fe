"""The worker clusters of a config file, assembled: observers + actuator, ready to run.

``serve`` (and the demo, in process) call ``ClusterSet.from_config(...)`` then ``run(stop)``:

- each ``simulated:`` cluster becomes a ``SimWorker`` driven in real time (``clusters.sim``);
  each ``kubeconfig:`` cluster the Kubernetes adapter (``clusters.kube``) when it is installed;
- every configured cluster is registered (``ClusterRegistered`` from the config, with a message
  id derived from its content, so replicas and restarts record it once per change);
- the actuator follows the log and applies decisions to them; observers report facts.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
from dataclasses import dataclass, field
from typing import Any

from eventlog import codec
from eventlog import events as ev
from eventlog.store import Inbox, LogReader
from reconciler.config import ClusterConfig, Config, parse_duration_ms
from reconciler.shell.actuator import Actuator
from reconciler.shell.clusters.base import Worker
from reconciler.shell.clusters.quantity import parse_resources
from reconciler.shell.clusters.reporter import InboxReporter
from reconciler.shell.clusters.sim import SimCluster
from reconciler.shell.logging import get_logger
from reconciler.sim.worker import SimWorker

log = get_logger("reconciler.compose")


def registration(cluster: ClusterConfig) -> ev.ClusterRegistered:
    capacity = parse_resources(cluster.simulated.capacity) if cluster.simulated is not None else {}
    lost = cluster.worker_lost_timeout
    return ev.ClusterRegistered(
        cluster=cluster.name,
        labels=dict(sorted(cluster.labels.items())),
        taints=list(cluster.taints),
        capacity=capacity,
        worker_lost_timeout_ms=None if lost is None else parse_duration_ms(lost, path=f"cluster {cluster.name}"),
    )


def registration_id(event: ev.ClusterRegistered) -> str:
    digest = hashlib.sha256(codec.encode(event)).hexdigest()[:16]
    return f"{event.cluster}/registered/{digest}"


def sim_cluster(cluster: ClusterConfig, *, heartbeat_interval_s: float) -> SimCluster:
    sim = cluster.simulated
    assert sim is not None
    model = SimWorker(
        cluster.name,
        parse_resources(sim.capacity),
        admission_latency_ms=parse_duration_ms(sim.admission_latency, path=f"cluster {cluster.name}.admissionLatency"),
        default_runtime_ms=parse_duration_ms(sim.default_runtime, path=f"cluster {cluster.name}.defaultRuntime"),
    )
    return SimCluster(model, heartbeat_interval_s=heartbeat_interval_s)


def kube_cluster(cluster: ClusterConfig, config: Config) -> Worker | None:
    """The Kubernetes adapter for this cluster, if the adapter is installed (``clusters.kube``)."""
    try:
        kube = importlib.import_module("reconciler.shell.clusters.kube")
    except ModuleNotFoundError:
        return None
    factory = getattr(kube, "worker_from_config", None)
    if factory is None:
        return None
    worker: Worker = factory(cluster, config)
    return worker


@dataclass
class ClusterSet:
    reader: LogReader
    inbox: Inbox
    registrations: list[ev.ClusterRegistered]
    workers: dict[str, Worker] = field(default_factory=dict)
    actuator: Actuator | None = None

    @classmethod
    def from_config(
        cls, config: Config, *, reader: LogReader, inbox: Inbox, heartbeat_interval_s: float = 2.0
    ) -> ClusterSet:
        workers: dict[str, Worker] = {}
        for c in config.clusters:
            if c.simulated is not None:
                workers[c.name] = sim_cluster(c, heartbeat_interval_s=heartbeat_interval_s)
            elif c.kubeconfig is not None:
                worker = kube_cluster(c, config)
                if worker is None:
                    log.error("kube_adapter_missing", cluster=c.name, hint="reconciler.shell.clusters.kube")
                    continue
                workers[c.name] = worker
            else:
                log.error("cluster_without_access", cluster=c.name, hint="give it simulated: or kubeconfig:")
        return cls(
            reader=reader,
            inbox=inbox,
            registrations=[registration(c) for c in config.clusters if c.name in workers],
            workers=workers,
            actuator=Actuator(reader, workers) if workers else None,
        )

    async def run(self, stop: asyncio.Event) -> None:
        if not self.workers:
            log.info("no_clusters_configured")
            await stop.wait()
            return
        reporter = InboxReporter(self.inbox)
        for event in self.registrations:
            await reporter.report(event, msg_id=registration_id(event))
            log.info("cluster_registered", cluster=event.cluster, labels=event.labels, capacity=event.capacity)
        tasks: list[asyncio.Task[Any]] = [
            asyncio.create_task(w.run(reporter, stop), name=f"observer-{n}") for n, w in sorted(self.workers.items())
        ]
        if self.actuator is not None:
            tasks.append(asyncio.create_task(self.actuator.run(stop), name="actuator"))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                if task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
