"""How long a job is expected to run, learned from the log.

In order of trust:

1. the ``kdispatch.io/expected-duration`` annotation on the submitted object (the user's guess,
   Go duration syntax: ``"2h"``, ``"45m"``);
2. its ``spec.activeDeadlineSeconds`` (Kubernetes kills it then: an upper bound, but the only one
   the user gave);
3. the median run time (``Placed`` to ``Finished``) of the last ``window`` finished jobs of its
   queue (``JobSubmitted.cluster_queue``, else ``queue``, else ``default``);
4. ``default_ms`` (30 min) for a queue that has finished nothing yet.

The simulated-runtime hint (``JobSubmitted.runtime_ms``) is never read: it is what a simulated
worker will do, so an estimate using it would measure nothing.

Also learned: each cluster's median latency from nomination to admission, which a forecast's
simulated workers wait before admitting.
"""

from __future__ import annotations

import statistics
import sys
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eventlog import events as ev
from eventlog.kube.duration import DurationError, parse_duration_ms
from eventlog.kube.names import EXPECTED_DURATION_ANNOTATION

DEFAULT_RUNTIME_MS = 30 * 60_000
DEFAULT_QUEUE = "default"
WINDOW = 200  # finished jobs per queue (and admissions per cluster) the medians are taken over


def expected_runtime_ms(manifest: Mapping[str, Any] | None) -> int | None:
    """What the object itself says: the annotation, else ``activeDeadlineSeconds``; None if
    neither (or neither is readable: a bad value is the webhook's to refuse, not ours)."""
    if not isinstance(manifest, Mapping):
        return None
    meta = manifest.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if isinstance(annotations, Mapping):
        raw = annotations.get(EXPECTED_DURATION_ANNOTATION)
        if isinstance(raw, str):
            try:
                return parse_duration_ms(raw)
            except DurationError:
                pass
    spec = manifest.get("spec")
    deadline = spec.get("activeDeadlineSeconds") if isinstance(spec, Mapping) else None
    if isinstance(deadline, int) and not isinstance(deadline, bool) and deadline > 0:
        return deadline * 1000
    return None


@dataclass(frozen=True)
class Durations:
    """What a forecast needs to know, frozen at one point of the log."""

    by_job: Mapping[str, int] = field(default_factory=dict)  # job key -> the object's own expectation
    queue_of: Mapping[str, str] = field(default_factory=dict)  # job key -> queue
    by_queue: Mapping[str, int] = field(default_factory=dict)  # queue -> median run time
    admission_latency_ms: Mapping[str, int] = field(default_factory=dict)  # cluster -> median
    default_ms: int = DEFAULT_RUNTIME_MS

    def runtime_ms(self, key: str) -> int:
        own = self.by_job.get(key)
        if own is not None:
            return own
        return self.by_queue.get(self.queue_of.get(key, DEFAULT_QUEUE), self.default_ms)


def _median(samples: deque[int]) -> int:
    return int(statistics.median(samples))


# The events ``DurationLearner.observe`` learns from; a follower of the whole log passes the others
# over without the call (most entries: a worker's RemoteCreated, heartbeats, ...).
LEARNED = frozenset(
    {
        ev.JobSubmitted,
        ev.JobUpdated,
        ev.Nominated,
        ev.RemoteAdmitted,
        ev.Placed,
        ev.Requeued,
        ev.Finished,
        ev.JobDeleted,
    }
)


@dataclass
class DurationLearner:
    """Folds log entries; ``durations()`` is what they taught so far. Bounded memory: per job only
    while it exists, per queue and cluster the last ``window`` samples."""

    default_ms: int = DEFAULT_RUNTIME_MS
    window: int = WINDOW
    by_job: dict[str, int] = field(default_factory=dict)
    queue_of: dict[str, str] = field(default_factory=dict)
    runs: dict[str, deque[int]] = field(default_factory=dict)  # queue -> recent run times
    latencies: dict[str, deque[int]] = field(default_factory=dict)  # cluster -> recent latencies
    _placed: dict[str, int] = field(default_factory=dict)  # job key -> Placed at
    _nominated: dict[str, dict[tuple[str, int], int]] = field(
        default_factory=dict
    )  # key -> (cluster, attempt) -> at

    def observe(self, entry: ev.LogEntry) -> None:
        e, at = entry.event, entry.at_ms
        match e:
            case ev.JobSubmitted(job=ref):
                key = _key(ref)
                # Interned: kept per job, and most jobs share a handful of queues.
                self.queue_of[key] = sys.intern(e.cluster_queue or e.queue or DEFAULT_QUEUE)
                self._expect(key, e.manifest)
            case ev.JobUpdated(job=ref) if e.manifest is not None:
                self._expect(_key(ref), e.manifest)
            case ev.Nominated(job=ref, clusters=clusters, attempt=attempt):
                open_ = self._nominated.setdefault(_key(ref), {})
                for cluster in clusters:
                    open_.setdefault((cluster, attempt), at)
            case ev.RemoteAdmitted(job=ref, cluster=cluster, attempt=attempt):
                since = self._nominated.get(_key(ref), {}).pop((cluster, attempt), None)
                if since is not None:
                    self._sample(self.latencies, cluster, at - since)
            case ev.Placed(job=ref):
                key = _key(ref)
                self._placed[key] = at
                self._nominated.pop(key, None)
            case ev.Requeued(job=ref):
                self._placed.pop(_key(ref), None)
                self._nominated.pop(_key(ref), None)
            case ev.Finished(job=ref):
                key = _key(ref)
                since = self._placed.pop(key, None)
                if since is not None:
                    self._sample(self.runs, self.queue_of.get(key, DEFAULT_QUEUE), at - since)
            case ev.JobDeleted(job=ref):
                key = _key(ref)
                self.by_job.pop(key, None)
                self.queue_of.pop(key, None)
                self._placed.pop(key, None)
                self._nominated.pop(key, None)
            case _:
                pass

    def durations(self) -> Durations:
        return Durations(
            by_job=dict(self.by_job),
            queue_of=dict(self.queue_of),
            by_queue={q: _median(s) for q, s in sorted(self.runs.items()) if s},
            admission_latency_ms={c: _median(s) for c, s in sorted(self.latencies.items()) if s},
            default_ms=self.default_ms,
        )

    def _expect(self, key: str, manifest: Mapping[str, Any] | None) -> None:
        own = expected_runtime_ms(manifest)
        if own is None:
            self.by_job.pop(key, None)
        else:
            self.by_job[key] = own

    def _sample(self, table: dict[str, deque[int]], name: str, value: int) -> None:
        table.setdefault(name, deque(maxlen=self.window)).append(max(value, 0))


def _key(ref: ev.JobRef) -> str:
    return f"{ref.namespace}/{ref.name}"
