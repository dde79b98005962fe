"""Wasted placements: jobs sent to a worker that could not start them within the round timeout.

Read off the log like every other figure. Each (job, cluster, attempt) a job is ``Nominated`` to
is a placement; it is **wasted** when the worker has not admitted that copy (``RemoteAdmitted``)
within the profile's round timeout of the nomination while the copy was still wanted there: it was
withdrawn at or after the timeout (TopK and Incremental withdraw at it), or was still waiting at
the end of the run that long after. A copy withdrawn earlier (another copy won the race, the user
deleted the job, a preemption) is not counted: nothing says that worker could not have started it.
AllAtOnce's rounds never time out; its copies are judged by the same clock (the profile's
``round_timeout_ms``), so the profiles compare.

``wasted_placements`` in results.json: ``count`` (jobs with at least one wasted placement),
``share_pct`` (of the jobs nominated at least once), ``copies`` (wasted placements) and
``jobs_sent``.
"""

from __future__ import annotations

from typing import Any

from eventlog import events as ev

CopyKey = tuple[str, str, int]  # (job uid, cluster, attempt)


class WastedPlacements:
    def __init__(self, *, round_timeout_ms: int) -> None:
        self.round_timeout_ms = round_timeout_ms
        self._open: dict[CopyKey, int] = {}  # nominated, not yet admitted nor let go -> when nominated
        self._by_job: dict[str, set[CopyKey]] = {}
        self.sent: set[str] = set()
        self.wasted_jobs: set[str] = set()
        self.wasted_copies = 0
        self.last_ms = 0

    def observe(self, entry: ev.LogEntry) -> None:
        self.last_ms = entry.at_ms
        match entry.event:
            case ev.Nominated(job=job, clusters=clusters, attempt=attempt):
                self.sent.add(job.uid)
                keys = self._by_job.setdefault(job.uid, set())
                for cluster in clusters:
                    key = (job.uid, cluster, attempt)
                    if key not in self._open:
                        self._open[key] = entry.at_ms
                        keys.add(key)
            case ev.RemoteAdmitted(job=job, cluster=cluster, attempt=attempt):
                self._close((job.uid, cluster, attempt), entry.at_ms, started=True)
            case (
                ev.Withdrawn(job=job, cluster=cluster, attempt=attempt)
                | ev.Evict(job=job, cluster=cluster, attempt=attempt)
                | ev.CleanUp(job=job, cluster=cluster, attempt=attempt)
                | ev.RemoteRejected(job=job, cluster=cluster, attempt=attempt)
            ):
                self._close((job.uid, cluster, attempt), entry.at_ms, started=False)
            case ev.JobDeleted(job=job):
                for key in sorted(self._by_job.get(job.uid, ())):
                    self._close(key, entry.at_ms, started=False)
            case _:
                pass

    def _close(self, key: CopyKey, at_ms: int, *, started: bool) -> None:
        since = self._open.pop(key, None)
        if since is None:
            return
        self._by_job[key[0]].discard(key)
        waited = at_ms - since
        if waited > self.round_timeout_ms or (not started and waited >= self.round_timeout_ms):
            self.wasted_copies += 1
            self.wasted_jobs.add(key[0])

    def results(self) -> dict[str, Any]:
        """The figures, counting copies still waiting at the end as of the last entry."""
        copies, jobs = self.wasted_copies, set(self.wasted_jobs)
        for (uid, _, _), since in self._open.items():
            if self.last_ms - since >= self.round_timeout_ms:
                copies += 1
                jobs.add(uid)
        sent = len(self.sent)
        return {
            "count": len(jobs),
            "share_pct": round(100 * len(jobs) / sent, 2) if sent else None,
            "copies": copies,
            "jobs_sent": sent,
            "round_timeout_s": self.round_timeout_ms / 1000,
        }
