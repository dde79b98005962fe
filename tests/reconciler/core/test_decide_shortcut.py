"""``decide`` skips the pass when nothing asks for one (``quiet``); news that reaches waiting jobs
without marking any job — capacity a worker reports free, a cluster coming back — must still
start a pass. (The harness also checks, at every step of every scenario, that a skipped pass
would have decided nothing.)"""

from __future__ import annotations

from eventlog import events as ev
from reconciler.core.decide import quiet
from tests.reconciler.core.harness import Harness, cluster, job, of_type


def test_capacity_reported_free_by_a_heartbeat_lets_a_waiting_job_in() -> None:
    h = Harness()
    h.feed(cluster("a", cpu=4000), ev.ClusterHeartbeat(cluster="a", usage={"cpu": 4000}))
    waiting = h.feed(job("j", cpu=1000))
    assert of_type(waiting, ev.Unschedulable)
    h.inputs(ev.ClusterHeartbeat(cluster="a", usage={"cpu": 0}))
    assert not h.state.pending  # no job was marked: only the freed capacity says to look
    assert not quiet(h.state)
    assert [d.job.name for d in of_type(h.step(), ev.Nominated)] == ["j"]


def test_nothing_new_is_quiet() -> None:
    h = Harness()
    h.feed(cluster("a", cpu=4000), ev.ClusterHeartbeat(cluster="a"))
    h.feed(job("j", cpu=1000))
    h.inputs(ev.ClusterHeartbeat(cluster="a"))
    assert quiet(h.state)
    assert h.step() == []
