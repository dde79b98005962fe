"""A ``JobUpdated`` recorded twice (the webhook's and the watcher's, when their message ids differ:
the watcher re-listed and missed the version the change was made to) changes nothing the second
time: no decision, the same summary. Checked against the real core (reconciler.core)."""

from __future__ import annotations

from typing import Any

from eventlog import events as ev
from reconciler.core import decide, fold, new_state, summary
from reconciler.core.state import State

JOB = ev.JobRef(namespace="team-a", name="train", uid="u-1", api_version="kubeflow.org/v1", kind="PyTorchJob")


class Log:
    """Folds inputs and, like the leader, appends and folds what ``decide`` answers."""

    def __init__(self) -> None:
        self.state: State = new_state()
        self.seq = 0
        self.decisions: list[Any] = []

    def input(self, event: ev.InputEvent, *, at_ms: int) -> list[Any]:
        self.seq += 1
        self.state = fold(self.state, ev.LogEntry(seq=self.seq, at_ms=at_ms, event=event))
        made = decide(self.state)
        for i, decision in enumerate(made):
            self.seq += 1
            entry = ev.LogEntry(seq=self.seq, at_ms=at_ms, event=decision, batch=(i, len(made)))
            self.state = fold(self.state, entry)
        self.decisions += made
        return made


def test_an_identical_update_recorded_twice_is_a_no_op() -> None:
    log = Log()
    log.input(ev.ClusterRegistered(cluster="w1", capacity={"cpu": 64_000}), at_ms=1)
    log.input(ev.ClusterHeartbeat(cluster="w1"), at_ms=2)
    sets = [ev.PodSet(name="master", count=1, requests={"cpu": 2000})]
    log.input(ev.JobSubmitted(job=JOB, pod_sets=sets, priority_class="high"), at_ms=3)
    log.input(ev.RemoteCreated(job=JOB, cluster="w1", attempt=1), at_ms=4)
    log.input(ev.RemoteAdmitted(job=JOB, cluster="w1", attempt=1), at_ms=5)
    assert summary(log.state)["jobs"]["team-a/train"]["phase"] == "Placed"
    grown = [*sets, ev.PodSet(name="worker", count=2, requests={"cpu": 4000})]
    update = ev.JobUpdated(job=JOB, pod_sets=grown, priority=1000, priority_class="high")
    log.input(update, at_ms=6)
    before = summary(log.state)
    assert log.input(update, at_ms=7) == []  # the same change again
    after = summary(log.state)
    assert after["jobs"] == before["jobs"] and after["clusters"] == before["clusters"]


def test_a_suspend_recorded_twice_is_a_no_op_too() -> None:
    log = Log()
    log.input(ev.ClusterRegistered(cluster="w1", capacity={"cpu": 1000}), at_ms=1)
    log.input(ev.ClusterHeartbeat(cluster="w1"), at_ms=2)
    sets = [ev.PodSet(name="main", count=1, requests={"cpu": 2000})]  # fits nowhere: it waits
    log.input(ev.JobSubmitted(job=JOB, pod_sets=sets), at_ms=3)
    suspend = ev.JobUpdated(job=JOB, pod_sets=sets, suspended=True)
    log.input(suspend, at_ms=4)
    before = summary(log.state)
    assert before["jobs"]["team-a/train"]["phase"] == "Suspended"
    assert log.input(suspend, at_ms=5) == []
    assert summary(log.state)["jobs"] == before["jobs"]
