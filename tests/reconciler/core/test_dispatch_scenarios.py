"""Dispatch through the event API: submit, cluster facts, admission; check the decisions."""

from __future__ import annotations

from eventlog import events as ev
from reconciler.core import explain, summary
from tests.reconciler.core.harness import Harness, cluster, job, of_type, ref


def policy(**strategy: object) -> ev.PolicyLoaded:
    from reconciler.core import DEFAULT_PROFILE

    spec = ev.StrategySpec(**strategy)  # type: ignore[arg-type]
    import msgspec

    profile = msgspec.structs.replace(DEFAULT_PROFILE, strategy=spec, round_timeout_ms=30_000)
    return ev.PolicyLoaded(profiles=[profile], requeue_backoff_ms=5_000)


def test_topk_nominates_the_best_cluster_and_places_it_when_admitted() -> None:
    h = Harness()
    h.inputs(cluster("small", cpu=8_000), cluster("large", cpu=64_000))
    decisions = h.feed(job("train", cpu=4_000))
    [nominated] = of_type(decisions, ev.Nominated)
    assert nominated.clusters == ["large"]  # CapacityScore: most headroom left
    assert nominated.attempt == 1 and nominated.deadline_ms == h.now + 60_000
    decisions = h.feed(ev.RemoteAdmitted(job=ref("train"), cluster="large", attempt=1))
    assert decisions == [ev.Placed(job=ref("train"), cluster="large", attempt=1)]
    assert summary(h.state)["jobs"]["team/train"]["phase"] == "Placed"
    assert summary(h.state)["clusters"]["large"]["assumed"]["cpu"] == 4_000


def test_all_at_once_first_admitted_wins_and_the_rest_are_withdrawn_in_the_same_batch() -> None:
    h = Harness(policy=policy(type="AllAtOnce"))
    h.inputs(cluster("a"), cluster("b"), cluster("c"))
    [nominated] = h.feed(job("j"))
    assert isinstance(nominated, ev.Nominated) and nominated.clusters == ["a", "b", "c"]
    assert nominated.deadline_ms is None
    # Two admissions arrive in the same input batch: the first in log order wins.
    h.inputs(
        ev.RemoteAdmitted(job=ref("j"), cluster="c", attempt=1),
        ev.RemoteAdmitted(job=ref("j"), cluster="a", attempt=1),
    )
    decisions = h.step()
    assert decisions[0] == ev.Placed(job=ref("j"), cluster="c", attempt=1)
    withdrawn = of_type(decisions, ev.Withdrawn)
    assert [(w.cluster, w.attempt) for w in withdrawn] == [("a", 1), ("b", 1)]
    assert all("admitted on c" in w.reason for w in withdrawn)
    s = summary(h.state)
    assert s["clusters"]["a"]["assumed"] == {} and s["clusters"]["c"]["assumed"] == {"cpu": 1000}


def test_incremental_moves_on_after_the_round_timeout_then_requeues_with_backoff() -> None:
    h = Harness(policy=policy(type="Incremental", step_size=2))
    h.inputs(*(cluster(f"c{i}", cpu=10_000 * (i + 1)) for i in range(5)))
    [first] = h.feed(job("j"))
    assert first.clusters == ["c4", "c3"] and first.round == 0
    assert h.advance(29_999) == []
    decisions = h.advance(1)
    assert [(type(d).__name__, getattr(d, "cluster", None)) for d in decisions[:2]] == [
        ("Withdrawn", "c4"),
        ("Withdrawn", "c3"),
    ]
    [second] = of_type(decisions, ev.Nominated)
    assert second.clusters == ["c2", "c1"] and second.round == 1 and second.attempt == 1
    h.advance(30_000)
    decisions = h.advance(30_000)
    [requeued] = of_type(decisions, ev.Requeued)
    assert requeued.reason == "AdmissionTimeout" and requeued.not_before_ms == h.now + 5_000
    assert h.advance(4_999) == []
    [again] = of_type(h.advance(1), ev.Nominated)
    assert again.attempt == 2 and again.clusters == ["c4", "c3"]


def test_unschedulable_summarises_per_filter_and_is_retried_only_when_clusters_change() -> None:
    h = Harness()
    gpu_taint = ev.Taint(key="gpu", value="h100", effect="NoSchedule")
    h.inputs(*(cluster(f"h{i}", gpu=8, taints=[gpu_taint]) for i in range(3)))
    h.inputs(cluster("cpu1"), cluster("cpu2"))
    [unsched] = h.feed(job("llm", gpu=4))
    assert isinstance(unsched, ev.Unschedulable)
    assert unsched.message == "3 clusters: taint gpu=h100:NoSchedule not tolerated; 2: insufficient nvidia.com/gpu"
    assert unsched.reasons == {"taint gpu=h100:NoSchedule not tolerated": 3, "insufficient nvidia.com/gpu": 2}
    # Nothing relevant changed: not re-emitted, however often we tick or heartbeat.
    assert h.advance(1_000) == []
    assert h.feed(ev.ClusterHeartbeat(cluster="cpu1", usage={"cpu": 10})) == []
    # A cluster the job tolerates appears: it is dispatched there.
    [nominated] = h.feed(cluster("h9", gpu=8))
    assert isinstance(nominated, ev.Nominated) and nominated.clusters == ["h9"]


def test_best_effort_is_placed_once_created() -> None:
    h = Harness()
    h.inputs(cluster("a"))
    h.feed(job("j", placement=ev.Placement(dispatch_mode="BestEffort")))
    assert h.feed(ev.RemoteCreated(job=ref("j"), cluster="a", attempt=1)) == [
        ev.Placed(job=ref("j"), cluster="a", attempt=1)
    ]


def test_headroom_counts_our_own_nominations_and_reported_usage() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=10_000), ev.ClusterHeartbeat(cluster="a", usage={"cpu": 4_000}))
    [n1] = h.feed(job("j1", cpu=5_000))
    assert isinstance(n1, ev.Nominated)
    # assumed 5,000 > reported 4,000: free is 5,000, so a second 5,000 fits and a third does not
    [n2] = h.feed(job("j2", cpu=5_000))
    assert isinstance(n2, ev.Nominated)
    [u] = h.feed(job("j3", cpu=1_000))
    assert isinstance(u, ev.Unschedulable) and u.reasons == {"insufficient free cpu": 1}
    # j1 is withdrawn (rejected by the worker): capacity is released and j3 goes.
    decisions = h.feed(ev.RemoteRejected(job=ref("j1"), cluster="a", attempt=1, reason="quota"))
    kinds = [type(d).__name__ for d in decisions]
    assert kinds == ["Withdrawn", "Requeued", "Nominated"]
    assert decisions[2].job == ref("j3")
    assert decisions[1].reason == "Rejected" and decisions[1].not_before_ms is not None


def test_priority_classes_from_the_policy_order_dispatch() -> None:
    p = ev.PolicyLoaded(profiles=[], priority_classes={"high": 1000, "low": 1})
    h = Harness(policy=p)
    h.inputs(cluster("a", cpu=4_000))
    h.inputs(job("low", cpu=4_000, priority_class="low"), job("high", cpu=4_000, priority_class="high"))
    decisions = h.step()
    assert [type(d).__name__ for d in decisions] == ["Nominated", "Unschedulable"]
    assert decisions[0].job == ref("high")


def test_explain_lists_every_cluster_with_verdict_or_scores() -> None:
    h = Harness()
    h.inputs(
        cluster("eu", labels={"region": "eu"}),
        cluster("us", labels={"region": "us"}),
        cluster("tiny", cpu=100, labels={"region": "eu"}),
    )
    h.feed(job("j", placement=ev.Placement(cluster_selector={"region": "eu"})))
    x = explain(h.state, "team/j")
    by_name = {c.cluster: c for c in x.clusters}
    assert by_name["eu"].feasible and by_name["eu"].rank == 1 and by_name["eu"].total is not None
    assert [r.plugin for r in by_name["us"].rejections] == ["ClusterSelector"]
    assert by_name["us"].rejections[0].reason == "label region=eu missing"
    assert by_name["tiny"].rejections[0].plugin == "ClusterFeasibility"
    assert {s.plugin for s in by_name["eu"].scores} == {
        "ClusterAffinityScore",
        "ClusterTaintScore",
        "CapacityScore",
        "TopologyScore",
        "GangScore",
    }


def test_explain_does_not_count_the_job_against_itself() -> None:
    h = Harness()
    h.inputs(cluster("only", cpu=4_000))
    h.feed(job("j", cpu=4_000))
    h.feed(ev.RemoteAdmitted(job=ref("j"), cluster="only", attempt=1))
    [verdict] = explain(h.state, "team/j").clusters
    assert verdict.feasible and verdict.rank == 1
    # Another identical job does see the cluster full.
    h.feed(job("k", cpu=4_000))
    [other] = explain(h.state, "team/k").clusters
    assert not other.feasible and other.rejections[0].reason == "insufficient free cpu"


def test_jobs_the_watcher_sees_but_the_log_never_had_are_listed_as_unsubmitted() -> None:
    h = Harness()
    h.inputs(cluster("a"), ev.JobObserved(job=ref("ghost")), ev.JobObserved(job=ref("known")))
    h.feed(job("known"))
    assert summary(h.state)["unsubmitted"] == ["team/ghost"]
    h.feed(job("ghost"))
    assert summary(h.state)["unsubmitted"] == []
