"""The manager cluster: watch the submitted jobs, and write back where and how they run.

``ManagerWatcher`` lists and watches every job kind the webhook holds (resourceVersion, re-list
on 410, periodic resync; one watch per resource, on the first version the cluster serves) and, for
objects carrying ``kdispatch.io/placement``, reports ``JobObserved`` (first seen, then when its
generation or suspend changed), ``JobUpdated`` (its pod sets, suspend or priority changed),
``JobDeleted``, and backfills ``JobSubmitted`` for a job the log still does not know
``backfill_after_s`` after it was first seen (and once the view of the log it asks has caught
up): the webhook could not record it. Its message id is the webhook's (``submitted_msg_id``), so
a backfill racing the webhook's record is dropped by the inbox. Pod sets and
priority come from the annotations the webhook writes, so every kind is handled alike.

``ManagerSync`` marks a placed job with ``kdispatch.io/cluster`` and copies the status of the
placed remote copy onto the manager object's status subresource.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from eventlog import events as ev
from eventlog.kube.kinds import SUPPORTED_KINDS, KindInfo, by_resource, lookup_api_version
from eventlog.kube.names import (
    CLUSTER_ANNOTATION,
    PLACEMENT_ANNOTATION,
    POD_GROUP_NAME,
    POD_SETS_ANNOTATION,
    PRIORITY_ANNOTATION,
)
from reconciler.edge.logging import get_logger
from reconciler.service.clusters.api import ApiError, KubeApi
from reconciler.service.clusters.backfill import (
    NotBackfillable,
    job_ref,
    manifest_of,
    pod_sets_of,
    priority_of,
    submission_of,
    user_suspended,
)
from reconciler.service.clusters.backoff import Backoff
from reconciler.service.clusters.base import Reporter, Unreachable
from reconciler.service.clusters.desired import Desired
from reconciler.service.clusters.remote import Origin
from reconciler.service.clusters.watch import LISTED, ListWatch, by_uid, ref_tombstone, sleep_or_stop

log = get_logger("reconciler.clusters.manager")


def update_msg_id(uid: str, previous_resource_version: str) -> str:
    """The Nats-Msg-Id of a ``JobUpdated``: the webhook gives the same change the same id (it sees
    the old object's resourceVersion at /validate; see webhook/stamps.py), so the inbox keeps one."""
    return f"upd/{uid}/{previous_resource_version}"


def submitted_msg_id(uid: str) -> str:
    """The Nats-Msg-Id of a ``JobSubmitted``, the webhook's (webhook/stamps.py) as the backfill's:
    a backfill racing a submission the log has not folded yet is dropped by the inbox."""
    return f"sub/{uid}"


def _watched(obj: dict[str, Any]) -> bool:
    """Held by the webhook, and a job of its own: the pods of a Kueue pod group are recorded once,
    under the group's name, by the webhook; the watcher leaves them to it (docs/clusters.md)."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if PLACEMENT_ANNOTATION not in annotations:
        return False
    return POD_GROUP_NAME not in annotations and POD_GROUP_NAME not in (meta.get("labels") or {})


Signature = tuple[bool, str, str]  # (suspended by its user, pod-sets annotation, priority annotation)


def _signature(kind: KindInfo, obj: dict[str, Any]) -> Signature:
    """Kept for every job on the manager: its strings are interned, since jobs made from one
    template carry the same annotations (one copy instead of one per job)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return (
        user_suspended(kind, obj),
        sys.intern(str(annotations.get(POD_SETS_ANNOTATION, ""))),
        sys.intern(str(annotations.get(PRIORITY_ANNOTATION, ""))),
    )


class ManagerWatcher:
    def __init__(
        self,
        api: KubeApi,
        reporter: Reporter,
        *,
        known: Callable[[str], bool],
        queues: Callable[[], ev.QueuesConfigured | None] = lambda: None,
        kinds: tuple[KindInfo, ...] = SUPPORTED_KINDS,
        resync_s: int = 300,
        backfill_after_s: float = 10.0,
        ready: asyncio.Event | None = None,
    ) -> None:
        self.api = api
        # ``known`` answers from a view of the log that is being read: until it has read to the
        # end (``ready``), every job the log holds would look unknown and be backfilled again.
        self.ready = ready
        self.reporter = reporter
        self.known = known
        self.queues = queues  # the log's latest queue config, to resolve a backfilled job's ClusterQueue
        self.kinds = kinds
        self.resync_s = resync_s
        self.backfill_after_s = backfill_after_s
        self._seen: dict[str, tuple[str, Signature]] = {}  # uid -> (resourceVersion, signature) last seen
        self._observed_state: dict[str, tuple[int, bool]] = {}  # what the last JobObserved said
        # Per job only until the log knows it (memory for the few the webhook missed, not for
        # every job on the manager): when first seen, the object, backfilled but not yet known.
        self._first_seen: dict[str, float] = {}
        self._objects: dict[str, dict[str, Any]] = {}
        self._backfilled: set[str] = set()
        self.backfill_skipped: set[str] = set()

    @property
    def held_for_backfill(self) -> int:
        """Jobs the watcher holds memory for, waiting for the log to know them."""
        return len(self._first_seen.keys() | self._objects.keys() | self._backfilled)

    async def run(self, stop: asyncio.Event) -> None:
        watches = [
            ListWatch(
                self.api,
                versions,
                handle=self._on_event,
                resync_s=self.resync_s,
                keep=_watched,
                key=by_uid,
                tombstone=ref_tombstone,  # a deletion needs only the job's ref (job_ref)
                log=log.bind(cluster="manager"),
            )
            for versions in by_resource(self.kinds)
        ]
        tasks = [asyncio.create_task(w.run(stop)) for w in watches]
        tasks.append(asyncio.create_task(self._backfill_loop(stop)))
        try:
            await stop.wait()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _on_event(self, kind: KindInfo, type_: str, obj: dict[str, Any]) -> None:
        if type_ == LISTED:
            await self._observed(kind, obj)
        elif type_ == "DELETED":
            await self._deleted(obj)
        else:
            await self._changed(kind, obj)

    async def _observed(self, kind: KindInfo, obj: dict[str, Any]) -> None:
        """A job in a (re-)list. Reported once per generation and suspend state: our own status
        writes bump its resourceVersion, and every resync would otherwise record it again."""
        ref = job_ref(obj)
        meta = obj["metadata"]
        state = (int(meta.get("generation", 0) or 0), user_suspended(kind, obj))
        self._keep_for_backfill(ref.uid, obj)
        if self._observed_state.get(ref.uid) != state:
            rv = str(meta.get("resourceVersion", ""))
            event = ev.JobObserved(job=ref, suspended=state[1], resource_version=rv)
            await self.reporter.report(event, msg_id=f"manager/{ref.uid}/observed/{rv}")
            self._observed_state[ref.uid] = state
        await self._changed(kind, obj, observed=True)

    async def _changed(self, kind: KindInfo, obj: dict[str, Any], *, observed: bool = False) -> None:
        ref = job_ref(obj)
        meta = obj.get("metadata") or {}
        rv = str(meta.get("resourceVersion", ""))
        signature = _signature(kind, obj)
        previous = self._seen.get(ref.uid)
        self._seen[ref.uid] = (rv, signature)
        self._keep_for_backfill(ref.uid, obj)
        if previous is None:
            if not observed:
                event = ev.JobObserved(job=ref, suspended=signature[0], resource_version=rv)
                await self.reporter.report(event, msg_id=f"manager/{ref.uid}/observed/{rv}")
                self._observed_state[ref.uid] = (int(meta.get("generation", 0) or 0), signature[0])
            return
        previous_rv, previous_signature = previous
        if previous_signature == signature:
            return  # status or annotation changes (ours among them): nothing for the dispatcher
        try:
            pod_sets = pod_sets_of(obj)
        except NotBackfillable as err:
            log.warning("update_not_reported", job=ref.key, kind=ref.kind, reason=str(err))
            return
        priority_class, priority = priority_of(obj)
        update = ev.JobUpdated(
            job=ref,
            pod_sets=pod_sets,
            suspended=signature[0],
            priority=priority,
            priority_class=priority_class,
            manifest=manifest_of(obj),
        )
        await self.reporter.report(update, msg_id=update_msg_id(ref.uid, previous_rv))

    def _keep_for_backfill(self, uid: str, obj: dict[str, Any]) -> None:
        """Hold the object (and when it was first seen) only while the log does not know the
        job: memory for the few the webhook missed, not for every job on the manager."""
        if uid in self._backfilled or self.known(uid):
            self._objects.pop(uid, None)
            if uid not in self._backfilled:
                self._first_seen.pop(uid, None)
        else:
            self._first_seen.setdefault(uid, time.monotonic())
            self._objects[uid] = obj

    async def _deleted(self, obj: dict[str, Any]) -> None:
        ref = job_ref(obj)
        for memory in (self._seen, self._observed_state, self._first_seen, self._objects):
            memory.pop(ref.uid, None)
        self._backfilled.discard(ref.uid)
        self.backfill_skipped.discard(ref.uid)
        await self.reporter.report(ev.JobDeleted(job=ref), msg_id=f"manager/{ref.uid}/deleted")

    async def _backfill_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await sleep_or_stop(stop, max(self.backfill_after_s / 2, 0.05))
            await self.backfill_due()

    async def backfill_due(self) -> int:
        """Record a ``JobSubmitted`` for every job the log has not learnt of in time."""
        if self.ready is not None and not self.ready.is_set():
            return 0
        now = time.monotonic()
        done = 0
        for uid in [u for u in self._backfilled if self.known(u)]:  # recorded: nothing more to hold
            self._backfilled.discard(uid)
            self._first_seen.pop(uid, None)
        for uid, first in list(self._first_seen.items()):
            if uid in self._backfilled or uid in self.backfill_skipped or now - first < self.backfill_after_s:
                continue
            if self.known(uid):
                self._first_seen.pop(uid, None)
                self._objects.pop(uid, None)
                continue
            obj = self._objects.get(uid)
            kind = lookup_api_version(str(obj.get("apiVersion", "")), str(obj.get("kind", ""))) if obj else None
            if obj is None or kind is None:
                continue
            try:
                submitted = submission_of(obj, kind, queues=self.queues())
            except NotBackfillable as err:
                self.backfill_skipped.add(uid)
                log.warning("backfill_impossible", job=job_ref(obj).key, reason=str(err))
                continue
            await self.reporter.report(submitted, msg_id=submitted_msg_id(uid))
            self._backfilled.add(uid)
            self._objects.pop(uid, None)
            done += 1
            log.warning("job_backfilled", job=submitted.job.key, reason="the webhook did not record this job")
        return done


class ManagerSync:
    """Writes the placement and the placed copy's status back onto the manager object.

    Writes run in the background, one after the other per job, so a slow or unreachable manager
    API never holds up the actuator or a worker's watch."""

    def __init__(self, api: KubeApi, desired: Desired) -> None:
        self.api = api
        self.desired = desired
        self._status: dict[tuple[str, str, int], dict[str, Any]] = {}
        self._written: dict[str, Any] = {}
        self._chains: dict[str, asyncio.Task[None]] = {}

    async def decided(self, event: ev.DecisionEvent, desired: Desired) -> None:
        if isinstance(event, ev.Placed):
            job, key = event.job, (event.job.uid, event.cluster, event.attempt)
            self._then(job.uid, lambda: self._placed(job, event.cluster, key))
        elif isinstance(event, ev.CleanUp) and event.job.uid not in self.desired.jobs:
            self._forget(event.job.uid)

    async def remote_status(self, cluster: str, origin: Origin, status: dict[str, Any]) -> None:
        key = (origin.job.uid, cluster, origin.attempt)
        self._status[key] = status
        if self.desired.placed.get(origin.job.uid) == (cluster, origin.attempt):
            self._then(origin.job.uid, lambda: self._write_status(origin.job, status))

    async def idle(self) -> None:
        """Wait for the writes started so far (tests, shutdown)."""
        while self._chains:
            await asyncio.gather(*list(self._chains.values()), return_exceptions=True)

    def _then(self, uid: str, write: Callable[[], Awaitable[None]]) -> None:
        previous = self._chains.get(uid)

        async def chained() -> None:
            if previous is not None:
                with contextlib.suppress(Exception):
                    await previous
            try:
                await write()
            except Exception as err:  # a failed write must not take anything else down
                log.error("manager_write_failed", job_uid=uid, error=str(err))

        task = asyncio.create_task(chained())
        self._chains[uid] = task
        task.add_done_callback(lambda t: self._chains.pop(uid, None) if self._chains.get(uid) is t else None)

    def _forget(self, uid: str) -> None:
        self._written.pop(uid, None)
        for key in [k for k in self._status if k[0] == uid]:
            del self._status[key]

    async def _placed(self, job: ev.JobRef, cluster: str, key: tuple[str, str, int]) -> None:
        await self._annotate(job, cluster)
        status = self._status.get(key)
        if status is not None:
            await self._write_status(job, status)

    async def _annotate(self, job: ev.JobRef, cluster: str) -> None:
        kind = lookup_api_version(job.api_version, job.kind)
        if kind is None:
            return
        body = {"metadata": {"annotations": {CLUSTER_ANNOTATION: cluster}}}
        await self._retrying(job, "annotate", self.api.patch, kind, body)

    async def _write_status(self, job: ev.JobRef, status: dict[str, Any]) -> None:
        kind = lookup_api_version(job.api_version, job.kind)
        if kind is None or not kind.status_synced or self._written.get(job.uid) == status:
            return
        # A merge patch keeps keys it does not name: null out what the remote status dropped.
        previous = self._written.get(job.uid) or {}
        body = {**{k: None for k in previous if k not in status}, **status}
        await self._retrying(job, "status", self.api.patch_status, kind, {"status": body})
        self._written[job.uid] = status

    async def _retrying(self, job: ev.JobRef, what: str, call: Any, kind: KindInfo, body: dict[str, Any]) -> None:
        backoff = Backoff(base_s=0.1, cap_s=5.0)
        for _ in range(5):
            try:
                await call(kind.group, kind.version, kind.plural, job.namespace, job.name, body)
                return
            except ApiError as err:
                if err.status == 404:
                    return  # the job is gone: nothing to write on
                log.warning("manager_write_failed", job=job.key, what=what, error=str(err))
            except Unreachable as err:
                log.info("manager_unreachable", job=job.key, what=what, error=str(err))
            await asyncio.sleep(backoff.next_delay())
        log.error("manager_write_gave_up", job=job.key, what=what, hint="the next status change retries it")
