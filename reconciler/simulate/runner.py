"""The virtual-time runner: the pure core and simulated workers, driven from a clock of events.

Like Armada's simulator, time jumps from one event to the next: the next trace submission or
deletion, the next thing a worker does (``next_event_ms``), the core's next timer
(``next_deadline``). At each such time the runner plays the sequencer — one batch of inputs
(stamped with that time), fold, ``decide``, one batch of decisions, fold — and then the actuator:
decisions become ``create``/``delete``/``evict`` calls on the workers, whose facts arrive in a
later batch. No NATS, no sleeping, no wall clock.

Heartbeats carry the usage the core's headroom is computed from, so a worker reports one in the
same batch as any fact that changed its usage (admission, finish, eviction, deletion): usage is
always fresh, as with a real worker heartbeating every few seconds. A quiet worker reports at
every batch once ``heartbeat_interval_ms`` (at most half the worker-lost timeout) has passed —
in particular at the core's worker-lost deadline, which is itself a batch. So no healthy worker is
ever lost, without a batch every few virtual seconds across a 149-day trace.
"""

from __future__ import annotations

import functools
import heapq
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from eventlog import events as ev
from reconciler.simulate.trace import Trace, TraceCluster, TraceJob

if TYPE_CHECKING:
    from reconciler.core import Registry

# 2024-01-01T00:00:00Z: trace time 0. Fixed, so runs are byte-for-byte reproducible.
EPOCH_MS = 1_704_067_200_000


class WorkerModel(Protocol):
    """What the runner needs of ``reconciler.simworker.SimWorker``."""

    name: str

    def create(
        self,
        job: ev.JobRef,
        attempt: int,
        pod_sets: Iterable[ev.PodSet],
        priority: int,
        runtime_ms: int | None,
        now_ms: int,
    ) -> bool: ...

    def delete(self, job_uid: str, attempt: int, now_ms: int) -> bool: ...

    def evict(self, job_uid: str, attempt: int, now_ms: int, *, reason: str = ...) -> bool: ...

    def advance_timed(self, now_ms: int) -> list[tuple[int, ev.InputEvent]]: ...

    def next_event_ms(self) -> int | None: ...

    def heartbeat(self, now_ms: int) -> ev.ClusterHeartbeat: ...


@dataclass(frozen=True)
class CoreApi:
    """The four functions of ``reconciler.core`` the runner uses (injectable for tests)."""

    new_state: Callable[[], Any]
    fold: Callable[[Any, ev.LogEntry], Any]
    decide: Callable[[Any], list[ev.DecisionEvent]]
    next_deadline: Callable[[Any], int | None]

    @classmethod
    def real(cls, plugins: Registry | None = None) -> CoreApi:
        """The real core; ``plugins``: the ``Registry`` states compile profiles against (the
        built-in plugins when not given)."""
        from reconciler import core

        registry = plugins if plugins is not None else core.BUILTINS
        return cls(
            new_state=functools.partial(core.new_state, plugins=registry),
            fold=core.fold,
            decide=core.decide,
            next_deadline=core.next_deadline,
        )


def sim_worker(cluster: TraceCluster) -> WorkerModel:
    from reconciler.simworker import SimWorker

    worker: WorkerModel = SimWorker(
        cluster.name,
        cluster.capacity,
        admission_latency_ms=cluster.admission_latency_ms,
        nodes=cluster.nodes,
        report_nodes=cluster.report_nodes,
    )
    return worker


@dataclass(frozen=True)
class RunSettings:
    heartbeat_interval_ms: int = 300_000
    # Stop once nothing is left to happen but timers that decide nothing for this long.
    idle_horizon_ms: int = 3_600_000
    max_batches_at_one_time: int = 10_000


class Observer(Protocol):
    def observe(self, entry: ev.LogEntry) -> None: ...


class SimulationStuck(RuntimeError):
    """The core and the workers keep producing work without time moving: a livelock."""


@dataclass
class _Clock:
    """Trace inputs (submissions, user deletions) on a heap of (time, seq)."""

    heap: list[tuple[int, int, ev.InputEvent]] = field(default_factory=list)
    seq: int = 0

    def push(self, at_ms: int, event: ev.InputEvent) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at_ms, self.seq, event))

    def next_ms(self) -> int | None:
        return self.heap[0][0] if self.heap else None

    def pop_until(self, now_ms: int) -> list[ev.InputEvent]:
        out = []
        while self.heap and self.heap[0][0] <= now_ms:
            out.append(heapq.heappop(self.heap)[2])
        return out


class VirtualRun:
    """One profile over one trace. ``run()`` returns when every job is done or nothing moves."""

    def __init__(
        self,
        trace: Trace,
        *,
        policy: ev.PolicyLoaded,
        profile_name: str,
        core: CoreApi,
        make_worker: Callable[[TraceCluster], WorkerModel] = sim_worker,
        observers: Sequence[Observer] = (),
        settings: RunSettings | None = None,
        progress: Callable[[int], None] | None = None,
        queues: ev.QueuesConfigured | None = None,
    ) -> None:
        self.trace = trace
        self.policy = policy
        self.queues = queues  # --queues: recorded at the start, as the leader records it
        self.core = core
        self.settings = settings or RunSettings()
        self.observers = list(observers)
        self.progress = progress
        self.workers = {c.name: make_worker(c) for c in trace.clusters}
        self.jobs: dict[str, TraceJob] = {j.uid: j for j in trace.jobs}
        self.refs: dict[str, ev.JobRef] = {j.uid: j.ref() for j in trace.jobs}
        self.state = core.new_state()
        self.seq = 0
        self.inbox_seq = 0
        self.now_ms = EPOCH_MS
        self.batches = 0
        self.decisions = 0
        self._last_hb: dict[str, int] = {}
        # Report at least twice per worker-lost timeout, so a healthy worker is never lost.
        self._hb_interval = min(self.settings.heartbeat_interval_ms, max(policy.worker_lost_timeout_ms // 2, 1))
        self._clock = _Clock()
        self._open = 0  # jobs submitted and not yet finished or deleted
        self._running: set[str] = set()  # jobs placed and not since finished, requeued or deleted
        self._progress_ms = self.now_ms  # the last placement, finish or deletion
        self._done: set[str] = set()
        self._submitted = 0
        for job in trace.jobs:
            placement = msgspec.structs.replace(job.placement, profile=profile_name)
            self._clock.push(EPOCH_MS + job.submit_ms, self._submission(job, placement))
            if job.delete_ms is not None:
                self._clock.push(EPOCH_MS + job.delete_ms, ev.JobDeleted(job=self.refs[job.uid]))

    def _submission(self, job: TraceJob, placement: ev.Placement) -> ev.JobSubmitted:
        return ev.JobSubmitted(
            job=self.refs[job.uid],
            pod_sets=job.pod_sets,
            priority=job.priority,
            priority_class=job.priority_class,
            placement=placement,
            runtime_ms=job.runtime_ms,
            queue=job.queue,
            cluster_queue=job.cluster_queue,
        )

    # ------------------------------------------------------------------ the sequencer's part

    def _append(self, events: Sequence[ev.AnyEvent], *, decisions: bool) -> None:
        count = len(events)
        for i, event in enumerate(events):
            self.seq += 1
            inbox_seq = None
            if not decisions and not isinstance(event, ev.Tick | ev.PolicyLoaded):
                self.inbox_seq += 1
                inbox_seq = self.inbox_seq
            entry = ev.LogEntry(
                seq=self.seq,
                at_ms=self.now_ms,
                event=event,
                inbox_seq=inbox_seq,
                batch=(i, count) if decisions else None,
                leader="simulate",
            )
            self.state = self.core.fold(self.state, entry)
            for observer in self.observers:
                observer.observe(entry)
            self._count(event)

    def _count(self, event: ev.AnyEvent) -> None:
        if isinstance(event, ev.Placed):
            self._running.add(event.job.uid)
            self._progress_ms = self.now_ms
        elif isinstance(event, ev.Finished | ev.Requeued | ev.JobDeleted):
            self._running.discard(event.job.uid)
            if not isinstance(event, ev.Requeued):
                self._progress_ms = self.now_ms
        if isinstance(event, ev.JobSubmitted):
            self._open += 1
            self._submitted += 1
            if self.progress is not None:
                self.progress(self._submitted)
        elif isinstance(event, ev.Finished | ev.JobDeleted) and event.job.uid not in self._done:
            self._done.add(event.job.uid)
            self._open -= 1

    def _step(self, inputs: list[ev.InputEvent]) -> int:
        self._append(inputs, decisions=False)
        decided = self.core.decide(self.state)
        self._append(decided, decisions=True)
        self.batches += 1
        self.decisions += len(decided)
        for decision in decided:
            self._actuate(decision)
        return len(decided)

    # ------------------------------------------------------------------ the actuator's part

    def _actuate(self, decision: ev.DecisionEvent) -> None:
        now = self.now_ms
        match decision:
            case ev.Nominated(job=ref, clusters=clusters, attempt=attempt):
                job = self.jobs[ref.uid]
                for name in clusters:
                    self._worker(name).create(ref, attempt, job.pod_sets, job.priority, job.runtime_ms, now)
            case ev.Withdrawn(job=ref, cluster=name, attempt=attempt) | ev.CleanUp(
                job=ref, cluster=name, attempt=attempt
            ):
                self._worker(name).delete(ref.uid, attempt, now)
            case ev.Evict(job=ref, cluster=name, attempt=attempt, reason=reason):
                self._worker(name).evict(ref.uid, attempt, now, reason=reason)
            case _:
                pass

    def _worker(self, name: str) -> WorkerModel:
        worker = self.workers.get(name)
        if worker is None:
            raise KeyError(f"the core decided about cluster {name!r}, which the trace does not have")
        return worker

    # ------------------------------------------------------------------ the loop

    def _worker_facts(self, t: int) -> tuple[list[ev.InputEvent], set[str]]:
        """What the workers report up to ``t``, in the order it happened.

        Facts at the same millisecond on different clusters (say two workers admitting copies of
        one job, with equal admission latencies) are ordered by a stable hash of (job, cluster):
        a coin toss that is the same on every run, instead of always favouring the cluster whose
        name sorts first. Facts about one copy keep their order (the sort is stable).
        """
        timed: list[tuple[int, int, int, ev.InputEvent]] = []
        changed: set[str] = set()
        for name, worker in self.workers.items():
            for at_ms, fact in worker.advance_timed(t):
                job = getattr(fact, "job", None)
                toss = zlib.crc32(f"{job.uid if job is not None else ''}/{name}".encode())
                timed.append((at_ms, toss, len(timed), fact))
                changed.add(name)
        timed.sort(key=lambda item: item[:3])
        return [fact for *_, fact in timed], changed

    def _heartbeats(self, *, changed: set[str] | None = None) -> list[ev.InputEvent]:
        """Heartbeats due now: every worker at the start (``changed`` None), a worker whose usage
        just changed, and any worker not heard from for the heartbeat interval."""
        out: list[ev.InputEvent] = []
        for name, worker in self.workers.items():
            last = self._last_hb.get(name)
            due = changed is None or name in changed or last is None or self.now_ms - last >= self._hb_interval
            if due:
                out.append(worker.heartbeat(self.now_ms))
                self._last_hb[name] = self.now_ms
        return out

    def _next_time(self) -> tuple[int | None, bool]:
        """The next event time, and whether anything but the core's timers is still to come."""
        candidates = [self._clock.next_ms()] + [w.next_event_ms() for w in self.workers.values()]
        external = [t for t in candidates if t is not None]
        deadline = self.core.next_deadline(self.state)
        times = external + ([deadline] if deadline is not None else [])
        return (min(times) if times else None), bool(external)

    def _start(self) -> None:
        first = self._clock.next_ms()
        self.now_ms = first if first is not None else EPOCH_MS
        setup: list[ev.InputEvent] = [self.policy]
        if self.queues is not None:
            setup.append(self.queues)
        for c in self.trace.clusters:
            setup.append(ev.ClusterRegistered(cluster=c.name, labels=c.labels, taints=c.taints, capacity=c.capacity))
        # What workers with nodes report before anything runs: their whole node picture.
        setup += self._worker_facts(self.now_ms)[0]
        setup += self._heartbeats()
        self._step(setup)

    def run(self) -> None:
        self._start()
        same_time = 0
        last_decision_ms = self.now_ms
        while True:
            t, more_to_come = self._next_time()
            if t is None:
                break
            if self._stalled(t):
                break  # jobs left that only go round the workers (reported as unfinished)
            if not more_to_come:
                if self._open <= 0:
                    break  # every job is done; only perpetual timers (worker-lost) remain
                if t - last_decision_ms > self.settings.idle_horizon_ms:
                    break  # jobs left that nothing will ever move (reported as unfinished)
            t = max(t, self.now_ms)
            same_time = same_time + 1 if t == self.now_ms else 0
            if same_time > self.settings.max_batches_at_one_time:
                raise SimulationStuck(f"{same_time} batches at virtual time {t - EPOCH_MS} ms without time moving")
            self.now_ms = t
            inputs: list[ev.InputEvent] = self._clock.pop_until(t)
            facts, changed = self._worker_facts(t)
            inputs.extend(facts)
            inputs.extend(self._heartbeats(changed=changed))
            deadline = self.core.next_deadline(self.state)
            if deadline is not None and deadline <= t:
                inputs.append(ev.Tick())
            if inputs and self._step(inputs):
                last_decision_ms = t

    def _stalled(self, t: int) -> bool:
        """Nothing runs, the trace is over, and for an idle horizon nothing was placed, finished or
        deleted: what is left are jobs sent to workers that cannot start them (a worker whose
        nodes cannot hold a pod its total capacity can), round after round. No finish can free
        room for them, so the run ends. (Without node facts a cluster's totals can say a job fits
        where no node holds it; with one pool per cluster this cannot happen.)"""
        return (
            not self._running
            and self._clock.next_ms() is None
            and t - self._progress_ms > self.settings.idle_horizon_ms
        )

    @property
    def open_jobs(self) -> int:
        return self._open
