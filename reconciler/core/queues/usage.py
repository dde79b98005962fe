"""Quota usage per node and (flavor, resource), and what a queue may still take.

``usage[n]`` follows Kueue's resource nodes: for a ClusterQueue what its admitted jobs hold; for
a cohort what its children use beyond their guaranteed quota (what they borrow from it or lend
into it). ``total[n]`` is the plain sum over the queues below a node, for fair sharing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventlog.events import Resources
from reconciler.core.jobs import Charge
from reconciler.core.queues.tree import QueueTree

if TYPE_CHECKING:
    from reconciler.core.queues.admit import Wait


class Usage:
    def __init__(self, tree: QueueTree) -> None:
        self.tree = tree
        width = len(tree.columns)
        self.usage: list[list[int]] = [[0] * width for _ in tree.nodes]
        self.total: list[list[int]] = [[0] * width for _ in tree.nodes]
        self.version: list[int] = [0] * len(tree.nodes)  # bumped when a node's usage changes
        # Rows this object may write to; a copy shares the others' rows with its original until
        # it first writes them (every decide pass copies the usage and most change a few nodes).
        self._owned: set[int] | None = None  # None: every row
        # ``admit.assign``'s waits, per (node, demand id): (demand, ``stamp``, wait). Per object.
        self.waits: dict[tuple[int, int], tuple[Resources, tuple[int, ...], Wait]] = {}

    def copy(self) -> Usage:
        """Copy-on-write, per node: writes to either object afterwards are not seen by the other."""
        other = Usage.__new__(Usage)
        other.tree = self.tree
        other.usage = list(self.usage)
        other.total = list(self.total)
        other.version = list(self.version)
        other._owned = set()
        other.waits = {}
        self._owned = set()  # the rows are shared both ways now
        return other

    def stamp(self, node: int) -> tuple[int, ...]:
        """The versions of the node and its cohorts up to the root: what the node may take
        (``available``) is the same while they are. Versions only grow, but a copy counts on from
        its original's, so stamps compare only within one object."""
        version = self.version
        nodes = self.tree.nodes
        out = [version[node]]
        parent = nodes[node].parent
        while parent is not None:
            out.append(version[parent])
            parent = nodes[parent].parent
        return tuple(out)

    def _own(self, node: int) -> None:
        owned = self._owned
        if owned is not None and node not in owned:
            self.usage[node] = list(self.usage[node])
            self.total[node] = list(self.total[node])
            owned.add(node)

    def add(self, node: int, col: int, delta: int) -> None:
        nodes = self.tree.nodes
        total = delta
        while True:
            self._own(node)
            n = nodes[node]
            old = self.usage[node][col]
            new = old + delta
            self.usage[node][col] = new
            self.total[node][col] += total
            self.version[node] += 1
            if n.parent is None:
                return
            g = n.guaranteed[col]
            delta = max(0, new - g) - max(0, old - g)
            node = n.parent
            if delta == 0:
                # Nothing more reaches the cohorts above, but their totals still move.
                while True:
                    self._own(node)
                    self.total[node][col] += total
                    self.version[node] += 1
                    parent = nodes[node].parent
                    if parent is None:
                        return
                    node = parent

    def apply(self, charge: Charge, sign: int) -> bool:
        """Charge (+1) or release (-1) a job's quota; False if its queue is not configured now."""
        node = self.tree.queue.get(charge.cluster_queue)
        if node is None:
            return False
        for flavor, resource, amount in charge.amounts:
            col = self.tree.column.get((flavor, resource))
            if col is not None and amount:
                self.add(node, col, sign * amount)
        return True

    def available(self, node: int, col: int) -> int:
        """What the node may still take of the column (Kueue's ``available``): its guaranteed
        quota left, plus what its cohort can give it, capped by its borrowing limit."""
        n = self.tree.nodes[node]
        used = self.usage[node][col]
        if n.parent is None:
            return n.subtree_quota[col] - used
        g = n.guaranteed[col]
        local = max(0, g - used)
        from_parent = self.available(n.parent, col)
        limit = n.borrowing_limit[col]
        if limit is not None:
            stored = n.subtree_quota[col] - g
            used_in_parent = max(0, used - g)
            from_parent = min(stored - used_in_parent + limit, from_parent)
        return local + from_parent

    def fits(self, node: int, amounts: list[tuple[int, int]]) -> bool:
        return all(amount <= self.available(node, col) for col, amount in amounts if amount)

    def by_resource(self, node: int) -> Resources:
        """The node's total usage per resource name (all flavors), for fair sharing."""
        out: Resources = {}
        row = self.total[node]
        for col, (_, resource) in enumerate(self.tree.columns):
            if row[col]:
                out[resource] = out.get(resource, 0) + row[col]
        return out
