"""The job lifecycle table (reconciler/core/transitions.py).

1. It is total: every event type of the log has an entry, and every event about a job says, for
   every phase, what happens (a step) or why nothing does (Ignored / Noted); fold honours it.
2. It is the one lifecycle: what a decide pass expects each job to look like once its batch is
   folded (its drafts, and the capacity it assumed) is what fold makes of that batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, cast
from unittest import mock

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import events as ev
from reconciler.core import State, decide, fold, phases, transitions
from reconciler.core.decide import decide_pass
from reconciler.core.draft import Draft
from reconciler.core.jobs import JobRecord
from tests.reconciler.core import test_properties
from tests.reconciler.core.harness import Harness, cluster, job


def _all_event_types() -> set[type[ev.Event]]:
    found: set[type[ev.Event]] = set()
    todo = [ev.Event]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.add(sub)
            todo.append(sub)
    return found


# One example of each event type, about job ``j`` on cluster ``c`` (attempt ``a``).
EXAMPLES: dict[type[ev.Event], Callable[[ev.JobRef, str, int], ev.Event]] = {
    ev.JobSubmitted: lambda j, c, a: job(j.name),
    ev.JobObserved: lambda j, c, a: ev.JobObserved(job=j),
    ev.JobUpdated: lambda j, c, a: ev.JobUpdated(job=j, pod_sets=[ev.PodSet(name="main", count=1)], suspended=True),
    ev.JobDeleted: lambda j, c, a: ev.JobDeleted(job=j),
    ev.ClusterRegistered: lambda j, c, a: cluster(c),
    ev.ClusterUpdated: lambda j, c, a: ev.ClusterUpdated(cluster=c, capacity={"cpu": 8_000}),
    ev.ClusterRemoved: lambda j, c, a: ev.ClusterRemoved(cluster=c),
    ev.ClusterHeartbeat: lambda j, c, a: ev.ClusterHeartbeat(cluster=c),
    ev.ClusterCapacityReported: lambda j, c, a: ev.ClusterCapacityReported(cluster=c, full=True),
    ev.RemoteCreated: lambda j, c, a: ev.RemoteCreated(job=j, cluster=c, attempt=a),
    ev.RemoteAdmitted: lambda j, c, a: ev.RemoteAdmitted(job=j, cluster=c, attempt=a),
    ev.RemoteRejected: lambda j, c, a: ev.RemoteRejected(job=j, cluster=c, attempt=a),
    ev.RemoteEvicted: lambda j, c, a: ev.RemoteEvicted(job=j, cluster=c, attempt=a),
    ev.RemoteFinished: lambda j, c, a: ev.RemoteFinished(job=j, cluster=c, attempt=a),
    ev.RemoteGone: lambda j, c, a: ev.RemoteGone(job=j, cluster=c, attempt=a),
    ev.Tick: lambda j, c, a: ev.Tick(),
    ev.PolicyLoaded: lambda j, c, a: ev.PolicyLoaded(profiles=[]),
    ev.QueuesConfigured: lambda j, c, a: ev.QueuesConfigured(cluster_queues=[ev.ClusterQueueSpec(name="team-a")]),
    ev.Rejected: lambda j, c, a: ev.Rejected(inbox_seq=1, subject="x", reason="bad"),
    ev.Nominated: lambda j, c, a: ev.Nominated(job=j, clusters=[c], attempt=a, deadline_ms=9_999_999),
    ev.Placed: lambda j, c, a: ev.Placed(job=j, cluster=c, attempt=a),
    ev.Withdrawn: lambda j, c, a: ev.Withdrawn(job=j, cluster=c, attempt=a),
    ev.Unschedulable: lambda j, c, a: ev.Unschedulable(job=j, reasons={"full": 2}),
    ev.Requeued: lambda j, c, a: ev.Requeued(job=j, reason="Evicted", not_before_ms=9_999_999),
    ev.ClusterLost: lambda j, c, a: ev.ClusterLost(cluster=c),
    ev.ClusterRecovered: lambda j, c, a: ev.ClusterRecovered(cluster=c),
    ev.PreemptionClaimed: lambda j, c, a: ev.PreemptionClaimed(preemptor=j, cluster=c, victims=[], expires_ms=9_999_999),
    ev.Evict: lambda j, c, a: ev.Evict(job=j, cluster=c, attempt=a),
    ev.ClaimExpired: lambda j, c, a: ev.ClaimExpired(preemptor=j, cluster=c),
    ev.Finished: lambda j, c, a: ev.Finished(job=j, cluster=c, attempt=a),
    ev.CleanUp: lambda j, c, a: ev.CleanUp(job=j, cluster=c, attempt=a),
}


def test_every_event_type_of_the_log_has_an_entry() -> None:
    types = _all_event_types()
    assert types == set(ev.ALL_TYPES)
    assert set(transitions.TABLE) == types
    assert set(EXAMPLES) == types


def lifecycle(job: JobRecord | Draft) -> dict[str, Any]:
    """The fields a transition moves (``transitions.Line``), comparable across record and draft."""
    return {
        "phase": job.phase,
        "attempt": job.attempt,
        "round": job.round,
        "nominated": list(job.nominated),
        "tried": list(job.tried),
        "cluster": job.cluster,
        "winner": job.winner,
        "not_before_ms": job.not_before_ms,
        "copies": [(c.cluster, c.attempt, c.state, c.counted) for c in job.copies],
    }


def _fold_one(state: State, event: ev.Event) -> None:
    decision = ev.is_decision(event)
    batch = (0, 1) if decision else None
    fold(state, ev.LogEntry(seq=state.seq + 1, at_ms=state.now_ms + 1, event=cast(ev.AnyEvent, event), batch=batch))


def _job_in(phase: str, *, nominated: bool) -> tuple[Harness, JobRecord]:
    """A job with copies on c0 and c1 (nominated, or requeued away from), set to ``phase``."""
    h = Harness()
    h.inputs(cluster("c0"), cluster("c1"))
    h.step()
    h.inputs(job("a", placement=ev.Placement(nominate=2)))
    h.step()
    record = h.state.jobs["team/a"]
    if not nominated:
        _fold_one(h.state, ev.Requeued(job=record.ref, reason="Evicted"))
    h.state.set_phase(record, phase)
    return h, record


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(sorted(ev.ALL_TYPES, key=lambda t: t.__name__)),
    phase=st.sampled_from(phases.ALL),
    where=st.sampled_from(["c0", "c1"]),
    current=st.booleans(),
    nominated=st.booleans(),
)
def test_every_job_event_is_defined_in_every_phase_and_fold_honours_it(
    kind: type[ev.Event], phase: str, where: str, current: bool, nominated: bool
) -> None:
    h, record = _job_in(phase, nominated=nominated)
    event = EXAMPLES[kind](record.ref, where, record.attempt if current else record.attempt - 1)
    entry = transitions.TABLE[kind]
    if isinstance(entry, transitions.NotAJobEvent):
        assert entry.why
        try:
            transitions.outcome_of(phase, event)
        except TypeError:
            return
        raise AssertionError(f"{kind.__name__} is not about a job, yet has an outcome")
    assert entry.job(event) == record.ref
    outcome = transitions.outcome_of(phase, event)
    before_record = msgspec.json.encode(record)
    before = lifecycle(record)
    _fold_one(h.state, event)
    after = h.state.jobs[record.key]
    if isinstance(outcome, transitions.Ignored):
        assert outcome.why
        assert msgspec.json.encode(after) == before_record, f"{kind.__name__} in {phase} is ignored, yet changed the job"
    elif isinstance(outcome, transitions.Noted):
        assert outcome.why
        assert lifecycle(after) == before, f"{kind.__name__} in {phase} only notes, yet moved the lifecycle"
    else:
        assert callable(outcome)


def test_an_incomplete_table_fails_at_import() -> None:
    with mock.patch.dict(transitions.TABLE), pytest.raises(RuntimeError, match="no entry for Placed"):
        del transitions.TABLE[ev.Placed]
        transitions._check_complete()
    gap = transitions.JobEvent(lambda e: e.job, {p: transitions.Ignored("x") for p in phases.ALL[1:]})
    with mock.patch.dict(transitions.TABLE, {ev.Placed: gap}), pytest.raises(RuntimeError, match="every phase"):
        transitions._check_complete()


# ---- decide's drafts are what fold makes of the batch ------------------------------------------


class MirrorHarness(Harness):
    """A harness whose every step checks that each draft the pass worked on, and the capacity it
    assumed, equal what folding the pass's decisions produces."""

    jobs_compared = 0

    def step(self, *, check_fixpoint: bool = True) -> list[ev.DecisionEvent]:
        s, drafts = decide_pass(self.state)
        decisions = s.out
        for i, d in enumerate(decisions):
            self._append(d, batch=(i, len(decisions)))
        for draft in drafts:
            folded = self.state.jobs[draft.job.key]
            assert lifecycle(draft) == lifecycle(folded), (draft.job.key, decisions)
            MirrorHarness.jobs_compared += 1
        table = self.state.clusters
        table.build()
        if s.assumed.shape == table.assumed.shape:
            assert np.array_equal(s.assumed, table.assumed), decisions
        if check_fixpoint:
            again = decide(self.state)
            assert again == [], f"not a fixpoint: {again}"
        return decisions


@settings(
    max_examples=int(os.environ.get("KD_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.data())
def test_drafts_equal_what_fold_makes_of_the_batch(data: st.DataObject) -> None:
    with mock.patch.object(test_properties, "Harness", MirrorHarness):
        h = test_properties.run_world(data, steps=int(os.environ.get("KD_STEPS", "40")))
    assert isinstance(h, MirrorHarness)


def test_the_mirror_check_compares_jobs_that_moved() -> None:
    """The property above is not vacuous: a scripted world whose every decision moves a job."""
    MirrorHarness.jobs_compared = 0
    h = MirrorHarness()
    h.inputs(cluster("c0", cpu=4_000), cluster("c1", cpu=4_000))
    h.step()
    h.inputs(job("a", cpu=3_000, placement=ev.Placement(nominate=2)), job("b", cpu=3_000, priority=5))
    first = h.step()
    assert {type(d) for d in first} >= {ev.Nominated}
    a = h.state.jobs["team/a"]
    h.inputs(ev.RemoteAdmitted(job=a.ref, cluster=a.nominated[0], attempt=a.attempt))
    assert any(isinstance(d, ev.Placed) for d in h.step())
    a = h.state.jobs["team/a"]
    assert a.cluster is not None
    h.inputs(ev.RemoteEvicted(job=a.ref, cluster=a.cluster, attempt=a.attempt))
    assert any(isinstance(d, ev.Requeued) for d in h.step())
    h.advance(11_000)
    a = h.state.jobs["team/a"]
    h.inputs(ev.RemoteFinished(job=a.ref, cluster=a.nominated[0], attempt=a.attempt))
    assert any(isinstance(d, ev.Finished) for d in h.step())
    assert MirrorHarness.jobs_compared >= 5


def test_a_draft_of_an_untouched_job_is_the_record() -> None:
    h = Harness()
    h.inputs(cluster("c0"))
    h.step()
    h.inputs(job("a"))
    h.step()
    record = h.state.jobs["team/a"]
    assert record.copies
    assert lifecycle(Draft.of(record)) == lifecycle(record)


def _nominated_twice() -> tuple[MirrorHarness, JobRecord]:
    h = MirrorHarness()
    h.inputs(cluster("c0"), cluster("c1"))
    h.step()
    h.inputs(job("a", placement=ev.Placement(nominate=2)))
    h.step()
    a = h.state.jobs["team/a"]
    assert a.phase == phases.NOMINATED and a.nominated == ("c0", "c1")
    return h, a


def test_a_winner_withdrawn_in_the_same_pass_is_forgotten_by_fold_and_by_the_draft() -> None:
    h, a = _nominated_twice()
    h.inputs(
        ev.RemoteAdmitted(job=a.ref, cluster="c0", attempt=a.attempt),
        ev.RemoteRejected(job=a.ref, cluster="c0", attempt=a.attempt, reason="quota"),
    )
    decisions = h.step()  # the mirror check runs here
    assert [type(d) for d in decisions] == [ev.Withdrawn]
    a = h.state.jobs["team/a"]
    assert (a.phase, a.nominated, a.winner) == (phases.NOMINATED, ("c1",), None)


def test_a_round_whose_winner_was_withdrawn_can_still_be_won() -> None:
    h, a = _nominated_twice()
    h.inputs(
        ev.RemoteAdmitted(job=a.ref, cluster="c0", attempt=a.attempt),
        ev.RemoteRejected(job=a.ref, cluster="c0", attempt=a.attempt, reason="quota"),
    )
    h.step()
    h.inputs(ev.RemoteAdmitted(job=a.ref, cluster="c1", attempt=a.attempt))
    assert any(isinstance(d, ev.Placed) for d in h.step())


def test_copies_on_a_cluster_lost_in_the_same_pass_are_stale_in_the_draft_as_in_fold() -> None:
    h, a = _nominated_twice()
    h.inputs(ev.RemoteAdmitted(job=a.ref, cluster="c0", attempt=a.attempt))
    h.step()
    assert h.state.jobs["team/a"].cluster == "c0"
    h.silent.add("c0")
    decisions = h.advance(h.state.worker_lost_timeout_ms + 1)  # ClusterLost and Requeued in one pass
    assert {type(d) for d in decisions} >= {ev.ClusterLost, ev.Requeued}
    a = h.state.jobs["team/a"]
    assert [(c.cluster, c.attempt, c.state) for c in a.copies if c.cluster == "c0"] == [
        ("c0", a.attempt - 1, phases.COPY_STALE)
    ]
