"""What a worker reported it can really run (``ClusterCapacityReported``), kept per cluster.

A report is either full (replaces everything known) or a change (listed node groups and queues
replace the ones with the same id; a group without bins and a queue in ``queues_removed`` are
gone; ``topology_levels``/``local_queues`` None = unchanged). ``apply_report`` folds either kind
into the same ``ClusterFacts``, so any split of a report into changes ends in the same facts.
"""

from __future__ import annotations

from msgspec import Struct, field

from eventlog.events import ClusterCapacityReported, NodeGroup, WorkerQueueFact


class ClusterFacts(Struct, kw_only=True):
    node_groups: dict[str, NodeGroup] = field(default_factory=dict)  # by id, sorted on write
    topology_levels: list[str] = field(default_factory=list)  # node label keys, widest first
    queues: dict[str, WorkerQueueFact] = field(default_factory=dict)  # worker ClusterQueues by name
    local_queues: dict[str, str] = field(default_factory=dict)  # "namespace/name" -> ClusterQueue
    # Whether the worker ever reported queues (it runs Kueue): a worker that did and has no
    # LocalQueue for a job does not admit it; one that never did is judged by its nodes only.
    kueue: bool = False

    @property
    def has_nodes(self) -> bool:
        return bool(self.node_groups)


def apply_report(facts: ClusterFacts | None, e: ClusterCapacityReported) -> tuple[ClusterFacts, bool, bool]:
    """The facts after the report, and whether the node side / the queue side changed."""
    old = facts if facts is not None and not e.full else ClusterFacts()
    groups = dict(old.node_groups)
    for group in e.node_groups:
        if group.bins:
            groups[group.id] = group
        else:
            groups.pop(group.id, None)
    queues = dict(old.queues)
    for name in e.queues_removed:
        queues.pop(name, None)
    for queue in e.queues:
        queues[queue.name] = queue
    levels = list(e.topology_levels) if e.topology_levels is not None else list(old.topology_levels)
    local = dict(e.local_queues) if e.local_queues is not None else dict(old.local_queues)
    kueue = old.kueue or bool(e.queues) or e.local_queues is not None or bool(e.queues_removed)
    new = ClusterFacts(
        node_groups={k: groups[k] for k in sorted(groups)},
        topology_levels=levels,
        queues={k: queues[k] for k in sorted(queues)},
        local_queues={k: local[k] for k in sorted(local)},
        kueue=kueue,
    )
    before = facts or ClusterFacts()
    nodes_changed = new.node_groups != before.node_groups or new.topology_levels != before.topology_levels
    queues_changed = (
        new.queues != before.queues or new.local_queues != before.local_queues or new.kueue != before.kueue
    )
    return new, nodes_changed, queues_changed
