"""Hypothesis: the dispatch caches and shortcuts decide exactly as the plain path.

- static filter verdicts per part of the job (``FilterPlugin.cache_key``) vs the cascade;
- static raw scores per part of the job (``ScorePlugin.cache_key``) vs scoring each job;
- idle dynamic filters and score plugins skipped (``FilterPlugin.idle``, ``ScorePlugin.idle``)
  vs asked;
- ``Scratch.still_fits`` (a quota wait kept without filtering again) vs filtering again;
- a spec class's feasible clusters carried from one of its jobs to the next in a pass
  (``spec_classes``), only the clusters touched since filtered again, vs filtering each job;
- ``FilterPlugin.survivors`` (ClusterHealth, ClusterHeadroom) vs their verdicts;
- CapacityScore's columns and capacities per demand (``capacity._demanded``) vs worked out per job;
- the flavors and columns ``assign`` tries, per queue and demand (``admit._plan``), vs worked out per job;
- the wait ``assign`` gave a queue and demand while the usage up its cohort tree stays the same
  (``admit._waited``, ``Usage.stamp``) vs worked out per job;
- ``lifecycle.untouched`` (a job with no report, copy or round skips ``handle_job``'s checks) vs checked;
- preemption's look skipped when no running job could make room (``preemption.any_victims``) vs
  the full evaluation and victim selection, and only the preemptor's own queue's jobs kept when
  its rules take nothing across queues (``rules.takes_nothing_across``) vs every rule asked;
- a look that no cluster can take ending without asking the quota when its queue's rules take
  nothing (``queues.dispatch._rules_may_take``) vs asked and refused by each rule;
- the tournament's order keys kept across passes on the queue tree (``order.Tournament``) vs
  worked out in each pass;
- a sleeping shape's facts kept across passes (``sleep.ShapeFacts``) vs read again every pass, and
  the yes/no quota question before dispatch (``admit.admits``) vs ``assign``'s answer.

Two leaders fold the same random inputs (clusters with labels and taints, ClusterQueues in a
cohort, jobs with selectors, affinities, tolerations, preferences; heartbeats that change usage
and a cluster that goes silent), one with everything above switched off; every batch of
decisions must be equal.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import events as ev
from reconciler.core import decide, fold, lifecycle, new_state, sleep, spec_classes
from reconciler.core.framework import cycle
from reconciler.core.framework.profile import CompiledProfile
from reconciler.core.plugins import capacity
from reconciler.core.queues import admit, order, rules
from reconciler.core.scratch import Scratch
from tests.reconciler.core.tenancy import GPU, TEAMS, cq

REGIONS = ["eu", "us"]
TIERS = ["gold", "silver", "bronze"]


def _every_dynamic(profile: CompiledProfile, inp: Any) -> list[Any]:
    return [(name, plugin) for name, plugin in profile.filters if not plugin.static]


def _assigns(usage: Any, node: int, demand: Any, available: Any) -> bool:
    return not isinstance(admit.assign(usage, node, demand), admit.Wait)


@contextmanager
def plain() -> Iterator[None]:
    """Every cache and shortcut of this module's list off."""
    with (
        mock.patch.object(cycle, "_by_parts", lambda profile, inp: None),
        mock.patch.object(cycle, "_raw_scores", lambda plugin, inp, candidates, memo: None),
        mock.patch.object(cycle, "active_filters", _every_dynamic),
        mock.patch.object(cycle, "idle_scores", lambda profile, inp: frozenset()),
        mock.patch.object(spec_classes, "active_filters", _every_dynamic),
        mock.patch.object(spec_classes, "lookup", lambda s, profile, job: None),
        mock.patch.object(Scratch, "still_fits", lambda self, seen: False),
        mock.patch.object(Scratch, "_shift_few", lambda self, table, slot, demand, sign: False),
        mock.patch.object(cycle, "_survivors", lambda plugin, inp, slots: None),
        mock.patch.object(capacity, "_demanded", lambda table, demand_vec: None),
        mock.patch.object(admit, "_plan", lambda tree, node, demand: None),
        mock.patch.object(admit, "_waited", lambda usage, node, demand, stamp: None),
        mock.patch.object(lifecycle, "untouched", lambda job: False),
        mock.patch.object(sleep, "_still", lambda s, key, info: False),
        mock.patch.object(sleep, "admits", _assigns),
        mock.patch("reconciler.core.dispatch.any_victims", lambda s, job: True),
        mock.patch("reconciler.core.queues.dispatch.any_victims", lambda s, job: True),
        mock.patch.object(rules, "takes_nothing_across", lambda policy: False),
        mock.patch.object(order, "_KEYS", -1),
        mock.patch("reconciler.core.queues.dispatch._rules_may_take", lambda spec: True),
    ):
        yield


clusters = st.lists(
    st.builds(
        lambda i, region, tier, gen, cpu, gpu, taint, spot: ev.ClusterRegistered(
            cluster=f"c{i}",
            labels={"region": region, "tier": tier, "gen": str(gen)},
            taints=([ev.Taint(key="gpu", value="a100", effect="NoSchedule")] if taint else [])
            + ([ev.Taint(key="spot", effect="PreferNoSchedule")] if spot else []),
            capacity={"cpu": cpu, GPU: gpu},
        ),
        st.integers(0, 30),
        st.sampled_from(REGIONS),
        st.sampled_from(TIERS),
        st.integers(1, 4),
        st.sampled_from([4_000, 8_000, 16_000]),
        st.sampled_from([0, 2, 8]),
        st.booleans(),
        st.booleans(),
    ),
    min_size=1,
    max_size=10,
    unique_by=lambda c: c.cluster,
)


@st.composite
def jobs(draw: st.DrawFn, n: int) -> list[ev.JobSubmitted]:
    out = []
    for i in range(n):
        selector = {"region": draw(st.sampled_from(REGIONS))} if draw(st.booleans()) else {}
        required = []
        if draw(st.booleans()):
            values = draw(st.lists(st.sampled_from(TIERS), min_size=1, max_size=2, unique=True))
            exprs = [ev.MatchExpression(key="tier", operator="In", values=values)]
            if draw(st.booleans()):
                exprs.append(ev.MatchExpression(key="gen", operator="Gt", values=[str(draw(st.integers(0, 3)))]))
            required.append(ev.SelectorTerm(match_expressions=exprs))
        preferred = [
            ev.WeightedTerm(
                weight=draw(st.integers(1, 100)),
                term=ev.SelectorTerm(match_expressions=[ev.MatchExpression(key="tier", operator="In", values=[t])]),
            )
            for t in draw(st.lists(st.sampled_from(TIERS), max_size=2, unique=True))
        ]
        tolerations = []
        if draw(st.booleans()):
            tolerations.append(ev.Toleration(key="gpu", operator="Exists"))
        if draw(st.booleans()):
            tolerations.append(ev.Toleration(key="spot", operator="Exists"))
        requests = {"cpu": draw(st.sampled_from([500, 1000, 4000]))}
        if gpu := draw(st.sampled_from([0, 0, 1, 2])):
            requests[GPU] = gpu
        out.append(
            ev.JobSubmitted(
                job=ev.JobRef(namespace="ns", name=f"j{i}", uid=f"u{i}"),
                pod_sets=[ev.PodSet(name="main", count=draw(st.sampled_from([1, 2])), requests=requests)],
                placement=ev.Placement(
                    cluster_selector=selector,
                    cluster_affinity=ev.ClusterAffinity(required=required, preferred=preferred),
                    cluster_tolerations=tolerations,
                ),
                priority=draw(st.sampled_from([0, 0, 5])),
                cluster_queue=draw(st.sampled_from(TEAMS)),
            )
        )
    return out


class Leader:
    def __init__(self) -> None:
        self.state = new_state()
        self.seq = 0
        self.now = 1_000_000

    def fold(self, event: ev.AnyEvent, batch: tuple[int, int] | None = None) -> None:
        self.seq += 1
        fold(self.state, ev.LogEntry(seq=self.seq, at_ms=self.now, event=event, batch=batch))

    def step(self, inputs: list[ev.InputEvent]) -> list[ev.DecisionEvent]:
        for e in inputs:
            self.fold(e)
        out = decide(self.state)
        for i, d in enumerate(out):
            self.fold(d, (i, len(out)))
        return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fleet=clusters,
    first=jobs(12),
    later=jobs(8),
    gpu=st.sampled_from([0, 2, 4]),
    silent=st.booleans(),
)
def test_caches_decide_as_the_plain_path(
    fleet: list[ev.ClusterRegistered], first: list[ev.JobSubmitted], later: list[ev.JobSubmitted], gpu: int, silent: bool
) -> None:
    queues = ev.QueuesConfigured(cluster_queues=[cq(t, gpu=gpu, borrowing_limit=1) for t in TEAMS], source="test")
    # The later batch also brings each first job's spec again: classes of several jobs in a pass.
    later = [
        ev.JobSubmitted(
            job=ev.JobRef(namespace="ns", name=f"k{i}", uid=f"v{i}"),
            pod_sets=j.pod_sets,
            placement=j.placement,
            priority=j.priority,
            cluster_queue=j.cluster_queue,
        )
        for i, j in enumerate([*later, *first])
    ]
    cached, uncached = Leader(), Leader()
    beats = [ev.ClusterHeartbeat(cluster=c.cluster, usage={"cpu": 1000}) for c in fleet[1:] if silent] or [
        ev.ClusterHeartbeat(cluster=c.cluster) for c in fleet
    ]
    batches: list[list[ev.InputEvent]] = [[queues, *fleet], list(first), beats, list(later)]
    for i, batch in enumerate(batches):
        for leader in (cached, uncached):
            leader.now += 70_000 if i == 2 else 1_000  # long enough for a silent cluster to be lost (60 s)
        got = cached.step(batch)
        with plain():
            want = uncached.step(batch)
        assert got == want, f"batch {i}"
