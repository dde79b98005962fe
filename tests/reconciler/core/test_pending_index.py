"""Hypothesis: decide with the pending index decides exactly as the full scan of waiting jobs.

The tenancy worlds of ``test_tenancy_properties`` (three teams, random quotas, cohorts, weights,
StrictFIFO or BestEffortFIFO, every preemption policy), deeper: more submissions of the few job
shapes there are, so lanes hold many jobs. At every step the leader decides twice on the same
state, with the index (``decide``) and without (``decide(state, index=False)``): the batches must
be equal. The index fold keeps must equal one rebuilt from the state, and survive a snapshot.
"""

from __future__ import annotations

import os
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import events as ev
from reconciler.core import State, decide, dump_state, load_state
from reconciler.core import sleep as sleep_module
from reconciler.core.decide import decide_pass, quiet
from reconciler.core.draft import Draft
from reconciler.core.pending import PendingIndex, lane_key
from reconciler.core.queues import dispatch as dispatch_module
from reconciler.core.queues.lines import Fallback, Groups
from reconciler.core.scratch import Scratch
from tests.reconciler.core import test_properties
from tests.reconciler.core import test_tenancy_properties as worlds
from tests.reconciler.core.harness import Harness
from tests.reconciler.core.tenancy import TEAMS, cq, gpu_cluster, team_job, three_teams


def lanes(index: PendingIndex, state: State) -> dict[object, list[str]]:
    out: dict[object, list[str]] = {}
    for key, lane in index.lanes.items():
        members = [k for i, k in enumerate(lane.keys) if index.live(lane, i, state.jobs)]
        assert len(members) == lane.live, key
        assert lane.keys[lane.head :] == lane.keys[lane.head :] and all(
            not index.live(lane, i, state.jobs) for i in range(lane.head)
        )
        out[key] = members
    return out


def classes(index: PendingIndex) -> dict[object, object]:
    """The sleep classes, the lanes in none, and the shapes: what fold keeps must be what the
    state alone gives (a restored snapshot rebuilds them)."""
    return {
        "classes": {k: sorted(map(str, c.lanes)) for k, c in index.classes.items()},
        "loose": sorted(map(str, index.loose)),
        "shapes": {k: sorted(map(str, v)) for k, v in index.shapes.items()},
        "per_queue": dict(index.per_queue),
    }


def check_index(state: State) -> None:
    fresh = PendingIndex()
    fresh.rebuild(state.jobs, state.waiting)
    kept = lanes(state.index, state)
    assert kept == lanes(fresh, state)
    assert classes(state.index) == classes(fresh)
    index = state.index
    for cls in index.classes.values():  # a lower bound of the class's first member
        live = [lane.seqs[i] for lane in cls.lanes.values() for i in range(len(lane.seqs)) if index.live(lane, i, state.jobs)]
        assert cls.low_seq <= min(live)
    assert sorted(k for members in kept.values() for k in members) == sorted(state.waiting)
    for key in state.waiting:
        assert state.index.of[key].key == lane_key(state.jobs[key])
    restored = load_state(dump_state(state))
    assert lanes(restored.index, restored) == kept


class BothWays(Harness):
    """A leader that decides with and without the index at every step and requires the same."""

    def step(self, *, check_fixpoint: bool = True) -> list[ev.DecisionEvent]:
        check_index(self.state)
        if quiet(self.state):
            assert decide_pass(self.state)[0].out == []
        want = decide(self.state, index=False)
        decisions = decide(self.state)
        assert decisions == want
        for i, d in enumerate(decisions):
            self._append(d, batch=(i, len(decisions)))
        if check_fixpoint:
            assert decide(self.state, index=False) == []
            assert decide(self.state) == []
        return decisions


@st.composite
def deep_worlds(draw: st.DrawFn) -> tuple[ev.QueuesConfigured, list[worlds.Op]]:
    config = draw(worlds.queues(worlds.POLICIES))
    steps = int(os.environ.get("KD_STEPS", "40"))
    # Bursts of submissions of the same few shapes, between the usual mix of worker facts,
    # deletions and time: queues deep behind their quota, freed a job at a time.
    burst = st.tuples(
        st.just("submit"), st.sampled_from(TEAMS), st.sampled_from([1, 1, 2]), st.sampled_from([0, 0, 5])
    )
    ops = draw(st.lists(st.one_of(burst, worlds.ops()), min_size=steps, max_size=2 * steps))
    return config, ops


def named_job(team: str, name: str, **kwargs: Any) -> ev.JobSubmitted:
    """A job that names its ClusterQueue, as the webhook resolves it (the index files its lanes
    by that name: a StrictFIFO queue's lanes can then sleep)."""
    return team_job(team, name, cluster_queue=team, **kwargs)


@settings(max_examples=int(os.environ.get("KD_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deep_worlds(), st.booleans())
def test_the_index_decides_as_the_full_scan(world: tuple[ev.QueuesConfigured, list[worlds.Op]], named: bool) -> None:
    """Also what the index leaves asleep (``reconciler.core.sleep``): a lane waiting for quota
    that the pass's news could help (quota freed in its cohort, capacity it fits, a queue that
    may preempt) and is not woken decides differently from the full scan, which looks at it."""
    config, ops = world
    with mock.patch.object(worlds, "Harness", BothWays), mock.patch.object(worlds, "team_job", named_job if named else team_job):
        h = worlds.run_world(config, ops)
    check_index(h.state)


@settings(max_examples=int(os.environ.get("KD_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_without_queues_the_index_decides_as_the_full_scan(data: st.DataObject) -> None:
    """The worlds of ``test_properties`` (no tenancy: the index only picks the lanes worth a look)."""
    with mock.patch.object(test_properties, "Harness", BothWays):
        h = test_properties.run_world(data, steps=int(os.environ.get("KD_STEPS", "40")))
    check_index(h.state)


RECLAIM = ev.QueuePreemption(reclaim_within_cohort="Any", within_cluster_queue="LowerPriority")


def test_dormant_lanes_are_walked_again_once_the_pass_changed_something() -> None:
    """Found by the search above against lines that never woke a dormant lane: a job of another
    queue admitted mid-pass makes its queue borrow, so the running jobs it had become victims a
    later member of a dormant lane may reclaim, where its representative found none."""
    config = ev.QueuesConfigured(
        cluster_queues=[
            cq("team-a", gpu=2, weight_milli=500, preemption=RECLAIM),
            cq("team-b", gpu=4, lending_limit=1, preemption=RECLAIM),
            cq("team-c", gpu=8, cohort=None, weight_milli=0, preemption=RECLAIM),
        ],
        cohorts=[ev.CohortSpec(name="infra", parent="org"), ev.CohortSpec(name="research", parent="org")],
        local_queues=[ev.LocalQueueSpec(namespace=t, name="default", cluster_queue=t) for t in TEAMS],
        source="test",
    )
    ops: list[worlds.Op] = [
        ("submit", "team-a", 1, 0), ("submit", "team-a", 2, 0), ("submit", "team-c", 1, 0),
        ("fact", 37, "rejected", 0), ("submit", "team-a", 0, 0), ("submit", "team-b", 1, 0),
        ("submit", "team-a", 1, 0), ("submit", "team-a", 1, 0), ("submit", "team-a", 2, 5),
        ("submit", "team-c", 1, 0), ("submit", "team-b", 1, 0), ("fact", 5, "admitted", 3),
        ("submit", "team-c", 1, 0), ("submit", "team-c", 4, 0), ("submit", "team-a", 1, 5),
        ("fact", 6, "rejected", 2), ("submit", "team-b", 1, 5), ("time", 40000),
        ("submit", "team-b", 4, 10), ("submit", "team-a", 2, 5), ("time", 40000),
    ]  # fmt: skip
    with mock.patch.object(worlds, "Harness", BothWays):
        worlds.run_world(config, ops)


def test_a_claim_that_became_a_nomination_gets_the_jobs_behind_it_a_look_in_the_same_pass() -> None:
    """Found by the deep worlds (also without the index): team-b's j18 (priority 10) held a
    claim on c0 and is nominated there in the pass. A claim turned nomination gets every job at
    or below its priority another look, and the next decide gave team-c's j12 one: it no longer
    fits any cluster, so capacity, not QuotaExceeded. The pass now looks at those jobs after the
    claimants' turns. The plain harness checks the fixpoint after every step."""
    none = ev.QueuePreemption()
    config = ev.QueuesConfigured(
        cluster_queues=[
            cq("team-a", gpu=8, cohort=None, weight_milli=0, preemption=none),
            cq("team-b", gpu=8, cohort=None, weight_milli=0, preemption=none),
            cq("team-c", gpu=0, cohort=None, weight_milli=0, preemption=none),
        ],
        cohorts=[ev.CohortSpec(name="infra", parent="org"), ev.CohortSpec(name="research", parent="org")],
        local_queues=[ev.LocalQueueSpec(namespace=t, name="default", cluster_queue=t) for t in TEAMS],
        source="test",
    )
    ops: list[worlds.Op] = [
        ("submit", "team-c", 1, 0), ("submit", "team-a", 1, 0), ("submit", "team-a", 2, 0),
        ("submit", "team-c", 1, 0), ("submit", "team-c", 1, 0), ("submit", "team-c", 1, 0),
        ("submit", "team-a", 1, 0), ("submit", "team-a", 1, 0), ("submit", "team-b", 2, 0),
        ("submit", "team-c", 1, 0), ("submit", "team-a", 1, 0), ("fact", 39, "evicted", 0),
        ("submit", "team-b", 1, 0), ("submit", "team-c", 2, 0), ("submit", "team-c", 1, 0),
        ("delete", 25), ("submit", "team-b", 1, 5), ("submit", "team-a", 2, 5),
        ("submit", "team-b", 2, 5), ("submit", "team-a", 1, 0), ("fact", 14, "admitted", 2),
        ("submit", "team-b", 2, 10), ("fact", 10, "rejected", 2),
    ]  # fmt: skip
    worlds.run_world(config, ops)


def test_a_pass_the_index_cannot_finish_alike_is_decided_again_without_it() -> None:
    """When a representative takes victims in the second look, the jobs skipped behind it would
    each have looked again: the pass is redone with the full scan (here forced at the first
    second look of an indexed pass), and decides as the full scan does."""
    h = Harness()
    # A preemption rule keeps team-a's lanes out of sleep classes (``reconciler.core.sleep``),
    # whose lanes would sleep again once the freed quota is taken, behind no representative.
    within = ev.QueuePreemption(within_cluster_queue="LowerPriority")
    teams = three_teams(team_a={"gpu": 2, "preemption": within}, team_b={"gpu": 0}, team_c={"gpu": 0})
    h.inputs(teams, gpu_cluster("c0", 64))
    h.step()
    for i in range(8):
        h.inputs(team_job("team-a", f"j{i}"))
    h.step()
    running = next(j for j in h.state.jobs.values() if j.phase == "Placed" or j.nominated)
    h.inputs(ev.JobDeleted(job=running.ref))
    want = decide(h.state, index=False)
    assert want, "the deletion frees quota: the pass has work"
    passes: list[bool] = []
    real = dispatch_module._second_look

    def forced(s: Scratch, left: list[Draft], turns: object, groups: Groups) -> None:
        passes.append(bool(groups.by_rep))
        if groups.by_rep:
            raise Fallback
        real(s, left, turns, groups)  # type: ignore[arg-type]

    with mock.patch.object(dispatch_module, "_second_look", forced):
        got = decide(h.state)
    assert passes == [True, False]  # the indexed pass gave up, the plain one finished
    assert got == want


NEVER = ev.QueuePreemption()


def test_a_lane_asleep_for_quota_is_looked_at_when_it_may_preempt_a_newcomer() -> None:
    """Found by the search above against a sleep that only checked the jobs capacity news could
    reach: team-a's j36 (priority 5, 4 GPUs) waits for quota, its lane asleep. j0 is placed, so
    j36 may preempt it and the full scan looks at it: it fits no cluster any more (team-b took
    them), so it is reported as waiting for capacity. The indexed pass finds, at its end, that
    a job it left asleep fits nowhere, and is redone without the index."""
    config = ev.QueuesConfigured(
        cluster_queues=[
            cq("team-a", gpu=2, cohort=None, weight_milli=0, preemption=NEVER),
            cq("team-b", gpu=8, cohort=None, weight_milli=0, preemption=NEVER),
            cq("team-c", gpu=0, cohort=None, weight_milli=0, preemption=NEVER),
        ],
        local_queues=[ev.LocalQueueSpec(namespace=t, name="default", cluster_queue=t) for t in TEAMS],
        source="test",
    )
    small: worlds.Op = ("submit", "team-a", 1, 0)
    ops: list[worlds.Op] = [
        *[small] * 11, ("submit", "team-b", 1, 0), ("time", 1000), *[small] * 23,
        ("submit", "team-b", 1, 0), ("submit", "team-a", 4, 5), ("submit", "team-b", 4, 0), ("fact", 0, "admitted", 0),
    ]  # fmt: skip
    with mock.patch.object(worlds, "Harness", BothWays):
        h = worlds.run_world(config, ops)
    big = h.state.jobs["team-a/j36"]
    assert big.unschedulable is not None and not any(k.startswith("QuotaExceeded") for k in big.unschedulable)


def two_teams_without_cohort() -> ev.QueuesConfigured:
    """team-a with 1 GPU of quota, team-b with 4, neither borrowing nor preempting."""
    return ev.QueuesConfigured(
        cluster_queues=[
            cq("team-a", gpu=1, cohort=None, preemption=NEVER),
            cq("team-b", gpu=4, cohort=None, preemption=NEVER),
        ],
        local_queues=[ev.LocalQueueSpec(namespace=t, name="default", cluster_queue=t) for t in ("team-a", "team-b")],
        source="test",
    )


def test_a_lane_woken_by_quota_news_sleeps_again_once_the_quota_is_taken_and_is_checked_at_the_end() -> None:
    """team-a's j1 and j2 (one lane) wait for team-a's quota while c0 would take them. j0 ends:
    the pass wakes their lane, admits j1, and j2, whose queue has no quota left, sleeps again
    untried (``Asleep.again``). team-b's new job takes c0's last GPU in the same pass, so at the
    end no cluster takes j2: the full scan reports it waiting for capacity, and the indexed pass,
    which checks the shape it put back to sleep, is redone without the index."""
    h = BothWays()
    config = two_teams_without_cohort()
    h.feed(config, gpu_cluster("c0", 2))
    (nominated,) = h.feed(team_job("team-a", "j0"))
    assert isinstance(nominated, ev.Nominated)
    h.feed(ev.RemoteCreated(job=nominated.job, cluster="c0", attempt=nominated.attempt))
    h.feed(ev.RemoteAdmitted(job=nominated.job, cluster="c0", attempt=nominated.attempt))
    h.feed(team_job("team-a", "j1"), team_job("team-a", "j2"))
    assert h.state.index.classes, "j1 and j2 wait for team-a's quota, asleep"
    woken: list[bool] = []
    real = sleep_module.Asleep.again

    def spy(self: sleep_module.Asleep, *args: Any) -> bool:
        woken.append(real(self, *args))
        return woken[-1]

    h.inputs(
        ev.RemoteFinished(job=nominated.job, cluster="c0", attempt=nominated.attempt, succeeded=True),
        team_job("team-b", "b1"),
    )
    with mock.patch.object(sleep_module.Asleep, "again", spy):
        out = h.step()
    assert any(woken), "no lane was put back to sleep in the pass"
    assert {"Nominated", "Unschedulable"} <= {type(d).__name__ for d in out}
    j2 = h.state.jobs["team-a/j2"]
    assert j2.unschedulable is not None and not any(k.startswith("QuotaExceeded") for k in j2.unschedulable)


def test_a_lane_asleep_through_capacity_news_is_checked_where_the_capacity_came_free() -> None:
    """team-a's a1 waits for team-a's quota, its lane asleep, while c0 would take it. A job of
    team-b ends on c0 (capacity news there, quota news in team-b only): a1's lane sleeps on, its
    shape checked at the end, where it still fits (on c0, remembered). Another ends, and team-b's
    three new jobs take c0 in the same pass: the full scan, which looks at a1 (it fits where
    capacity came free), reports it waiting for capacity. The indexed pass finds at its end that
    a1's shape fits neither on c0 nor anywhere else, and is redone without the index."""
    h = BothWays()
    config = two_teams_without_cohort()
    h.feed(config, gpu_cluster("c0", 4))
    running: dict[str, ev.Nominated] = {}
    for team, name in (("team-a", "a0"), ("team-b", "b0"), ("team-b", "b00")):
        (nominated,) = h.feed(team_job(team, name))
        assert isinstance(nominated, ev.Nominated)
        h.feed(ev.RemoteCreated(job=nominated.job, cluster="c0", attempt=nominated.attempt))
        h.feed(ev.RemoteAdmitted(job=nominated.job, cluster="c0", attempt=nominated.attempt))
        running[name] = nominated
    h.feed(team_job("team-a", "a1"))
    assert h.state.index.classes, "a1 waits for team-a's quota, asleep"
    for name, more in (("b00", []), ("b0", [team_job("team-b", f"b{i}") for i in (1, 2, 3)])):
        done = running[name]
        h.feed(ev.RemoteFinished(job=done.job, cluster="c0", attempt=done.attempt, succeeded=True), *more)
        if not more:
            assert h.state.index.fits, "a1's shape was checked, and fit on c0"
    a1 = h.state.jobs["team-a/a1"]
    assert a1.unschedulable is not None and not any(k.startswith("QuotaExceeded") for k in a1.unschedulable)


def test_shape_facts_are_kept_across_passes_only_while_what_they_were_read_from_holds() -> None:
    """``PendingIndex.facts`` (``sleep.ShapeFacts``): what a pass needs of a sleeping shape is
    kept for the next ones, but re-read once the cluster table changes (a taint on c1 turns
    the shape away from it: capacity freed there is no news for it any more), and read from
    another member once its representative stops waiting."""
    h = BothWays()
    config = ev.QueuesConfigured(
        cluster_queues=[cq("team-a", gpu=1, cohort=None, preemption=NEVER)],
        local_queues=[ev.LocalQueueSpec(namespace="team-a", name="default", cluster_queue="team-a")],
        source="test",
    )
    h.feed(config, gpu_cluster("c0", 4), gpu_cluster("c1", 4))
    (nominated,) = h.feed(team_job("team-a", "a0"))
    assert isinstance(nominated, ev.Nominated)
    h.feed(ev.RemoteCreated(job=nominated.job, cluster=nominated.clusters[0], attempt=nominated.attempt))
    h.feed(ev.RemoteAdmitted(job=nominated.job, cluster=nominated.clusters[0], attempt=nominated.attempt))
    h.feed(team_job("team-a", "a1"), team_job("team-a", "a2"))
    state = h.state
    (key,) = state.index.shapes  # a1 and a2 wait for team-a's quota, one lane asleep

    def freed_on_c1() -> sleep_module.Asleep:
        """What a pass would leave asleep if capacity came free on c1 alone."""
        s = Scratch.start(state)
        s.help, s.freed, s.quota_freed = False, {state.clusters.index["c1"]}, set()  # that news alone
        return sleep_module.asleep(s, [])

    first = freed_on_c1()
    facts = state.index.facts[key]
    assert first.verify == [facts.rep], "it fits on c1: the full scan would look at it"
    assert freed_on_c1().shapes[key] is facts  # kept
    taint = ev.Taint(key="maintenance", effect="NoSchedule")
    h.feed(ev.ClusterUpdated(cluster="c1", capacity=dict(gpu_cluster("c1", 4).capacity), taints=[taint]))
    assert state.index.shapes and not freed_on_c1().verify, "c1 takes it no more: capacity there is no news"
    rep = state.index.facts[key].rep
    h.feed(ev.JobDeleted(job=rep.ref))
    freed_on_c1()
    assert state.index.facts[key].rep.key in state.waiting
