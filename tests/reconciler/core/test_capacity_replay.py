"""A log with capacity facts replays to the same decisions, from the start and from a snapshot
taken anywhere in it (the facts, and what the filters derive from them, are all in the state)."""

from __future__ import annotations

import random

import msgspec
import pytest

from eventlog import events as ev
from reconciler.core import decide, dump_state, fold, load_state, new_state
from tests.reconciler.core.capacity import GPU, gang, group, pods, report
from tests.reconciler.core.harness import Harness, cluster

RACK = "cloud.provider.com/rack"


def _world(seed: int) -> Harness:
    rng = random.Random(seed)
    h = Harness()
    for c in range(4):
        h.inputs(cluster(f"w{c}", gpu=64))
    for n in range(60):
        c = f"w{rng.randrange(4)}"
        roll = rng.random()
        if roll < 0.25:
            groups = [
                group(
                    f"r{r}",
                    *[
                        (rng.randint(1, 3), {"cpu": 16_000, GPU: rng.choice([0, 1, 2, 4, 8])})
                        for _ in range(2)
                    ],
                    labels={RACK: f"r{r}"},
                )
                for r in range(rng.randint(1, 3))
            ]
            h.inputs(report(c, *groups, full=rng.random() < 0.5, topology_levels=[RACK]))
        elif roll < 0.4:
            queue = ev.WorkerQueueFact(
                name="gpu",
                cohort="co",
                flavors=[ev.FlavorFact(name="f", resources={GPU: ev.QuotaFact(nominal=rng.randint(4, 16))})],
            )
            h.inputs(
                ev.ClusterCapacityReported(cluster=c, queues=[queue], local_queues={"team/default": "gpu"})
            )
        else:
            ps = pods("main", rng.randint(1, 3), cpu=1000, gpu=rng.choice([1, 2, 4, 8]))
            if rng.random() < 0.3:
                ps = msgspec.structs.replace(ps, topology=ev.TopologyRequest(required=RACK))
            h.inputs(gang(f"j{n}", ps))
        for d in h.step():
            if isinstance(d, ev.Nominated) and rng.random() < 0.5:
                h.inputs(ev.RemoteAdmitted(job=d.job, cluster=d.clusters[0], attempt=d.attempt))
        h.now += 1_000
    return h


def _recompute(log: list[ev.LogEntry], *, snapshot_at: int) -> None:
    state = new_state()
    i = 0
    while i < len(log):
        entry = log[i]
        if entry.seq == snapshot_at:
            state = load_state(dump_state(state))
        if entry.batch is not None and entry.batch[0] == 0:
            recorded = [e.event for e in log[i : i + entry.batch[1]]]
            assert decide(state) == recorded, f"batch at seq {entry.seq}"
            for e in log[i : i + entry.batch[1]]:
                fold(state, e)
            i += entry.batch[1]
            continue
        fold(state, entry)
        i += 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_log_with_capacity_facts_replays_identically_from_any_snapshot(seed: int) -> None:
    h = _world(seed)
    assert any(isinstance(e.event, ev.ClusterCapacityReported) for e in h.log)
    assert any(isinstance(e.event, ev.Unschedulable) for e in h.log)  # the facts turned some away
    rng = random.Random(seed)
    for at in [0, *rng.sample(range(1, len(h.log)), 3)]:
        _recompute(h.log, snapshot_at=at)
