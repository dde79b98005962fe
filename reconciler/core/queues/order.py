"""Weighted dominant resource fairness across ClusterQueues, hierarchical through cohorts.

A node's share is the largest, over resources, of its usage divided by the fleet's capacity
(every Ready cluster), divided by its weight; exact fractions, ties by name. The next job to
dispatch comes from a tournament: from the root down, the child with the lowest share among
those with jobs still to try, until a ClusterQueue is reached (Kueue's hierarchical fair
sharing). A weight of 0 means the node only gets what nobody else wants.
"""

from __future__ import annotations

from fractions import Fraction
from math import gcd

from eventlog.events import Resources
from reconciler.core.queues.usage import Usage

ShareKey = tuple[bool, Fraction, str]
# What the tournament compares: the share key with the share's float in front. float() of a
# Fraction is correctly rounded, hence monotonic: where the floats differ they order the shares
# as the fractions would, and where they are equal the exact fractions decide. Same order as
# ShareKey, without a Python-level Fraction comparison for every pair of nodes.
# (A whole share is kept as an int: equal ints compare in C, and ints and Fractions compare exactly.)
OrderKey = tuple[bool, float, Fraction | int, str]
_FLEETS = 16  # fleet capacities the tree keeps keys for (each a cluster lost, recovered, resized)
_KEYS = 100_000  # keys kept per fleet before starting over


def dominant(usage: Usage, node: int, fleet: Resources) -> tuple[int, int]:
    """The node's dominant share as (numerator, denominator), not reduced: the largest used/cap
    over resources, found by cross-multiplying (a ``Fraction`` per resource cost more than the
    tournament's comparisons)."""
    num, den = 0, 1
    for resource, used in usage.by_resource(node).items():
        cap = fleet.get(resource, 0)
        if cap > 0 and used > 0 and used * den > num * cap:
            num, den = used, cap
    return num, den


def share(usage: Usage, node: int, fleet: Resources) -> Fraction:
    """Unweighted dominant share of the node (its subtree, for a cohort)."""
    return Fraction(*dominant(usage, node, fleet))


def weighted(usage: Usage, node: int, fleet: Resources) -> ShareKey:
    n = usage.tree.nodes[node]
    num, den = dominant(usage, node, fleet)
    if n.weight_milli <= 0:
        return (True, Fraction(num, den), n.name)
    return (False, Fraction(num * 1000, den * n.weight_milli), n.name)


def order_key(key: ShareKey) -> OrderKey:
    zero, frac, name = key
    return (zero, float(frac), frac.numerator if frac.denominator == 1 else frac, name)


class Tournament:
    """Picks the ClusterQueue to dispatch from next, among those still active in this pass."""

    def __init__(self, usage: Usage, fleet: Resources, active: list[int]) -> None:
        self.usage = usage
        self.fleet = fleet
        tree = usage.tree
        self.count = [0] * len(tree.nodes)
        for q in active:
            for a in tree.ancestors(q):
                self.count[a] += 1
        self._keys: dict[int, tuple[int, OrderKey]] = {}
        # A node's key is a function of its usage totals, weight and name, and the fleet: kept
        # across passes on the tree (most passes see the usage of the last one, or a former one).
        memo = tree.shares
        if len(memo) > _FLEETS:
            memo.clear()
        fleet_key = tuple(sorted(fleet.items()))
        self._shared: dict[tuple[int, ...], OrderKey]
        self._exact: dict[tuple[int, int], Fraction]
        self._shared, self._exact = memo.setdefault(fleet_key, ({}, {}))
        if len(self._shared) > _KEYS:
            self._shared.clear()
            self._exact.clear()

    def key(self, node: int) -> OrderKey:
        version = self.usage.version[node]
        cached = self._keys.get(node)
        if cached is not None and cached[0] == version:
            return cached[1]
        usage = (node, *self.usage.total[node])
        k = self._shared.get(usage)
        if k is None:
            k = self._shared[usage] = self._order_key(node)
        self._keys[node] = (version, k)
        return k

    def _order_key(self, node: int) -> OrderKey:
        """``order_key(weighted(...))``, reduced with ``gcd`` instead of a new ``Fraction`` each
        time: equal shares are one interned object (on a tie of floats the tuple comparison
        then stops at identity instead of calling Fraction.__eq__; queues with equal usage tie
        often), and ``a / b`` of the reduced ints is ``float(Fraction(a, b))``."""
        n = self.usage.tree.nodes[node]
        num, den = dominant(self.usage, node, self.fleet)
        zero = n.weight_milli <= 0
        if not zero:
            num, den = num * 1000, den * n.weight_milli
        g = gcd(num, den)
        num, den = num // g, den // g
        if den == 1:
            return (zero, float(num), num, n.name)
        exact = self._exact.get((num, den))
        if exact is None:
            exact = self._exact[(num, den)] = Fraction(num, den)
        return (zero, num / den, exact, n.name)

    def pick(self) -> int | None:
        """From the roots down, the child with the lowest key among those still active (the first
        of equal keys, as ``min``)."""
        tree = self.usage.tree
        count, keys, versions = self.count, self._keys, self.usage.version
        level = tree.roots
        while True:
            best: int | None = None
            best_key: OrderKey | None = None
            for node in level:
                if not count[node]:
                    continue
                cached = keys.get(node)
                k = cached[1] if cached is not None and cached[0] == versions[node] else self.key(node)
                if best_key is None or k < best_key:
                    best, best_key = node, k
            if best is None:
                return None
            n = tree.nodes[best]
            if n.is_queue:
                return best
            level = n.children

    def retire(self, queue: int) -> None:
        for a in self.usage.tree.ancestors(queue):
            self.count[a] -= 1
