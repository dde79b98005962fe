"""NodeFit through the real entry points: capacity reports folded, then decide."""

from __future__ import annotations

import msgspec

from eventlog import events as ev
from reconciler.core import explain
from tests.reconciler.core.capacity import GPU, gang, group, pods, report
from tests.reconciler.core.harness import Harness, cluster, job, of_type, ref


def _nominated(decisions: list[ev.DecisionEvent]) -> list[str]:
    return [c for d in of_type(decisions, ev.Nominated) for c in d.clusters]


def test_an_8_gpu_pod_does_not_go_to_eight_1_gpu_nodes() -> None:
    h = Harness()
    h.inputs(cluster("small", gpu=8), cluster("big", gpu=8))
    h.inputs(
        report("small", group("g", (8, {"cpu": 16_000, GPU: 1}))),
        report("big", group("g", (1, {"cpu": 64_000, GPU: 8}))),
    )
    assert _nominated(h.feed(gang("train", pods("main", 1, cpu=1000, gpu=8)))) == ["big"]


def test_no_node_reason_names_the_largest_free_amount() -> None:
    h = Harness()
    h.inputs(cluster("small", gpu=8), report("small", group("g", (8, {"cpu": 16_000, GPU: 1}))))
    [u] = of_type(h.feed(gang("train", pods("main", 1, cpu=1000, gpu=8))), ev.Unschedulable)
    assert u.message == "1 cluster: no node with 8 nvidia.com/gpu free (largest: 1)"
    [verdict] = explain(h.state, "team/train").clusters
    assert [r.plugin for r in verdict.rejections] == ["NodeFit"]


def test_a_cluster_without_node_facts_is_judged_by_its_totals() -> None:
    h = Harness()
    h.inputs(cluster("plain", gpu=8))
    assert _nominated(h.feed(gang("train", pods("main", 1, cpu=1000, gpu=8)))) == ["plain"]


def test_min_count_is_enough_room() -> None:
    h = Harness()
    h.inputs(cluster("w", gpu=16), report("w", group("g", (3, {"cpu": 8_000, GPU: 2}))))
    # 4 pods of 2 GPUs each do not fit three 2-GPU nodes, but a minCount of 3 does.
    [u] = of_type(h.feed(gang("all", pods("main", 4, cpu=1000, gpu=2))), ev.Unschedulable)
    assert "nodes hold 3 of the 4 pods pod set main needs" in u.message
    assert _nominated(h.feed(gang("some", pods("main", 4, min_count=3, cpu=1000, gpu=2)))) == ["w"]


def test_node_selector_and_taints_count() -> None:
    a100 = {"nvidia.com/gpu.product": "A100"}
    taint = ev.Taint(key="gpu", effect="NoSchedule")
    h = Harness()
    h.inputs(
        cluster("w", gpu=16),
        report(
            "w",
            group("a", (2, {"cpu": 8_000, GPU: 8}), labels=a100, taints=[taint]),
            group("b", (4, {"cpu": 8_000})),
        ),
    )
    wants = msgspec.structs.replace(pods("main", 1, cpu=1000, gpu=8), node_selector=a100)
    [u] = of_type(h.feed(gang("untolerated", wants)), ev.Unschedulable)
    assert "every node pod set main could use has a taint it does not tolerate" in u.message
    tolerant = msgspec.structs.replace(wants, tolerations=[ev.Toleration(key="gpu", operator="Exists")])
    assert _nominated(h.feed(gang("tolerant", tolerant))) == ["w"]
    other = msgspec.structs.replace(tolerant, name="x", node_selector={"nvidia.com/gpu.product": "H100"})
    [u] = of_type(h.feed(gang("h100", other)), ev.Unschedulable)
    assert "no node matches the node selector/affinity of pod set x" in u.message


def _one_8_and_one_4_gpu_node() -> Harness:
    h = Harness()
    h.inputs(
        cluster("w", gpu=64),
        report("w", group("g", (1, {"cpu": 64_000, GPU: 8}), (1, {"cpu": 64_000, GPU: 4}))),
    )
    return h


def test_pod_sets_of_a_gang_do_not_share_a_node_they_both_need() -> None:
    # The 8-GPU pod takes the 8-GPU node whatever order the sets come in; the 4-GPU one the other.
    h = _one_8_and_one_4_gpu_node()
    assert _nominated(
        h.feed(gang("ok", pods("head", 1, cpu=1000, gpu=4), pods("worker", 1, cpu=1000, gpu=8)))
    ) == ["w"]
    # Two 8-GPU pods: each alone fits, together they do not.
    h = _one_8_and_one_4_gpu_node()
    [u] = of_type(
        h.feed(gang("no", pods("head", 1, cpu=1000, gpu=8), pods("worker", 1, cpu=1000, gpu=8))),
        ev.Unschedulable,
    )
    assert "has no room left on nodes once pod set(s) head have theirs" in u.message


def test_a_pod_no_node_could_ever_hold_is_not_worth_preempting_for() -> None:
    h = Harness()
    small = msgspec.structs.replace(
        group("g", (8, {"cpu": 16_000, GPU: 1})), allocatable={"cpu": 16_000, GPU: 1}
    )
    busy = msgspec.structs.replace(group("g", (8, {"cpu": 16_000})), allocatable={"cpu": 16_000, GPU: 8})
    h.inputs(cluster("small", gpu=8), cluster("busy", gpu=8), report("small", small), report("busy", busy))
    h.feed(gang("train", pods("main", 1, cpu=1000, gpu=8)))
    codes = {
        v.cluster: [(r.code, r.reason) for r in v.rejections] for v in explain(h.state, "team/train").clusters
    }
    assert codes["small"] == [
        (
            "UNSCHEDULABLE_AND_UNRESOLVABLE",
            "no node can hold a pod of pod set main (1 cpu, 8 nvidia.com/gpu) even when empty",
        )
    ]
    # Nodes that could hold it once their pods leave: waiting (or preempting) may help there.
    assert codes["busy"] == [("UNSCHEDULABLE", "no node with 8 nvidia.com/gpu free (largest: 0)")]


def test_gang_score_prefers_room_for_all_replicas_over_min_count() -> None:
    h = Harness()
    h.inputs(cluster("a-some", gpu=16), cluster("b-all", gpu=16))
    h.inputs(
        report("a-some", group("g", (3, {"cpu": 8_000, GPU: 2}))),
        report("b-all", group("g", (4, {"cpu": 8_000, GPU: 2}))),
    )
    # Both hold the minCount of 3; only b-all holds all 4 (a-some sorts first and wins ties).
    assert _nominated(h.feed(gang("ray", pods("workers", 4, min_count=3, cpu=1000, gpu=2)))) == ["b-all"]
    scores = {
        v.cluster: {s.plugin: s.score for s in v.scores}["GangScore"]
        for v in explain(h.state, "team/ray").clusters
    }
    assert scores == {"a-some": 0, "b-all": 100}


def test_small_jobs_are_not_evicted_for_a_pod_no_fragmented_node_can_hold() -> None:
    """Victims are chosen by the totals they free, which do not say on which node their pods
    run: evicting four 2-GPU jobs from eight 1-GPU nodes would never make room for an 8-GPU pod.
    The job waits for room instead (NodeFit's rejection is not resolvable by preemption)."""
    h = Harness()
    h.inputs(cluster("frag", gpu=8))
    for i in range(4):
        pin = ev.Placement(cluster_names=["frag"])
        [n] = of_type(h.feed(job(f"small-{i}", placement=pin, gpu=2, priority=10)), ev.Nominated)
        h.feed(ev.RemoteAdmitted(job=ref(f"small-{i}"), cluster="frag", attempt=n.attempt))
    h.inputs(report("frag", group("g", (8, {"cpu": 16_000}))))  # every GPU in use
    urgent = msgspec.structs.replace(gang("train", pods("main", 1, cpu=1000, gpu=8)), priority=100)
    decisions = h.feed(urgent)
    assert not of_type(decisions, ev.PreemptionClaimed)
    assert not of_type(decisions, ev.Evict)
    assert of_type(decisions, ev.Unschedulable)
    [verdict] = explain(h.state, "team/train").clusters
    assert ("NodeFit", "no node with 8 nvidia.com/gpu free (largest: 0)") in [
        (r.plugin, r.reason) for r in verdict.rejections
    ]
