"""The manager cluster: watch the submitted jobs, and write back where and how they run.

``ManagerWatcher`` lists and watches every served job kind (resourceVersion, re-list on 410,
periodic resync) and, for objects carrying ``kdispatch.io/placement``, reports ``JobObserved``
(on every list), ``JobUpdated`` (generation or suspend changed), ``JobDeleted``, and backfills
``JobSubmitted`` (batch Job only) for a job the log still does not know ``backfill_after_s``
after it was first seen: the webhook could not record it.

``ManagerSync`` marks a placed job with ``kdispatch.io/cluster`` and copies the status of the
placed remote copy onto the manager object's status subresource.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from eventlog import events as ev
from reconciler.shell.clusters.api import ApiError, Gone, KubeApi
from reconciler.shell.clusters.backfill import NotBackfillable, job_ref, pod_sets_of, submission_of
from reconciler.shell.clusters.backoff import Backoff
from reconciler.shell.clusters.base import CLUSTER_ANNOTATION, PLACEMENT_ANNOTATION, Reporter, Unreachable
from reconciler.shell.clusters.desired import Desired
from reconciler.shell.clusters.kinds import KINDS, Kind, kind_for
from reconciler.shell.clusters.remote import Origin
from reconciler.shell.logging import get_logger

log = get_logger("reconciler.clusters.manager")

MANAGED_BY = "kueue.x-k8s.io/multikueue"  # what the webhook sets to hold a job (see KINDS.md)


def _has_placement(obj: dict[str, Any]) -> bool:
    return PLACEMENT_ANNOTATION in ((obj.get("metadata") or {}).get("annotations") or {})


def _get(obj: dict[str, Any], path: tuple[str, ...] | None) -> Any:
    node: Any = obj
    for key in path or ():
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _suspended(kind: Kind, obj: dict[str, Any]) -> bool:
    """Did the *user* suspend it? A job kdispatch holds (managedBy MultiKueue, suspended by the
    webhook) is not suspended in that sense, as the webhook records it (``suspended=False``)."""
    if kind.managed_by_path is not None and _get(obj, kind.managed_by_path) == MANAGED_BY:
        return False
    return bool(_get(obj, kind.suspend_path))


class ManagerWatcher:
    def __init__(
        self,
        api: KubeApi,
        reporter: Reporter,
        *,
        known: Callable[[str], bool],
        kinds: tuple[Kind, ...] = KINDS,
        resync_s: int = 300,
        backfill_after_s: float = 10.0,
    ) -> None:
        self.api = api
        self.reporter = reporter
        self.known = known
        self.kinds = kinds
        self.resync_s = resync_s
        self.backfill_after_s = backfill_after_s
        self._seen: dict[str, tuple[int, bool]] = {}  # uid -> (generation, suspended)
        self._observed_state: dict[str, tuple[int, bool]] = {}  # what the last JobObserved said
        self._first_seen: dict[str, float] = {}
        self._objects: dict[str, dict[str, Any]] = {}
        self._backfilled: set[str] = set()
        self.backfill_skipped: set[str] = set()

    async def run(self, stop: asyncio.Event) -> None:
        tasks = [asyncio.create_task(self._watch_loop(kind, stop)) for kind in self.kinds]
        tasks.append(asyncio.create_task(self._backfill_loop(stop)))
        try:
            await stop.wait()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch_loop(self, kind: Kind, stop: asyncio.Event) -> None:
        backoff = Backoff(base_s=0.2, cap_s=30.0)
        known: dict[str, dict[str, Any]] = {}
        bound = log.bind(cluster="manager", kind=kind.kind)
        while not stop.is_set():
            try:
                listing = await self.api.list_objects(kind.group, kind.version, kind.plural)
                rv = str((listing.get("metadata") or {}).get("resourceVersion") or "")
                current = {
                    str((o.get("metadata") or {}).get("uid", "")): o
                    for o in listing.get("items") or []
                    if _has_placement(o)
                }
                for uid, obj in known.items():
                    if uid not in current:
                        await self._deleted(obj)
                for obj in current.values():
                    await self._observed(kind, obj)
                known = current
                backoff.reset()
                async for event in self.api.watch(
                    kind.group, kind.version, kind.plural, resource_version=rv, timeout_s=self.resync_s
                ):
                    obj = event["object"]
                    if not _has_placement(obj):
                        continue
                    uid = str((obj.get("metadata") or {}).get("uid", ""))
                    if event["type"] == "DELETED":
                        known.pop(uid, None)
                        await self._deleted(obj)
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        known[uid] = obj
                        await self._changed(kind, obj)
            except Gone:
                bound.info("watch_expired_relisting")
            except ApiError as err:
                delay = self.resync_s if err.status == 404 else backoff.next_delay()
                if err.status != 404:
                    bound.warning("manager_watch_failed", error=str(err), retry_in_s=round(delay, 2))
                await _sleep_or_stop(stop, delay)
            except Unreachable as err:
                delay = backoff.next_delay()
                bound.info("manager_disconnected", error=str(err), retry_in_s=round(delay, 2))
                await _sleep_or_stop(stop, delay)
            except Exception as err:  # a malformed object must not end the watch for good
                delay = backoff.next_delay()
                bound.exception("manager_watch_error", error=str(err), retry_in_s=round(delay, 2))
                await _sleep_or_stop(stop, delay)

    async def _observed(self, kind: Kind, obj: dict[str, Any]) -> None:
        """A job in a (re-)list. Reported once per generation and suspend state: our own status
        writes bump its resourceVersion, and every resync would otherwise record it again."""
        ref = job_ref(obj)
        meta = obj["metadata"]
        state = (int(meta.get("generation", 0) or 0), _suspended(kind, obj))
        self._first_seen.setdefault(ref.uid, time.monotonic())
        self._keep_for_backfill(ref.uid, obj)
        if self._observed_state.get(ref.uid) != state:
            rv = str(meta.get("resourceVersion", ""))
            event = ev.JobObserved(job=ref, suspended=state[1], resource_version=rv)
            await self.reporter.report(event, msg_id=f"manager/{ref.uid}/observed/{rv}")
            self._observed_state[ref.uid] = state
        await self._changed(kind, obj, observed=True)

    async def _changed(self, kind: Kind, obj: dict[str, Any], *, observed: bool = False) -> None:
        ref = job_ref(obj)
        meta = obj.get("metadata") or {}
        state = (int(meta.get("generation", 0) or 0), _suspended(kind, obj))
        previous = self._seen.get(ref.uid)
        self._seen[ref.uid] = state
        self._keep_for_backfill(ref.uid, obj)
        if previous is None:
            self._first_seen.setdefault(ref.uid, time.monotonic())
            if not observed:
                rv = str(meta.get("resourceVersion", ""))
                event = ev.JobObserved(job=ref, suspended=state[1], resource_version=rv)
                await self.reporter.report(event, msg_id=f"manager/{ref.uid}/observed/{rv}")
                self._observed_state[ref.uid] = state
            return
        if previous == state:
            return  # status or annotation changes (ours among them): nothing for the dispatcher
        try:
            pod_sets = pod_sets_of(obj)
        except NotBackfillable:
            log.info(
                "update_not_reported_kind",
                job=ref.key,
                kind=ref.kind,
                reason="pod sets of this kind come from the webhook",
            )
            return
        update = ev.JobUpdated(job=ref, pod_sets=pod_sets, suspended=state[1], manifest=obj)
        await self.reporter.report(update, msg_id=f"manager/{ref.uid}/updated/{state[0]}-{int(state[1])}")

    def _keep_for_backfill(self, uid: str, obj: dict[str, Any]) -> None:
        """Hold the object only while the log does not know the job: memory for the few the
        webhook missed, not for every job on the manager."""
        if uid in self._backfilled or self.known(uid):
            self._objects.pop(uid, None)
        else:
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
            await _sleep_or_stop(stop, max(self.backfill_after_s / 2, 0.05))
            await self.backfill_due()

    async def backfill_due(self) -> int:
        """Record a ``JobSubmitted`` for every job the log has not learnt of in time."""
        now = time.monotonic()
        done = 0
        for uid, first in list(self._first_seen.items()):
            if uid in self._backfilled or uid in self.backfill_skipped or now - first < self.backfill_after_s:
                continue
            if self.known(uid):
                self._backfilled.add(uid)
                self._objects.pop(uid, None)
                continue
            obj = self._objects.get(uid)
            if obj is None:
                continue
            try:
                submitted = submission_of(obj)
            except NotBackfillable as err:
                self.backfill_skipped.add(uid)
                log.warning("backfill_impossible", job=job_ref(obj).key, reason=str(err))
                continue
            await self.reporter.report(submitted, msg_id=f"manager/{uid}/submitted-by-watch")
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
        kind = kind_for(job.api_version, job.kind)
        if kind is None:
            return
        body = {"metadata": {"annotations": {CLUSTER_ANNOTATION: cluster}}}
        await self._retrying(job, "annotate", self.api.patch, kind, body)

    async def _write_status(self, job: ev.JobRef, status: dict[str, Any]) -> None:
        kind = kind_for(job.api_version, job.kind)
        if kind is None or self._written.get(job.uid) == status:
            return
        # A merge patch keeps keys it does not name: null out what the remote status dropped.
        previous = self._written.get(job.uid) or {}
        body = {**{k: None for k in previous if k not in status}, **status}
        await self._retrying(job, "status", self.api.patch_status, kind, {"status": body})
        self._written[job.uid] = status

    async def _retrying(self, job: ev.JobRef, what: str, call: Any, kind: Kind, body: dict[str, Any]) -> None:
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


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
