"""A job as one decide pass has changed it so far.

Every decision about a job goes through a ``Draft`` method that emits the event and applies it
to the draft with the same ``transitions`` fold will use, so the rest of the pass sees the job
(and, through the scratch, the clusters) as they will be once the batch is folded. That is what
makes ``decide`` reach its fixpoint in one pass.

A draft's lifecycle fields are fold's, with one reading of decide's own: a round that timed out
(or was left with nothing open by a batch cut short) is waiting again (``phase`` Queued,
``timed_out``) although fold keeps it Nominated until the pass nominates or requeues it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from eventlog import events as ev
from reconciler.core import phases, transitions
from reconciler.core.jobs import Copy, JobRecord, find_copy
from reconciler.core.queues.admit import Wait
from reconciler.core.scratch import Scratch


@dataclass(slots=True)  # one per job a pass looks at: no __dict__ each
class Draft:
    job: JobRecord
    attempt: int
    phase: str
    nominated: tuple[str, ...]
    tried: tuple[str, ...]
    cluster: str | None
    winner: str | None
    not_before_ms: int | None
    round: int
    copies: list[Copy]  # copies of the record's, changed as fold will change them
    requeued: bool = False
    timed_out: bool = False
    # Only here because capacity came free somewhere: skip it unless it could fit there.
    capacity_only: bool = False
    notes: list[str] = field(default_factory=list)
    queue_wait: Wait | None = None  # tenancy: why its queue does not admit it in this pass
    # Tenancy: the clusters it passed every filter on when its queue turned it down, with the
    # scratch's tick and claim changes then (``Scratch.still_fits``).
    seen_feasible: tuple[npt.NDArray[np.intp], int, int] | None = None

    @staticmethod
    def of(job: JobRecord, *, capacity_only: bool = False) -> Draft:
        return Draft(
            capacity_only=capacity_only,
            job=job,
            attempt=job.attempt,
            phase=job.phase,
            nominated=job.nominated,  # (tuples: transitions replace them, never edit them)
            tried=job.tried,
            cluster=job.cluster,
            winner=job.winner,
            not_before_ms=job.not_before_ms,
            round=job.round,
            copies=[Copy(cluster=c.cluster, attempt=c.attempt, state=c.state, counted=c.counted) for c in job.copies]
            if job.copies
            else [],  # (most jobs a pass looks at wait, with no copy)
        )

    @property
    def suspended(self) -> bool:
        return self.job.suspended

    @property
    def terminal(self) -> bool:
        return self.phase in phases.TERMINAL

    @property
    def admitted_on(self) -> str | None:
        """The cluster that admitted the current round's copy first (a withdrawn one is forgotten)."""
        return self.winner

    def copy(self, cluster: str, attempt: int) -> Copy | None:
        return find_copy(self.copies, cluster, attempt)

    # ---- decisions: emitted, then applied as fold will ----------------------------------------

    def _apply(self, s: Scratch, event: ev.DecisionEvent) -> None:
        s.emit(event)
        books = s.books
        if not isinstance(books, _Books):  # (one per pass, not one per decision)
            books = s.books = _Books(s)
        transitions.apply(self, event, books)

    def withdraw(self, s: Scratch, *, cluster: str, attempt: int, reason: str) -> None:
        if self.terminal:
            self._apply(s, ev.CleanUp(job=self.job.ref, cluster=cluster, attempt=attempt))
        else:
            self._apply(s, ev.Withdrawn(job=self.job.ref, cluster=cluster, attempt=attempt, reason=reason))

    def requeue(
        self, s: Scratch, *, reason: ev.RequeueReason, cluster: str | None, backoff: bool, message: str = ""
    ) -> None:
        not_before = s.now + s.state.requeue_backoff_ms if backoff else None
        self._apply(
            s, ev.Requeued(job=self.job.ref, reason=reason, cluster=cluster, not_before_ms=not_before, message=message)
        )
        self.requeued = True

    def place(self, s: Scratch, cluster: str) -> None:
        others = [c for c in self.nominated if c != cluster]
        self._apply(s, ev.Placed(job=self.job.ref, cluster=cluster, attempt=self.attempt))
        for other in others:
            self.withdraw(s, cluster=other, attempt=self.attempt, reason=f"admitted on {cluster}")

    def finish(self, s: Scratch, *, cluster: str, attempt: int, succeeded: bool) -> None:
        self._apply(s, ev.Finished(job=self.job.ref, cluster=cluster, attempt=attempt, succeeded=succeeded))

    def nominate(
        self, s: Scratch, *, clusters: list[str], deadline_ms: int | None, flavors: dict[str, str] | None = None
    ) -> None:
        round_ = self.round + 1 if self.timed_out else self.round
        self._apply(
            s,
            ev.Nominated(
                job=self.job.ref,
                clusters=clusters,
                attempt=self.attempt,
                round=round_,
                deadline_ms=deadline_ms,
                flavors=flavors or {},
            ),
        )

    def unschedulable(self, s: Scratch, *, reasons: dict[str, int], message: str) -> None:
        self._apply(s, ev.Unschedulable(job=self.job.ref, reasons=reasons, message=message))


@dataclass(slots=True)
class _Books:
    """The scratch as ``transitions.Books``: what the pass's decisions do to capacity, the
    running set and claims, as fold will do it to the state."""

    s: Scratch

    def health(self, cluster: str) -> str:
        return self.s.health(cluster)

    def nominated_hold(self, job: Draft) -> str:
        return self.s.state.nominated_hold(job.job)

    def count(self, job: Draft, copy: Copy) -> None:
        if not copy.counted and copy.cluster in self.s.state.clusters.index:
            self.s.assume(copy.cluster, job.job.demand)
            copy.counted = True
            self.s.copy_counted(job.job, copy)

    def uncount(self, job: Draft, copy: Copy) -> None:
        if copy.counted:
            copy.counted = False
            self.s.release(copy.cluster, job.job.demand)
            self.s.copy_done(job.job, copy.cluster, copy.attempt)

    def add_copy(self, job: Draft, *, cluster: str, attempt: int, state: str) -> Copy:
        copy = job.copy(cluster, attempt)
        if copy is None:
            copy = Copy(cluster=cluster, attempt=attempt, state=state)
            job.copies.append(copy)
        else:
            copy.state = state
        return copy

    def drop_copy(self, job: Draft, copy: Copy) -> None:
        self.uncount(job, copy)
        job.copies.remove(copy)

    def set_phase(self, job: Draft, phase: str) -> None:
        job.phase = phase
        if phase not in phases.CHARGED:
            self.s.release_quota(job.job)

    def charge(self, job: Draft, flavors: dict[str, str]) -> None:
        self.s.charge_quota(job.job, flavors)

    def started(self, job: Draft, cluster: str) -> None:
        s = self.s
        s.placed_now[job.job.key] = cluster
        s.placed_low = job.job.priority if s.placed_low is None else min(s.placed_low, job.job.priority)

    def stopped(self, job: Draft) -> None:
        self.s.gone(job.job.key)

    def claim_used(self, job: Draft) -> None:
        self.s.drop_claim(job.job.key, expired=False)

    def wake(self, job: Draft, at_ms: int | None) -> None:
        pass  # the pass is one instant: timers are fold's
