"""Hypothesis: random arrival sequences and worker facts across teams sharing a cohort.

After every batch: usage equals a recount of the charges jobs hold, no ClusterQueue uses more
than nominal + borrowing limit, no cohort lends more than it has, and the jobs nominated in the
batch came in DRF order. The harness checks the fixpoint after every step; at the end the log
replays exactly, also through a snapshot.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import events as ev
from reconciler.core import State, dump_state, phases, summary
from reconciler.core.queues.admit import queue_of
from reconciler.core.queues.order import weighted
from reconciler.core.queues.usage import Usage
from reconciler.core.state import charge_for
from tests.reconciler.core.checks import fold_all, fold_via_snapshot, replay_verify
from tests.reconciler.core.harness import Harness
from tests.reconciler.core.tenancy import GPU, TEAMS, cq, gpu_cluster, team_job

POLICIES = [
    ev.QueuePreemption(),
    ev.QueuePreemption(reclaim_within_cohort="Any", within_cluster_queue="LowerPriority"),
    ev.QueuePreemption(reclaim_within_cohort="LowerPriority", borrow_within_cohort="LowerPriority"),
    ev.QueuePreemption(within_cluster_queue="LowerOrNewerEqualPriority"),
]


@st.composite
def queues(draw: st.DrawFn, policies: list[ev.QueuePreemption]) -> ev.QueuesConfigured:
    nested = draw(st.booleans(), label="nested")
    specs = []
    for i, team in enumerate(TEAMS):
        specs.append(
            cq(
                team,
                gpu=draw(st.sampled_from([0, 2, 4, 8]), label="nominal"),
                cohort=("research" if i < 2 or not nested else "infra") if draw(st.integers(0, 5)) else None,
                weight_milli=draw(st.sampled_from([0, 500, 1000, 3000]), label="weight"),
                borrowing_limit=draw(st.sampled_from([None, None, 0, 2]), label="borrowing"),
                lending_limit=draw(st.sampled_from([None, None, 0, 1]), label="lending"),
                strategy=draw(st.sampled_from(["BestEffortFIFO", "StrictFIFO"]), label="strategy"),
                preemption=draw(st.sampled_from(policies), label="preemption"),
            )
        )
    cohorts = [ev.CohortSpec(name="infra", parent="org"), ev.CohortSpec(name="research", parent="org")] if nested else []
    return ev.QueuesConfigured(
        cluster_queues=specs,
        cohorts=cohorts,
        local_queues=[ev.LocalQueueSpec(namespace=t, name="default", cluster_queue=t) for t in TEAMS],
        source="test",
    )


def recount(state: State) -> Usage:
    assert state.tree is not None
    usage = Usage(state.tree)
    for key in sorted(state.jobs):
        job = state.jobs[key]
        if job.charge is not None:
            usage.apply(job.charge, +1)
    return usage


def check_quota(state: State) -> None:
    tree, usage = state.tree, state.usage
    assert tree is not None and usage is not None
    assert recount(state).usage == usage.usage
    for node in tree.nodes:
        for col in range(len(tree.columns)):
            if node.is_queue and node.borrowing_limit[col] is not None:
                assert usage.usage[node.index][col] <= node.nominal[col] + node.borrowing_limit[col], node.name
            if node.is_queue and node.parent is None:
                assert usage.usage[node.index][col] <= node.nominal[col], node.name
            if node.parent is None:  # a root never lends more than its subtree has
                assert usage.usage[node.index][col] <= node.subtree_quota[col], node.name
    for key in sorted(state.jobs):
        job = state.jobs[key]
        assert (job.charge is not None) == (job.phase in phases.CHARGED and isinstance(queue_of(tree, job), int)), key


def check_drf_order(state: State, before_claims: set[str], decisions: list[ev.DecisionEvent]) -> None:
    """Replays the batch's nominations from the usage dispatch started with: whenever a queue's
    job was nominated, no queue nominated later in the batch went before it in the tournament."""
    tree, usage = state.tree, state.usage
    assert tree is not None and usage is not None
    expired = {d.preemptor.key for d in decisions if isinstance(d, ev.ClaimExpired)}
    claimants = before_claims - expired
    noms = [d for d in decisions if isinstance(d, ev.Nominated) and d.job.key not in claimants]
    sim = usage.copy()
    charges = []
    for d in noms:
        job = state.jobs[d.job.key]
        node = queue_of(tree, job)
        assert isinstance(node, int)
        charge = charge_for(tree.nodes[node].name, job.demand, dict(d.flavors))
        charges.append((node, charge))
        sim.apply(charge, -1)
    table = state.clusters
    totals = table.capacity[table.ready].sum(axis=0) if len(table) else []
    fleet = {name: int(totals[i]) for i, name in enumerate(table.resources.names)}
    for i, (node, charge) in enumerate(charges):
        for other, _ in charges[i + 1 :]:
            if other == node:
                continue
            a = list(reversed(tree.ancestors(node)))
            b = list(reversed(tree.ancestors(other)))
            j = 0
            while j < min(len(a), len(b)) and a[j] == b[j]:
                j += 1
            assert weighted(sim, a[j], fleet) <= weighted(sim, b[j], fleet), (tree.nodes[node].name, tree.nodes[other].name)
        sim.apply(charge, +1)


def run_world(data: st.DataObject, *, steps: int, policies: list[ev.QueuePreemption]) -> Harness:
    h = Harness()
    h.inputs(data.draw(queues(policies), label="queues"), gpu_cluster("c0", 4), gpu_cluster("c1", 8), gpu_cluster("c2", 4))
    h.step()
    check_quota(h.state)
    jobs: list[str] = []
    for _ in range(steps):
        op = data.draw(st.sampled_from(["submit", "submit", "submit", "fact", "fact", "fact", "time", "delete"]), label="op")
        if op == "submit":
            team = data.draw(st.sampled_from(TEAMS), label="team")
            name = f"j{len(jobs)}"
            jobs.append(f"{team}/{name}")
            gpu = data.draw(st.sampled_from([0, 1, 1, 2, 4]), label="gpu")
            h.inputs(team_job(team, name, gpu=gpu, priority=data.draw(st.sampled_from([0, 0, 5, 10]), label="prio")))
        elif op == "fact" and jobs:
            job = h.state.jobs[data.draw(st.sampled_from(jobs), label="job")]
            where = [*job.nominated, *([job.cluster] if job.cluster else [])]
            if not where:
                continue
            kind = data.draw(
                st.sampled_from([ev.RemoteAdmitted, ev.RemoteAdmitted, ev.RemoteFinished, ev.RemoteEvicted, ev.RemoteRejected]),
                label="kind",
            )
            h.inputs(kind(job=job.ref, cluster=data.draw(st.sampled_from(where), label="where"), attempt=job.attempt))
        elif op == "time":
            before = set(h.state.claims)
            out = h.advance(data.draw(st.sampled_from([1_000, 15_000, 40_000]), label="ms"))
            check_quota(h.state)
            check_drf_order(h.state, before, out)
            continue
        elif op == "delete" and jobs:
            h.inputs(ev.JobDeleted(job=h.state.jobs[data.draw(st.sampled_from(jobs), label="victim")].ref))
        else:
            continue
        before = set(h.state.claims)
        out = h.step()
        check_quota(h.state)
        check_drf_order(h.state, before, out)
    return h


def _check_world(data: st.DataObject, policies: list[ev.QueuePreemption]) -> None:
    h = run_world(data, steps=int(os.environ.get("KD_STEPS", "40")), policies=policies)
    replayed = replay_verify(h.log)
    assert summary(replayed) == summary(h.state)
    assert dump_state(replayed) == dump_state(h.state)
    cut = data.draw(st.integers(0, len(h.log)), label="cut")
    assert dump_state(fold_via_snapshot(h.log, cut)) == dump_state(fold_all(h.log))
    assert summary(fold_via_snapshot(h.log, cut)) == summary(h.state)


@settings(max_examples=int(os.environ.get("KD_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_quota_holds_order_is_drf_and_replay_is_exact(data: st.DataObject) -> None:
    _check_world(data, POLICIES[:1])


@pytest.mark.xfail(
    reason="known gap: with quota preemption, a decide right after its own batch can still preempt "
    "(a job whose turn came before the quota it now lacks was taken); see the branch report",
    strict=False,
)
@settings(max_examples=int(os.environ.get("KD_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_with_quota_preemption_quota_holds_and_replay_is_exact(data: st.DataObject) -> None:
    _check_world(data, POLICIES)


def test_gpu_resource_name_matches_the_harness() -> None:
    assert GPU == "nvidia.com/gpu"
