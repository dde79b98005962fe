"""Capacity reports folded into facts: any split of a report into changes ends in the same facts,
and a snapshot carries them."""

from __future__ import annotations

import itertools
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import events as ev
from reconciler.core import dump_state, load_state
from reconciler.core.nodes import node_arrays
from tests.reconciler.core.capacity import GPU, gang, group, pods, report
from tests.reconciler.core.harness import Harness, cluster

EXAMPLES = settings(
    max_examples=int(os.environ.get("KD_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

groups_st = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d", "e"]),
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 8)), min_size=1, max_size=3),
    max_size=5,
)
queues_st = st.dictionaries(st.sampled_from(["q1", "q2", "q3"]), st.integers(0, 10), max_size=3)


def _group(gid: str, rows: list[tuple[int, int]]) -> ev.NodeGroup:
    return group(gid, *[(count, {"cpu": 4_000, GPU: g}) for count, g in rows], labels={"rack": gid})


def _queue(name: str, nominal: int) -> ev.WorkerQueueFact:
    return ev.WorkerQueueFact(
        name=name, flavors=[ev.FlavorFact(name="f", resources={GPU: ev.QuotaFact(nominal=nominal)})]
    )


def _full(groups: dict[str, list[tuple[int, int]]], queues: dict[str, int]) -> ev.ClusterCapacityReported:
    return ev.ClusterCapacityReported(
        cluster="w",
        full=True,
        node_groups=[_group(k, v) for k, v in groups.items()],
        topology_levels=["zone", "rack"],
        queues=[_queue(k, v) for k, v in queues.items()],
        local_queues={f"team/{k}": k for k in queues},
    )


def _facts_after(*reports: ev.ClusterCapacityReported) -> object:
    h = Harness()
    h.inputs(cluster("w", gpu=64), *reports)
    return h.state.clusters.records[0].facts


@EXAMPLES
@given(
    before=groups_st,
    groups=groups_st,
    queues=queues_st,
    junk=groups_st,
    cuts=st.lists(st.integers(0, 20), max_size=4),
    where=st.integers(0, 4),
)
def test_any_split_into_changes_equals_the_full_report(
    before: dict[str, list[tuple[int, int]]],
    groups: dict[str, list[tuple[int, int]]],
    queues: dict[str, int],
    junk: dict[str, list[tuple[int, int]]],
    cuts: list[int],
    where: int,
) -> None:
    full = _full(groups, queues)
    items: list[tuple[str, object]] = [("g", g) for g in full.node_groups] + [("q", q) for q in full.queues]
    # Groups the full report does not have, added then removed again by later changes.
    extra = [_group("x" + k, v) for k, v in junk.items()]
    bounds = sorted({min(c, len(items)) for c in cuts} | {0, len(items)})
    parts = [items[a:b] for a, b in itertools.pairwise(bounds)] or [[]]
    reports = []
    for i, part in enumerate(parts):
        reports.append(
            ev.ClusterCapacityReported(
                cluster="w",
                full=i == 0,
                node_groups=[x for kind, x in part if kind == "g"] + (extra if i == 0 else []),  # type: ignore[misc]
                queues=[x for kind, x in part if kind == "q"],  # type: ignore[misc]
                topology_levels=full.topology_levels if i == min(where, len(parts) - 1) else None,
                local_queues=full.local_queues if i == min(where, len(parts) - 1) else None,
            )
        )
    gone = [ev.NodeGroup(id=g.id) for g in extra]
    reports.append(ev.ClusterCapacityReported(cluster="w", node_groups=gone))
    stale = ev.ClusterCapacityReported(
        cluster="w",
        full=True,
        node_groups=[_group("old" + k, v) for k, v in before.items()],
        queues=[_queue("old", 1)],
    )
    assert _facts_after(stale, *reports) == _facts_after(full)


def test_a_snapshot_carries_the_facts_and_decides_the_same() -> None:
    h = Harness()
    h.inputs(
        cluster("a", gpu=16),
        cluster("b", gpu=16),
        report("a", group("g", (2, {"cpu": 8_000, GPU: 1}))),
        report("b", group("g", (1, {"cpu": 8_000, GPU: 8})), topology_levels=["rack"]),
    )
    restored = load_state(dump_state(h.state))
    assert [r.facts for r in restored.clusters.records] == [r.facts for r in h.state.clusters.records]
    before, after = node_arrays(h.state.clusters), node_arrays(restored.clusters)
    assert np.array_equal(before.row_free, after.row_free) and np.array_equal(before.row_slot, after.row_slot)
    spec = gang("train", pods("main", 1, cpu=1000, gpu=8))
    again = Harness()
    again.state = restored
    again.now = h.now
    again.log = list(h.log)
    assert h.feed(spec) == again.feed(spec)


def test_heartbeats_do_not_rebuild_the_node_arrays() -> None:
    h = Harness()
    h.inputs(cluster("a", gpu=16), report("a", group("g", (2, {"cpu": 8_000, GPU: 1}))))
    arrays = node_arrays(h.state.clusters)
    h.inputs(ev.ClusterHeartbeat(cluster="a", usage={"cpu": 1000}))
    assert node_arrays(h.state.clusters) is arrays
    h.inputs(report("a", group("g", (3, {"cpu": 8_000, GPU: 1})), full=False))
    assert node_arrays(h.state.clusters) is not arrays


def test_a_report_for_an_unknown_cluster_is_ignored_and_an_update_keeps_facts() -> None:
    h = Harness()
    h.inputs(report("nowhere", group("g", (2, {"cpu": 8_000}))), cluster("a", gpu=16))
    assert h.state.clusters.records[0].facts is None
    h.inputs(report("a", group("g", (2, {"cpu": 8_000}))))
    facts = h.state.clusters.records[0].facts
    h.inputs(ev.ClusterUpdated(cluster="a", labels={"x": "y"}, capacity={"cpu": 64_000}))
    assert h.state.clusters.records[0].facts == facts


def test_a_report_rebuilds_only_the_reporting_workers_rows() -> None:
    h = Harness()
    h.inputs(cluster("a", gpu=16), cluster("b", gpu=16))
    h.inputs(
        report("a", group("g", (2, {"cpu": 8_000, GPU: 1}))),
        report("b", group("g", (1, {"cpu": 8_000, GPU: 8}))),
    )
    node_arrays(h.state.clusters)
    _, blocks = h.state.clusters.derived["node_blocks"]
    a, b = blocks.by_slot[0], blocks.by_slot[1]
    h.inputs(report("b", group("g", (2, {"cpu": 8_000, GPU: 8})), full=False))
    arrays = node_arrays(h.state.clusters)
    assert blocks.by_slot[0] is a and blocks.by_slot[1] is not b
    assert arrays.row_count.tolist() == [2, 2]
    assert arrays.row_free[:, h.state.clusters.resources.index[GPU]].tolist() == [1, 8]
