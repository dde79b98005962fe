"""Tells the user on the manager cluster what kdispatch knows about their job: Kubernetes Events
(``events.k8s.io/v1``) and the ``kdispatch.io/status`` annotation, plus a ``kdispatch.io/cluster``
label so ``kubectl get jobs -L kdispatch.io/cluster`` shows where each job runs.

Everything is derived from the log (``clusters.jobview``), like the actuator: every replica folds
it, only the one that leads writes (``leading()``), and writes are idempotent:

- an Event's name is fixed by (job uid, reason, note, the seq that started its series): creating
  it again answers 409, and the series is patched to the same count;
- the status annotation carries ``observedSeq``, the last log entry reported for that job (Events
  first, then the annotation). A replica that becomes leader reads it back once per job and
  resumes after it, so what the previous leader reported is not reported again.

Writes are per job, one at a time, coalesced: ten decisions about a job while a write is in
flight become one write of the latest state. Positions in a queue change as other jobs leave it;
they are refreshed every ``refresh_s``, not at every decision, and so is the expected start of a
waiting job (the leader's forecast, ``service.forecasts``: in the annotation only, never in an
Event, whose notes every replica must derive alike from the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import json
from collections.abc import Callable
from typing import Any, Protocol

from eventlog import events as ev
from eventlog.kube.kinds import lookup_api_version
from eventlog.kube.names import CLUSTER_ANNOTATION, CLUSTER_LABEL, STATUS_ANNOTATION
from eventlog.store import LogReader
from reconciler.edge.logging import get_logger
from reconciler.forecast import Forecast
from reconciler.service.clusters.api import ApiError, KubeApi
from reconciler.service.clusters.backoff import Backoff
from reconciler.service.clusters.base import Unreachable
from reconciler.service.clusters.jobview import JobStatus, JobView, Series

log = get_logger("reconciler.clusters.visibility")

REPORTING_CONTROLLER = "kdispatch.io/dispatcher"
EVENTS = ("events.k8s.io", "v1", "events")
SEQ_ANNOTATION = "kdispatch.io/seq"  # on an Event: the last log entry it counts


class EventCounter(Protocol):
    """Told of each Event occurrence: written (a create or a series patch), or ``suppressed``
    (folded into a series between two writes, dropped by the rate limit, or already on the
    object when this replica took over). ``ReconcilerMetrics.event_written`` is one."""

    def __call__(self, reason: str, *, suppressed: bool = False) -> None: ...


def uncounted(reason: str, *, suppressed: bool = False) -> None:
    pass


def _micro(at_ms: int) -> str:
    """MicroTime, as events.k8s.io/v1 wants ``eventTime``."""
    t = datetime.datetime.fromtimestamp(at_ms / 1000, tz=datetime.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _time(at_ms: int) -> str:
    return datetime.datetime.fromtimestamp(at_ms // 1000, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(s: Series, *, instance: str) -> dict[str, Any]:
    job, occ = s.job, s.occurrence
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": s.name,
            "namespace": job.namespace,
            "annotations": {SEQ_ANNOTATION: str(s.last_seq)},
        },
        "eventTime": _micro(s.first_ms),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance,
        "action": occ.action,
        "reason": occ.reason,
        "type": occ.type,
        "note": occ.note[:1024],  # the API server's limit
        "regarding": {
            "apiVersion": job.api_version,
            "kind": job.kind,
            "namespace": job.namespace,
            "name": job.name,
            "uid": job.uid,
        },
    }
    if s.count > 1:
        body["series"] = _series(s)
    return body


def _series(s: Series) -> dict[str, Any]:
    return {"count": s.count, "lastObservedTime": _micro(s.last_ms)}


def status_json(
    st: JobStatus, *, position: int | None, observed_seq: int, forecast: Forecast | None = None
) -> str:
    """``forecast``: the leader's start-time estimates; a waiting job it has one for gets an
    ``expectedStart`` (time, cluster, and the line a person reads, counted from when the forecast
    was made, so the annotation changes only with the forecast)."""
    status: dict[str, Any] = {
        "phase": st.phase,
        "queue": st.queue or "default",
        "position": position,
        "cluster": st.cluster,
        "reason": st.reason,
        "lastTransitionTime": _time(st.last_transition_ms),
        "observedSeq": observed_seq,
    }
    key = f"{st.job.namespace}/{st.job.name}"
    estimate = forecast.get(key) if forecast is not None and st.phase in ("Queued", "Pending") else None
    if forecast is not None and estimate is not None:
        status["expectedStart"] = {
            "time": _time(estimate.start_ms),
            "cluster": estimate.cluster,
            "message": forecast.line(key),
        }
    return json.dumps(status, separators=(",", ":"))


def observed_seq(obj: dict[str, Any]) -> int:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(STATUS_ANNOTATION, "")
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return int(json.loads(raw).get("observedSeq", 0))
    return 0


class StatusReporter:
    def __init__(
        self,
        reader: LogReader,
        api: KubeApi,
        *,
        instance: str,
        leading: Callable[[], bool],
        view: JobView | None = None,
        poll_interval_s: float = 0.05,
        refresh_s: float = 10.0,
        concurrency: int = 4,
        read_batch: int = 1000,
        on_event: EventCounter = uncounted,
        forecast: Callable[[], Forecast | None] | None = None,
    ) -> None:
        self.reader = reader
        self.api = api
        self.instance = instance
        self.leading = leading
        self.view = view or JobView()
        self.poll_interval_s = poll_interval_s
        self.refresh_s = refresh_s
        self.concurrency = concurrency
        self.read_batch = read_batch
        self.on_event = on_event
        self.forecast = forecast  # the leader's start-time estimates, if it makes them
        self.caught_up = asyncio.Event()
        self._reported: dict[str, int] = {}  # uid -> observedSeq on the object (known while leading)
        # uid -> a digest of the status JSON last written: compared, never read back, and kept for
        # every job (16 bytes instead of the few hundred of the JSON)
        self._written: dict[str, bytes] = {}
        # uid -> Event name -> the series count last written (known while leading)
        self._counts: dict[str, dict[str, int]] = {}
        # rate-limit drops already counted (or not ours to count)
        self._dropped = dict(self.view.dropped)
        self._suppressed = self.view.suppressed
        self._dirty: set[str] = set()
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._inflight: set[str] = set()
        self._led = False
        self.events_written = 0
        self.status_written = 0

    def settled(self) -> bool:
        return self.caught_up.is_set() and not self._dirty and not self._inflight

    async def run(self, stop: asyncio.Event) -> None:
        """Follow the log and write until ``stop``; a crash of any part ends the run."""
        tasks = [asyncio.create_task(self._follow(stop), name="status-follow")]
        tasks += [
            asyncio.create_task(self._consume(stop), name="status-write") for _ in range(self.concurrency)
        ]
        stopper = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopper and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            for task in [stopper, *tasks]:
                task.cancel()
            await asyncio.gather(stopper, *tasks, return_exceptions=True)

    # -- following the log ----------------------------------------------------------------------

    async def _follow(self, stop: asyncio.Event) -> None:
        backoff = Backoff(base_s=0.2, cap_s=10.0)
        loop = asyncio.get_running_loop()
        next_refresh = loop.time() + self.refresh_s
        while not stop.is_set():
            try:
                got = await self._read()
                backoff.reset()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a NATS outage slows the reporter down, never ends it
                got = False
                log.warning("log_read_failed", error=str(err), next_seq=self.view.seq + 1)
                await _sleep(stop, backoff.next_delay())
            if not got and not self.caught_up.is_set():
                self.caught_up.set()
                log.info("status_reporter_caught_up", seq=self.view.seq, jobs=len(self.view.jobs))
            self._check_leadership()
            if loop.time() >= next_refresh:
                next_refresh = loop.time() + self.refresh_s
                self._refresh_positions()
            if not got:
                await _sleep(stop, self.poll_interval_s)

    async def _read(self) -> bool:
        got = False
        async for batch in self.reader.read(from_seq=self.view.seq + 1, batch=self.read_batch):
            for entry in batch:
                got = True
                for uid in self.view.fold(entry):
                    self._mark(uid)
                if isinstance(entry.event, ev.JobDeleted):
                    self._forget(entry.event.job.uid)
                if self.view.suppressed != self._suppressed:
                    self._count_dropped()
        return got

    def _count_dropped(self) -> None:
        """Occurrences the rate limit dropped since the last look; only a leader's count, so
        what a standby (or the catch-up) folds is not counted by every replica."""
        for reason, total in self.view.dropped.items():
            new = total - self._dropped.get(reason, 0)
            if new > 0 and self._led:
                for _ in range(new):
                    self.on_event(reason, suppressed=True)
            self._dropped[reason] = total
        self._suppressed = self.view.suppressed

    def _check_leadership(self) -> None:
        leading = self.caught_up.is_set() and self.leading()
        if leading and not self._led:
            # What the previous leader reported is on the objects (observedSeq): every job is
            # looked at once (but those finished long ago), and only what is newer is written.
            self._reported.clear()
            self._written.clear()
            self._counts.clear()
            self._dirty = {uid for uid in self.view.jobs if not self.view.settled_long_ago(uid)}
            for uid in self._dirty:
                self._queue.put_nowait(uid)
            log.info("status_reporter_leading", jobs=len(self._dirty), instance=self.instance)
        elif self._led and not leading:
            self._dirty.clear()  # the next leader writes them; a write in flight finishes
            log.info("status_reporter_stepped_down", instance=self.instance)
        self._led = leading

    def _mark(self, uid: str) -> None:
        if not self._led or uid in self._dirty:
            return
        self._dirty.add(uid)
        if uid not in self._inflight:
            self._queue.put_nowait(uid)

    def _forget(self, uid: str) -> None:
        self._reported.pop(uid, None)
        self._written.pop(uid, None)
        self._counts.pop(uid, None)

    def _refresh_positions(self) -> None:
        if not self._led:
            return
        for uid, st in self.view.jobs.items():
            if st.phase in ("Queued", "Pending") and _digest(self._status_for(st)) != self._written.get(uid):
                self._mark(uid)

    # -- writing --------------------------------------------------------------------------------

    async def _consume(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            uid = await self._queue.get()
            if uid not in self._dirty or uid in self._inflight:
                continue
            self._dirty.discard(uid)
            self._inflight.add(uid)
            try:
                await self._sync_retrying(uid, stop)
            finally:
                self._inflight.discard(uid)
                if uid in self._dirty:
                    self._queue.put_nowait(uid)

    async def _sync_retrying(self, uid: str, stop: asyncio.Event) -> None:
        backoff = Backoff(base_s=0.1, cap_s=10.0)
        while not stop.is_set() and self._led:
            try:
                await self.sync(uid)
                return
            except asyncio.CancelledError:
                raise
            except Unreachable as err:
                log.info("manager_unreachable", job_uid=uid, error=str(err))
            except Exception as err:  # one job's trouble must not stop the others
                log.warning("status_write_failed", job_uid=uid, error=str(err))
            await _sleep(stop, backoff.next_delay())

    def _status_for(self, st: JobStatus) -> str:
        forecast = self.forecast() if self.forecast is not None else None
        return status_json(
            st, position=self.view.position(st.job.uid), observed_seq=self._last_seq(st), forecast=forecast
        )

    def _last_seq(self, st: JobStatus) -> int:
        return max([st.seq, *(s.last_seq for s in self.view.series_of(st.job.uid))])

    async def sync(self, uid: str) -> None:
        """Bring one job's Events and status on the manager up to the view."""
        st = self.view.jobs.get(uid)
        if st is None:
            return
        kind = lookup_api_version(st.job.api_version, st.job.kind)
        if kind is None:
            return
        reported = self._reported.get(uid)
        if reported is None:
            obj = await self.api.get(kind.group, kind.version, kind.plural, st.job.namespace, st.job.name)
            if obj is None or (obj.get("metadata") or {}).get("uid") != uid:
                return  # gone (or replaced by a namesake): nothing of ours to write on
            reported = self._reported[uid] = observed_seq(obj)
            for s in self.view.series_of(uid):
                if s.last_seq <= reported:  # the object shows it already: the last leader wrote it
                    self.on_event(s.occurrence.reason, suppressed=True)
        # What to report, taken at one instant: the log may move on during the writes below, and
        # observedSeq must not claim an Event that was folded after this list was made.
        series = [s for s in self.view.series_of(uid) if s.last_seq > reported]
        target = self._last_seq(st)
        status = self._status_for(st)
        cluster = st.cluster
        for s in series:
            await self._write_event(s)
        self._reported[uid] = target
        digest = _digest(status)
        if self._written.get(uid) == digest:
            return
        annotations = {STATUS_ANNOTATION: status}
        if cluster is not None:  # ManagerSync writes it at Placed too; the same value
            annotations[CLUSTER_ANNOTATION] = cluster
        # A None label is removed by the merge patch: a requeued job no longer shows a cluster.
        body = {"metadata": {"labels": {CLUSTER_LABEL: cluster}, "annotations": annotations}}
        try:
            await self.api.patch(kind.group, kind.version, kind.plural, st.job.namespace, st.job.name, body)
        except ApiError as err:
            if err.status == 404:
                return
            raise
        self._written[uid] = digest
        self.status_written += 1

    async def _write_event(self, s: Series) -> None:
        body = event_body(s, instance=self.instance)
        group, version, plural = EVENTS
        counts = self._counts.setdefault(s.job.uid, {})
        count = s.count  # taken now: the series may grow while the write is in flight
        try:
            await self.api.create(group, version, plural, s.job.namespace, body)
            before = 0
        except ApiError as err:
            if err.status != 409:
                raise
            # Already there (an earlier write of ours, or the previous leader's): bring its count
            # up to the log's. The API server allows only the series (and metadata) to change.
            # The body's values, not the series' now: it may have grown during the create.
            patch: dict[str, Any] = {"metadata": {"annotations": body["metadata"]["annotations"]}}
            if "series" in body:
                patch["series"] = body["series"]
            await self.api.patch(group, version, plural, s.job.namespace, s.name, patch)
            # Not known after a takeover: the previous leader counted what it wrote.
            before = counts.get(s.name, count - 1)
        counts[s.name] = count
        self.events_written += 1
        reason = s.occurrence.reason
        self.on_event(reason)
        for _ in range(count - before - 1):  # folded into the series between two writes
            self.on_event(reason, suppressed=True)


def _digest(status: str) -> bytes:
    return hashlib.blake2b(status.encode(), digest_size=16).digest()


async def _sleep(stop: asyncio.Event, delay_s: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), delay_s)
