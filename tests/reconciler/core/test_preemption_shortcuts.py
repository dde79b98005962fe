"""Hypothesis: preemption's shortcuts against the full look, on crowded clusters with queues.

- ``preemption.any_victims`` (no running job could make room: the full evaluation and victim
  selection are skipped) must never say no where ``select_victims`` would find victims;
- ``keep_priority_victims`` keeping only the preemptor's own queue's jobs when its rules take
  nothing across queues (``rules.takes_nothing_across``) must keep what asking every rule keeps.

Each waiting job of a random world is asked both ways, on the scratch of a pass.
"""

from __future__ import annotations

import os
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import events as ev
from reconciler.core import phases
from reconciler.core.framework.cycle import evaluate
from reconciler.core.preemption import any_victims, select_victims
from reconciler.core.queues import rules
from reconciler.core.scratch import Scratch
from tests.reconciler.core.harness import Harness, of_type
from tests.reconciler.core.tenancy import TEAMS, config, cq, gpu_cluster, team_job

RULES = [
    ev.QueuePreemption(),
    ev.QueuePreemption(within_cluster_queue="LowerPriority"),
    ev.QueuePreemption(reclaim_within_cohort="LowerPriority"),
    ev.QueuePreemption(reclaim_within_cohort="Any", borrow_within_cohort="LowerPriority"),
]


@settings(max_examples=int(os.environ.get("KD_EXAMPLES", "50")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_preemption_shortcuts_agree_with_the_full_look(data: st.DataObject) -> None:
    h = Harness()
    queues = [
        cq(t, gpu=data.draw(st.sampled_from([2, 4, 8])), borrowing_limit=8, preemption=data.draw(st.sampled_from(RULES)))
        for t in TEAMS
    ]
    h.inputs(config(*queues), *(gpu_cluster(f"c{i}", gpu=8) for i in range(3)))
    h.step()
    for i in range(data.draw(st.integers(4, 16))):
        team = data.draw(st.sampled_from(TEAMS))
        spec = team_job(team, f"j{i}", gpu=data.draw(st.sampled_from([1, 2, 4])), priority=data.draw(st.sampled_from([0, 1, 5])))
        for n in of_type(h.feed(spec), ev.Nominated):
            h.feed(ev.RemoteAdmitted(job=n.job, cluster=n.clusters[0], attempt=n.attempt))
    s = Scratch.start(h.state)
    waiting = [j for j in h.state.jobs.values() if j.phase in phases.WAITING]
    for job in waiting:
        profile = h.state.profiles[job.placement.profile]
        full = evaluate(profile, s.cycle_input(job), spec_key=job.spec_key, scores=False, full=True)
        if not any_victims(s, job):
            assert select_victims(s, job, evaluation=full) is None, job.key
        pool = s.running()
        n = pool.size
        fast = pool.alive[:n] & (pool.priority[:n] < job.priority)
        every = fast.copy()
        rules.keep_priority_victims(s, job, pool, fast)
        with mock.patch.object(rules, "takes_nothing_across", lambda policy: False):
            rules.keep_priority_victims(s, job, pool, every)
        assert np.array_equal(fast, every), job.key
