"""The actuator: makes the worker clusters match the log's decisions, idempotently.

It reads the log (from the start: the projection it needs is small, see
``clusters.desired``), then tails it. Every decision that changes what should exist on a
cluster marks that copy, keyed by (job uid, cluster, attempt); a per-cluster executor makes the
copy match its *latest* intent: Nominated -> create, Withdrawn/CleanUp -> delete, Evict -> evict
(Placed and Finished are bookkeeping). Requests to an unreachable cluster are retried with
back-off for as long as the intent stands, without holding up the other clusters.

Idempotence, so that a restart or a second actuator never makes a copy twice: intents are levels,
not edges; workers ignore a create of a copy they have (Kubernetes: same name with our labels;
simulated: same uid and attempt) and treat deleting a missing copy as done. After catching up,
every copy that should exist is re-applied once, and a garbage collector on an interval deletes
our copies (origin label) that the log no longer wants.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from eventlog import events as ev
from eventlog.store import SeekableReader
from reconciler.edge.logging import get_logger
from reconciler.service.clusters.backoff import Backoff
from reconciler.service.clusters.base import Unreachable, Worker
from reconciler.service.clusters.desired import CopyKey, Desired, Intent, SpecUnreadable
from reconciler.service.clusters.metrics import ClusterMetrics
from reconciler.service.clusters.specs import CACHE_ENTRIES, SpecReader

log = get_logger("reconciler.actuator")


_TOLD = (ev.Placed, ev.Finished, ev.CleanUp)  # the decisions listeners hear of
WAKE_SPACING_S = 0.005  # woken by appends (``Actuator.wake``): reads at least this far apart


class DecisionListener(Protocol):
    """Told about bookkeeping decisions (Placed, Finished, CleanUp) once caught up; e.g. the
    manager status sync. Must not block: slow work belongs in its own task."""

    async def decided(self, event: ev.DecisionEvent, desired: Desired) -> None: ...


class _Executor:
    """Applies intents to one cluster, a few copies at a time, retrying each until it sticks."""

    def __init__(
        self,
        worker: Worker,
        desired: Desired,
        specs: SpecReader,
        *,
        name: str,
        concurrency: int,
        stop: asyncio.Event,
        metrics: ClusterMetrics,
    ) -> None:
        self.worker = worker
        self.metrics = metrics
        self.desired = desired
        self.specs = specs
        self.stop = stop
        self.concurrency = concurrency
        self.queue: asyncio.Queue[CopyKey] = asyncio.Queue()
        self.queued: set[CopyKey] = set()
        self.inflight: set[CopyKey] = set()
        self.again: set[CopyKey] = set()
        self.done: dict[CopyKey, Intent] = {}
        self.applied = 0
        # Looked up once: a logger bound per copy applied cost more than creating a simulated copy.
        self._debug = bool(getattr(log.bind(), "is_enabled_for", lambda _level: True)(logging.DEBUG))
        self._applied: dict[str, Any] = {}  # intent -> this cluster's counter
        self.pending = metrics.pending.labels(cluster=name)  # set at every read of the log: looked up once

    def submit(self, key: CopyKey) -> None:
        if key in self.inflight:
            self.again.add(key)
        elif key not in self.queued:
            self.queued.add(key)
            self.queue.put_nowait(key)

    def idle(self) -> bool:
        return not self.queued and not self.inflight

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            for _ in range(self.concurrency):
                tg.create_task(self._consume())

    async def _consume(self) -> None:
        while not self.stop.is_set():
            key = await self.queue.get()
            self.queued.discard(key)
            self.inflight.add(key)
            try:
                await self._apply(key)
            finally:
                self.inflight.discard(key)
                if key in self.again:
                    self.again.discard(key)
                    self.submit(key)

    async def _apply(self, key: CopyKey) -> None:
        backoff = Backoff(base_s=0.2, cap_s=30.0)
        uid, cluster, attempt = key
        while not self.stop.is_set():
            intent = self.desired.intent(key)
            if intent is None or intent is self.done.get(key) or intent is Intent.FINISHED:
                return
            job = self.desired.refs.get(uid)

            def bound(job: ev.JobRef | None = job, intent: Intent = intent) -> Any:
                return log.bind(job=job.key if job else uid, cluster=cluster, attempt=attempt, intent=str(intent))

            try:
                if intent is Intent.RUN:
                    try:
                        spec = await self.specs.spec(key)
                    except SpecUnreadable as err:
                        bound().error("create_skipped_spec_unreadable", error=str(err))
                        self.done[key] = intent
                        return
                    if spec is None:
                        bound().error(
                            "create_skipped_job_unknown", hint="the log has no JobSubmitted for this uid"
                        )
                        self.done[key] = intent
                        return
                    await self.worker.create(spec)
                elif job is not None and intent is Intent.EVICT:
                    await self.worker.evict(
                        job, attempt, reason=self.desired.evict_reason.get(key, "Preempted")
                    )
                elif job is not None and intent is Intent.GONE:
                    await self.worker.delete(job, attempt)
                if intent is Intent.GONE:
                    self.done.pop(key, None)  # final: nothing will be asked of this copy again
                else:
                    self.done[key] = intent
                self.applied += 1
                counter = self._applied.get(intent)
                if counter is None:
                    counter = self._applied[intent] = self.metrics.applied.labels(cluster=cluster, intent=str(intent))
                counter.inc()
                if self._debug:
                    bound().debug("applied")
                return
            except asyncio.CancelledError:
                raise
            except Unreachable as err:
                delay = backoff.next_delay()
                self.metrics.retries.labels(cluster=cluster, why="unreachable").inc()
                bound().info("cluster_unreachable_retrying", error=str(err), retry_in_s=round(delay, 3))
            except Exception as err:  # an API error must not kill the executor: log and retry
                delay = backoff.next_delay()
                self.metrics.retries.labels(cluster=cluster, why="error").inc()
                bound().error("apply_failed_retrying", error=str(err), retry_in_s=round(delay, 3))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), delay)


class Actuator:
    def __init__(
        self,
        reader: SeekableReader,
        workers: Mapping[str, Worker],
        *,
        listeners: tuple[DecisionListener, ...] = (),
        observers: tuple[Callable[[Sequence[ev.LogEntry]], None], ...] = (),
        poll_interval_s: float = 0.02,
        gc_interval_s: float = 30.0,
        gc_grace_s: float = 60.0,
        concurrency: int = 8,
        read_batch: int = 1000,
        spec_cache: int = CACHE_ENTRIES,
        metrics: ClusterMetrics | None = None,
    ) -> None:
        self.reader = reader
        self.workers = dict(workers)
        self.listeners = listeners
        # Others that follow the whole log in order (the forecasts' duration learner): handed each
        # batch this reads, so the log is read and decoded once for all of them.
        self.observers = observers
        self.poll_interval_s = poll_interval_s
        self.gc_interval_s = gc_interval_s
        self.gc_grace_ms = int(gc_grace_s * 1000)
        self.concurrency = concurrency
        self.read_batch = read_batch
        self.desired = Desired()
        self.specs = SpecReader(reader, self.desired, cache_entries=spec_cache)
        self._read_backoff = Backoff(base_s=0.2, cap_s=10.0)
        self.metrics = metrics or ClusterMetrics()
        self.caught_up = asyncio.Event()
        self._executors: dict[str, _Executor] = {}
        self._executor_tasks: dict[str, asyncio.Task[None]] = {}
        self._stop: asyncio.Event | None = None  # set by run: workers added later start at once
        # Set when the log may have grown (this process appended to it: jetstream.recent); the
        # actuator then reads at once instead of at its next poll. None: polls only.
        self.wake: asyncio.Event | None = None
        self.wake_spacing_s = WAKE_SPACING_S
        self.collected = 0

    @property
    def next_seq(self) -> int:
        return self.desired.seq + 1

    def settled(self) -> bool:
        """Caught up and nothing queued or in flight (tests and the benchmark wait for this)."""
        return self.caught_up.is_set() and all(x.idle() for x in self._executors.values())

    async def run(self, stop: asyncio.Event) -> None:
        """Follow the log and apply it until ``stop`` is set. A crash of any part ends the run."""
        self._stop = stop
        for name, worker in self.workers.items():
            self._start_executor(name, worker)
        tasks = list(self._executor_tasks.values())
        tasks += [asyncio.create_task(self._follow(stop)), asyncio.create_task(self._gc_loop(stop))]
        stopper = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopper and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            tasks = list({*tasks, *self._executor_tasks.values()})  # with the executors added since
            for task in [stopper, *tasks]:
                task.cancel()
            await asyncio.gather(stopper, *tasks, return_exceptions=True)

    def _start_executor(self, name: str, worker: Worker) -> None:
        assert self._stop is not None
        ex = _Executor(
            worker, self.desired, self.specs, name=name, concurrency=self.concurrency, stop=self._stop,
            metrics=self.metrics,
        )
        self._executors[name] = ex
        self._executor_tasks[name] = asyncio.create_task(ex.run(), name=f"executor-{name}")

    def add_worker(self, name: str, worker: Worker) -> None:
        """A cluster declared while running (a WorkerCluster object): drive it from now on,
        starting with what the log already wants there."""
        self.workers[name] = worker
        if self._stop is None:
            return  # run() starts it with the others
        self._start_executor(name, worker)
        if self.caught_up.is_set():
            for key in self.desired.active():
                if key[1] == name:
                    self._submit(key)

    async def remove_worker(self, name: str) -> None:
        """Stop driving a cluster (its WorkerCluster is gone): nothing more is asked of it."""
        self.workers.pop(name, None)
        self._executors.pop(name, None)
        task = self._executor_tasks.pop(name, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def drained(self, cluster: str) -> bool:
        """Caught up, the drain taint read back, no copy on ``cluster`` the log still wants, and
        every delete asked of it done: what a draining cluster waits for before it is removed."""
        ex = self._executors.get(cluster)
        if not self.caught_up.is_set() or cluster not in self.desired.draining:
            return False  # the drain taint is not read back yet: a decision may still name it
        return self.desired.live_on(cluster) == 0 and (ex is None or ex.idle())

    async def _follow(self, stop: asyncio.Event) -> None:
        while not await self._read_or_wait(stop, apply=False):
            pass  # the log could not be read: retried with back-off
        for key in self.desired.active():
            self._submit(key)
        self.caught_up.set()
        log.info("actuator_caught_up", seq=self.desired.seq, active=len(self.desired.active()))
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            self.metrics.seq.set(self.desired.seq)
            for ex in self._executors.values():
                ex.pending.set(len(ex.queued) + len(ex.inflight))
            wake = self.wake
            if wake is not None:
                wake.clear()  # before reading: an append from now on wakes the wait below
            started = loop.time()
            got = await self._read_or_wait(stop, apply=True)
            if wake is not None:
                # Read again when woken (at once if an append came during this read), not right
                # after every read: the read after one that took all there was would only ask
                # the server for its last sequence.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self.poll_interval_s)  # ``run`` cancels it on stop
                # At most one read per spacing: what the leader decides meanwhile is read in one
                # go, so the copies are created, and their facts reported, in batches.
                rest = self.wake_spacing_s - (loop.time() - started)
                if rest > 0:
                    await asyncio.sleep(rest)
            elif not got:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.poll_interval_s)

    async def _read_or_wait(self, stop: asyncio.Event, *, apply: bool) -> bool:
        """Read what is new; False if nothing was (or the log is unreachable: then after a
        back-off, so a NATS outage slows the actuator down instead of ending it)."""
        try:
            got = await self._read_available(apply=apply)
            self._read_backoff.reset()
            return got or not apply
        except asyncio.CancelledError:
            raise
        except Exception as err:
            delay = self._read_backoff.next_delay()
            log.warning("log_read_failed", error=str(err), next_seq=self.next_seq, retry_in_s=round(delay, 2))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            return stop.is_set() and not apply

    async def _read_available(self, *, apply: bool) -> bool:
        got = False
        async for batch in self.reader.read(from_seq=self.next_seq, batch=self.read_batch):
            for observe in self.observers:
                try:
                    observe(batch)
                except Exception as err:  # an observer's trouble must not stop the actuator
                    log.error("log_observer_failed", error=repr(err), first_seq=batch[0].seq if batch else None)
            got = got or bool(batch)
            saw, fold, submit = self.specs.saw, self.desired.fold, self._submit
            tell = apply and bool(self.listeners)
            for entry in batch:
                saw(entry)
                keys = fold(entry)
                if apply:
                    for key in keys:
                        submit(key)
                if tell and isinstance(entry.event, _TOLD):
                    await self._tell(entry.event)
        return got

    async def _tell(self, event: ev.DecisionEvent) -> None:
        for listener in self.listeners:
            try:
                await listener.decided(event, self.desired)
            except Exception as err:  # a listener's trouble must not stop the actuator
                log.error("decision_listener_failed", listener=type(listener).__name__, error=str(err))

    def _submit(self, key: CopyKey) -> None:
        ex = self._executors.get(key[1])
        if ex is None:
            log.warning("decision_for_unknown_cluster", cluster=key[1], job_uid=key[0], attempt=key[2])
            return
        ex.submit(key)

    async def _gc_loop(self, stop: asyncio.Event) -> None:
        await self.caught_up.wait()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.gc_interval_s)
            if not stop.is_set():
                await self.collect_garbage()

    async def collect_garbage(self) -> int:
        """Delete our copies the log no longer wants, on every reachable cluster."""
        removed = 0
        for name, worker in list(self.workers.items()):  # clusters come and go meanwhile
            try:
                copies = await worker.copies()
            except Unreachable:
                continue
            except Exception as err:
                log.error("gc_list_failed", cluster=name, error=str(err))
                continue
            for copy in copies:
                if not self.desired.collectable(
                    job_uid=copy.job_uid,
                    cluster=name,
                    attempt=copy.attempt,
                    age_ms=copy.age_ms,
                    grace_ms=self.gc_grace_ms,
                ):
                    continue
                job = self.desired.refs.get(copy.job_uid) or ev.JobRef(
                    namespace=copy.namespace, name=copy.name, uid=copy.job_uid
                )
                try:
                    await worker.delete(job, copy.attempt)
                except Unreachable:
                    break
                except Exception as err:
                    log.error(
                        "gc_delete_failed", cluster=name, job=job.key, attempt=copy.attempt, error=str(err)
                    )
                    continue
                removed += 1
                self.metrics.collected.labels(cluster=name).inc()
                log.info("gc_deleted", cluster=name, job=job.key, attempt=copy.attempt)
        self.collected += removed
        return removed
