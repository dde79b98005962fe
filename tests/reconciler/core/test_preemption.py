"""Preemption with claims (issue 5): victim choice, one cluster per job, races, expiry."""

from __future__ import annotations

import re

from eventlog import events as ev
from reconciler.core import decide, dump_state, explain, load_state, summary
from tests.reconciler.core.checks import fold_all, replay_verify
from tests.reconciler.core.harness import Harness, cluster, job, of_type, ref


def place(h: Harness, name: str, *, on: str, **kw: object) -> None:
    pin = ev.Placement(cluster_names=[on])
    [n] = of_type(h.feed(job(name, placement=pin, **kw)), ev.Nominated)  # type: ignore[arg-type]
    assert n.clusters == [on]
    h.feed(ev.RemoteAdmitted(job=ref(name), cluster=on, attempt=n.attempt))


def test_only_one_of_three_clusters_preempts_and_it_is_the_cheapest() -> None:
    h = Harness()
    h.inputs(cluster("x", cpu=8_000), cluster("y", cpu=8_000), cluster("z", cpu=8_000))
    # x: one priority-50 job; y: two priority-10 jobs; z: one priority-10 job, 4 cpu free.
    place(h, "x-mid", on="x", cpu=8_000, priority=50)
    h.advance(1_000)
    place(h, "y-old", on="y", cpu=4_000, priority=10)
    h.advance(1_000)
    place(h, "y-new", on="y", cpu=4_000, priority=10)
    place(h, "z-low", on="z", cpu=4_000, priority=10)
    place(h, "z-mid", on="z", cpu=4_000, priority=40)
    decisions = h.feed(job("urgent", cpu=6_000, priority=100))
    [claim] = of_type(decisions, ev.PreemptionClaimed)
    # y and z both need lower-priority victims; z's cheapest set includes a priority-40 job,
    # y's highest victim priority is 10 (two victims): y wins on highest victim priority.
    assert claim.cluster == "y" and [v.name for v in claim.victims] == ["y-new", "y-old"]
    evicts = of_type(decisions, ev.Evict)
    assert [(e.job.name, e.cluster, e.preemptor) for e in evicts] == [
        ("y-new", "y", ref("urgent")),
        ("y-old", "y", ref("urgent")),
    ]
    assert claim.expires_ms == h.now + 120_000 and claim.claim == {"cpu": 6_000}
    assert not of_type(decisions, ev.Nominated)
    # Victims leave: requeued as Preempted (no back-off), and the preemptor lands on y.
    h.inputs(ev.RemoteEvicted(job=ref("y-new"), cluster="y", attempt=1))
    h.inputs(ev.RemoteEvicted(job=ref("y-old"), cluster="y", attempt=1))
    decisions = h.step()
    requeued = of_type(decisions, ev.Requeued)
    assert {(r.job.name, r.reason, r.not_before_ms) for r in requeued} == {
        ("y-new", "Preempted", None),
        ("y-old", "Preempted", None),
    }
    [n] = [d for d in of_type(decisions, ev.Nominated) if d.job == ref("urgent")]
    assert n.clusters == ["y"]
    s = summary(h.state)
    assert s["claims"] == [] and s["jobs"]["team/y-new"]["evictions"] == 1


def test_victims_prefer_lowest_priority_then_most_recently_started() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=12_000))
    place(h, "old", on="a", cpu=4_000, priority=1)
    h.advance(5_000)
    place(h, "new", on="a", cpu=4_000, priority=1)
    place(h, "lowest", on="a", cpu=4_000, priority=0)
    decisions = h.feed(job("p", cpu=8_000, priority=5))
    [claim] = of_type(decisions, ev.PreemptionClaimed)
    assert [v.name for v in claim.victims] == ["lowest", "new"]


def test_never_preempts_equal_or_higher_priority_or_with_policy_never() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=4_000))
    place(h, "peer", on="a", cpu=4_000, priority=5)
    [u] = h.feed(job("same", cpu=4_000, priority=5))
    assert isinstance(u, ev.Unschedulable)
    never = ev.Placement(preemption_policy="Never")
    [u] = h.feed(job("polite", cpu=4_000, priority=9, placement=never))
    assert isinstance(u, ev.Unschedulable)


def test_two_high_priority_jobs_racing_for_the_same_victims_never_share_one() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=8_000))
    place(h, "v1", on="a", cpu=4_000, priority=0)
    place(h, "v2", on="a", cpu=4_000, priority=0)
    h.inputs(job("hi1", cpu=4_000, priority=10), job("hi2", cpu=4_000, priority=10))
    decisions = h.step()
    claims = of_type(decisions, ev.PreemptionClaimed)
    assert [(c.preemptor.name, [v.name for v in c.victims]) for c in claims] == [
        ("hi1", ["v1"]),  # same priority, same start: by name
        ("hi2", ["v2"]),
    ]
    # A third one finds no free victim: it waits as Unschedulable, claims untouched.
    [u] = h.feed(job("hi3", cpu=4_000, priority=10))
    assert isinstance(u, ev.Unschedulable)


def test_claimed_capacity_is_not_offered_to_equal_or_lower_priority_jobs() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=8_000))
    place(h, "victim", on="a", cpu=8_000, priority=0)
    h.feed(job("hi", cpu=4_000, priority=10))
    decisions = h.feed(ev.RemoteEvicted(job=ref("victim"), cluster="a", attempt=1))
    # 8 cpu free now: hi takes 4; the victim (priority 0) must not take the claimed part, but
    # there are 4 cpu left beyond the claim so... it is requeued and fits in what hi leaves.
    [n_hi] = [d for d in of_type(decisions, ev.Nominated) if d.job == ref("hi")]
    assert n_hi.clusters == ["a"]
    [victim_next] = [d for d in decisions if getattr(d, "job", None) == ref("victim") and not isinstance(d, ev.Withdrawn)][1:]
    assert isinstance(victim_next, ev.Unschedulable)  # needs 8, only 4 left


def test_claim_holds_capacity_against_lower_priority_newcomers() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=8_000))
    place(h, "victim", on="a", cpu=8_000, priority=0)
    h.feed(job("hi", cpu=8_000, priority=10))
    h.feed(job("sneaky", cpu=4_000, priority=5))
    # The victim is still running; meanwhile usage report shows it gone but hi has not been
    # evaluated yet: sneaky must still not get the claimed capacity.
    h.inputs(ev.ClusterHeartbeat(cluster="a", usage={}))
    decisions = h.step()
    assert not [d for d in of_type(decisions, ev.Nominated) if d.job == ref("sneaky")]


def test_a_claim_that_is_not_satisfied_expires() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=4_000))
    place(h, "stubborn", on="a", cpu=4_000, priority=0)
    h.feed(job("hi", cpu=4_000, priority=10))
    assert h.advance(119_000) == []
    decisions = h.advance(1_000)
    assert decisions[0] == ev.ClaimExpired(preemptor=ref("hi"), cluster="a")
    # It may try again: the victim is still "being evicted", so it cannot be chosen twice.
    assert not of_type(decisions, ev.PreemptionClaimed)
    assert summary(h.state)["claims"] == []


def test_explain_shows_who_preempts_whom() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=4_000))
    place(h, "low", on="a", cpu=4_000, priority=0)
    h.feed(job("hi", cpu=4_000, priority=10))
    claim = explain(h.state, "team/hi").claims[0]
    assert claim.startswith("holds a claim on a until ") and claim.endswith(": evicting team/low")
    # The expiry reads as a time, like the rest of explain's output, not as raw milliseconds.
    assert re.search(r"until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z:", claim), claim
    assert "being preempted on a by team/hi" in explain(h.state, "team/low").claims[0]


def test_leader_killed_between_claim_and_evict_the_next_leader_carries_on_from_the_log() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=8_000))
    place(h, "low1", on="a", cpu=4_000, priority=0)
    place(h, "low2", on="a", cpu=4_000, priority=0)
    h.inputs(job("hi", cpu=8_000, priority=10))
    planned = decide(h.state)
    assert [type(d).__name__ for d in planned] == ["PreemptionClaimed", "Evict", "Evict"]
    # The old leader wrote the claim and one Evict, then died.
    for i, d in enumerate(planned[:2]):
        h._append(d, batch=(i, len(planned)))
    # The new leader rebuilds its state from the log (through a snapshot, for good measure).
    state = load_state(dump_state(fold_all(h.log)))
    assert summary(state) == summary(h.state)
    rest = decide(state)
    assert rest == [planned[2]]  # only the missing Evict; the claim is not made twice
    for i, d in enumerate(rest):
        h._append(d, batch=(i, len(rest)))
    assert decide(h.state) == []
    replay_verify(h.log)
    # And it completes: the victims leave, the preemptor is dispatched on a.
    h.inputs(ev.RemoteEvicted(job=ref("low1"), cluster="a", attempt=1))
    h.inputs(ev.RemoteEvicted(job=ref("low2"), cluster="a", attempt=1))
    [n] = [d for d in of_type(h.step(), ev.Nominated) if d.job == ref("hi")]
    assert n.clusters == ["a"]


def test_a_waiting_job_preempts_a_lower_priority_job_that_starts_later() -> None:
    h = Harness()
    # Other tenants use 6 of 8 cpus (reported usage): hi (4) does not fit and has no victims.
    h.inputs(cluster("a", cpu=8_000), ev.ClusterHeartbeat(cluster="a", usage={"cpu": 6_000}))
    [u] = h.feed(job("hi", cpu=4_000, priority=5))
    assert isinstance(u, ev.Unschedulable)
    # A small low-priority job fits in the 2 left and starts: now evicting it would make room.
    h.inputs(job("small", cpu=2_000, priority=0))
    [n] = of_type(h.step(), ev.Nominated)
    assert n.job == ref("small")
    decisions = h.feed(ev.RemoteAdmitted(job=ref("small"), cluster="a", attempt=1))
    assert [type(d).__name__ for d in decisions] == ["Placed", "PreemptionClaimed", "Evict"]
    assert decisions[1].preemptor == ref("hi") and [v.name for v in decisions[1].victims] == ["small"]
