"""Strategies, profiles, policy validation and third-party plugins (found by the shell through
entry points, handed to the core as a value)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from eventlog import events as ev
from reconciler.core import DEFAULT_PROFILE, validate_policy
from reconciler.core.strategies import choose, round_deadline
from reconciler.edge.plugins import PluginDiscoveryError, discover
from tests.reconciler import gpugen
from tests.reconciler.core.harness import Harness, cluster, job, of_type

RANKED = ["c1", "c2", "c3", "c4", "c5"]


@pytest.mark.parametrize(
    ("strategy", "placement", "tried", "expected"),
    [
        (ev.StrategySpec(type="AllAtOnce"), ev.Placement(), [], RANKED),
        (ev.StrategySpec(type="AllAtOnce"), ev.Placement(), ["c2"], ["c1", "c3", "c4", "c5"]),
        (ev.StrategySpec(type="Incremental", step_size=2), ev.Placement(), [], ["c1", "c2"]),
        (ev.StrategySpec(type="Incremental", step_size=2), ev.Placement(), ["c1", "c2"], ["c3", "c4"]),
        (ev.StrategySpec(type="TopK", k=1), ev.Placement(), [], ["c1"]),
        (ev.StrategySpec(type="TopK", k=3), ev.Placement(), ["c1"], ["c2", "c3", "c4"]),
        (ev.StrategySpec(type="TopK", k=1), ev.Placement(nominate=2), [], ["c1", "c2"]),  # job's K wins
        (ev.StrategySpec(type="TopK", k=9), ev.Placement(), [], RANKED),
    ],
)
def test_strategies_choose(
    *,
    strategy: ev.StrategySpec, placement: ev.Placement, tried: list[str], expected: list[str]
) -> None:
    assert choose(strategy, placement=placement, ranked=RANKED, tried=tried) == expected


def test_round_deadlines() -> None:
    assert round_deadline(ev.StrategySpec(type="AllAtOnce"), now_ms=5, timeout_ms=10) is None
    assert round_deadline(ev.StrategySpec(type="TopK"), now_ms=5, timeout_ms=10) == 15


def test_validate_policy_reports_every_problem_with_a_path() -> None:
    bad = ev.PolicyLoaded(
        profiles=[
            ev.Profile(name="typo", filters=[ev.FilterSpec(name="ClusterSelecter")]),
            ev.Profile(name="weights", scores=[ev.ScoreSpec(name="BinPack", weight=500)]),
            ev.Profile(name="kind", filters=[ev.FilterSpec(name="BinPack")]),
            ev.Profile(name="fine"),
        ]
    )
    errors = validate_policy(bad)
    assert len(errors) == 3
    assert any("$.profiles[0].filters[0].name: unknown plugin 'ClusterSelecter'" in e for e in errors)
    assert any("$.profiles[1].scores[0].weight" in e for e in errors)
    assert any("BinPack is not a filter plugin" in e for e in errors)
    assert validate_policy(ev.PolicyLoaded(profiles=[DEFAULT_PROFILE])) == []


def test_a_job_asking_for_an_unknown_or_broken_profile_is_unschedulable_with_the_reason() -> None:
    broken = ev.Profile(name="broken", filters=[ev.FilterSpec(name="Nope")])
    h = Harness(policy=ev.PolicyLoaded(profiles=[broken]))
    h.inputs(cluster("a"))
    [u1] = h.feed(job("j1", placement=ev.Placement(profile="broken")))
    [u2] = h.feed(job("j2", placement=ev.Placement(profile="missing")))
    assert isinstance(u1, ev.Unschedulable) and "unknown plugin 'Nope'" in u1.message
    assert isinstance(u2, ev.Unschedulable) and "profile 'missing' is not defined" in u2.message
    # The built-in default still applies to everyone else.
    [n] = h.feed(job("j3"))
    assert isinstance(n, ev.Nominated)


def test_policy_override_ignores_policies_in_the_log() -> None:
    all_at_once = msgspec.structs.replace(DEFAULT_PROFILE, strategy=ev.StrategySpec(type="AllAtOnce"))
    h = Harness(override=ev.PolicyLoaded(profiles=[all_at_once]))
    h.inputs(ev.PolicyLoaded(profiles=[DEFAULT_PROFILE]), cluster("a"), cluster("b"))
    [n] = of_type(h.feed(job("j")), ev.Nominated)
    assert n.clusters == ["a", "b"]


def test_binpack_profile_packs_where_the_default_spreads() -> None:
    packing = ev.Profile(
        name="pack",
        filters=DEFAULT_PROFILE.filters,
        scores=[ev.ScoreSpec(name="BinPack")],
        strategy=ev.StrategySpec(type="TopK", k=1),
    )
    h = Harness(policy=ev.PolicyLoaded(profiles=[packing]))
    h.inputs(cluster("roomy", cpu=100_000), cluster("tight", cpu=10_000))
    [n1] = h.feed(job("spread"))
    [n2] = h.feed(job("packed", placement=ev.Placement(profile="pack")))
    assert n1.clusters == ["roomy"] and n2.clusters == ["tight"]


def test_third_party_plugins_come_from_the_shell_not_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(gpugen.install(tmp_path, version="0.1")))
    plugins = discover()  # the shell reads the installed distributions ...
    assert plugins.refs["GpuGeneration"] == ev.PluginRef(name="GpuGeneration", distribution="kd-gpugen", version="0.1")
    assert plugins.refs["ClusterHealth"].builtin and plugins.refs["ClusterHealth"].distribution == "kdispatch"
    policy = ev.PolicyLoaded(profiles=[gpugen.PROFILE])
    h = Harness(policy=policy, plugins=plugins.registry)  # ... and hands the core the result
    h.inputs(cluster("old", cpu=999_000, labels={"gpu-gen": "3"}), cluster("new", labels={"gpu-gen": "5"}))
    [n] = h.feed(job("j"))
    assert isinstance(n, ev.Nominated) and n.clusters == ["new"]
    h.inputs(cluster("older", labels={"gpu-gen": "2"}))
    h.feed(job("big", cpu=80_000))
    assert h.state.jobs["team/big"].last_reason == "2 clusters: insufficient cpu; 1: gpu generation too old"
    # The core never looks: installed or not, a state built on the built-ins does not know it.
    alone = Harness(policy=policy)
    alone.inputs(cluster("new", labels={"gpu-gen": "5"}))
    [u] = alone.feed(job("j"))
    assert isinstance(u, ev.Unschedulable) and "unknown plugin 'GpuGeneration'" in u.message


def test_a_broken_or_clashing_entry_point_is_refused_with_its_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(gpugen.install(tmp_path / "a", version="0.3", target="tests.reconciler.gpugen:Args")))
    with pytest.raises(PluginDiscoveryError, match=r"GpuGeneration = tests.reconciler.gpugen:Args of kd-gpugen 0.3 .* is not a FilterPlugin"):
        discover()
    monkeypatch.syspath_prepend(str(gpugen.install(tmp_path / "b", version="0.4", target="reconciler.core.plugins.health:ClusterHealth")))
    with pytest.raises(PluginDiscoveryError, match="the name 'ClusterHealth' is already a built-in plugin"):
        discover()
