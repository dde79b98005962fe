"""A tiny stand-in for ``reconciler.core`` with the same four functions, for runner tests.

Nominates the first ``k`` clusters by name (all for AllAtOnce), places on the first admission
(withdrawing the other copies in the same batch), finishes on ``RemoteFinished``. No timers.
Folding its own decisions makes the next ``decide`` return nothing (the fixpoint the real core
guarantees).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eventlog import events as ev


@dataclass
class _Job:
    ref: ev.JobRef
    phase: str = "Queued"
    copies: list[str] = field(default_factory=list)
    admitted: list[str] = field(default_factory=list)
    finished: bool = False
    placed: str | None = None


@dataclass
class FakeState:
    k: int | None = None
    clusters: list[str] = field(default_factory=list)
    jobs: dict[str, _Job] = field(default_factory=dict)
    now_ms: int = 0


def new_state() -> FakeState:
    return FakeState()


def fold(state: FakeState, entry: ev.LogEntry) -> FakeState:
    state.now_ms = entry.at_ms
    match entry.event:
        case ev.PolicyLoaded(profiles=profiles):
            strategy = profiles[0].strategy
            state.k = None if strategy.type == "AllAtOnce" else strategy.k
        case ev.ClusterRegistered(cluster=name):
            state.clusters = sorted({*state.clusters, name})
        case ev.JobSubmitted(job=ref):
            state.jobs[ref.uid] = _Job(ref=ref)
        case ev.JobDeleted(job=ref):
            state.jobs[ref.uid].phase = "Deleted"
        case ev.RemoteAdmitted(job=ref, cluster=name):
            state.jobs[ref.uid].admitted.append(name)
        case ev.RemoteFinished(job=ref):
            state.jobs[ref.uid].finished = True
        case ev.Nominated(job=ref, clusters=clusters):
            job = state.jobs[ref.uid]
            job.phase, job.copies = "Nominated", list(clusters)
        case ev.Placed(job=ref, cluster=name):
            job = state.jobs[ref.uid]
            job.phase, job.placed = "Placed", name
        case ev.Withdrawn(job=ref, cluster=name):
            state.jobs[ref.uid].copies.remove(name)
        case ev.Finished(job=ref):
            state.jobs[ref.uid].phase = "Finished"
        case _:
            pass
    return state


def decide(state: FakeState) -> list[ev.DecisionEvent]:
    out: list[ev.DecisionEvent] = []
    for uid in sorted(state.jobs):
        job = state.jobs[uid]
        if job.phase == "Queued":
            out.append(ev.Nominated(job=job.ref, clusters=state.clusters[: state.k], attempt=1))
        elif job.phase == "Nominated" and job.admitted:
            winner = job.admitted[0]
            out.append(ev.Placed(job=job.ref, cluster=winner, attempt=1))
            out += [ev.Withdrawn(job=job.ref, cluster=c, attempt=1) for c in job.copies if c != winner]
        elif job.phase == "Placed" and job.finished and job.placed is not None:
            out.append(ev.Finished(job=job.ref, cluster=job.placed, attempt=1))
        elif job.phase == "Deleted" and job.copies:
            out += [ev.Withdrawn(job=job.ref, cluster=c, attempt=1) for c in job.copies]
    return out


def next_deadline(state: FakeState) -> int | None:
    return None
