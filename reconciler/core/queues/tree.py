"""The queue configuration compiled for the core: one node per ClusterQueue and cohort.

Quotas are integer tuples indexed by (flavor, resource) column. A cohort a ClusterQueue names
but the config does not define is an empty cohort at the root, as in Kueue. Nodes are numbered
in name order (cohorts and queues apart), so everything derived from them is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eventlog import events as ev

FlavorResource = tuple[str, str]

CLUSTER_QUEUE = "ClusterQueue"
COHORT = "Cohort"


@dataclass(frozen=True)
class Group:
    """A resource group: the resources it covers and its flavors, in the order they are tried."""

    covered: tuple[str, ...]
    flavors: tuple[str, ...]


@dataclass
class Node:
    name: str
    kind: str
    index: int
    parent: int | None
    weight_milli: int
    nominal: list[int]  # the node's own quota (a cohort's own resource groups)
    borrowing_limit: list[int | None]
    lending_limit: list[int | None]
    children: list[int] = field(default_factory=list)
    subtree_quota: list[int] = field(default_factory=list)
    guaranteed: list[int] = field(default_factory=list)
    groups: tuple[Group, ...] = ()
    spec: ev.ClusterQueueSpec | None = None

    @property
    def is_queue(self) -> bool:
        return self.kind == CLUSTER_QUEUE


@dataclass
class QueueTree:
    config: ev.QueuesConfigured
    columns: list[FlavorResource]
    column: dict[FlavorResource, int]
    nodes: list[Node]
    queue: dict[str, int]  # ClusterQueue name -> node
    cohort: dict[str, int]  # cohort name -> node
    local_queues: dict[tuple[str, str], ev.LocalQueueSpec]  # (namespace, name) -> spec
    roots: list[int]  # nodes without a parent, in name order
    resources: list[str]  # resource names over all columns, sorted
    # Pure memo for ``admit.assign``: per (node, demand), the flavors to try and their columns.
    plans: dict[tuple[int, int], Any] = field(default_factory=dict, compare=False, repr=False)
    # Pure memo for ``order.Tournament``: per fleet capacity, each node's order key by its usage.
    shares: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def ancestors(self, node: int) -> list[int]:
        """The node and its cohorts up to the root."""
        out = [node]
        parent = self.nodes[node].parent
        while parent is not None:
            out.append(parent)
            parent = self.nodes[parent].parent
        return out

    def root_of(self, node: int) -> int:
        nodes = self.nodes
        parent = nodes[node].parent
        while parent is not None:  # ancestors()[-1], without the list (called per victim looked at)
            node, parent = parent, nodes[parent].parent
        return node

    def queues_under(self, node: int) -> list[int]:
        n = self.nodes[node]
        if n.is_queue:
            return [node]
        return [q for c in n.children for q in self.queues_under(c)]


def compile_queues(config: ev.QueuesConfigured) -> QueueTree | None:
    """None when the config has no ClusterQueue: tenancy is off."""
    if not config.cluster_queues:
        return None
    pairs: dict[FlavorResource, None] = {}
    for groups in [cq.resource_groups for cq in config.cluster_queues] + [c.resource_groups for c in config.cohorts]:
        for group in groups:
            for flavor in group.flavors:
                for quota in flavor.resources:
                    pairs[(flavor.name, quota.name)] = None
    columns = sorted(pairs)
    column = {fr: i for i, fr in enumerate(columns)}
    width = len(columns)

    def quotas(groups: list[ev.ResourceGroup]) -> tuple[list[int], list[int | None], list[int | None]]:
        nominal = [0] * width
        borrowing: list[int | None] = [None] * width
        lending: list[int | None] = [None] * width
        for group in groups:
            for flavor in group.flavors:
                for q in flavor.resources:
                    col = column[(flavor.name, q.name)]
                    nominal[col] = q.nominal
                    borrowing[col] = q.borrowing_limit
                    lending[col] = q.lending_limit
        return nominal, borrowing, lending

    cohort_specs = {c.name: c for c in config.cohorts}
    names = dict.fromkeys(c.name for c in config.cohorts)
    for cq in config.cluster_queues:
        if cq.cohort:
            names[cq.cohort] = None
    for c in config.cohorts:
        if c.parent:
            names[c.parent] = None
    nodes: list[Node] = []
    cohort: dict[str, int] = {}
    for name in sorted(names):
        spec = cohort_specs.get(name)
        nominal, borrowing, lending = quotas(spec.resource_groups if spec else [])
        cohort[name] = len(nodes)
        nodes.append(
            Node(
                name=name,
                kind=COHORT,
                index=len(nodes),
                parent=None,
                weight_milli=spec.weight_milli if spec else 1000,
                nominal=nominal,
                borrowing_limit=borrowing,
                lending_limit=lending,
            )
        )
    for name in sorted(names):
        spec = cohort_specs.get(name)
        if spec is not None and spec.parent:
            nodes[cohort[name]].parent = cohort[spec.parent]
    queue: dict[str, int] = {}
    for cq in sorted(config.cluster_queues, key=lambda q: q.name):
        nominal, borrowing, lending = quotas(cq.resource_groups)
        queue[cq.name] = len(nodes)
        nodes.append(
            Node(
                name=cq.name,
                kind=CLUSTER_QUEUE,
                index=len(nodes),
                parent=cohort[cq.cohort] if cq.cohort else None,
                weight_milli=cq.weight_milli,
                nominal=nominal,
                borrowing_limit=borrowing,
                lending_limit=lending,
                groups=tuple(
                    Group(covered=tuple(g.covered_resources), flavors=tuple(f.name for f in g.flavors))
                    for g in cq.resource_groups
                ),
                spec=cq,
            )
        )
    for node in nodes:
        if node.parent is not None:
            nodes[node.parent].children.append(node.index)
    roots = [n.index for n in nodes if n.parent is None]
    for root in roots:
        _subtree(nodes, root, width)
    return QueueTree(
        config=config,
        columns=columns,
        column=column,
        nodes=nodes,
        queue=queue,
        cohort=cohort,
        local_queues={(lq.namespace, lq.name): lq for lq in config.local_queues},
        roots=sorted(roots, key=lambda i: nodes[i].name),
        resources=sorted({r for _, r in columns}),
    )


def _subtree(nodes: list[Node], index: int, width: int) -> None:
    """Kueue's subtree quota: a node's own quota plus what each child can lend it; and its
    guaranteed quota: what it keeps for itself (subtree quota beyond its lending limit)."""
    node = nodes[index]
    quota = list(node.nominal)
    for child in node.children:
        _subtree(nodes, child, width)
        c = nodes[child]
        for col in range(width):
            quota[col] += c.subtree_quota[col] - c.guaranteed[col]
    node.subtree_quota = quota
    node.guaranteed = [
        max(0, quota[col] - limit) if (limit := node.lending_limit[col]) is not None else 0 for col in range(width)
    ]
