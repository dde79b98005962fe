"""What the log wants on the worker clusters: a small projection of decisions, pure and fast.

The actuator folds every log entry into ``Desired`` and then makes each touched remote copy
match its intent. Because the projection is level-based (the *latest* intent per copy), applying
it twice, after a restart or from a second actuator, does nothing new.

It keeps no job's spec, only where the log has it (``JobSources``: a few sequences), so a deep
queue costs it ints rather than every pending job's decoded manifest; the actuator reads the
entries back when it creates a copy (``clusters.specs``), and ``remote_spec`` builds the copy's
spec from them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from enum import StrEnum

from msgspec import Struct

from eventlog import events as ev
from eventlog.kube.names import DRAINING_TAINT
from reconciler.core.state import RETIRE_DELETED_AFTER_MS
from reconciler.service.clusters.base import RemoteSpec

CopyKey = tuple[str, str, int]  # (job uid, cluster, attempt)


class Intent(StrEnum):
    RUN = "run"  # Nominated: the copy should exist
    EVICT = "evict"  # Evict: stop it (the job is requeued as a new attempt)
    FINISHED = "finished"  # Finished: leave it alone until CleanUp
    GONE = "gone"  # Withdrawn / CleanUp: remove it


class JobSources(Struct, frozen=True, gc=False):
    """Where a job's spec is in the log: for each part, the sequence of the last entry that set
    it (often one and the same ``JobSubmitted``). Replaced, never changed in place, so a reader
    that awaits between its reads keeps one consistent set."""

    submitted: int  # its JobSubmitted: the ref, runtime and queue, and the parts below until updated
    pod_sets: int  # the last JobSubmitted / JobUpdated (each carries the pod sets)
    priority: int  # the last of those with a priority
    manifest: int  # the last of those with a manifest (the JobSubmitted's may be None)

    def seqs(self) -> set[int]:
        return {self.submitted, self.pod_sets, self.priority, self.manifest}


SpecEvent = ev.JobSubmitted | ev.JobUpdated


class SpecUnreadable(LookupError):
    """An entry a job's sources name is not in the log (or not what it was): no copy can be made."""


def remote_spec(key: CopyKey, sources: JobSources, events: Mapping[int, SpecEvent]) -> RemoteSpec:
    """The spec of copy ``key`` from the entries ``sources`` names (``events``: seq -> event),
    as the projection would have built it by keeping each part as it was folded."""

    def at(seq: int, part: str) -> SpecEvent:
        event = events.get(seq)
        if event is None or event.job.uid != key[0]:
            raise SpecUnreadable(
                f"log entry {seq}, which holds the {part} of job uid {key[0]}, "
                f"is {'missing' if event is None else f'about job uid {event.job.uid}'}"
            )
        return event

    submitted = at(sources.submitted, "submission")
    if not isinstance(submitted, ev.JobSubmitted):
        raise SpecUnreadable(f"log entry {sources.submitted} of job uid {key[0]} is not its JobSubmitted")
    priority = at(sources.priority, "priority").priority
    return RemoteSpec(
        job=submitted.job,
        cluster=key[1],
        attempt=key[2],
        pod_sets=list(at(sources.pod_sets, "pod sets").pod_sets),
        priority=submitted.priority if priority is None else priority,
        runtime_ms=submitted.runtime_ms,
        queue=submitted.queue,
        manifest=at(sources.manifest, "manifest").manifest,
    )


# The decisions the actuator acts on, or tells its listeners about: each names a copy's job.
_COPY_DECISIONS = (ev.Nominated, ev.Withdrawn, ev.CleanUp, ev.Evict, ev.Finished, ev.Placed)
# Every event ``fold`` looks at. Two entries in five are a worker's facts (RemoteCreated,
# RemoteAdmitted), which it does not: they are passed over by one set lookup instead of a failed
# ``isinstance`` per case below.
_FOLDED = frozenset(
    {
        *_COPY_DECISIONS,
        ev.QueuesConfigured,
        ev.JobSubmitted,
        ev.JobUpdated,
        ev.ClusterRegistered,
        ev.ClusterUpdated,
        ev.ClusterRemoved,
        ev.JobDeleted,
    }
)


class Desired:
    def __init__(self) -> None:
        # Every job that may still get a copy -> where its spec is; a job never updated (most)
        # keeps its JobSubmitted's sequence alone, an int instead of a struct around it.
        self.jobs: dict[str, int | JobSources] = {}
        self.intents: dict[CopyKey, Intent] = {}
        self.latest_attempt: dict[str, int] = {}
        self.placed: dict[str, tuple[str, int]] = {}  # uid -> (cluster, attempt)
        self.evict_reason: dict[CopyKey, str] = {}
        # Every job a decision about its copies named; a pending job has its ref in its JobSubmitted.
        self.refs: dict[str, ev.JobRef] = {}
        self._keys: dict[str, list[CopyKey]] = {}  # uid -> its copies
        self._ended: set[str] = set()  # finished or deleted: its spec goes once no copy may run
        self.submitted: set[str] = set()  # every uid a JobSubmitted named (kept after its spec goes)
        self.clusters: dict[str, int] = {}  # registered cluster -> seq of its registration
        self.draining: dict[str, int] = {}  # cluster -> seq of the entry that gave it the drain taint
        self.capacity: dict[str, ev.Resources] = {}  # cluster -> its capacity as the log has it
        self.queues: ev.QueuesConfigured | None = None  # the latest queue config (for the watcher's backfill)
        self.seq = 0
        # Deleted jobs in the order of deletion, (at ms, uid): forgotten after the core's period,
        # see ``_retire``, so a long-running actuator does not keep every job it ever saw.
        self._deleted: deque[tuple[int, str]] = deque()

    def fold(self, entry: ev.LogEntry) -> list[CopyKey]:
        """Fold one entry; returns the copies whose intent changed (to be applied)."""
        self.seq = entry.seq
        event = entry.event
        if self._deleted and self._deleted[0][0] + RETIRE_DELETED_AFTER_MS <= entry.at_ms:
            self._retire(entry.at_ms)
        if type(event) not in _FOLDED:
            return []
        if isinstance(event, _COPY_DECISIONS):
            self.refs[event.job.uid] = event.job
        match event:
            case ev.QueuesConfigured():
                self.queues = event
            case ev.JobSubmitted():
                self.submitted.add(event.job.uid)
                self.jobs[event.job.uid] = entry.seq
            case ev.JobUpdated():
                was = self.sources(event.job.uid)
                if was is not None:
                    seq = entry.seq
                    self.jobs[event.job.uid] = JobSources(
                        was.submitted,
                        seq,
                        was.priority if event.priority is None else seq,
                        was.manifest if event.manifest is None else seq,
                    )
            case ev.Nominated():
                uid = event.job.uid
                if event.attempt > self.latest_attempt.get(uid, 0):
                    self.latest_attempt[uid] = event.attempt
                keys = [(uid, c, event.attempt) for c in event.clusters]
                return [k for k in keys if self._set(k, Intent.RUN)]
            case ev.Withdrawn() | ev.CleanUp():
                key = (event.job.uid, event.cluster, event.attempt)
                changed = self._set(key, Intent.GONE)
                self._drop_spec_if_done(event.job.uid)
                return [key] if changed else []
            case ev.ClusterRegistered() | ev.ClusterUpdated():
                if isinstance(event, ev.ClusterRegistered):
                    self.clusters[event.cluster] = entry.seq
                self.capacity[event.cluster] = event.capacity
                if any(t.key == DRAINING_TAINT for t in event.taints):
                    self.draining.setdefault(event.cluster, entry.seq)
                else:
                    self.draining.pop(event.cluster, None)
            case ev.ClusterRemoved():
                self.clusters.pop(event.cluster, None)
                self.draining.pop(event.cluster, None)
                self.capacity.pop(event.cluster, None)
            case ev.JobDeleted():
                self._ended.add(event.job.uid)
                self._drop_spec_if_done(event.job.uid)
                self._deleted.append((entry.at_ms, event.job.uid))
            case ev.Evict():
                key = (event.job.uid, event.cluster, event.attempt)
                self.evict_reason[key] = event.reason
                return [key] if self._set(key, Intent.EVICT) else []
            case ev.Finished():
                self._set((event.job.uid, event.cluster, event.attempt), Intent.FINISHED)
                self._ended.add(event.job.uid)
            case ev.Placed():
                self.placed[event.job.uid] = (event.cluster, event.attempt)
            case ev.QueuesConfigured():
                self.queues = event
            case _:
                pass
        return []

    def _set(self, key: CopyKey, intent: Intent) -> bool:
        old = self.intents.get(key)
        if old is intent or old is Intent.GONE:
            return False  # GONE is final: a late duplicate never brings a copy back
        if old is Intent.FINISHED and intent is not Intent.GONE:
            return False
        if old is None:
            self._keys.setdefault(key[0], []).append(key)
        self.intents[key] = intent
        return True

    def _drop_spec_if_done(self, uid: str) -> None:
        """Forget an ended job's sources once none of its copies may still be created; the small
        per-copy intents stay for the GC."""
        if uid not in self._ended:
            return
        if all(self.intents.get(k) in (Intent.GONE, Intent.FINISHED) for k in self._keys.get(uid, ())):
            self.jobs.pop(uid, None)
            self._ended.discard(uid)

    def _retire(self, now_ms: int) -> None:
        """Forget jobs deleted a period ago whose copies are all gone (one with a copy still
        wanted waits another period). A copy of a forgotten job found on a worker later is
        unknown, and collected like any unknown copy once past the grace period."""
        deleted = self._deleted
        while deleted and deleted[0][0] + RETIRE_DELETED_AFTER_MS <= now_ms:
            _, uid = deleted.popleft()
            keys = self._keys.get(uid, [])
            if any(self.intents.get(k) is not Intent.GONE for k in keys):
                deleted.append((now_ms, uid))
                continue
            for k in keys:
                self.intents.pop(k, None)
                self.evict_reason.pop(k, None)
            self._keys.pop(uid, None)
            self.latest_attempt.pop(uid, None)
            self.placed.pop(uid, None)
            self.refs.pop(uid, None)
            self.submitted.discard(uid)
            self.jobs.pop(uid, None)
            self._ended.discard(uid)

    def intent(self, key: CopyKey) -> Intent | None:
        return self.intents.get(key)

    def wanted(self, job_uid: str, cluster: str, attempt: int) -> bool:
        """Should this copy exist? (Finished copies too, until CleanUp.)"""
        return self.intents.get((job_uid, cluster, attempt)) in (Intent.RUN, Intent.FINISHED)

    def collectable(self, *, job_uid: str, cluster: str, attempt: int, age_ms: int, grace_ms: int) -> bool:
        """May the garbage collector delete this copy found on ``cluster``?

        Yes when the log says it is gone, or it belongs to an older attempt than the latest one
        nominated. A copy the log does not know at all is collected only once it is older than
        ``grace_ms``: another actuator may have created it from an entry we have not read yet.
        """
        intent = self.intents.get((job_uid, cluster, attempt))
        if intent is Intent.GONE:
            return True
        if intent is not None:
            return False
        latest = self.latest_attempt.get(job_uid)
        if latest is not None and attempt < latest:
            return True
        return age_ms > grace_ms

    def sources(self, job_uid: str) -> JobSources | None:
        """Where the log has the job's spec; None once no copy of it may be created."""
        at = self.jobs.get(job_uid)
        return JobSources(at, at, at, at) if isinstance(at, int) else at

    def live_on(self, cluster: str) -> int:
        """Copies on ``cluster`` that should exist, or be stopped (a drain waits for none)."""
        return sum(1 for k, i in self.intents.items() if k[1] == cluster and i is not Intent.GONE)

    def active(self) -> list[CopyKey]:
        """Copies that should exist or be stopped (what a restarted actuator re-applies)."""
        return [k for k, i in self.intents.items() if i in (Intent.RUN, Intent.EVICT)]
