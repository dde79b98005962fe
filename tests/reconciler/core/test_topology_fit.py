"""TopologyFit and TopologyScore through fold and decide."""

from __future__ import annotations

import msgspec

from eventlog import events as ev
from reconciler.core import explain
from tests.reconciler.core.capacity import GPU, gang, group, pods, report
from tests.reconciler.core.harness import Harness, cluster, of_type

RACK = "cloud.provider.com/rack"
BLOCK = "cloud.provider.com/block"
NODE = {"cpu": 32_000, GPU: 4}


def _world() -> Harness:
    """``split``: two racks of two 4-GPU nodes; ``whole``: one rack of four."""
    h = Harness()
    h.inputs(cluster("split", gpu=64), cluster("whole", gpu=64))
    h.inputs(
        report(
            "split",
            group("r1", (2, NODE), labels={BLOCK: "b", RACK: "r1"}),
            group("r2", (2, NODE), labels={BLOCK: "b", RACK: "r2"}),
            topology_levels=[BLOCK, RACK],
        ),
        report(
            "whole", group("r1", (4, NODE), labels={BLOCK: "b", RACK: "r1"}), topology_levels=[BLOCK, RACK]
        ),
    )
    return h


def _set(name: str, count: int, *, required: str | None = None, preferred: str | None = None) -> ev.PodSet:
    return msgspec.structs.replace(
        pods(name, count, cpu=1000, gpu=4),
        topology=ev.TopologyRequest(required=required, preferred=preferred),
    )


def _nominated(decisions: list[ev.DecisionEvent]) -> list[str]:
    return [c for d in of_type(decisions, ev.Nominated) for c in d.clusters]


def test_a_required_level_goes_only_where_one_domain_holds_the_set() -> None:
    h = _world()
    decisions = h.feed(gang("tas", _set("main", 4, required=RACK)))
    assert _nominated(decisions) == ["whole"]
    split = next(v for v in explain(h.state, "team/tas").clusters if v.cluster == "split")
    assert [(r.plugin, r.reason) for r in split.rejections] == [
        ("TopologyFit", f"no {RACK} domain holds the 4 pods of pod set main (most: 2)")
    ]


def test_pod_sets_may_use_different_domains() -> None:
    h = _world()
    h.inputs(cluster("whole", gpu=0))  # capacity gone: only ``split`` can take it
    decisions = h.feed(gang("two", _set("head", 2, required=RACK), _set("workers", 2, required=RACK)))
    assert _nominated(decisions) == ["split"]


def test_a_level_no_node_has_is_reported() -> None:
    h = _world()
    [u] = of_type(
        h.feed(gang("zone", _set("main", 1, required="topology.kubernetes.io/zone"))), ev.Unschedulable
    )
    assert "no node has topology level topology.kubernetes.io/zone" in u.message


def test_the_host_level_is_one_node() -> None:
    h = _world()
    [u] = of_type(h.feed(gang("host", _set("main", 2, required="kubernetes.io/hostname"))), ev.Unschedulable)
    assert "no kubernetes.io/hostname domain holds the 2 pods of pod set main (most: 1)" in u.message


def test_the_score_prefers_a_cluster_whose_domain_holds_the_preferred_level() -> None:
    h = _world()
    # ``split`` sorts first and ties otherwise; the preferred rack only fits in ``whole``.
    assert _nominated(h.feed(gang("pref", _set("main", 4, preferred=RACK)))) == ["whole"]
    verdicts = {
        v.cluster: {s.plugin: s.score for s in v.scores} for v in explain(h.state, "team/pref").clusters
    }
    assert verdicts["whole"]["TopologyScore"] == 100
    assert verdicts["split"]["TopologyScore"] < 100


def test_jobs_without_topology_requests_score_the_same_everywhere() -> None:
    h = _world()
    h.feed(gang("plain", pods("main", 1, cpu=1000, gpu=4)))
    scores = {
        s.score
        for v in explain(h.state, "team/plain").clusters
        for s in v.scores
        if s.plugin == "TopologyScore"
    }
    assert scores == {0}
