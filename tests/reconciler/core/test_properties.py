"""Hypothesis: random worlds (clusters, jobs, worker facts, time) driven through the core.

Every step checks the fixpoint (the harness); at the end the log must replay byte for byte,
folding via a snapshot must equal folding straight through, and the invariants must hold.
"""

from __future__ import annotations

import os

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import events as ev
from reconciler.core import DEFAULT_PROFILE, dump_state, summary
from tests.reconciler.core.checks import (
    check_log_invariants,
    check_state_invariants,
    fold_all,
    fold_via_snapshot,
    replay_verify,
)
from tests.reconciler.core.harness import Harness, ref

CLUSTERS = ["c0", "c1", "c2", "c3"]
GPU_TAINT = ev.Taint(key="gpu", value="a100", effect="NoSchedule")
MAINT = ev.Taint(key="maintenance", effect="NoExecute")
PREFER = ev.Taint(key="spot", effect="PreferNoSchedule")


def _policy(kind: str) -> ev.PolicyLoaded:
    strategy = {
        "topk": ev.StrategySpec(type="TopK", k=1),
        "top2": ev.StrategySpec(type="TopK", k=2),
        "all": ev.StrategySpec(type="AllAtOnce"),
        "inc": ev.StrategySpec(type="Incremental", step_size=1),
    }[kind]
    profile = msgspec.structs.replace(DEFAULT_PROFILE, strategy=strategy, round_timeout_ms=20_000)
    return ev.PolicyLoaded(
        profiles=[profile],
        priority_classes={"high": 100},
        worker_lost_timeout_ms=45_000,
        claim_ttl_ms=50_000,
        requeue_backoff_ms=7_000,
    )


def _cluster(i: int, *, taints: list[ev.Taint]) -> ev.ClusterRegistered:
    return ev.ClusterRegistered(
        cluster=CLUSTERS[i],
        labels={"region": "eu" if i % 2 == 0 else "us", "tier": str(i)},
        taints=taints,
        capacity={"cpu": 8_000 * (1 + i % 2), "nvidia.com/gpu": 4 if i >= 2 else 0},
    )


@st.composite
def job_event(draw: st.DrawFn, n: int) -> ev.JobSubmitted:
    cpu = draw(st.sampled_from([1_000, 2_000, 4_000, 8_000, 20_000]))
    gpu = draw(st.sampled_from([0, 0, 0, 1, 4]))
    requests = {"cpu": cpu} | ({"nvidia.com/gpu": gpu} if gpu else {})
    selector = draw(st.sampled_from([{}, {}, {"region": "eu"}, {"region": "us"}]))
    tolerations = draw(
        st.sampled_from(
            [
                [],
                [ev.Toleration(key="gpu", operator="Exists")],
                [ev.Toleration(key="maintenance", operator="Exists", effect="NoExecute", toleration_seconds=10)],
            ]
        )
    )
    affinity = draw(
        st.sampled_from(
            [
                ev.ClusterAffinity(),
                ev.ClusterAffinity(
                    required=[
                        ev.SelectorTerm(match_expressions=[ev.MatchExpression(key="tier", operator="Gt", values=["0"])])
                    ],
                    preferred=[
                        ev.WeightedTerm(
                            weight=50,
                            term=ev.SelectorTerm(
                                match_expressions=[ev.MatchExpression(key="region", operator="In", values=["us"])]
                            ),
                        )
                    ],
                ),
            ]
        )
    )
    placement = ev.Placement(
        cluster_selector=selector,
        cluster_tolerations=tolerations,
        cluster_affinity=affinity,
        dispatch_mode=draw(st.sampled_from(["MustBeAdmitted", "MustBeAdmitted", "BestEffort"])),
        preemption_policy=draw(st.sampled_from(["PreemptLowerPriority", "Never"])),
    )
    high = draw(st.booleans())
    return ev.JobSubmitted(
        job=ref(f"j{n}"),
        pod_sets=[ev.PodSet(name="main", count=draw(st.sampled_from([1, 1, 2])), requests=requests)],
        priority=draw(st.sampled_from([0, 0, 5, 10, 50])),
        priority_class="high" if high and n % 3 == 0 else None,
        placement=placement,
    )


def run_world(data: st.DataObject, *, steps: int) -> Harness:
    h = Harness(policy=_policy(data.draw(st.sampled_from(["topk", "top2", "all", "inc"]), label="policy")))
    taints = {name: [] for name in CLUSTERS}  # type: dict[str, list[ev.Taint]]
    taints["c3"] = [GPU_TAINT]
    taints["c1"] = [PREFER]
    for i in range(len(CLUSTERS)):
        h.inputs(_cluster(i, taints=taints[CLUSTERS[i]]))
    h.step()
    jobs = 0
    for _ in range(steps):
        op = data.draw(
            st.sampled_from(
                ["submit", "submit", "fact", "fact", "fact", "time", "time", "silence", "update", "taint", "policy",
                 "remove"]
            ),
            label="op",
        )
        if op == "submit":
            h.inputs(data.draw(job_event(jobs)))
            jobs += 1
        elif op == "fact" and jobs:
            key = f"team/j{data.draw(st.integers(0, jobs - 1), label='job')}"
            job = h.state.jobs[key]
            current = [(c, job.attempt) for c in job.nominated] * 4
            copies = current + [(c.cluster, c.attempt) for c in job.copies] or [(CLUSTERS[0], job.attempt)]
            cluster, attempt = data.draw(st.sampled_from(copies), label="copy")
            kind = data.draw(
                st.sampled_from(
                    [ev.RemoteCreated, ev.RemoteAdmitted, ev.RemoteAdmitted, ev.RemoteAdmitted, ev.RemoteAdmitted,
                     ev.RemoteFinished, ev.RemoteEvicted, ev.RemoteRejected, ev.RemoteGone]
                ),
                label="kind",
            )
            h.inputs(kind(job=job.ref, cluster=cluster, attempt=attempt))
        elif op == "time":
            h.advance(data.draw(st.sampled_from([1_000, 8_000, 21_000, 50_000])), beat=True)
            continue
        elif op == "silence":
            name = data.draw(st.sampled_from(CLUSTERS), label="cluster")
            if name in h.silent:
                h.silent.discard(name)
            else:
                h.silent.add(name)
        elif op == "update" and jobs:
            key = f"team/j{data.draw(st.integers(0, jobs - 1), label='job')}"
            job = h.state.jobs[key]
            suspended = data.draw(st.booleans(), label="suspended")
            smaller = [msgspec.structs.replace(ps, count=1) for ps in job.pod_sets]
            h.inputs(ev.JobUpdated(job=job.ref, pod_sets=smaller, suspended=suspended))
        elif op == "update":
            continue
        elif op == "taint":
            i = data.draw(st.integers(0, len(CLUSTERS) - 1), label="cluster")
            name = CLUSTERS[i]
            taints[name] = [*taints[name], MAINT] if MAINT not in taints[name] else [t for t in taints[name] if t != MAINT]
            base = _cluster(i, taints=taints[name])
            h.inputs(ev.ClusterUpdated(cluster=name, labels=base.labels, taints=base.taints, capacity=base.capacity))
        elif op == "remove":
            i = data.draw(st.integers(0, len(CLUSTERS) - 1), label="cluster")
            record = h.state.clusters.records[h.state.clusters.index[CLUSTERS[i]]]
            if record.health == "Removed":  # it comes back, registered again
                h.inputs(_cluster(i, taints=taints[CLUSTERS[i]]))
            else:
                h.inputs(ev.ClusterRemoved(cluster=CLUSTERS[i]))
        elif op == "policy":
            h.inputs(_policy(data.draw(st.sampled_from(["topk", "top2", "all", "inc"]), label="policy")))
        if op == "fact" and not jobs:
            continue
        if op == "submit" and jobs > 3 and data.draw(st.integers(0, 9), label="delete") == 0:
            h.inputs(ev.JobDeleted(job=ref(f"j{data.draw(st.integers(0, jobs - 1), label='victim')}")))
        h.step()
    h.advance(1_000)
    return h


@settings(max_examples=int(os.environ.get("KD_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_worlds_replay_exactly_and_keep_the_invariants(data: st.DataObject) -> None:
    h = run_world(data, steps=int(os.environ.get("KD_STEPS", "40")))
    check_log_invariants(h.log)
    check_state_invariants(h.state)
    replayed = replay_verify(h.log)
    assert summary(replayed) == summary(h.state)
    assert dump_state(replayed) == dump_state(h.state)
    cut = data.draw(st.integers(0, len(h.log)), label="cut")
    straight = fold_all(h.log)
    via_snapshot = fold_via_snapshot(h.log, cut)
    assert summary(via_snapshot) == summary(straight) == summary(h.state)
    assert dump_state(via_snapshot) == dump_state(straight)
