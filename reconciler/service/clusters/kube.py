"""A Kubernetes worker cluster: creates and removes our copies, and watches them.

Requests (from the actuator): ``create`` is idempotent by name + origin labels (AlreadyExists with
our labels for the same attempt is success; an older attempt of ours that the log no longer
wants is deleted first; anything else is reported as ``RemoteRejected``); ``delete`` only removes
the copy with the asked (uid, attempt), with a uid precondition, and reports ``RemoteGone``;
``evict`` removes the copy and reports ``RemoteEvicted`` (the dispatcher requeues the job as a new
attempt, as MultiKueue removes the remote workload).

Observation (``run``): list + watch (resourceVersion, re-list on 410 Gone, re-list every
``resync_s``) of every served job kind with our origin label, and of Kueue ``Workload`` objects
when the worker runs Kueue; a heartbeat (GET /version with a timeout) on an interval; capacity
and usage from ClusterQueues (or nodes and pods). Every failure is retried with exponential
back-off and jitter; nothing here raises out of ``run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from eventlog import events as ev
from eventlog.kube.kinds import SUPPORTED_KINDS, KindInfo, by_resource, lookup_api_version
from eventlog.kube.names import ORIGIN_LABEL
from reconciler.edge.logging import get_logger
from reconciler.service.clusters.api import ApiError, KubeApi
from reconciler.service.clusters.backoff import Backoff
from reconciler.service.clusters.base import (
    CopyRef,
    RemoteSpec,
    Reporter,
    Unreachable,
    remote_fact_id,
)
from reconciler.service.clusters.capacity_facts import DEFAULT_LEVELS, ReportDiffer, WorkerState
from reconciler.service.clusters.heartbeats import HeartbeatGate
from reconciler.service.clusters.remote import (
    Origin,
    PermanentFailure,
    age_ms,
    job_facts,
    origin_of,
    remote_manifest,
    workload_facts,
    workload_owner_uid,
)
from reconciler.service.clusters.usage import from_cluster_queues, from_nodes_and_pods
from reconciler.service.clusters.watch import ListWatch, by_name, sleep_or_stop

log = get_logger("reconciler.clusters.kube")

KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta1"
WORKLOAD_VERSIONS = tuple(k for k in SUPPORTED_KINDS if k.plural == "workloads")
MAX_UNMATCHED_WORKLOADS = 2_000


def _coordinates(group: str, versions: tuple[str, ...], kind: str, plural: str) -> tuple[KindInfo, ...]:
    # ListWatch reads only the API coordinates of a KindInfo; the job-specific fields are unused.
    return tuple(KindInfo(group=group, version=v, kind=kind, plural=plural, family="workload") for v in versions)


NODES = _coordinates("", ("v1",), "Node", "nodes")
PODS = _coordinates("", ("v1",), "Pod", "pods")
CLUSTER_QUEUES = _coordinates(KUEUE_GROUP, ("v1beta2", "v1beta1"), "ClusterQueue", "clusterqueues")
LOCAL_QUEUES = _coordinates(KUEUE_GROUP, ("v1beta2", "v1beta1"), "LocalQueue", "localqueues")
TOPOLOGIES = _coordinates(KUEUE_GROUP, ("v1beta2", "v1beta1", "v1alpha1"), "Topology", "topologies")
CAPACITY_RESYNC_S = 300
"""Capacity objects are relisted at most this often: the watch carries every change, a relist only
catches deletions a dropped watch missed, and a worker's nodes and pods are its largest lists."""
FIRST_REPORT_WAIT_S = 30.0
"""How long the first capacity report waits for every capacity list to have answered once."""

StatusListener = Callable[[str, Origin, dict[str, Any]], Awaitable[None]]
"""Called with (cluster, origin, remote status) whenever one of our copies changes."""


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class KubeWorker:
    def __init__(
        self,
        name: str,
        api: KubeApi,
        *,
        manager_id: str,
        labels: dict[str, str] | None = None,
        taints: list[ev.Taint] | None = None,
        worker_lost_timeout_ms: int | None = None,
        kueue: bool | None = None,
        kinds: tuple[KindInfo, ...] = SUPPORTED_KINDS,
        heartbeat_interval_s: float = 5.0,
        heartbeat_timeout_s: float = 3.0,
        heartbeat_keepalive_s: float | None = None,
        usage_interval_s: float = 15.0,
        resync_s: int = 300,
        capacity_interval_s: float = 5.0,
        node_labels: tuple[str, ...] = (),
        topology_levels: tuple[str, ...] = DEFAULT_LEVELS,
    ) -> None:
        self.name = name
        self.api = api
        self.manager_id = manager_id
        self.labels = labels or {}
        self.taints = taints or []
        self.worker_lost_timeout_ms = worker_lost_timeout_ms
        self.kueue_setting = kueue
        self.kueue: bool = bool(kueue)
        self.kinds = kinds
        self.heartbeat_interval_s = heartbeat_interval_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.heartbeats = HeartbeatGate(
            name,
            interval_ms=int(heartbeat_interval_s * 1000),
            keepalive_ms=None if heartbeat_keepalive_s is None else int(heartbeat_keepalive_s * 1000),
        )
        self.usage_interval_s = usage_interval_s
        self.resync_s = resync_s
        self.selector = f"{ORIGIN_LABEL}={manager_id}"
        self.wanted: Callable[[str, int], bool] = lambda _uid, _attempt: True
        self.status_listeners: list[StatusListener] = []
        self.reporter: Reporter | None = None
        # Part of the capacity update's message id: a WorkerCluster deleted and applied again soon
        # after (a new uid) reports its capacity anew instead of as a duplicate (clusters/declared.py).
        self.incarnation = ""
        self.usage: ev.Resources = {}
        self.capacity: ev.Resources = {}
        self._by_remote_uid: dict[str, Origin] = {}
        self._workloads: dict[str, dict[str, Any]] = {}  # owner (remote job) uid -> workload
        self._sent: dict[tuple[str, int], set[str]] = {}  # (uid, attempt) -> facts reported
        self._served: dict[str, bool] = {}  # kind name -> served by this cluster (learned)
        self._log = log.bind(cluster=name)
        # Capacity facts (docs/capacity-reports.md): the watched objects, and what was reported.
        self.capacity_state = WorkerState(extra_labels=node_labels, default_levels=topology_levels)
        self.capacity_reports = ReportDiffer(name, min_interval_ms=int(capacity_interval_s * 1000))
        self._capacity_expected: dict[str, int] = {}  # resource -> how many versions it is tried in
        self._capacity_listed: set[str] = set()  # resources whose first list answered (or none is served)
        self._capacity_unserved: Counter[str] = Counter()
        self._unreachable = False

    # -- requests -------------------------------------------------------------------------------

    def _kind(self, job: ev.JobRef) -> KindInfo:
        kind = lookup_api_version(job.api_version, job.kind)
        if kind is None:
            raise PermanentFailure(
                f"{job.api_version} {job.kind} is not a kind kdispatch can copy to a worker"
            )
        return kind

    async def create(self, spec: RemoteSpec) -> None:
        bound = self._log.bind(job=spec.job.key, attempt=spec.attempt)
        try:
            kind = self._kind(spec.job)
            body = remote_manifest(spec, kind=kind, manager_id=self.manager_id, kueue=self.kueue)
        except PermanentFailure as err:
            await self._reject(spec.job, spec.attempt, str(err))
            return
        for _ in range(3):
            try:
                await self.api.create(kind.group, kind.version, kind.plural, spec.job.namespace, body)
                bound.info("remote_created", kueue=self.kueue)
                return
            except ApiError as err:
                if err.status == 409:
                    if await self._resolve_conflict(spec, kind):
                        return
                    continue  # a superseded copy of ours was removed: create again
                if err.status in (400, 403, 404, 422):
                    hint = " (check the worker's RBAC: see docs/clusters.md)" if err.status == 403 else ""
                    await self._reject(spec.job, spec.attempt, f"{err.message}{hint}")
                    return
                raise
        raise Unreachable(f"{self.name}: {spec.job.key} keeps conflicting with an old copy; retrying")

    async def _resolve_conflict(self, spec: RemoteSpec, kind: KindInfo) -> bool:
        """AlreadyExists: True if it is this very copy; False after removing a superseded copy of
        ours (create again); reports a rejection when the name belongs to something else."""
        existing = await self.api.get(
            kind.group, kind.version, kind.plural, spec.job.namespace, spec.job.name
        )
        if existing is None:
            return False  # deleted meanwhile
        origin = origin_of(existing, manager_id=self.manager_id)
        if origin is not None and origin.job.uid == spec.job.uid and origin.attempt == spec.attempt:
            return True
        if origin is not None and not self.wanted(origin.job.uid, origin.attempt):
            await self.api.delete(
                kind.group,
                kind.version,
                kind.plural,
                spec.job.namespace,
                spec.job.name,
                uid=origin.remote_uid,
            )
            self._log.info("superseded_copy_removed", job=spec.job.key, old_attempt=origin.attempt)
            return False
        owner = "another kdispatch copy still wanted" if origin else "an object kdispatch did not create"
        await self._reject(
            spec.job,
            spec.attempt,
            f"{kind.kind} {spec.job.key} already exists on {self.name} and is {owner}",
        )
        return True

    async def _reject(self, job: ev.JobRef, attempt: int, reason: str) -> None:
        self._log.warning("remote_rejected", job=job.key, attempt=attempt, reason=reason)
        await self._report(ev.RemoteRejected(job=job, cluster=self.name, attempt=attempt, reason=reason))

    async def delete(self, job: ev.JobRef, attempt: int) -> None:
        kind = lookup_api_version(job.api_version, job.kind)
        if kind is not None:
            existing = await self.api.get(kind.group, kind.version, kind.plural, job.namespace, job.name)
            origin = origin_of(existing, manager_id=self.manager_id) if existing else None
            if origin is not None and origin.job.uid == job.uid and origin.attempt == attempt:
                await self.api.delete(
                    kind.group, kind.version, kind.plural, job.namespace, job.name, uid=origin.remote_uid
                )
                self._log.info("remote_deleted", job=job.key, attempt=attempt)
        await self._report(ev.RemoteGone(job=job, cluster=self.name, attempt=attempt))

    async def evict(self, job: ev.JobRef, attempt: int, *, reason: str) -> None:
        # Evicted before Gone, the order a Kueue eviction shows: the dispatcher requeues the job
        # because it was evicted, then learns the copy is gone.
        await self._report(ev.RemoteEvicted(job=job, cluster=self.name, attempt=attempt, reason=reason))
        await self.delete(job, attempt)

    async def copies(self) -> list[CopyRef]:
        out: list[CopyRef] = []
        for versions in by_resource(self.kinds):
            listing = await self._list_served(versions)
            for obj in (listing or {}).get("items") or []:
                origin = origin_of(obj, manager_id=self.manager_id)
                if versions[0].plural == "workloads" and not _workload_copy(obj, origin):
                    continue  # a Workload Kueue made for a copy (labels copied from it): not ours
                if origin is not None:
                    out.append(
                        CopyRef(
                            job_uid=origin.job.uid,
                            attempt=origin.attempt,
                            namespace=origin.job.namespace,
                            name=origin.job.name,
                            age_ms=age_ms(obj),
                        )
                    )
        return out

    async def _list_served(self, versions: tuple[KindInfo, ...]) -> dict[str, Any] | None:
        """Our copies of one resource, through the first of its versions the cluster serves."""
        for kind in versions:
            if self._served.get(f"{kind.kind}/{kind.version}") is False:
                continue
            try:
                return await self.api.list_objects(
                    kind.group, kind.version, kind.plural, label_selector=self.selector
                )
            except ApiError as err:
                if err.status != 404:
                    raise
        return None

    # -- reporting ------------------------------------------------------------------------------

    async def _report(self, event: ev.InputEvent, *, msg_id: str | None = None) -> None:
        """Publish a fact. Remote facts are remembered per copy so that every MODIFIED event does
        not publish them again (the inbox would drop the duplicates anyway); the memory of a copy
        goes with its ``RemoteGone``."""
        if self.reporter is None:
            self._log.warning("fact_dropped_not_running", fact=type(event).__name__)
            return
        job = getattr(event, "job", None)
        copy_key = (job.uid, int(getattr(event, "attempt", 0))) if isinstance(job, ev.JobRef) else None
        msg_id = msg_id or remote_fact_id(event)
        if copy_key is not None and msg_id in self._sent.get(copy_key, ()):
            return
        await self.reporter.report(event, msg_id=msg_id)
        if copy_key is None:
            return
        if isinstance(event, ev.RemoteGone):
            self._sent.pop(copy_key, None)
        else:
            self._sent.setdefault(copy_key, set()).add(msg_id)

    # -- observation ----------------------------------------------------------------------------

    async def run(self, reporter: Reporter, stop: asyncio.Event) -> None:
        self.reporter = reporter
        await self._detect_kueue()
        tasks = [asyncio.create_task(self._heartbeats(stop)), asyncio.create_task(self._usage_loop(stop))]
        tasks += [asyncio.create_task(w.run(stop)) for w in self._capacity_watches()]
        tasks.append(asyncio.create_task(self._capacity_loop(stop)))
        for versions in by_resource(self.kinds):
            if versions[0].plural != "workloads":  # the Workload watch below sees our Workload copies
                tasks.append(asyncio.create_task(self._watch(versions).run(stop)))
        if self.kueue:
            tasks.append(asyncio.create_task(self._watch(WORKLOAD_VERSIONS).run(stop)))
        try:
            await stop.wait()
        finally:
            await _cancel_all(tasks)

    async def _detect_kueue(self) -> None:
        if self.kueue_setting is not None:
            self.kueue = self.kueue_setting
            return
        backoff = Backoff(base_s=0.5, cap_s=30.0)
        while True:
            try:
                await self.api.list_objects(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues")
                self.kueue = True
                break
            except ApiError as err:
                if err.status != 404:
                    self._log.warning("kueue_detection_failed", error=str(err))
                self.kueue = False
                break
            except Unreachable as err:
                delay = backoff.next_delay()
                self._log.info("cluster_unreachable", error=str(err), retry_in_s=round(delay, 2))
                await asyncio.sleep(delay)
        self._log.info("kueue_detected" if self.kueue else "no_kueue_using_job_status", kueue=self.kueue)

    async def _heartbeats(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            now = wall_ms()  # the check's grid point: other replicas check at the same one
            try:
                await self.api.version(timeout_s=self.heartbeat_timeout_s)
                hb = ev.ClusterHeartbeat(cluster=self.name, reachable=True, usage=dict(self.usage))
                if self._unreachable:
                    self._unreachable = False
                    self.capacity_reports.reset()  # back after an outage: report everything again
            except (Unreachable, ApiError) as err:
                self._log.info("heartbeat_failed", error=str(err))
                hb = ev.ClusterHeartbeat(cluster=self.name, reachable=False)
                self._unreachable = True
            msg_id = self.heartbeats.observe(hb, now)
            if msg_id is not None:  # only news, or a keepalive: see reconciler.service.clusters.heartbeats
                await self._report(hb, msg_id=msg_id)
            wait_s = max(self.heartbeats.next_check_ms(wall_ms()) - wall_ms(), 0) / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait_s)

    async def _usage_loop(self, stop: asyncio.Event) -> None:
        backoff = Backoff(base_s=1.0, cap_s=60.0)
        while not stop.is_set():
            wait_s = self.usage_interval_s
            try:
                await self.refresh_usage()
                backoff.reset()
            except (Unreachable, ApiError) as err:
                wait_s = min(backoff.next_delay(), self.usage_interval_s)
                self._log.info("usage_refresh_failed", error=str(err))
            except Exception as err:  # e.g. a quantity kdispatch cannot read: log, keep going
                wait_s = self.usage_interval_s
                self._log.exception("usage_refresh_error", error=str(err))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait_s)

    async def refresh_usage(self) -> None:
        if self.kueue:
            listing = await self.api.list_objects(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues")
            capacity, usage = from_cluster_queues(listing.get("items") or [])
        else:
            capacity, usage = from_nodes_and_pods(await self.api.list_nodes(), await self.api.list_pods())
        self.usage = usage
        if capacity != self.capacity:
            self.capacity = capacity
            update = ev.ClusterUpdated(
                cluster=self.name,
                labels=self.labels,
                taints=self.taints,
                capacity=capacity,
                worker_lost_timeout_ms=self.worker_lost_timeout_ms,
            )
            digest = hashlib.sha256(repr(sorted(capacity.items())).encode()).hexdigest()[:16]
            await self._report(update, msg_id=f"{self.name}/updated/{self.incarnation}{digest}")
            self._log.info("capacity_changed", capacity=capacity)

    # -- capacity facts ---------------------------------------------------------------------------

    def _capacity_watches(self) -> list[ListWatch]:
        """Nodes and pods of every worker (per-node fit counts with or without Kueue); Kueue's
        ClusterQueues, LocalQueues and Topologies where it runs."""
        state = self.capacity_state
        state.kueue = self.kueue
        follow: list[tuple[tuple[KindInfo, ...], Callable[[str, dict[str, Any]], None]]] = [
            (NODES, state.on_node),
            (PODS, state.on_pod),
        ]
        if self.kueue:
            follow += [
                (CLUSTER_QUEUES, state.on_cluster_queue),
                (LOCAL_QUEUES, state.on_local_queue),
                (TOPOLOGIES, state.on_topology),
            ]
        self._capacity_expected = {versions[0].plural: len(versions) for versions, _ in follow}
        return [
            ListWatch(
                self.api,
                versions,
                handle=self._capacity_handler(on),
                resync_s=max(self.resync_s, CAPACITY_RESYNC_S),
                key=by_name,
                on_served=self._capacity_served,
                log=self._log,
            )
            for versions, on in follow
        ]

    def _capacity_handler(
        self, on: Callable[[str, dict[str, Any]], None]
    ) -> Callable[[KindInfo, str, dict[str, Any]], Awaitable[None]]:
        async def handle(_kind: KindInfo, type_: str, obj: dict[str, Any]) -> None:
            on(type_, obj)

        return handle

    def _capacity_served(self, kind: KindInfo, served: bool) -> None:
        # Told before the list's objects are handed over, which happens without yielding: by the
        # time the report loop runs again, this resource's list is in the state.
        if not served:
            self._capacity_unserved[kind.plural] += 1
            if self._capacity_unserved[kind.plural] < self._capacity_expected.get(kind.plural, 1):
                return  # another version may be served
        self._capacity_listed.add(kind.plural)

    async def _capacity_loop(self, stop: asyncio.Event) -> None:
        """Publish what changed, at most once per ``capacity_interval_s``: the state is checked
        once per interval (one wake-up per worker, however busy it is), and a report goes out only
        when something changed since the last. The first
        (full) report waits (up to ``FIRST_REPORT_WAIT_S``) for every capacity list to answer
        once, so that it is not a half-listed worker."""
        deadline = time.monotonic() + FIRST_REPORT_WAIT_S
        while not stop.is_set() and time.monotonic() < deadline:
            if set(self._capacity_expected) <= self._capacity_listed:
                break
            await sleep_or_stop(stop, 0.05)
        while not stop.is_set():
            if self.capacity_state.changed or self.capacity_reports.pending_full:
                self.capacity_state.changed = False
                try:
                    report = self.capacity_reports.next_report(self.capacity_state, wall_ms())
                    if report is not None:
                        await self._report(report[0], msg_id=report[1])
                except Exception as err:  # an object kdispatch cannot read must not end the reports
                    self._log.exception("capacity_report_error", error=str(err))
            interval_ms = self.capacity_reports.min_interval_ms
            await sleep_or_stop(stop, max(self.capacity_reports.wait_ms(wall_ms()), interval_ms) / 1000)

    def _watch(self, versions: tuple[KindInfo, ...]) -> ListWatch:
        """List + watch one resource (docs/clusters.md): our copies by the origin label, and every
        Workload (Kueue makes its own for our copies: no label of ours to select them by)."""
        return ListWatch(
            self.api,
            versions,
            handle=lambda kind, type_, obj: self._on_event(kind.plural, type_, obj),
            resync_s=self.resync_s,
            label_selector="" if versions[0].plural == "workloads" else self.selector,
            key=by_name,
            on_served=self._note_served,
            log=self._log,
        )

    def _note_served(self, kind: KindInfo, served: bool) -> None:
        self._served[f"{kind.kind}/{kind.version}"] = served

    async def _on_event(self, plural: str, kind: str, obj: dict[str, Any]) -> None:
        origin = origin_of(obj, manager_id=self.manager_id)
        if plural == "workloads" and not _workload_copy(obj, origin):  # Kueue's, for one of our copies
            await self._on_workload(kind, obj)
            return
        if origin is None:
            return
        if kind == "DELETED":
            self._by_remote_uid.pop(origin.remote_uid, None)
            self._workloads.pop(origin.remote_uid, None)
            await self._report(ev.RemoteGone(job=origin.job, cluster=self.name, attempt=origin.attempt))
            return
        self._by_remote_uid[origin.remote_uid] = origin
        for fact in job_facts(obj, origin, cluster=self.name, kueue=self.kueue):
            await self._report(fact)
        workload = self._workloads.get(origin.remote_uid)
        if workload is not None:
            for fact in workload_facts(workload, origin, cluster=self.name):
                await self._report(fact)
        status = obj.get("status")
        if isinstance(status, dict):
            for listener in self.status_listeners:
                await listener(self.name, origin, status)

    async def _on_workload(self, kind: str, workload: dict[str, Any]) -> None:
        owner = workload_owner_uid(workload)
        if owner is None:
            return
        if kind == "DELETED":
            self._workloads.pop(owner, None)
            return
        origin = self._by_remote_uid.get(owner)
        if origin is None:
            # Not one of our copies, or its job has not been seen yet (both lists run at once):
            # keep a bounded number of these, so other tenants' workloads cost no memory.
            self._workloads[owner] = workload
            while len(self._workloads) > len(self._by_remote_uid) + MAX_UNMATCHED_WORKLOADS:
                del self._workloads[next(iter(self._workloads))]
            return
        self._workloads[owner] = workload
        for fact in workload_facts(workload, origin, cluster=self.name):
            await self._report(fact)


def _workload_copy(obj: dict[str, Any], origin: Origin | None) -> bool:
    """Is this Workload a copy we created (a dispatched Workload)? Kueue's own Workloads always
    have an owner (the job they admit), even when Kueue copied our labels onto them."""
    return origin is not None and workload_owner_uid(obj) is None


async def _cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel the tasks and wait until each has ended, cancelling again those still running.
    A cancel can be swallowed: one that lands as aiohttp's own read timeout fires comes out as a
    TimeoutError, which a watch takes for a dropped connection and reconnects (a CI run saw a
    watch still reading 30 s after its worker was told to stop)."""
    pending = set(tasks)
    while pending:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=1.0)
    for t in tasks:  # retrieved, as gather(return_exceptions=True) did: no "never retrieved" noise
        if not t.cancelled():
            t.exception()
