"""Tenancy scenarios through fold/decide: three teams in a cohort, 8 GPUs of quota each, a fleet
of 32 GPUs (so quota, not capacity, is what runs out). Every step checks the fixpoint (the
harness)."""

from __future__ import annotations

import msgspec
import pytest

from eventlog import events as ev
from reconciler.core import decide, dump_state, explain, load_state, summary
from tests.reconciler.core.harness import Harness, of_type
from tests.reconciler.core.tenancy import GPU, config, cq, gpu_cluster, team_job, three_teams, usage

RECLAIM = ev.QueuePreemption(reclaim_within_cohort="Any", within_cluster_queue="LowerPriority")


def world(queues: ev.QueuesConfigured, clusters: int = 4, gpu: int = 8) -> Harness:
    h = Harness()
    h.inputs(queues, *(gpu_cluster(f"c{i}", gpu) for i in range(clusters)))
    h.step()
    return h


def admit_all(h: Harness) -> list[ev.DecisionEvent]:
    """Every nominated job is admitted by its first nominated cluster."""
    for key in sorted(h.state.jobs):
        job = h.state.jobs[key]
        if job.phase == "Nominated" and job.nominated:
            h.inputs(ev.RemoteAdmitted(job=job.ref, cluster=job.nominated[0], attempt=job.attempt))
    return h.step()


def nominated_keys(decisions: list[ev.DecisionEvent]) -> list[str]:
    return [d.job.key for d in of_type(decisions, ev.Nominated)]


def test_a_team_borrows_what_the_others_leave_idle_and_the_rest_waits_with_a_quota_reason() -> None:
    h = world(three_teams())
    out = h.feed(*(team_job("team-a", f"j{i:02}") for i in range(30)))
    assert len(nominated_keys(out)) == 24  # 8 of its own, 16 lent by team-b and team-c
    assert usage(h.state, "team-a") == 24
    waiting = h.state.jobs["team-a/j29"]
    assert waiting.phase == "Unschedulable"
    assert waiting.last_reason == "queue team-a: nvidia.com/gpu 25/8 nominal, cohort has 0 to lend"
    assert all(n.flavors == {"cpu": "default", GPU: "default"} for n in of_type(out, ev.Nominated))


def test_the_lender_returns_and_reclaims_its_quota_by_preemption() -> None:
    h = world(three_teams(team_b={"preemption": RECLAIM}))
    h.feed(*(team_job("team-a", f"j{i:02}") for i in range(24)))
    admit_all(h)
    assert usage(h.state, "team-a") == 24
    out = h.feed(*(team_job("team-b", f"b{i}") for i in range(4)))
    claims = of_type(out, ev.PreemptionClaimed)
    evicts = of_type(out, ev.Evict)
    assert len(claims) == 4 and len(evicts) == 4
    assert {e.job.namespace for e in evicts} == {"team-a"}
    assert not nominated_keys(out)
    # The victims leave: team-b gets its quota back, team-a is back to what it may use.
    for e in evicts:
        h.inputs(ev.RemoteEvicted(job=e.job, cluster=e.cluster, attempt=e.attempt))
    out = h.step()
    assert sorted(nominated_keys(out)) == [f"team-b/b{i}" for i in range(4)]
    assert usage(h.state, "team-b") == 4
    assert usage(h.state, "team-a") == 20
    # Stable: nothing more is preempted, and team-a's requeued jobs wait for quota.
    assert not of_type(h.advance(20_000), ev.PreemptionClaimed)


def test_no_reclaim_without_the_policy() -> None:
    h = world(three_teams())
    h.feed(*(team_job("team-a", f"j{i:02}") for i in range(24)))
    admit_all(h)
    out = h.feed(team_job("team-b", "b0"))
    assert not of_type(out, ev.PreemptionClaimed)
    assert h.state.jobs["team-b/b0"].last_reason.startswith("queue team-b: nvidia.com/gpu 1/8 nominal")


def test_weighted_drf_order_across_queues() -> None:
    # Quota is not the limit here (no cohort, large nominal): one 6-GPU cluster is.
    queues = config(cq("team-a", gpu=100, cohort=None, weight_milli=2000), cq("team-b", gpu=100, cohort=None))
    h = world(queues, clusters=1, gpu=6)
    out = h.feed(*(team_job("team-b", f"b{i}") for i in range(6)), *(team_job("team-a", f"a{i}") for i in range(6)))
    order = [k.split("/")[0] for k in nominated_keys(out)]
    # Shares (weighted): a 0 = b 0 -> a by name; a 1/12 > b 0 -> b; a 1/12 < b 1/6 -> a; tie -> a; ...
    assert order == ["team-a", "team-b", "team-a", "team-a", "team-b", "team-a"]


def test_strict_fifo_head_blocks_its_queue_best_effort_lets_others_pass() -> None:
    for strategy, passes in (("StrictFIFO", False), ("BestEffortFIFO", True)):
        h = world(config(cq("team-a", gpu=4, cohort=None, strategy=strategy)))  # type: ignore[arg-type]
        h.feed(team_job("team-a", "big", gpu=6))
        out = h.feed(team_job("team-a", "small", gpu=1))
        assert (nominated_keys(out) == ["team-a/small"]) is passes
        if not passes:
            assert h.state.jobs["team-a/small"].last_reason == "behind team-a/big in ClusterQueue team-a (StrictFIFO)"


def test_borrowing_limit_caps_what_a_queue_takes() -> None:
    h = world(three_teams(team_a={"borrowing_limit": 4}))
    h.feed(*(team_job("team-a", f"j{i:02}") for i in range(30)))
    assert usage(h.state, "team-a") == 12
    assert h.state.jobs["team-a/j29"].last_reason.endswith("(borrowing limit 4)")


def test_lending_limit_caps_what_a_queue_lends() -> None:
    h = world(three_teams(team_b={"lending_limit": 2}, team_c={"lending_limit": 0}))
    h.feed(*(team_job("team-a", f"j{i:02}") for i in range(30)))
    assert usage(h.state, "team-a") == 10
    # team-b still has its guaranteed 6 (8 - 2 lent) and team-c all of its 8.
    out = h.feed(*(team_job("team-b", f"b{i}") for i in range(6)), *(team_job("team-c", f"c{i}") for i in range(8)))
    assert len(nominated_keys(out)) == 14


def test_a_removed_queue_leaves_its_jobs_waiting_with_the_reason() -> None:
    h = world(three_teams())
    h.feed(team_job("team-c", "late", cluster_queue="team-c"))
    assert usage(h.state, "team-c") == 1
    h.feed(config(cq("team-a"), cq("team-b")))
    out = h.feed(team_job("team-c", "next", cluster_queue="team-c"))
    assert not nominated_keys(out)
    assert h.state.jobs["team-c/next"].last_reason == "ClusterQueue team-c no longer exists"
    out = h.feed(team_job("team-d", "lost"))
    assert "no LocalQueue 'default' in namespace 'team-d'" in h.state.jobs["team-d/lost"].last_reason


def test_stop_policy_hold_admits_nothing_new() -> None:
    h = world(three_teams(team_a={"stop": "Hold"}))
    out = h.feed(team_job("team-a", "j0"), team_job("team-b", "b0"))
    assert nominated_keys(out) == ["team-b/b0"]
    assert "stopPolicy Hold" in h.state.jobs["team-a/j0"].last_reason
    out = h.feed(three_teams())  # released: it goes
    assert nominated_keys(out) == ["team-a/j0"]


def test_quota_is_released_when_a_job_finishes_and_waiting_jobs_get_it() -> None:
    h = world(config(cq("team-a", gpu=2, cohort=None)))
    h.feed(*(team_job("team-a", f"j{i}") for i in range(3)))
    admit_all(h)
    assert usage(h.state, "team-a") == 2
    job = h.state.jobs["team-a/j0"]
    out = h.feed(ev.RemoteFinished(job=job.ref, cluster=job.cluster or "", attempt=job.attempt))
    assert nominated_keys(out) == ["team-a/j2"]
    assert usage(h.state, "team-a") == 2


def test_explain_and_summary_report_queue_facts() -> None:
    h = world(three_teams(team_a={"weight_milli": 2000}))
    h.feed(*(team_job("team-a", f"j{i:02}") for i in range(26)), team_job("team-b", "b0", gpu=0))
    facts = explain(h.state, "team-a/j25").queue
    assert facts is not None
    assert facts.cluster_queue == "team-a" and facts.cohort == "research"
    assert facts.weight_milli == 2000
    assert facts.position == 2  # j24 is ahead of it
    gpu = next(u for u in facts.usage if u.resource == GPU)
    assert (gpu.used, gpu.nominal, gpu.available) == (24, 8, 0)
    assert "team-a" in facts.reason
    queues = summary(h.state)["queues"]
    assert queues["team-a"]["usage"][f"default/{GPU}"] == 24
    assert queues["team-a"]["borrowed"][f"default/{GPU}"] == 16
    assert queues["team-a"]["pending"] == 2 and queues["team-a"]["admitted"] == 24
    assert queues["team-b"]["admitted"] == 1


def test_stop_policy_hold_and_drain_evicts_what_the_queue_admitted() -> None:
    h = world(three_teams())
    h.feed(team_job("team-a", "j0"), team_job("team-b", "b0"))
    admit_all(h)
    out = h.feed(three_teams(team_a={"stop": "HoldAndDrain"}))
    assert [(type(d).__name__, d.job.key) for d in out if isinstance(d, ev.Withdrawn | ev.Requeued)] == [
        ("Withdrawn", "team-a/j0"),
        ("Requeued", "team-a/j0"),
    ]
    assert usage(h.state, "team-a") == 0 and usage(h.state, "team-b") == 1
    assert "stopPolicy HoldAndDrain" in h.state.jobs["team-a/j0"].last_reason


def test_hierarchical_cohorts_lend_across_branches_and_snapshots_keep_usage() -> None:
    queues = config(cq("team-a"), cq("team-b"), cq("team-c", cohort="infra"))
    queues = msgspec.structs.replace(
        queues, cohorts=[ev.CohortSpec(name="research", parent="org"), ev.CohortSpec(name="infra", parent="org")]
    )
    h = world(queues)
    h.feed(*(team_job("team-a", f"j{i:02}") for i in range(30)))
    assert usage(h.state, "team-a") == 24  # team-b's 8 through research, team-c's 8 through org
    restored = load_state(dump_state(h.state))
    assert restored.usage is not None and h.state.usage is not None
    assert restored.usage.usage == h.state.usage.usage
    assert decide(restored) == []


def test_a_team_within_its_quota_reclaims_a_cluster_the_borrowers_fill() -> None:
    # 2 + 6 GPUs of quota on two 4-GPU clusters: team-a's 3-GPU jobs borrow and leave 1 GPU free
    # on each cluster, so team-b's 2-GPU job fits its quota but no cluster.
    h = world(
        config(cq("team-a", gpu=2), cq("team-b", gpu=6, preemption=RECLAIM)),
        clusters=2,
        gpu=4,
    )
    h.feed(team_job("team-a", "a0", gpu=3), team_job("team-a", "a1", gpu=3))
    admit_all(h)
    assert usage(h.state, "team-a") == 6  # 4 borrowed
    out = h.feed(team_job("team-b", "b0", gpu=2))
    (claim,) = of_type(out, ev.PreemptionClaimed)
    # One victim is enough on either cluster; started together, the cluster's name decides.
    (victim,) = claim.victims
    assert claim.cluster == "c0" == h.state.jobs[victim.key].cluster
    (evict,) = of_type(out, ev.Evict)
    h.inputs(ev.RemoteEvicted(job=evict.job, cluster=evict.cluster, attempt=evict.attempt))
    out = h.step()
    assert nominated_keys(out) == ["team-b/b0"]
    # team-a still borrows (3 of 2), but its job no longer fits anywhere: it waits, no thrash.
    admit_all(h)
    assert not of_type(h.advance(20_000), ev.PreemptionClaimed)
    assert (usage(h.state, "team-a"), usage(h.state, "team-b")) == (3, 2)


def test_no_capacity_reclaim_from_a_team_within_its_quota() -> None:
    # Quotas above the fleet: team-a uses its own 4 GPUs (borrows nothing), so team-b, though
    # within quota, waits for capacity rather than preempting.
    h = world(config(cq("team-a", gpu=4), cq("team-b", gpu=4, preemption=RECLAIM)), clusters=1, gpu=4)
    h.feed(*(team_job("team-a", f"a{i}") for i in range(4)))
    admit_all(h)
    out = h.feed(team_job("team-b", "b0"))
    assert not of_type(out, ev.PreemptionClaimed)
    assert h.state.jobs["team-b/b0"].phase == "Unschedulable"


def test_priority_preemption_takes_from_another_queue_only_by_the_cohort_rules() -> None:
    # One 4-GPU cluster, more quota than the fleet: capacity, not quota, runs out.
    def fill(team_b_gpu: int, policy: ev.QueuePreemption | None = None) -> list[ev.DecisionEvent]:
        h = world(config(cq("team-a", gpu=4, preemption=policy), cq("team-b", gpu=team_b_gpu)), clusters=1, gpu=4)
        h.feed(*(team_job("team-b", f"b{i}") for i in range(4)))
        admit_all(h)
        return h.feed(team_job("team-a", "urgent", priority=10))

    # team-b uses its own quota: a higher priority elsewhere does not take it.
    assert not of_type(fill(4, ev.QueuePreemption(borrow_within_cohort="LowerPriority")), ev.PreemptionClaimed)
    # team-b borrows, but team-a's policy takes nothing from other queues.
    assert not of_type(fill(2), ev.PreemptionClaimed)
    # team-b borrows and team-a may take from borrowers of lower priority (borrowWithinCohort).
    (claim,) = of_type(fill(2, ev.QueuePreemption(borrow_within_cohort="LowerPriority")), ev.PreemptionClaimed)
    assert [v.namespace for v in claim.victims] == ["team-b"]


def test_priority_preemption_within_a_queue_is_as_without_queues() -> None:
    h = world(config(cq("team-a", gpu=8)), clusters=1, gpu=4)
    h.feed(*(team_job("team-a", f"low{i}") for i in range(4)))
    admit_all(h)
    (claim,) = of_type(h.feed(team_job("team-a", "urgent", priority=10)), ev.PreemptionClaimed)
    assert claim.victims[0].namespace == "team-a"


@pytest.mark.parametrize("strategy", ["BestEffortFIFO", "StrictFIFO"])
@pytest.mark.parametrize("company", [False, True], ids=["alone", "with-a-new-job-in-its-queue"])
def test_a_claim_that_becomes_a_nomination_gets_lower_jobs_a_look_in_the_same_pass(
    strategy: ev.QueueingStrategy, company: bool
) -> None:
    """team-a's j holds a claim on c0 when a rejection frees c0 and j is nominated there, not on
    its victim's capacity. A claim turned nomination gets every job at or below its priority
    another look, in the next decide: team-c's w, told QuotaExceeded while c0 had room, now fits
    no cluster. Claimants go first in the pass, so jobs not worth a look before their turns are
    looked at again after them (the harness checks the next decide has nothing to add)."""
    none = ev.QueuePreemption()
    queues = config(cq("team-a", cohort=None, preemption=none), cq("team-c", gpu=0, cohort=None, strategy=strategy))
    h = world(queues, clusters=1, gpu=4)
    h.feed(team_job("team-c", "w", gpu=3))
    assert h.state.jobs["team-c/w"].unschedulable == {"QuotaExceeded: ClusterQueue team-c": 1}
    h.feed(team_job("team-a", "v", gpu=2))
    h.feed(ev.RemoteAdmitted(job=h.state.jobs["team-a/v"].ref, cluster="c0", attempt=1))
    h.feed(team_job("team-a", "x", gpu=2))
    h.feed(team_job("team-a", "j", gpu=2, priority=10))
    assert h.state.claims["team-a/j"].victims == ["team-a/v"]
    x = h.state.jobs["team-a/x"]
    h.inputs(ev.RemoteRejected(job=x.ref, cluster="c0", attempt=x.attempt))
    if company:
        h.inputs(team_job("team-c", "w2", gpu=1))
    out = h.step()
    assert nominated_keys(out) == ["team-a/j"]
    assert h.state.jobs["team-c/w"].unschedulable == {f"insufficient free {GPU}": 1}
