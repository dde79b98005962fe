"""The job lifecycle, written once: how each event moves one job, phase by phase.

``fold`` applies every event that names a job to that job's record. A ``decide`` pass applies
each decision it emits to its ``Draft`` of the job, so the rest of the pass sees the job as fold
will once the batch is folded (that is what lets decide reach its fixpoint in one pass). Both go
through ``apply`` and ``TABLE`` below, so the two can no longer drift apart.

A transition moves the job's *lifecycle*: the fields a decide pass reads back after its own
decisions (``Line``). What else a job record keeps (worker reports, deadlines, reasons, counters)
is fold's record and stays in fold. What a transition touches outside the job (capacity its
copies hold, the running pool, claims, timers) goes through ``Books``: the state when folding,
the pass's scratch when deciding.

``TABLE`` has an entry for every event type: either a ``JobEvent`` with, for every phase, the
step to take or the reason nothing happens, or a ``NotAJobEvent``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol, TypeVar

from eventlog import events as ev
from reconciler.core import phases
from reconciler.core.clusters import LOST, REMOVED
from reconciler.core.jobs import Copy, JobRecord


class Line(Protocol):
    """A job's lifecycle: a ``JobRecord`` (fold) or a ``Draft`` of one (decide)."""

    phase: str
    attempt: int
    round: int
    nominated: tuple[str, ...]  # open nominations of this round (replaced, never edited)
    tried: tuple[str, ...]  # clusters of earlier rounds of this attempt (replaced, never edited)
    cluster: str | None  # placed (or finished) here
    winner: str | None  # first cluster to admit (or create, BestEffort) this attempt
    not_before_ms: int | None

    @property
    def copies(self) -> Sequence[Copy]: ...  # changed through ``Books`` (add_copy, drop_copy)

    @property
    def suspended(self) -> bool: ...

    def copy(self, cluster: str, attempt: int) -> Copy | None: ...


J = TypeVar("J", bound=Line)
J_contra = TypeVar("J_contra", bound=Line, contravariant=True)


class Books(Protocol[J_contra]):
    """What a transition touches outside the job itself."""

    def health(self, cluster: str) -> str:
        """READY, LOST or REMOVED, as of this event (a cluster never registered: REMOVED)."""
        ...

    def nominated_hold(self, job: J_contra) -> str:
        """What the job's profile says a nominated copy holds: "all", "best" or "none"."""
        ...

    def count(self, job: J_contra, copy: Copy) -> None:
        """The copy's demand now holds capacity on its cluster (no-op if it already does)."""
        ...

    def uncount(self, job: J_contra, copy: Copy) -> None:
        """The copy no longer holds capacity (no-op if it did not)."""
        ...

    def add_copy(self, job: J_contra, *, cluster: str, attempt: int, state: str) -> Copy:
        """The copy of (cluster, attempt), created if new, in ``state``."""
        ...

    def drop_copy(self, job: J_contra, copy: Copy) -> None: ...

    def set_phase(self, job: J_contra, phase: str) -> None: ...

    def started(self, job: J_contra, cluster: str) -> None:
        """The job runs on ``cluster`` from now on."""
        ...

    def stopped(self, job: J_contra) -> None:
        """The job runs nowhere any more (no-op if it did not run)."""
        ...

    def charge(self, job: J_contra, flavors: dict[str, str]) -> None:
        """The job holds its queue's quota in these flavors (tenancy; replaces a held charge).
        Leaving the nominated and placed phases (``set_phase``) releases it."""
        ...

    def claim_used(self, job: J_contra) -> None:
        """The job was nominated: its preemption claim, if any, has served its purpose."""
        ...

    def wake(self, job: J_contra, at_ms: int | None) -> None:
        """Have decide look at the job again at ``at_ms`` (None: no timer)."""
        ...


Step = Callable[[Any, Any, Any], bool]
"""``step(job, event, books)``: apply the event; True if it is news ``decide`` must look at."""


@dataclass(frozen=True)
class Ignored:
    """Nothing happens to the job, or its record, in this phase."""

    why: str


@dataclass(frozen=True)
class Noted:
    """The lifecycle does not move; fold notes the event in the job's record."""

    why: str


Outcome = Step | Ignored | Noted


@dataclass(frozen=True)
class JobEvent:
    job: Callable[[Any], ev.JobRef]  # which job the event is about
    phases: Mapping[str, Outcome]  # every phase


@dataclass(frozen=True)
class NotAJobEvent:
    why: str


Entry = JobEvent | NotAJobEvent


def apply(job: J, event: ev.Event, books: Books[J]) -> bool:
    """Apply one event to the job it names; True if it is news for ``decide``."""
    steps = _STEPS.get(type(event))
    if steps is None:
        _not_about_a_job(event)
    step = steps[job.phase]
    return False if step is None else step(job, event, books)


def outcome_of(phase: str, event: ev.Event) -> Outcome:
    entry = TABLE[type(event)]
    if not isinstance(entry, JobEvent):
        _not_about_a_job(event)
    return entry.phases[phase]


def _not_about_a_job(event: ev.Event) -> NoReturn:
    entry = TABLE[type(event)]
    why = entry.why if isinstance(entry, NotAJobEvent) else "?"
    raise TypeError(f"{type(event).__name__} is not about a job: {why}")


def ignores(phase: str, event: ev.Event) -> bool:
    """Whether the event leaves a job in ``phase`` (lifecycle and record) alone."""
    return isinstance(outcome_of(phase, event), Ignored)


# ---- decisions -----------------------------------------------------------------------------
# The leader decided each against the state it is folded into, so every decision applies as
# written, in whatever phase the job is.


def _nominated(job: J, e: ev.Nominated, books: Books[J]) -> bool:
    job.attempt = e.attempt
    job.round = e.round
    job.nominated = tuple(e.clusters)
    job.winner = None
    job.not_before_ms = None
    # Until one admits, a copy holds its job's demand on its cluster as assumed usage (so the
    # headroom filter turns other jobs away there) on every nominated cluster ("all"), on the
    # first one only, ranked best by the decision ("best"), or nowhere ("none"). An admitted
    # copy always holds (``_placed``).
    hold = books.nominated_hold(job)
    for i, cluster in enumerate(e.clusters):
        copy = books.add_copy(job, cluster=cluster, attempt=e.attempt, state=phases.COPY_NOMINATED)
        if hold == "all" or (hold == "best" and i == 0):
            books.count(job, copy)
    books.charge(job, dict(e.flavors))
    books.claim_used(job)
    books.set_phase(job, phases.NOMINATED)
    books.wake(job, e.deadline_ms)  # the round times out
    return False


def _placed(job: J, e: ev.Placed, books: Books[J]) -> bool:
    job.cluster = e.cluster
    job.winner = None
    # The other nominations are withdrawn by decisions of their own; they no longer count as
    # open (nor, having never been admitted, as tried).
    job.nominated = tuple([c for c in job.nominated if c == e.cluster])
    copy = job.copy(e.cluster, e.attempt)
    if copy is not None:
        copy.state = phases.COPY_ADMITTED
        books.count(job, copy)
    books.set_phase(job, phases.PLACED)
    books.started(job, e.cluster)
    return False


def _withdraw_copy(job: J, e: ev.Withdrawn | ev.CleanUp, books: Books[J]) -> None:
    copy = job.copy(e.cluster, e.attempt)
    if copy is not None:
        books.uncount(job, copy)
        copy.state = phases.COPY_WITHDRAWING  # until the worker says it is gone
    if e.attempt == job.attempt and e.cluster in job.nominated:
        i = job.nominated.index(e.cluster)  # (the first, as list.remove did)
        job.nominated = job.nominated[:i] + job.nominated[i + 1 :]
        if e.cluster not in job.tried:
            job.tried = (*job.tried, e.cluster)
    if e.attempt == job.attempt and job.winner == e.cluster and job.cluster != e.cluster:
        # A winner withdrawn before placement (rejected, evicted, its cluster lost) no longer
        # holds the round: another cluster may still win it, and the round can time out.
        job.winner = None


def _withdrawn(job: J, e: ev.Withdrawn, books: Books[J]) -> bool:
    _withdraw_copy(job, e, books)
    if e.attempt == job.attempt and job.cluster == e.cluster:
        job.cluster = None
        books.stopped(job)
    return False


def _cleaned_up(job: J, e: ev.CleanUp, books: Books[J]) -> bool:
    _withdraw_copy(job, e, books)
    books.stopped(job)  # the job ended: none of its copies runs for it any more
    return False


def _unschedulable(job: J, e: ev.Unschedulable, books: Books[J]) -> bool:
    books.set_phase(job, phases.UNSCHEDULABLE)
    return False


def _requeued(job: J, e: ev.Requeued, books: Books[J]) -> bool:
    for copy in list(job.copies):
        if copy.attempt != job.attempt:
            continue
        books.uncount(job, copy)
        health = books.health(copy.cluster)
        if health == REMOVED:
            books.drop_copy(job, copy)
        elif health == LOST and copy.state != phases.COPY_WITHDRAWING:
            copy.state = phases.COPY_STALE  # withdrawn once its cluster is back
    job.attempt += 1
    job.round = 0
    job.nominated = ()
    job.tried = ()
    job.winner = None
    job.cluster = None
    job.not_before_ms = e.not_before_ms
    books.stopped(job)
    books.set_phase(job, phases.SUSPENDED if job.suspended else phases.QUEUED)
    books.wake(job, e.not_before_ms)  # the back-off ends
    return False


def _finished(job: J, e: ev.Finished, books: Books[J]) -> bool:
    copy = job.copy(e.cluster, e.attempt)
    if copy is not None:
        books.uncount(job, copy)
        if copy.state != phases.COPY_WITHDRAWING:
            copy.state = phases.COPY_DONE
    for other in job.copies:
        books.uncount(job, other)
    job.cluster = e.cluster
    job.nominated = ()
    job.winner = None
    books.stopped(job)
    books.set_phase(job, phases.FINISHED)
    return False


# ---- facts about a job (only fold applies these, to a JobRecord) -----------------------------


def _copy_seen(job: JobRecord, e: ev.RemoteCreated | ev.RemoteAdmitted, books: Books[JobRecord]) -> bool:
    state = phases.COPY_ADMITTED if isinstance(e, ev.RemoteAdmitted) else phases.COPY_CREATED
    copy = job.copy(e.cluster, e.attempt)
    if copy is None:
        books.add_copy(job, cluster=e.cluster, attempt=e.attempt, state=state)
    elif copy.state in (phases.COPY_NOMINATED, phases.COPY_CREATED):
        copy.state = state
    return True


def _copy_seen_may_win(job: JobRecord, e: ev.RemoteCreated | ev.RemoteAdmitted, books: Books[JobRecord]) -> bool:
    """While nominated, the first open nomination to admit (or, BestEffort, to create) wins."""
    _copy_seen(job, e, books)
    open_ = e.attempt == job.attempt and e.cluster in job.nominated and job.winner is None
    if open_ and (isinstance(e, ev.RemoteAdmitted) or job.placement.dispatch_mode == "BestEffort"):
        job.winner = e.cluster
    return True


def _copy_ended(
    job: JobRecord, e: ev.RemoteRejected | ev.RemoteEvicted | ev.RemoteFinished, books: Books[JobRecord]
) -> bool:
    copy = job.copy(e.cluster, e.attempt)
    if copy is None:
        books.add_copy(job, cluster=e.cluster, attempt=e.attempt, state=phases.COPY_DONE)
    elif copy.state != phases.COPY_WITHDRAWING:
        copy.state = phases.COPY_DONE
    return True


def _copy_gone(job: JobRecord, e: ev.RemoteGone, books: Books[JobRecord]) -> bool:
    copy = job.copy(e.cluster, e.attempt)
    if copy is not None:
        withdrawing = copy.state == phases.COPY_WITHDRAWING
        books.drop_copy(job, copy)
        if withdrawing:
            return False  # the withdrawal decide asked for is done: nothing new
    return True


def _suspend(job: JobRecord, e: ev.JobUpdated, books: Books[JobRecord]) -> bool:
    """Waiting: a suspension on the manager holds the job."""
    changed = e.suspended != job.suspended
    job.suspended = e.suspended
    if changed and e.suspended:
        books.set_phase(job, phases.SUSPENDED)
    return True


def _resume(job: JobRecord, e: ev.JobUpdated, books: Books[JobRecord]) -> bool:
    """Suspended: resuming on the manager queues the job at once (no back-off)."""
    changed = e.suspended != job.suspended
    job.suspended = e.suspended
    if changed and not e.suspended:
        job.not_before_ms = None
        books.set_phase(job, phases.QUEUED)
    return True


def _suspend_dispatched(job: JobRecord, e: ev.JobUpdated, books: Books[JobRecord]) -> bool:
    """Nominated or placed: decide withdraws the copies and requeues it as Suspended."""
    job.suspended = e.suspended
    return True


def _deleted(job: JobRecord, e: ev.JobDeleted, books: Books[JobRecord]) -> bool:
    books.set_phase(job, phases.DELETED)
    books.stopped(job)  # decide cleans up its copies
    return True


# ---- the table -------------------------------------------------------------------------------


def _everywhere(outcome: Outcome) -> dict[str, Outcome]:
    return dict.fromkeys(phases.ALL, outcome)


def _by_phase(default: Outcome, overrides: Mapping[str, Outcome]) -> dict[str, Outcome]:
    return _everywhere(default) | dict(overrides)


def _job(e: Any) -> ev.JobRef:
    ref: ev.JobRef = e.job
    return ref


def _preemptor(e: Any) -> ev.JobRef:
    ref: ev.JobRef = e.preemptor
    return ref


_TERMINAL_UPDATE = Ignored("the job is over: changes to its spec no longer matter")
_SUBMITTED_AGAIN = Ignored(
    "the same job (same uid) submitted again: webhook and watcher both report it; "
    "a new uid under the same name starts a new record instead"
)

TABLE: dict[type[ev.Event], Entry] = {
    # manager-side inputs
    ev.JobSubmitted: JobEvent(_job, _everywhere(_SUBMITTED_AGAIN)),
    ev.JobObserved: JobEvent(
        _job, _everywhere(Ignored("the watcher saw a job the log knows; fold lists unknown ones as unsubmitted"))
    ),
    ev.JobUpdated: JobEvent(
        _job,
        _by_phase(
            _suspend,
            {
                phases.SUSPENDED: _resume,
                phases.NOMINATED: _suspend_dispatched,
                phases.PLACED: _suspend_dispatched,
                phases.FINISHED: _TERMINAL_UPDATE,
                phases.DELETED: _TERMINAL_UPDATE,
            },
        ),
    ),
    ev.JobDeleted: JobEvent(_job, _by_phase(_deleted, {phases.DELETED: Ignored("deleted already")})),
    # cluster inputs
    ev.ClusterRegistered: NotAJobEvent("a cluster's record; fold has decide look at the jobs with copies there"),
    ev.ClusterUpdated: NotAJobEvent("a cluster's record; fold has decide look at the jobs with copies there"),
    ev.ClusterRemoved: NotAJobEvent("a cluster's record; decide requeues the jobs that ran there"),
    ev.ClusterHeartbeat: NotAJobEvent("a cluster's usage and liveness"),
    ev.ClusterCapacityReported: NotAJobEvent("what a worker can really run: node groups and its queues"),
    # what workers report about a job's copies
    ev.RemoteCreated: JobEvent(_job, _by_phase(_copy_seen, {phases.NOMINATED: _copy_seen_may_win})),
    ev.RemoteAdmitted: JobEvent(_job, _by_phase(_copy_seen, {phases.NOMINATED: _copy_seen_may_win})),
    ev.RemoteRejected: JobEvent(_job, _everywhere(_copy_ended)),
    ev.RemoteEvicted: JobEvent(_job, _everywhere(_copy_ended)),
    ev.RemoteFinished: JobEvent(_job, _everywhere(_copy_ended)),
    ev.RemoteGone: JobEvent(_job, _everywhere(_copy_gone)),
    # the sequencer itself
    ev.Tick: NotAJobEvent("time passes; fold fires the timers it passes"),
    ev.PolicyLoaded: NotAJobEvent("policy; fold re-resolves every job's priority"),
    ev.QueuesConfigured: NotAJobEvent("the queue configuration (tenancy); fold keeps it"),
    ev.Rejected: NotAJobEvent("an inbox message that could not be decoded"),
    # decisions
    ev.Nominated: JobEvent(_job, _everywhere(_nominated)),
    ev.Placed: JobEvent(_job, _everywhere(_placed)),
    ev.Withdrawn: JobEvent(_job, _everywhere(_withdrawn)),
    ev.CleanUp: JobEvent(_job, _everywhere(_cleaned_up)),
    ev.Unschedulable: JobEvent(_job, _everywhere(_unschedulable)),
    ev.Requeued: JobEvent(_job, _everywhere(_requeued)),
    ev.Finished: JobEvent(_job, _everywhere(_finished)),
    ev.Evict: JobEvent(
        _job, _everywhere(Noted("the job runs until its worker reports the eviction; fold notes who evicts it"))
    ),
    ev.PreemptionClaimed: JobEvent(
        _preemptor, _everywhere(Noted("the preemptor waits for its victims; fold records the claim and why"))
    ),
    ev.ClaimExpired: NotAJobEvent("a claim ends; fold drops it and gives waiting jobs another look"),
    ev.ClusterLost: NotAJobEvent("a cluster's health; decide requeues or withdraws what ran there"),
    ev.ClusterRecovered: NotAJobEvent("a cluster's health"),
}


# TABLE as fold and every decide pass look it up: event type -> phase -> the step (None: the
# job stays as it is, ``Ignored`` or ``Noted``).
_STEPS: dict[type[ev.Event], dict[str, Step | None]] = {
    kind: {phase: None if isinstance(o, Ignored | Noted) else o for phase, o in entry.phases.items()}
    for kind, entry in TABLE.items()
    if isinstance(entry, JobEvent)
}


def _check_complete() -> None:
    """Every event type has an entry and every job event an outcome for every phase: a new
    event type or phase fails at import, not in production."""
    missing = [t.__name__ for t in ev.ALL_TYPES if t not in TABLE]
    if missing:
        raise RuntimeError(f"transitions.TABLE has no entry for {', '.join(missing)}")
    for kind, entry in TABLE.items():
        if isinstance(entry, JobEvent) and set(entry.phases) != set(phases.ALL):
            raise RuntimeError(f"transitions.TABLE[{kind.__name__}] does not cover every phase")


_check_complete()
