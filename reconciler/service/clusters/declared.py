"""Worker clusters declared as ``WorkerCluster`` objects on the manager, followed at runtime.

``DeclaredClusters`` lists and watches them (``watch.ListWatch``, like every other watch):

- applied: the kubeconfig is read from its Secret, a worker adapter (``kube.KubeWorker``) is
  started and driven by the actuator, and ``ClusterRegistered`` is recorded; the object gets the
  ``kdispatch.io/drain`` finalizer, so that deleting it waits for the drain below;
- changed: labels, taints or the worker-lost timeout -> ``ClusterUpdated``; the kubeconfig, Kueue
  or heartbeat settings -> the adapter is started again with them;
- deleted (marked for deletion, held by the finalizer): drained. ``ClusterUpdated`` gives the
  cluster the ``kdispatch.io/draining`` taint (a fact in the log, so replay decides alike): nothing
  new is placed there (ClusterHealth). ``drainPolicy: Leave`` (the default) leaves what runs there
  to finish (NoSchedule); ``Withdraw`` withdraws it, and the core requeues it elsewhere
  (NoExecute). Once the log wants no copy there and the actuator has deleted the last one,
  ``ClusterRemoved`` is recorded, the adapter stopped and the finalizer removed;
- gone without a drain (the finalizer removed by hand, or deleted while kdispatch was not
  running): ``ClusterRemoved`` at once; the core requeues what was placed there, as for a cluster
  taken out of the config file.

Every replica runs this (like the actuator: the facts carry message ids, so the inbox keeps one);
only the leader writes the objects' status (``declaredstatus``). A name that the config file
declares too stays the config file's; the object is reported as a conflict in its status.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client

from eventlog import codec
from eventlog import events as ev
from eventlog.kube.kinds import KindInfo
from reconciler.config import ClusterConfig, ConfigError
from reconciler.edge.logging import get_logger
from reconciler.service.clusters.actuator import Actuator
from reconciler.service.clusters.api import ApiError, KubeApi
from reconciler.service.clusters.base import Reporter, Unreachable
from reconciler.service.clusters.kube import KubeWorker, StatusListener
from reconciler.service.clusters.objects import (
    FINALIZER,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    Declared,
    DrainPolicy,
    declared,
    with_drain_taint,
)
from reconciler.service.clusters.setup import api_client_for, heartbeat_keepalive_s, kube_worker, registration
from reconciler.service.clusters.watch import ListWatch, sleep_or_stop

log = get_logger("reconciler.clusters.declared")

# ListWatch follows a KindInfo; of this one only group, version and plural are read.
WORKER_CLUSTERS = (KindInfo(group=GROUP, version=VERSION, kind=KIND, plural=PLURAL, family="job"),)

# What a change of needs a new adapter for (the rest is a ClusterUpdated to the running one).
_CONNECTION = ("kubeconfig", "kueue", "heartbeat_interval_ms", "heartbeat_timeout_ms")


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _finalizers(obj: dict[str, Any]) -> list[str]:
    return list((obj.get("metadata") or {}).get("finalizers") or [])


@dataclass
class _Live:
    """A declared cluster whose adapter runs."""

    spec: Declared
    worker: KubeWorker
    api_client: client.ApiClient
    task: asyncio.Task[None]
    stop: asyncio.Event
    draining: str = ""  # the drain policy applied, once its taint is reported


@dataclass
class Wiring:
    """How a new adapter is connected: the actuator drives it, the log says which copies it wants,
    the manager status sync hears about its copies."""

    actuator: Actuator
    reporter: Reporter
    status_listeners: list[StatusListener] = field(default_factory=list)


class DeclaredClusters:
    def __init__(
        self,
        api: KubeApi,
        wiring: Wiring,
        *,
        manager_id: str,
        configured: frozenset[str] = frozenset(),
        policy_lost_timeout_ms: int = 60_000,
        resync_s: int = 300,
        retry_s: float = 5.0,
        drain_check_s: float = 1.0,
        make_client: Callable[[ClusterConfig, KubeApi], Any] | None = None,
    ) -> None:
        self.api = api
        self.wiring = wiring
        self.manager_id = manager_id
        self.configured = configured
        self.policy_lost_timeout_ms = policy_lost_timeout_ms
        self.resync_s = resync_s
        self.retry_s = retry_s  # a Secret missing, a bad spec: tried again this often
        self.drain_check_s = drain_check_s
        self._drained: set[str] = set()  # uids drained and released: their last events are ignored
        self._make_client = make_client
        self.objects: dict[str, dict[str, Any]] = {}  # name -> the object as last seen
        self.errors: dict[str, str] = {}  # name -> why it is not running (for its status)
        self.live: dict[str, _Live] = {}
        self.listed = asyncio.Event()  # the first list is in (or the kind is not installed)
        self._lock = asyncio.Lock()  # one object at a time: the watch and the retry/drain loop

    def names(self) -> set[str]:
        """Every cluster a WorkerCluster declares (running, failing or draining)."""
        return set(self.objects)

    async def run(self, stop: asyncio.Event) -> None:
        watch = ListWatch(
            self.api,
            WORKER_CLUSTERS,
            handle=self._on_event,
            resync_s=self.resync_s,
            key=_name,
            on_served=self._served,
            on_listed=self.listed.set,
            log=log.bind(cluster="manager"),
        )
        tasks = [asyncio.create_task(watch.run(stop)), asyncio.create_task(self._tend(stop))]
        try:
            await stop.wait()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for name in list(self.live):
                await self._stop_adapter(name)

    def _served(self, kind: KindInfo, served: bool) -> None:
        if not served and not self.listed.is_set():  # no WorkerCluster can exist: an empty list
            log.info("worker_cluster_crd_not_installed", hint="the CRD is deploy/base/workercluster-crd.yaml")
        if not served:
            self.listed.set()

    async def _on_event(self, _kind: KindInfo, type_: str, obj: dict[str, Any]) -> None:
        name = _name(obj)
        async with self._lock:
            if type_ == "DELETED":
                self.objects.pop(name, None)
                self.errors.pop(name, None)
                await self._gone(name)
            elif str((obj.get("metadata") or {}).get("uid") or "") not in self._drained:
                self.objects[name] = obj
                await self._reconcile(name)

    async def _tend(self, stop: asyncio.Event) -> None:
        """Finish drains (checked every ``drain_check_s``) and retry what failed, every
        ``retry_s`` (a Secret created after its WorkerCluster, a worker not answering yet)."""
        next_retry = 0.0
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            await sleep_or_stop(stop, self.drain_check_s)
            retry = loop.time() >= next_retry
            if retry:
                next_retry = loop.time() + self.retry_s
            for name in sorted(self.objects):
                live = self.live.get(name)
                if (live is not None and live.draining) or (retry and name in self.errors):
                    async with self._lock:
                        if name in self.objects:
                            await self._reconcile(name)

    # -- one object ----------------------------------------------------------------------------

    async def _reconcile(self, name: str) -> None:
        obj = self.objects[name]
        if name in self.configured:
            self.errors[name] = f"the config file declares a cluster {name!r} too; the config file's is used"
            return
        try:
            spec = declared(obj)
        except ConfigError as err:
            self.errors[name] = str(err)
            log.warning("worker_cluster_invalid", cluster=name, error=str(err))
            live = self.live.get(name)
            if live is not None and (obj.get("metadata") or {}).get("deletionTimestamp"):
                await self._drain(live, live.spec.drain_policy, obj)  # keep the last good spec
            return
        live = self.live.get(name)
        try:
            if not spec.deleting and FINALIZER not in _finalizers(obj):
                await self._add_finalizer(obj)
            if live is not None and live.spec.uid != spec.uid:  # deleted and applied again
                await self._stop_adapter(name)
                live = None
            if live is None:
                if spec.deleting and FINALIZER not in _finalizers(obj):
                    return  # not ours to drain: nothing runs, nothing holds it
                live = await self._start(spec)
            elif not spec.deleting:
                live = await self._changed(live, spec)
            if spec.deleting:
                await self._drain(live, spec.drain_policy, obj)
            self.errors.pop(name, None)
        except (ConfigError, ApiError, Unreachable) as err:
            self.errors[name] = str(err)
            log.warning("worker_cluster_not_started", cluster=name, error=str(err), retry_in_s=self.retry_s)

    async def _start(self, spec: Declared) -> _Live:
        cfg = spec.draining_config() if spec.deleting else spec.config
        what = f"WorkerCluster {spec.name}: spec.kubeConfig"
        if self._make_client is not None:
            api_client = self._make_client(cfg, self.api)
        else:
            api_client = await api_client_for(cfg.kubeconfig, manager=self.api, what=what)
        keepalive_s = heartbeat_keepalive_s(cfg, policy_lost_timeout_ms=self.policy_lost_timeout_ms)
        worker = kube_worker(cfg, api_client, manager_id=self.manager_id, resync_s=self.resync_s, keepalive_s=keepalive_s)
        worker.incarnation = _incarnation(spec, spec.drain_policy if spec.deleting else "")
        actuator = self.wiring.actuator
        worker.wanted = lambda uid, attempt: actuator.desired.wanted(uid, spec.name, attempt)
        worker.status_listeners.extend(self.wiring.status_listeners)
        event, _ = registration(cfg, capacity={})
        await self.wiring.reporter.report(event, msg_id=f"{spec.name}/registered/{spec.uid}/{_digest(event)}")
        actuator.add_worker(spec.name, worker)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(self.wiring.reporter, stop), name=f"observer-{spec.name}")
        live = _Live(spec=spec, worker=worker, api_client=api_client, task=task, stop=stop)
        if spec.deleting:
            live.draining = spec.drain_policy
        self.live[spec.name] = live
        log.info("worker_cluster_started", cluster=spec.name, draining=spec.deleting)
        return live

    async def _changed(self, live: _Live, spec: Declared) -> _Live:
        old = live.spec.config
        if spec.config == old:
            live.spec = spec
            return live
        if any(getattr(spec.config, f) != getattr(old, f) for f in _CONNECTION):
            log.info("worker_cluster_reconnecting", cluster=spec.name)
            await self._stop_adapter(spec.name)
            return await self._start(spec)
        live.spec = spec
        await self._update(live, spec.config, _incarnation(spec, ""))
        return live

    async def _update(self, live: _Live, cfg: ClusterConfig, incarnation: str) -> None:
        """Record the new labels, taints or lost timeout. Every replica must record the same event
        (one message id), so it carries the capacity the log has, not this adapter's: that may be
        older or newer than another replica's. The adapter then reports its own capacity again,
        under a new message id, with the new labels and taints."""
        actuator = self.wiring.actuator
        await actuator.caught_up.wait()
        worker = live.worker
        worker.labels, worker.taints = dict(cfg.labels), list(cfg.taints)
        worker.worker_lost_timeout_ms = cfg.worker_lost_timeout_ms
        event = ev.ClusterUpdated(
            cluster=cfg.name,
            labels=dict(cfg.labels),
            taints=list(cfg.taints),
            capacity=dict(actuator.desired.capacity.get(cfg.name, {})),
            worker_lost_timeout_ms=cfg.worker_lost_timeout_ms,
        )
        await self.wiring.reporter.report(event, msg_id=f"{cfg.name}/spec/{live.spec.uid}/{_digest(event)}")
        worker.incarnation, worker.capacity = incarnation, {}  # reported again at its next refresh

    async def _drain(self, live: _Live, policy: DrainPolicy, obj: dict[str, Any]) -> None:
        if live.draining != policy:
            live.draining = policy
            await self._update(live, with_drain_taint(live.spec.config, policy), _incarnation(live.spec, policy))
            log.info("worker_cluster_draining", cluster=live.spec.name, policy=policy)
        name = live.spec.name
        if not self.wiring.actuator.drained(name):
            return
        registered_at = self.wiring.actuator.desired.clusters.get(name)
        if registered_at is not None:
            await self.wiring.reporter.report(ev.ClusterRemoved(cluster=name), msg_id=f"{name}/removed/{registered_at}")
        await self._stop_adapter(name)
        self._drained.add(live.spec.uid)
        self.objects.pop(name, None)
        await self._remove_finalizer(obj)
        log.info("worker_cluster_drained", cluster=name)

    async def _gone(self, name: str) -> None:
        """The object is gone. Drained already, or not at all: then it is removed as it stands."""
        if name not in self.live:
            return
        registered_at = self.wiring.actuator.desired.clusters.get(name)
        if registered_at is not None:
            log.warning("worker_cluster_removed_undrained", cluster=name)
            await self.wiring.reporter.report(ev.ClusterRemoved(cluster=name), msg_id=f"{name}/removed/{registered_at}")
        await self._stop_adapter(name)

    async def _stop_adapter(self, name: str) -> None:
        live = self.live.pop(name, None)
        if live is None:
            return
        live.stop.set()
        await self.wiring.actuator.remove_worker(name)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(live.task, 10)
        if not live.task.done():
            live.task.cancel()
        await live.api_client.close()

    # -- the finalizer ---------------------------------------------------------------------------

    async def _add_finalizer(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        body = {"metadata": {"finalizers": [*_finalizers(obj), FINALIZER], "resourceVersion": meta.get("resourceVersion")}}
        self.objects[_name(obj)] = await self.api.patch(GROUP, VERSION, PLURAL, "", meta["name"], body)

    async def _remove_finalizer(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        rest = [f for f in _finalizers(obj) if f != FINALIZER]
        try:
            await self.api.patch(GROUP, VERSION, PLURAL, "", meta["name"], {"metadata": {"finalizers": rest or None}})
        except ApiError as err:
            if err.status != 404:
                raise


def _incarnation(spec: Declared, draining: str) -> str:
    """Part of the message id of the adapter's capacity reports: new for each spec and drain, so
    that its first report after one is not taken for a duplicate of an earlier one."""
    return f"{spec.uid}/{spec.generation}{'/' + draining if draining else ''}/"


def _digest(event: ev.Event) -> str:
    return hashlib.sha256(codec.encode(event)).hexdigest()[:16]
