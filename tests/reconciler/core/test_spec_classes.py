"""Jobs of one spec class in one pass: each is placed against the capacity the ones before it
took (``spec_classes`` carries the class's feasible clusters from job to job and must filter a
cluster again once a nomination touched it)."""

from __future__ import annotations

import pytest

from eventlog import events as ev
from reconciler.core import spec_classes
from reconciler.core.decide import decide_pass
from reconciler.core.framework.profile import CompiledProfile
from reconciler.core.jobs import Claim, JobRecord
from reconciler.core.scratch import Scratch
from reconciler.core.spec_classes import FEW, Feasible, lookup
from tests.reconciler.core.harness import Harness, cluster, job, of_type, ref

POLICY = ev.PolicyLoaded(
    profiles=[
        ev.Profile(
            name="default",
            filters=[ev.FilterSpec(name=n) for n in ("ClusterHealth", "ClusterFeasibility", "ClusterHeadroom")],
            scores=[ev.ScoreSpec(name="CapacityScore")],
            strategy=ev.StrategySpec(type="TopK", k=1),
        )
    ]
)


def test_a_class_fills_its_clusters_one_job_at_a_time() -> None:
    h = Harness(policy=POLICY)
    h.inputs(cluster("a", cpu=2000), cluster("b", cpu=1000), ev.ClusterHeartbeat(cluster="a"), ev.ClusterHeartbeat(cluster="b"))
    h.step()
    h.inputs(*(job(f"x{i}", cpu=1000) for i in range(4)))
    decisions = h.step()
    placed = {n.job.name: n.clusters for n in of_type(decisions, ev.Nominated)}
    assert placed == {"x0": ["a"], "x1": ["a"], "x2": ["b"]}
    (left,) = of_type(decisions, ev.Unschedulable)
    assert left.job.name == "x3"
    assert left.reasons == {"insufficient free cpu": 2}


def _pass_with_two_jobs() -> tuple[Scratch, CompiledProfile, JobRecord, JobRecord]:
    h = Harness(policy=POLICY)
    h.inputs(cluster("a", cpu=4000), ev.ClusterHeartbeat(cluster="a"))
    h.step()
    h.inputs(job("x0"), job("x1"))
    state = h.state
    x0, x1 = state.jobs[ref("x0").key], state.jobs[ref("x1").key]
    assert x0.spec_key == x1.spec_key
    return Scratch.start(state), state.profiles["default"], x0, x1


def test_a_class_is_carried_only_while_no_claim_holds_capacity() -> None:
    """A claim holds capacity per priority and preemptor, so jobs of one class may see different
    free capacity: while any is held each job is filtered on its own."""
    s, profile, x0, x1 = _pass_with_two_jobs()
    first = Feasible(s, profile, x0)
    assert first.inp is not None  # (filtered itself)
    assert Feasible(s, profile, x1).inp is None  # (the class's clusters, carried)
    s.claims["team/y"] = Claim(preemptor="team/y", cluster="a", victims=[], expires_ms=s.now + 1, priority=0)
    assert lookup(s, profile, x1) is None
    assert Feasible(s, profile, x1).inp is not None
    del s.claims["team/y"]
    s.claim_changes += 1  # (made and dropped within the pass)
    assert lookup(s, profile, x1) is None
    Feasible(s, profile, x0)
    assert lookup(s, profile, x1) is not None


def test_a_class_is_filtered_again_past_a_few_touches() -> None:
    s, profile, x0, x1 = _pass_with_two_jobs()
    Feasible(s, profile, x0)
    for _ in range(FEW + 1):
        s.touch(0)
    assert lookup(s, profile, x1) is None


def test_the_classes_of_a_pass_stay_within_their_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spec_classes, "BUDGET", 0)  # (the floor: 16 classes)
    h = Harness(policy=POLICY)
    h.inputs(cluster("a", cpu=1_000_000), ev.ClusterHeartbeat(cluster="a"))
    h.step()
    h.inputs(*(job(f"x{i}", cpu=100 + i) for i in range(40)))  # 40 classes
    s = decide_pass(h.state)[0]
    assert len(of_type(s.out, ev.Nominated)) == 40
    assert 0 < len(s.classes) <= 16
