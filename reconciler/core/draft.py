"""A job as one decide pass has changed it so far.

Every decision about a job goes through a ``Draft`` method that emits the event and mirrors what
``fold`` will do with it (phase, attempt, nominations, copies, released capacity), so the rest of
the pass sees the job and the clusters as they will be once the batch is folded. That mirroring
is what makes ``decide`` reach its fixpoint in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eventlog import events as ev
from reconciler.core import phases
from reconciler.core.clusters import LOST, REMOVED
from reconciler.core.jobs import JobRecord
from reconciler.core.scratch import Scratch


@dataclass
class CopyView:
    state: str
    counted: bool


@dataclass
class Draft:
    job: JobRecord
    attempt: int
    phase: str
    nominated: list[str]
    tried: list[str]
    cluster: str | None
    winner: str | None
    not_before_ms: int | None
    round: int
    copies: dict[tuple[str, int], CopyView]  # (cluster, attempt) -> what fold will hold
    requeued: bool = False
    timed_out: bool = False
    # Only here because capacity came free somewhere: skip it unless it could fit there.
    capacity_only: bool = False
    notes: list[str] = field(default_factory=list)

    @staticmethod
    def of(job: JobRecord, *, capacity_only: bool = False) -> Draft:
        return Draft(
            capacity_only=capacity_only,
            job=job,
            attempt=job.attempt,
            phase=job.phase,
            nominated=list(job.nominated),
            tried=list(job.tried),
            cluster=job.cluster,
            winner=job.winner,
            not_before_ms=job.not_before_ms,
            round=job.round,
            copies={(c.cluster, c.attempt): CopyView(c.state, c.counted) for c in job.copies},
        )

    @property
    def terminal(self) -> bool:
        return self.phase in phases.TERMINAL

    # ---- decisions, mirrored ----------------------------------------------------------------

    def _uncount(self, s: Scratch, key: tuple[str, int]) -> None:
        entry = self.copies.get(key)
        if entry is not None and entry.counted:
            entry.counted = False
            s.release(key[0], self.job.demand)

    def withdraw(self, s: Scratch, *, cluster: str, attempt: int, reason: str) -> None:
        if self.terminal:
            s.emit(ev.CleanUp(job=self.job.ref, cluster=cluster, attempt=attempt))
        else:
            s.emit(ev.Withdrawn(job=self.job.ref, cluster=cluster, attempt=attempt, reason=reason))
        key = (cluster, attempt)
        if self.terminal or (attempt == self.attempt and cluster == self.cluster):
            s.gone(self.job.key)
        self._uncount(s, key)
        if key in self.copies:
            self.copies[key].state = phases.COPY_WITHDRAWING
        if attempt == self.attempt and cluster in self.nominated:
            self.nominated.remove(cluster)
            if cluster not in self.tried:
                self.tried.append(cluster)
        if attempt == self.attempt and self.cluster == cluster and not self.terminal:
            self.cluster = None

    def requeue(
        self, s: Scratch, *, reason: ev.RequeueReason, cluster: str | None, backoff: bool, message: str = ""
    ) -> None:
        not_before = s.now + s.state.requeue_backoff_ms if backoff else None
        s.emit(ev.Requeued(job=self.job.ref, reason=reason, cluster=cluster, not_before_ms=not_before, message=message))
        table = s.state.clusters
        for key, entry in self.copies.items():
            if key[1] != self.attempt:
                continue
            self._uncount(s, key)
            slot = table.index.get(key[0])
            health = table.records[slot].health if slot is not None else REMOVED
            if health == LOST and entry.state != phases.COPY_WITHDRAWING:
                entry.state = phases.COPY_STALE
        self.attempt += 1
        self.round = 0
        self.nominated = []
        self.tried = []
        self.cluster = None
        self.winner = None
        self.not_before_ms = not_before
        self.requeued = True
        s.gone(self.job.key)
        self.phase = phases.SUSPENDED if self.job.suspended else phases.QUEUED

    def place(self, s: Scratch, cluster: str) -> None:
        s.emit(ev.Placed(job=self.job.ref, cluster=cluster, attempt=self.attempt))
        s.placed_now[self.job.key] = cluster
        s.placed_low = self.job.priority if s.placed_low is None else min(s.placed_low, self.job.priority)
        self.cluster = cluster
        self.winner = None
        self.phase = phases.PLACED
        for other in [c for c in self.nominated if c != cluster]:
            self.withdraw(s, cluster=other, attempt=self.attempt, reason=f"admitted on {cluster}")
        self.nominated = [cluster]

    def finish(self, s: Scratch, *, cluster: str, attempt: int, succeeded: bool) -> None:
        s.emit(ev.Finished(job=self.job.ref, cluster=cluster, attempt=attempt, succeeded=succeeded))
        for key in self.copies:
            self._uncount(s, key)
            if key == (cluster, attempt) and self.copies[key].state != phases.COPY_WITHDRAWING:
                self.copies[key].state = phases.COPY_DONE
        self.phase = phases.FINISHED
        s.gone(self.job.key)
        self.cluster = cluster
        self.nominated = []
        self.winner = None

    def nominate(self, s: Scratch, *, clusters: list[str], deadline_ms: int | None) -> None:
        round_ = self.round + 1 if self.timed_out else self.round
        s.emit(
            ev.Nominated(job=self.job.ref, clusters=clusters, attempt=self.attempt, round=round_, deadline_ms=deadline_ms)
        )
        for cluster in clusters:
            key = (cluster, self.attempt)
            if key not in self.copies or not self.copies[key].counted:
                s.assume(cluster, self.job.demand)
            self.copies[key] = CopyView(phases.COPY_NOMINATED, True)
        self.nominated = list(clusters)
        self.round = round_
        self.phase = phases.NOMINATED
        s.drop_claim(self.job.key, expired=False)
