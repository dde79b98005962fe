"""Fold of ``ClusterCapacityReported``: a worker's node groups and Kueue queues as facts on its
cluster record (so snapshots carry them), kept apart from the rest of ``fold``.

A report only bumps the table's ``facts_version`` (the node and worker-queue arrays rebuild on
it), not its ``version``: the cluster-level arrays and the static filter caches stay valid.
Facts that changed count as capacity that may have come free there, as a heartbeat whose usage
dropped does, so waiting jobs that could use the cluster get another look.
"""

from __future__ import annotations

from eventlog import events as ev
from reconciler.core.clusters import REMOVED
from reconciler.core.facts import apply_report
from reconciler.core.state import State


def capacity_reported(state: State, e: ev.ClusterCapacityReported) -> None:
    table = state.clusters
    slot = table.index.get(e.cluster)
    if slot is None:
        return  # a report racing the registration: the next full report carries it
    record = table.records[slot]
    if record.health == REMOVED:
        return
    facts, nodes_changed, queues_changed = apply_report(record.facts, e)
    if not (nodes_changed or queues_changed):
        return
    new_columns = False
    for group in e.node_groups:
        for name in group.allocatable:
            new_columns |= table.resources.add(name)
        for b in group.bins:
            for name in b.free:
                new_columns |= table.resources.add(name)
    for queue in e.queues:
        for flavor in queue.flavors:
            for name in flavor.resources:
                new_columns |= table.resources.add(name)
    table.set_facts(slot, facts)
    if new_columns:
        table.touch()  # every array grows a column
    state.freed[e.cluster] = None
