"""What a user is told about their job: the log folded into a status per job and Kubernetes Event
series, pure (no I/O, no clock: time is the log's ``at_ms``) so every replica, and a leader that
took over, derives exactly the same Events with the same names.

Aggregation follows client-go's events broadcaster (k8s.io/client-go/tools/events): occurrences
with the same (job, reason, note) within ``series_window_ms`` of the last one are one Event whose
``series.count`` and ``series.lastObservedTime`` grow; after a quiet window a new Event starts.
On top of that, like client-go's EventCorrelator spam filter, each (job, reason) may start at most
``burst`` new Events and then one per ``refill_ms``: a job whose Pending reason keeps changing does
not flood its namespace. A suppressed occurrence still changes the status annotation, which
always says the latest.
"""

from __future__ import annotations

import bisect
import hashlib
import sys
from dataclasses import dataclass, field
from typing import Literal

from eventlog import events as ev

EventType = Literal["Normal", "Warning"]

SERIES_WINDOW_MS = 6 * 60_000  # client-go's finishTime: a series ends after 6 quiet minutes
BURST = 3  # new Events per (job, reason) before the refill rate applies
REFILL_MS = 60_000


@dataclass(frozen=True, slots=True)
class Occurrence:
    reason: str  # CamelCase, as kubectl shows it
    type: EventType
    action: str  # what kdispatch did (events.k8s.io/v1 ``action``)
    note: str


@dataclass(slots=True)
class Series:
    """One Event object: its name is fixed by (job uid, reason, note, the seq that started it)."""

    name: str
    job: ev.JobRef
    occurrence: Occurrence
    first_ms: int
    first_seq: int
    last_ms: int
    last_seq: int
    count: int = 1


@dataclass(slots=True)
class JobStatus:
    job: ev.JobRef
    queue: str
    priority: int
    submitted_seq: int
    phase: str = "Queued"
    cluster: str | None = None
    reason: str = ""
    last_transition_ms: int = 0
    seq: int = 0  # the last entry that changed this status
    label: str = ""  # how its queue is named to people ("" = from ``queue``)


@dataclass(slots=True)
class _Bucket:
    tokens: int
    at_ms: int


def queue_of(submitted: ev.JobSubmitted, local_queues: dict[tuple[str, str], str] | None = None) -> str:
    """The queue a user knows the job by: with queues configured (``local_queues``: the latest
    QueuesConfigured's (namespace, LocalQueue) -> ClusterQueue), its ClusterQueue, the one the
    webhook resolved or else its LocalQueue's (``default`` when it names none, as Kueue); without,
    the queue it names."""
    if submitted.cluster_queue:
        return submitted.cluster_queue
    if local_queues is not None:
        local = submitted.queue or "default"
        return local_queues.get((submitted.job.namespace, local), "")
    return submitted.queue or ""


def queue_label(submitted: ev.JobSubmitted, queue: str, local_queues: dict[tuple[str, str], str] | None) -> str:
    """"ClusterQueue research (LocalQueue research/default)" with queues configured, else ""."""
    if local_queues is None and not submitted.cluster_queue:
        return ""
    local = f"LocalQueue {submitted.job.namespace}/{submitted.queue or 'default'}"
    return f"ClusterQueue {queue} ({local})" if queue else f"no ClusterQueue ({local} does not exist)"


def describe_queue(queue: str, label: str = "") -> str:
    if label:
        return label
    return f"queue {queue}" if queue else "the default queue"


def pending_message(event: ev.Unschedulable) -> str:
    """One line: "no cluster fits: 3 clusters: taint ... not tolerated; 2: insufficient gpu"."""
    if event.message:
        return f"no cluster fits: {event.message}"
    parts = sorted(event.reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    return "no cluster fits: " + ("; ".join(f"{n} {r}" for r, n in parts) or "no clusters registered")


def event_name(job: ev.JobRef, reason: str, note: str, first_seq: int) -> str:
    """``<job>.<hash>``, the shape client-go gives (``<name>.<hex>``), but derived, not timed."""
    digest = hashlib.sha256(f"{job.uid}\0{reason}\0{note}\0{first_seq}".encode()).hexdigest()[:16]
    return f"{job.name[: 253 - 17]}.{digest}"


@dataclass
class JobView:
    series_window_ms: int = SERIES_WINDOW_MS
    burst: int = BURST
    refill_ms: int = REFILL_MS
    jobs: dict[str, JobStatus] = field(default_factory=dict)
    series: dict[str, dict[tuple[str, str], Series]] = field(default_factory=dict)  # uid -> (reason, note)
    suppressed: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # suppressed, by reason
    seq: int = 0
    at_ms: int = 0  # the latest entry's time
    _buckets: dict[tuple[str, str], _Bucket] = field(default_factory=dict)
    _queues: dict[str, list[tuple[int, int, str]]] = field(default_factory=dict)  # queue -> sorted keys
    _claims: dict[str, ev.PreemptionClaimed] = field(default_factory=dict)  # preemptor uid -> claim
    # With queues configured: (namespace, LocalQueue) -> ClusterQueue, from the latest QueuesConfigured
    _local_queues: dict[tuple[str, str], str] | None = None

    # -- queries --------------------------------------------------------------------------------

    def position(self, uid: str) -> int | None:
        """1-based place among the waiting jobs of its queue, in the core's dispatch order
        (priority first, then submission); None when it is not waiting."""
        st = self.jobs.get(uid)
        if st is None or st.phase not in ("Queued", "Pending"):
            return None
        keys = self._queues.get(st.queue, [])
        i = bisect.bisect_left(keys, _order(st))
        return i + 1 if i < len(keys) and keys[i][2] == uid else None

    def settled_long_ago(self, uid: str) -> bool:
        """Finished, and nothing about it newer than a series window: a new leader need not
        look at it again (what it says was reported long before the failover)."""
        st = self.jobs.get(uid)
        if st is None or st.phase not in ("Succeeded", "Failed"):
            return False
        last = max([st.last_transition_ms, *(s.last_ms for s in self.series.get(uid, {}).values())])
        return self.at_ms - last > self.series_window_ms

    def series_of(self, uid: str) -> list[Series]:
        return sorted(self.series.get(uid, {}).values(), key=lambda s: s.first_seq)

    # -- folding --------------------------------------------------------------------------------

    def fold(self, entry: ev.LogEntry) -> set[str]:
        """Fold one entry; returns the uids whose status or Events changed."""
        self.seq, self.at_ms = entry.seq, max(self.at_ms, entry.at_ms)
        e, seq, at = entry.event, entry.seq, entry.at_ms
        touched: set[str] = set()

        def tell(job: ev.JobRef, occ: Occurrence) -> None:
            if self._record(job, occ, seq=seq, at_ms=at):
                touched.add(job.uid)

        def to(job: ev.JobRef, phase: str, *, reason: str, cluster: str | None = None) -> JobStatus | None:
            st = self.jobs.get(job.uid)
            if st is None:
                return None
            if st.phase != phase:
                st.last_transition_ms = at
            self._leave_queue(st)
            st.phase, st.reason, st.cluster, st.seq = phase, sys.intern(reason), cluster, seq
            self._join_queue(st)
            touched.add(job.uid)
            return st

        match e:
            case ev.QueuesConfigured():
                found = {(lq.namespace, lq.name): lq.cluster_queue for lq in e.local_queues}
                self._local_queues = found if e.cluster_queues else None  # no ClusterQueue: tenancy off
            case ev.JobSubmitted() if e.job.uid not in self.jobs:
                queue = sys.intern(queue_of(e, self._local_queues))
                st = JobStatus(
                    job=_shared(e.job),
                    queue=queue,
                    priority=e.priority,
                    submitted_seq=seq,
                    last_transition_ms=at,
                    label=sys.intern(queue_label(e, queue, self._local_queues)),
                )
                self.jobs[e.job.uid] = st
                to(e.job, "Queued", reason=f"waiting in {describe_queue(st.queue, st.label)}")
                note = f"queued in {describe_queue(st.queue, st.label)} at position {self.position(e.job.uid)}"
                tell(e.job, Occurrence("Queued", "Normal", "Enqueue", note))
            case ev.JobUpdated() if e.job.uid in self.jobs and e.priority is not None:
                st = self.jobs[e.job.uid]
                self._leave_queue(st)
                st.priority = e.priority
                self._join_queue(st)
            case ev.Unschedulable():
                line = sys.intern(pending_message(e))  # most waiting jobs have the same
                to(e.job, "Pending", reason=line)
                tell(e.job, Occurrence("Pending", "Warning", "Schedule", line))
            case ev.Nominated():
                names = ", ".join(e.clusters)
                to(e.job, "Nominated", reason=f"waiting for admission on {names}")
                tell(
                    e.job,
                    Occurrence(
                        "Nominated", "Normal", "Nominate", f"nominated to {names} (attempt {e.attempt})"
                    ),
                )
            case ev.Placed():
                to(e.job, "Placed", reason=f"admitted on {e.cluster}", cluster=e.cluster)
                tell(
                    e.job,
                    Occurrence("Placed", "Normal", "Place", f"placed on {e.cluster} (attempt {e.attempt})"),
                )
            case ev.PreemptionClaimed():
                self._claims[e.preemptor.uid] = e
            case ev.Evict():
                tell(e.job, _evicted(e, self._claims.get(e.preemptor.uid) if e.preemptor else None))
            case ev.Requeued():
                back = to(e.job, "Queued", reason=_requeue_line(e))
                if back is not None:
                    tell(
                        e.job,
                        _requeued(e, queue=describe_queue(back.queue, back.label), position=self.position(e.job.uid)),
                    )
            case ev.Finished():
                how = "succeeded" if e.succeeded else "failed"
                to(
                    e.job,
                    "Succeeded" if e.succeeded else "Failed",
                    reason=f"{how} on {e.cluster}",
                    cluster=e.cluster,
                )
                kind: EventType = "Normal" if e.succeeded else "Warning"
                tell(
                    e.job,
                    Occurrence("Finished", kind, "Finish", f"{how} on {e.cluster} (attempt {e.attempt})"),
                )
                self._claims.pop(e.job.uid, None)
            case ev.JobDeleted():
                gone = self.jobs.pop(e.job.uid, None)
                if gone is not None:
                    self._leave_queue(gone)
                self.series.pop(e.job.uid, None)
                self._claims.pop(e.job.uid, None)
                for key in [k for k in self._buckets if k[0] == e.job.uid]:
                    del self._buckets[key]
            case _:
                pass
        return touched

    def _record(self, job: ev.JobRef, occ: Occurrence, *, seq: int, at_ms: int) -> bool:
        st = self.jobs.get(job.uid)
        if st is None:
            return False  # a decision about a job we never saw submitted (or already deleted)
        # The status's ref (the same job): not the decision's own decoded copy, one per Event.
        job = st.job
        mine = self.series.setdefault(job.uid, {})
        current = mine.get((occ.reason, occ.note))
        if current is not None and at_ms - current.last_ms <= self.series_window_ms:
            current.count += 1
            current.last_ms, current.last_seq = at_ms, seq
            return True
        if not self._take_token(job.uid, occ.reason, at_ms):
            self.suppressed += 1
            self.dropped[occ.reason] = self.dropped.get(occ.reason, 0) + 1
            return False
        # A new series replaces the finished one of the same key; other keys' series stay until
        # the job is deleted (their Events are the object's history until the API server's TTL).
        mine[(occ.reason, occ.note)] = Series(
            name=event_name(job, occ.reason, occ.note, seq),
            job=job,
            occurrence=occ,
            first_ms=at_ms,
            first_seq=seq,
            last_ms=at_ms,
            last_seq=seq,
        )
        return True

    def _take_token(self, uid: str, reason: str, at_ms: int) -> bool:
        bucket = self._buckets.get((uid, reason))
        if bucket is None:
            bucket = self._buckets[(uid, reason)] = _Bucket(tokens=self.burst, at_ms=at_ms)
        refills = (at_ms - bucket.at_ms) // self.refill_ms if self.refill_ms > 0 else 0
        if refills > 0:
            bucket.tokens = min(self.burst, bucket.tokens + refills)
            bucket.at_ms += refills * self.refill_ms
        if bucket.tokens <= 0:
            return False
        bucket.tokens -= 1
        return True

    def _join_queue(self, st: JobStatus) -> None:
        if st.phase in ("Queued", "Pending"):
            keys = self._queues.setdefault(st.queue, [])
            key = _order(st)
            i = bisect.bisect_left(keys, key)
            if i == len(keys) or keys[i] != key:
                keys.insert(i, key)

    def _leave_queue(self, st: JobStatus) -> None:
        keys = self._queues.get(st.queue)
        if keys:
            key = _order(st)
            i = bisect.bisect_left(keys, key)
            if i < len(keys) and keys[i] == key:
                del keys[i]


def _shared(ref: ev.JobRef) -> ev.JobRef:
    """The ref kept for every job in the view, with the strings most jobs repeat (namespace,
    apiVersion, kind) interned: each decoded entry brings its own copies of them."""
    return ev.JobRef(
        namespace=sys.intern(ref.namespace),
        name=ref.name,
        uid=ref.uid,
        api_version=sys.intern(ref.api_version),
        kind=sys.intern(ref.kind),
    )


def _order(st: JobStatus) -> tuple[int, int, str]:
    return (-st.priority, st.submitted_seq, st.job.uid)


def _evicted(e: ev.Evict, claim: ev.PreemptionClaimed | None) -> Occurrence:
    if e.preemptor is None:
        return Occurrence("Evicted", "Warning", "Evict", f"evicted from {e.cluster}: {e.reason}")
    why = e.reason or f"preempted by {e.preemptor.namespace}/{e.preemptor.name}"
    if claim is not None and claim.cluster == e.cluster and claim.claim:
        freed = ", ".join(f"{r} {q}" for r, q in sorted(claim.claim.items()))
        why = f"{why}, to free {freed}"
    return Occurrence("Preempted", "Warning", "Preempt", f"preempted on {e.cluster}: {why}")


def _requeue_line(e: ev.Requeued) -> str:
    where = f" on {e.cluster}" if e.cluster else ""
    line = f"requeued ({e.reason}{where})"
    return f"{line}: {e.message}" if e.message else line


def _requeued(e: ev.Requeued, *, queue: str, position: int | None) -> Occurrence:
    at = f" at position {position}" if position is not None else ""
    if e.reason == "WorkerLost":
        note = f"cluster {e.cluster or '?'} stopped answering; back in {queue}{at}"
        return Occurrence("WorkerLost", "Warning", "Requeue", note)
    if e.reason == "Evicted":
        note = f"evicted from {e.cluster or '?'}{': ' + e.message if e.message else ''}; back in {queue}{at}"
        return Occurrence("Evicted", "Warning", "Requeue", note)
    note = f"{_requeue_line(e)}; back in {queue}{at}"
    return Occurrence("Requeued", "Normal", "Requeue", note)
