"""Each plugin on its own, through the same CycleInput the framework builds."""

from __future__ import annotations

import numpy as np
import pytest

from eventlog import events as ev
from reconciler.core import BUILTINS, PluginError
from reconciler.core.framework.interface import FilterPlugin, ScorePlugin, normalize_by_max
from reconciler.core.framework.status import Code
from reconciler.core.scratch import Scratch
from tests.reconciler.core.harness import Harness, cluster, job


def world(*clusters: ev.ClusterRegistered, spec: ev.JobSubmitted) -> tuple[Harness, object]:
    h = Harness()
    h.inputs(*clusters, spec)
    return h, Scratch.start(h.state).cycle_input(h.state.jobs[spec.job.key])


def verdicts(name: str, *clusters: ev.ClusterRegistered, spec: ev.JobSubmitted) -> dict[str, str]:
    """cluster -> "" if it passes, else the reason."""
    h, inp = world(*clusters, spec=spec)
    plugin = BUILTINS.build(name, {}, path="test")
    assert isinstance(plugin, FilterPlugin)
    table = h.state.clusters
    slots = np.arange(len(table), dtype=np.intp)
    result = plugin.filter(inp, slots)  # type: ignore[arg-type]
    return {table.names[i]: (result.reasons[v - 1].message if (v := int(result.verdict[i])) else "") for i in slots}


def scores(name: str, *clusters: ev.ClusterRegistered, spec: ev.JobSubmitted, args: dict | None = None) -> dict[str, int]:
    h, inp = world(*clusters, spec=spec)
    plugin = BUILTINS.build(name, args or {}, path="test")
    assert isinstance(plugin, ScorePlugin)
    table = h.state.clusters
    slots = np.arange(len(table), dtype=np.intp)
    norm = plugin.normalize(plugin.score(inp, slots))  # type: ignore[arg-type]
    return {table.names[i]: int(norm[i]) for i in slots}


def expr(key: str, op: str, *values: str) -> ev.SelectorTerm:
    return ev.SelectorTerm(match_expressions=[ev.MatchExpression(key=key, operator=op, values=list(values))])  # type: ignore[arg-type]


LABELLED = (
    cluster("a", labels={"region": "eu", "gen": "3"}),
    cluster("b", labels={"region": "us", "gen": "5"}),
    cluster("c", labels={"region": "ap", "gen": "x"}),
    cluster("d"),
)


def affinity(*terms: ev.SelectorTerm) -> ev.JobSubmitted:
    return job("j", placement=ev.Placement(cluster_affinity=ev.ClusterAffinity(required=list(terms))))


@pytest.mark.parametrize(
    ("term", "passing"),
    [
        (expr("region", "In", "eu", "us"), {"a", "b"}),
        (expr("region", "NotIn", "eu"), {"b", "c", "d"}),  # no label: NotIn matches (Kubernetes)
        (expr("region", "Exists"), {"a", "b", "c"}),
        (expr("region", "DoesNotExist"), {"d"}),
        (expr("gen", "Gt", "3"), {"b"}),  # "x" is not an integer: never matches Gt/Lt
        (expr("gen", "Lt", "5"), {"a"}),
        (expr("gen", "Gt", "not-a-number"), set()),
        (ev.SelectorTerm(), set()),  # an empty term matches nothing
    ],
)
def test_cluster_affinity_operators(term: ev.SelectorTerm, passing: set[str]) -> None:
    got = verdicts("ClusterAffinity", *LABELLED, spec=affinity(term))
    assert {c for c, why in got.items() if not why} == passing
    assert {why for why in got.values() if why} <= {"no required cluster-affinity term matches"}


def test_cluster_affinity_is_an_or_of_terms_each_an_and() -> None:
    both = ev.SelectorTerm(
        match_expressions=[
            ev.MatchExpression(key="region", operator="In", values=["eu", "us"]),
            ev.MatchExpression(key="gen", operator="Gt", values=["4"]),
        ]
    )
    got = verdicts("ClusterAffinity", *LABELLED, spec=affinity(both, expr("region", "DoesNotExist")))
    assert {c for c, why in got.items() if not why} == {"b", "d"}


def test_cluster_selector_names_the_missing_label() -> None:
    spec = job("j", placement=ev.Placement(cluster_selector={"region": "eu", "gen": "3"}))
    got = verdicts("ClusterSelector", *LABELLED, spec=spec)
    assert got == {"a": "", "b": "label gen=3 missing", "c": "label gen=3 missing", "d": "label gen=3 missing"}


def test_cluster_pinning() -> None:
    spec = job("j", placement=ev.Placement(cluster_names=["b", "nowhere"]))
    got = verdicts("ClusterPinning", *LABELLED, spec=spec)
    assert {c for c, why in got.items() if not why} == {"b"}


TAINTED = (
    cluster("plain"),
    cluster("gpu", taints=[ev.Taint(key="gpu", value="h100", effect="NoSchedule")]),
    cluster("drain", taints=[ev.Taint(key="maint", effect="NoExecute")]),
    cluster("spot", taints=[ev.Taint(key="spot", effect="PreferNoSchedule")]),
)


@pytest.mark.parametrize(
    ("tolerations", "passing"),
    [
        ([], {"plain", "spot"}),
        ([ev.Toleration(key="gpu", value="h100")], {"plain", "spot", "gpu"}),
        ([ev.Toleration(key="gpu", value="a100")], {"plain", "spot"}),
        ([ev.Toleration(key="gpu", operator="Exists", effect="NoSchedule")], {"plain", "spot", "gpu"}),
        ([ev.Toleration(key="gpu", operator="Exists", effect="NoExecute")], {"plain", "spot"}),
        ([ev.Toleration(operator="Exists")], {"plain", "spot", "gpu", "drain"}),  # empty key: all
        ([ev.Toleration(key="maint", operator="Exists")], {"plain", "spot", "drain"}),
        # tolerationSeconds: the cluster would evict on a timer, so no new placement there
        ([ev.Toleration(key="maint", operator="Exists", toleration_seconds=60)], {"plain", "spot"}),
    ],
)
def test_cluster_taints(tolerations: list[ev.Toleration], passing: set[str]) -> None:
    got = verdicts("ClusterTaints", *TAINTED, spec=job("j", placement=ev.Placement(cluster_tolerations=tolerations)))
    assert {c for c, why in got.items() if not why} == passing
    if "gpu" not in passing:
        assert got["gpu"] == "taint gpu=h100:NoSchedule not tolerated"


def test_taint_score_prefers_clusters_without_untolerated_prefer_no_schedule() -> None:
    got = scores("ClusterTaintScore", *TAINTED, spec=job("j"))
    assert got == {"plain": 100, "gpu": 100, "drain": 100, "spot": 0}
    tolerant = job("j", placement=ev.Placement(cluster_tolerations=[ev.Toleration(key="spot", operator="Exists")]))
    assert set(scores("ClusterTaintScore", *TAINTED, spec=tolerant).values()) == {100}


def test_feasibility_is_total_capacity_and_headroom_is_free_now() -> None:
    h = Harness()
    h.inputs(cluster("small", cpu=4_000), cluster("big", cpu=16_000, gpu=4))
    h.inputs(ev.ClusterHeartbeat(cluster="big", usage={"cpu": 14_000}))
    h.inputs(job("j", cpu=3_000, gpu=1))
    inp = Scratch.start(h.state).cycle_input(h.state.jobs["team/j"])
    slots = np.arange(2, dtype=np.intp)
    feas = BUILTINS.build("ClusterFeasibility", {}, path="t").filter(inp, slots)  # type: ignore[attr-defined]
    head = BUILTINS.build("ClusterHeadroom", {}, path="t").filter(inp, slots)  # type: ignore[attr-defined]
    assert [feas.reasons[v - 1].message if v else "" for v in feas.verdict] == ["insufficient nvidia.com/gpu", ""]
    assert feas.reasons[0].code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert [head.reasons[v - 1].message if v else "" for v in head.verdict] == [
        "insufficient free nvidia.com/gpu",
        "insufficient free cpu",
    ]
    assert head.reasons[0].code == Code.UNSCHEDULABLE  # preemption could help


def test_a_resource_no_cluster_has_fails_everywhere_by_name() -> None:
    got = verdicts("ClusterFeasibility", cluster("a"), spec=ev.JobSubmitted(
        job=job("j").job, pod_sets=[ev.PodSet(name="m", count=1, requests={"example.com/fpga": 1})]
    ))
    assert got == {"a": "insufficient example.com/fpga"}


def test_capacity_score_spreads_and_binpack_packs() -> None:
    clusters = (cluster("roomy", cpu=100_000), cluster("tight", cpu=10_000))
    spread = scores("CapacityScore", *clusters, spec=job("j", cpu=5_000))
    packed = scores("BinPack", *clusters, spec=job("j", cpu=5_000))
    assert spread == {"roomy": 95, "tight": 50}
    assert packed == {"roomy": 5, "tight": 50}


def test_affinity_score_sums_matching_preferred_weights_normalized() -> None:
    preferred = [
        ev.WeightedTerm(weight=30, term=expr("region", "In", "eu")),
        ev.WeightedTerm(weight=10, term=expr("gen", "Exists")),
    ]
    spec = job("j", placement=ev.Placement(cluster_affinity=ev.ClusterAffinity(preferred=preferred)))
    assert scores("ClusterAffinityScore", *LABELLED, spec=spec) == {"a": 100, "b": 25, "c": 25, "d": 0}


def test_locality_score_follows_the_profile_preferred_labels() -> None:
    got = scores("LocalityScore", *LABELLED, spec=job("j"), args={"preferred": {"region": "us"}})
    assert got == {"a": 0, "b": 100, "c": 0, "d": 0}


def test_normalize_by_max() -> None:
    assert normalize_by_max(np.array([0, 5, 10])).tolist() == [0, 50, 100]
    assert normalize_by_max(np.array([0, 5, 10]), reverse=True).tolist() == [100, 50, 0]
    assert normalize_by_max(np.array([0, 0])).tolist() == [0, 0]


def test_plugin_arguments_are_validated_with_field_paths() -> None:
    with pytest.raises(PluginError) as err:
        BUILTINS.build("LocalityScore", {"prefered": {}}, path="$.profiles[0].scores[2]")
    assert err.value.path.startswith("$.profiles[0].scores[2].args")
    assert "prefered" in str(err.value)
    with pytest.raises(PluginError, match="takes no arguments"):
        BUILTINS.build("ClusterTaints", {"x": 1}, path="p")
    with pytest.raises(PluginError, match="unknown plugin 'ClusterMagic'"):
        BUILTINS.build("ClusterMagic", {}, path="p")


def test_duplicate_plugin_names_are_an_error() -> None:
    from reconciler.core.framework.registry import Registry

    class A(FilterPlugin):
        name = "Same"

    class B(FilterPlugin):
        name = "Same"

    with pytest.raises(PluginError, match="duplicate plugin name 'Same'"):
        Registry([A, B])
    with pytest.raises(PluginError, match="duplicate plugin name 'Same'"):
        Registry([A]).with_plugins([B])


def test_a_plugin_that_raises_makes_the_job_unschedulable_with_the_cause_not_the_leader_crash() -> None:
    class Broken(FilterPlugin):
        name = "BrokenForTest"

        def filter(self, inp: object, slots: object) -> object:  # type: ignore[override]
            raise RuntimeError("boom")

    profile = ev.Profile(name="default", filters=[ev.FilterSpec(name="BrokenForTest")])
    h = Harness(policy=ev.PolicyLoaded(profiles=[profile]), plugins=BUILTINS.with_plugins([Broken]))
    h.inputs(cluster("a"), cluster("b"))
    [u] = h.feed(job("j"))
    assert isinstance(u, ev.Unschedulable)
    assert u.message == "2 clusters: BrokenForTest failed: RuntimeError: boom"
