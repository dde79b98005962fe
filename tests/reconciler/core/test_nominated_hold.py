"""What a nominated, not yet admitted copy holds (``StrategySpec.nominated_hold``)."""

from __future__ import annotations

import msgspec
import pytest

from eventlog import events as ev
from reconciler.config import decode_config
from reconciler.core import DEFAULT_PROFILE
from reconciler.policy import policy_event
from tests.reconciler.core.harness import Harness, cluster, job, of_type


def _all_at_once(hold: ev.NominatedHold | None) -> Harness:
    profile = msgspec.structs.replace(DEFAULT_PROFILE, strategy=ev.StrategySpec(type="AllAtOnce", nominated_hold=hold))
    h = Harness(policy=ev.PolicyLoaded(profiles=[profile]))
    h.inputs(cluster("a", cpu=4000), cluster("b", cpu=4000), cluster("c", cpu=4000))
    return h


@pytest.mark.parametrize(
    ("hold", "held_on", "second_goes_to"),
    [
        # Absent, as in every log written before the field: every copy holds, as it always did.
        (None, 3, None),
        ("all", 3, None),
        ("best", 1, 2),
        ("none", 0, 3),
    ],
)
def test_a_waiting_job_holds_what_its_strategy_says(hold: ev.NominatedHold | None, held_on: int,
                                                   second_goes_to: int | None) -> None:
    """Three clusters with room for one 3-CPU job each: the first job is nominated to all three;
    what its copies hold decides where the second may go while the first is not admitted."""
    h = _all_at_once(hold)
    [first] = of_type(h.feed(job("first", cpu=3000)), ev.Nominated)
    assert first.clusters == ["a", "b", "c"]
    held = [r.name for r in h.state.clusters.records if r.assumed.get("cpu")]
    assert len(held) == held_on
    if hold == "best":
        assert held == first.clusters[:1]  # the best-ranked one
    second = h.feed(job("second", cpu=3000))
    nominated = of_type(second, ev.Nominated)
    if second_goes_to is None:
        assert nominated == [] and of_type(second, ev.Unschedulable)
    else:
        assert len(nominated[0].clusters) == second_goes_to
        assert not set(held) & set(nominated[0].clusters)


def test_an_admitted_copy_holds_whatever_the_strategy_says() -> None:
    h = _all_at_once("none")
    [n] = of_type(h.feed(job("j", cpu=3000)), ev.Nominated)
    h.feed(ev.RemoteAdmitted(job=n.job, cluster="b", attempt=n.attempt))
    assert {r.name: r.assumed.get("cpu", 0) for r in h.state.clusters.records} == {"a": 0, "b": 3000, "c": 0}


def test_a_configured_profile_records_its_hold() -> None:
    """The config decoder writes the hold into PolicyLoaded: nothing for AllAtOnce (MultiKueue's
    copies hold no quota), every nominated cluster for the others; an explicit value is kept."""
    config = decode_config({"policy": {"profiles": [
        {"name": "a", "strategy": {"type": "AllAtOnce"}},
        {"name": "t", "strategy": {"type": "TopK", "k": 2}},
        {"name": "x", "strategy": {"type": "AllAtOnce", "nominated_hold": "best"}},
    ]}})
    holds = {p.name: p.strategy.nominated_hold for p in policy_event(config.policy).profiles}
    assert holds == {"a": "none", "t": "all", "x": "best"}
    assert DEFAULT_PROFILE.strategy.nominated_hold == "all"
