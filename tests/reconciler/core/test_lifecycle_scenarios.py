"""Issue 5 rules through the event API: worker loss, recovery, races, suspension, drift, finish."""

from __future__ import annotations

from collections import Counter

import msgspec

from eventlog import events as ev
from reconciler.core import fold, summary
from reconciler.core.snapshot import dump_state, load_state
from reconciler.core.state import RETIRE_DELETED_AFTER_MS
from tests.reconciler.core.harness import Harness, cluster, job, of_type, ref

LOST_AFTER = 60_000


def place(h: Harness, name: str, **kw: object) -> str:
    [nominated] = of_type(h.feed(job(name, **kw)), ev.Nominated)  # type: ignore[arg-type]
    where = nominated.clusters[0]
    h.feed(ev.RemoteAdmitted(job=ref(name), cluster=where, attempt=nominated.attempt))
    return where


def test_losing_a_cluster_with_50_placed_jobs_replaces_each_exactly_once_and_cleans_up_on_return() -> None:
    h = Harness()
    h.inputs(cluster("doomed", cpu=1_000_000))
    for i in range(50):
        assert place(h, f"j{i:02}") == "doomed"
    h.feed(cluster("b", cpu=40_000), cluster("c", cpu=40_000))
    h.silent.add("doomed")
    h.advance(LOST_AFTER - 1)
    decisions = h.advance(1)
    assert decisions[0] == ev.ClusterLost(cluster="doomed", last_seen_ms=h.now - LOST_AFTER)
    requeued = of_type(decisions, ev.Requeued)
    assert len(requeued) == 50 and {r.reason for r in requeued} == {"WorkerLost"}
    nominated = of_type(decisions, ev.Nominated)
    assert Counter(n.job.name for n in nominated) == Counter(f"j{i:02}" for i in range(50))
    assert all(n.clusters[0] in ("b", "c") and n.attempt == 2 for n in nominated)
    assert not of_type(decisions, ev.Withdrawn)  # unreachable: superseded copies wait for its return
    for n in nominated:
        h.inputs(ev.RemoteAdmitted(job=n.job, cluster=n.clusters[0], attempt=2))
    placed = of_type(h.step(), ev.Placed)
    assert len(placed) == 50
    # The cluster returns: every superseded copy there is withdrawn first, in the recovery batch.
    h.silent.discard("doomed")
    back = h.advance(1_000)
    assert back[0] == ev.ClusterRecovered(cluster="doomed")
    withdrawn = of_type(back, ev.Withdrawn)
    assert sorted((w.job.name, w.cluster, w.attempt) for w in withdrawn) == [
        (f"j{i:02}", "doomed", 1) for i in range(50)
    ]
    assert not of_type(back, ev.Nominated)
    s = summary(h.state)
    assert all(s["jobs"][f"team/j{i:02}"]["cluster"] in ("b", "c") for i in range(50))
    assert s["clusters"]["doomed"]["assumed"] == {}


def test_merely_nominated_jobs_are_withdrawn_at_once_when_the_cluster_is_lost() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=100_000), cluster("b", cpu=10_000))
    [n] = of_type(h.feed(job("j")), ev.Nominated)
    assert n.clusters == ["a"]
    h.silent.add("a")
    decisions = h.advance(LOST_AFTER)
    kinds = [type(d).__name__ for d in decisions]
    assert kinds == ["ClusterLost", "Withdrawn", "Requeued", "Nominated"]
    assert decisions[3].clusters == ["b"] and decisions[2].reason == "WorkerLost"


def test_finished_while_unreachable_before_the_new_copy_is_admitted_is_not_run_twice() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=100_000), cluster("b", cpu=10_000))
    assert place(h, "j") == "a"
    h.silent.add("a")
    decisions = h.advance(LOST_AFTER)
    [n] = of_type(decisions, ev.Nominated)
    assert n.clusters == ["b"] and n.attempt == 2
    # a comes back and reports that attempt 1 finished while we could not see it.
    h.silent.discard("a")
    h.inputs(ev.ClusterHeartbeat(cluster="a"), ev.RemoteFinished(job=ref("j"), cluster="a", attempt=1))
    decisions = h.step()
    finished = of_type(decisions, ev.Finished)
    assert finished == [ev.Finished(job=ref("j"), cluster="a", attempt=1, succeeded=True)]
    cleaned = sorted((c.cluster, c.attempt) for c in of_type(decisions, ev.CleanUp))
    assert cleaned == [("a", 1), ("b", 2)]
    assert summary(h.state)["jobs"]["team/j"]["phase"] == "Finished"
    # The new copy's admission arriving late changes nothing.
    assert h.feed(ev.RemoteAdmitted(job=ref("j"), cluster="b", attempt=2)) == []


def test_finished_on_the_old_copy_after_the_new_one_was_admitted_is_stale() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=100_000), cluster("b", cpu=10_000))
    place(h, "j")
    h.silent.add("a")
    h.advance(LOST_AFTER)
    h.feed(ev.RemoteAdmitted(job=ref("j"), cluster="b", attempt=2))
    h.silent.discard("a")
    h.inputs(ev.ClusterHeartbeat(cluster="a"), ev.RemoteFinished(job=ref("j"), cluster="a", attempt=1))
    decisions = h.step()
    assert not of_type(decisions, ev.Finished)
    assert [(w.cluster, w.attempt) for w in of_type(decisions, ev.Withdrawn)] == [("a", 1)]
    assert summary(h.state)["jobs"]["team/j"] | {} == summary(h.state)["jobs"]["team/j"]
    assert summary(h.state)["jobs"]["team/j"]["phase"] == "Placed"
    assert summary(h.state)["jobs"]["team/j"]["cluster"] == "b"


def test_remote_finished_releases_capacity_and_cleans_up() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=4_000))
    place(h, "j1", cpu=4_000)
    [u] = h.feed(job("j2", cpu=4_000))
    assert isinstance(u, ev.Unschedulable)
    decisions = h.feed(ev.RemoteFinished(job=ref("j1"), cluster="a", attempt=1, succeeded=False))
    assert [type(d).__name__ for d in decisions] == ["Finished", "CleanUp", "Nominated"]
    assert decisions[0].succeeded is False and decisions[2].job == ref("j2")


def test_job_deleted_withdraws_everywhere() -> None:
    h = Harness(policy=ev.PolicyLoaded(profiles=[], requeue_backoff_ms=1))
    from tests.reconciler.core.test_dispatch_scenarios import policy

    h = Harness(policy=policy(type="AllAtOnce"))
    h.inputs(cluster("a"), cluster("b"))
    h.feed(job("j"))
    decisions = h.feed(ev.JobDeleted(job=ref("j")))
    assert sorted(c.cluster for c in of_type(decisions, ev.CleanUp)) == ["a", "b"]
    assert summary(h.state)["jobs"]["team/j"]["phase"] == "Deleted"
    assert summary(h.state)["clusters"]["a"]["assumed"] == {}


def test_suspend_withdraws_and_resume_dispatches_again() -> None:
    h = Harness()
    h.inputs(cluster("a"))
    place(h, "j")
    pods = [ev.PodSet(name="main", count=1, requests={"cpu": 1000})]
    decisions = h.feed(ev.JobUpdated(job=ref("j"), pod_sets=pods, suspended=True))
    assert [type(d).__name__ for d in decisions] == ["Withdrawn", "Requeued"]
    assert decisions[1].reason == "Suspended"
    assert summary(h.state)["jobs"]["team/j"]["phase"] == "Suspended"
    assert h.advance(100_000) == []
    [n] = h.feed(ev.JobUpdated(job=ref("j"), pod_sets=pods, suspended=False))
    assert isinstance(n, ev.Nominated) and n.attempt == 2


def test_spec_drift_that_no_longer_fits_moves_the_job_and_says_why() -> None:
    h = Harness()
    h.inputs(cluster("small", cpu=8_000), cluster("big", cpu=6_000, gpu=8))
    assert place(h, "j", cpu=2_000) == "small"
    grown = [ev.PodSet(name="main", count=1, requests={"cpu": 2_000, "nvidia.com/gpu": 2})]
    decisions = h.feed(ev.JobUpdated(job=ref("j"), pod_sets=grown))
    assert [type(d).__name__ for d in decisions] == ["Withdrawn", "Requeued", "Nominated"]
    assert decisions[1].reason == "SpecChanged"
    assert "ClusterFeasibility: insufficient nvidia.com/gpu" in decisions[1].message
    assert decisions[2].clusters == ["big"]
    # Drift that still fits changes nothing.
    h.feed(ev.RemoteAdmitted(job=ref("j"), cluster="big", attempt=2))
    smaller = [ev.PodSet(name="main", count=1, requests={"cpu": 1_000, "nvidia.com/gpu": 1})]
    assert h.feed(ev.JobUpdated(job=ref("j"), pod_sets=smaller)) == []


def test_evicted_by_the_worker_is_requeued_with_a_backoff_recorded_in_the_log() -> None:
    h = Harness()
    h.inputs(cluster("a"))
    place(h, "j")
    decisions = h.feed(ev.RemoteEvicted(job=ref("j"), cluster="a", attempt=1, reason="node drained"))
    [requeued] = of_type(decisions, ev.Requeued)
    assert requeued.reason == "Evicted" and requeued.not_before_ms == h.now + 10_000
    assert requeued.message == "node drained"
    assert not of_type(decisions, ev.Nominated)
    assert h.advance(9_999) == []
    [n] = of_type(h.advance(1), ev.Nominated)
    assert n.attempt == 2
    assert summary(h.state)["jobs"]["team/j"]["evictions"] == 1


def test_stale_facts_about_old_attempts_are_withdrawn_not_counted() -> None:
    h = Harness()
    h.inputs(cluster("a"), cluster("b", cpu=1_000))
    place(h, "j")
    h.feed(ev.RemoteEvicted(job=ref("j"), cluster="a", attempt=1))
    h.advance(10_000)
    # A late admission of attempt 1 somewhere: it is withdrawn, never placed.
    decisions = h.feed(ev.RemoteAdmitted(job=ref("j"), cluster="b", attempt=1))
    assert [(type(d).__name__, d.cluster, d.attempt) for d in decisions] == [("Withdrawn", "b", 1)]


def test_no_execute_taint_added_later_evicts_after_toleration_seconds() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=100_000), cluster("b"))
    tol = ev.Toleration(key="maintenance", operator="Exists", effect="NoExecute", toleration_seconds=30)
    assert place(h, "patient", placement=ev.Placement(cluster_tolerations=[tol])) == "a"
    assert place(h, "plain") == "a"
    taint = ev.Taint(key="maintenance", effect="NoExecute")
    decisions = h.feed(ev.ClusterUpdated(cluster="a", capacity={"cpu": 100_000, "memory": 256 << 30}, taints=[taint]))
    assert [(type(d).__name__, d.job.name) for d in decisions if hasattr(d, "job")][:2] == [
        ("Withdrawn", "plain"),
        ("Requeued", "plain"),
    ]
    assert h.advance(29_000) == []
    decisions = h.advance(1_000)
    [requeued] = of_type(decisions, ev.Requeued)
    assert requeued.job == ref("patient") and requeued.reason == "Evicted" and "after 30s" in requeued.message


def test_cluster_removed_requeues_its_jobs() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=100_000), cluster("b"))
    place(h, "j")
    decisions = h.feed(ev.ClusterRemoved(cluster="a"))
    [requeued] = of_type(decisions, ev.Requeued)
    assert requeued.reason == "ClusterRemoved"
    [n] = of_type(decisions, ev.Nominated)
    assert n.clusters == ["b"]


def test_spec_drift_while_nominated_withdraws_copies_that_no_longer_fit() -> None:
    h = Harness()
    h.inputs(cluster("small", cpu=8_000), cluster("gpu", cpu=4_000, gpu=8))
    [n] = of_type(h.feed(job("j", cpu=2_000)), ev.Nominated)
    assert n.clusters == ["small"]
    grown = [ev.PodSet(name="main", count=1, requests={"cpu": 2_000, "nvidia.com/gpu": 1})]
    decisions = h.feed(ev.JobUpdated(job=ref("j"), pod_sets=grown))
    assert [type(d).__name__ for d in decisions] == ["Withdrawn", "Requeued", "Nominated"]
    assert decisions[0].reason == "spec changed: ClusterFeasibility: insufficient nvidia.com/gpu"
    assert decisions[2].clusters == ["gpu"]


def test_on_return_stale_copies_are_withdrawn_before_anything_new_lands_there() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=4_000), cluster("b", cpu=4_000))
    assert place(h, "old", cpu=4_000) == "a"
    h.silent.add("a")
    decisions = h.advance(LOST_AFTER)
    [moved] = of_type(decisions, ev.Nominated)
    assert moved.clusters == ["b"]
    h.feed(ev.RemoteAdmitted(job=ref("old"), cluster="b", attempt=2))
    [waiting] = h.feed(job("new", cpu=4_000))
    assert isinstance(waiting, ev.Unschedulable)  # a is lost, b is full
    h.silent.discard("a")
    back = h.advance(1_000)
    kinds = [(type(d).__name__, getattr(d, "cluster", None) or getattr(d, "clusters", None)) for d in back]
    assert kinds == [("ClusterRecovered", "a"), ("Withdrawn", "a"), ("Nominated", ["a"])]
    assert back[1].job == ref("old") and back[2].job == ref("new")


def test_a_deleted_job_leaves_the_state_once_its_copies_are_gone_and_the_period_is_over() -> None:

    h = Harness()
    h.inputs(cluster("a"))
    where = place(h, "j")
    place(h, "k")
    [cleanup] = of_type(h.feed(ev.JobDeleted(job=ref("j"))), ev.CleanUp)
    # Its copy is not gone yet: the record stays past the period, and the report still counts.
    h.advance(RETIRE_DELETED_AFTER_MS + 1)
    assert "team/j" in h.state.jobs
    h.feed(ev.RemoteGone(job=ref("j"), cluster=where, attempt=cleanup.attempt))
    assert not h.state.jobs["team/j"].copies
    # A snapshot taken now drops it at the same moment as the state that folded the log.
    restored = load_state(dump_state(h.state))
    h.advance(RETIRE_DELETED_AFTER_MS)
    assert "team/j" not in h.state.jobs and "team/k" in h.state.jobs
    for entry in h.log[restored.seq :]:
        fold(restored, entry)
    assert restored.jobs.keys() == h.state.jobs.keys()
    # A late report about it is ignored, as for any job the state does not know; a new job under
    # the same name starts afresh.
    assert h.feed(ev.RemoteGone(job=ref("j"), cluster=where, attempt=cleanup.attempt)) == []
    again = msgspec.structs.replace(job("j"), job=msgspec.structs.replace(ref("j"), uid="uid-team-j-2"))
    assert of_type(h.feed(again), ev.Nominated)
