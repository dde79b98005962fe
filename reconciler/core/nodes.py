"""Every worker's reported node groups as flat arrays over all clusters at once.

One row per free-capacity bin (``count`` nodes with at least ``free`` left), rows of one cluster
contiguous and in slot order, so per-cluster totals are one ``np.add.reduceat``/``bincount``.
Group attributes (labels, taints) are indexed per group, as the cluster table indexes them per
cluster, so a pod set's node selector, affinity and tolerations are evaluated once per distinct
group, never per node. Built when the facts change (``node_arrays``) from per-cluster blocks, of
which only the reporting workers' are rebuilt; heartbeats do not touch any of it.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import numpy.typing as npt

from eventlog.events import Taint
from reconciler.core.clusters import ClusterTable, LabelColumn, Mask, taint_id
from reconciler.core.facts import ClusterFacts

HOSTNAME = "kubernetes.io/hostname"

# Per-cluster results memoized on the arrays: about this many numbers at most (a few per
# cluster per entry), so a world of many clusters keeps fewer entries.
_MEMO_NUMBERS = 8_000_000

Ints = npt.NDArray[np.int64]
Index = npt.NDArray[np.intp]


class VectorPool:
    """Distinct free vectors, each with a stable id. Workers round free capacity down to steps,
    so the same vector recurs on many rows and across reports: per-pod arithmetic runs on the
    distinct vectors and is gathered back to rows."""

    def __init__(self, n_resources: int) -> None:
        self.n_resources = n_resources
        self.ids: dict[tuple[int, ...], int] = {}
        self.vectors: list[tuple[int, ...]] = []
        self._array: Ints = np.zeros((0, n_resources), dtype=np.int64)

    def intern(self, vector: tuple[int, ...]) -> int:
        i = self.ids.get(vector)
        if i is None:
            i = self.ids[vector] = len(self.vectors)
            self.vectors.append(vector)
        return i

    def array(self) -> Ints:
        if len(self._array) != len(self.vectors):
            added = np.array(self.vectors[len(self._array) :], dtype=np.int64).reshape(-1, self.n_resources)
            self._array = np.concatenate([self._array, added])
        return self._array


class Block:
    """One cluster's rows, built from its facts object and kept as long as that object is its
    facts: a report rebuilds the block of the worker that sent it, not everyone's."""

    def __init__(self, facts: ClusterFacts, col: dict[str, int], pool: VectorPool) -> None:
        self.facts = facts
        self.levels = list(facts.topology_levels)
        self.group_labels = [g.labels for g in facts.node_groups.values()]
        self.group_taints = [g.taints for g in facts.node_groups.values()]
        width = len(col)
        alloc = [[0] * width for _ in facts.node_groups]
        for g, group in enumerate(facts.node_groups.values()):
            for name, amount in group.allocatable.items():
                c = col.get(name)
                if c is not None:
                    alloc[g][c] = amount
        self.group_alloc: Ints = np.array(alloc, dtype=np.int64).reshape(len(alloc), width)
        self.group_alloc_known: Mask = np.array(
            [bool(g.allocatable) for g in facts.node_groups.values()], np.bool_
        )
        self.group_nodes: Ints = np.array(
            [sum(b.count for b in g.bins if b.count > 0) for g in facts.node_groups.values()], dtype=np.int64
        )
        groups: list[int] = []
        counts: list[int] = []
        vectors: list[int] = []
        for g, group in enumerate(facts.node_groups.values()):
            for b in group.bins:
                if b.count <= 0:
                    continue
                free = [0] * width
                for name, amount in b.free.items():
                    c = col.get(name)
                    if c is not None:
                        free[c] = amount
                groups.append(g)
                counts.append(b.count)
                vectors.append(pool.intern(tuple(free)))
        self.row_group: Index = np.array(groups, dtype=np.intp)
        self.row_count: Ints = np.array(counts, dtype=np.int64)
        self.row_vector: Index = np.array(vectors, dtype=np.intp)


class Blocks:
    """Per table: the blocks of every cluster with nodes and the vector pool they share."""

    def __init__(self, resources: list[str]) -> None:
        self.col = {name: i for i, name in enumerate(resources)}
        self.pool = VectorPool(len(resources))
        self.by_slot: dict[int, Block] = {}

    def block(self, slot: int, facts: ClusterFacts) -> Block:
        block = self.by_slot.get(slot)
        if block is None or block.facts is not facts:
            block = self.by_slot[slot] = Block(facts, self.col, self.pool)
        return block


class NodeArrays:
    def __init__(self, records: list[Any], blocks: Blocks, present: Mask) -> None:
        n = len(records)
        self.n_clusters = n
        self.n_resources = blocks.pool.n_resources
        self.has_nodes: Mask = np.zeros(n, dtype=np.bool_)
        self.levels: list[list[str]] = [[] for _ in range(n)]
        used: list[tuple[int, Block]] = []
        for slot, rec in enumerate(records):
            facts = rec.facts
            if facts is None or not facts.node_groups or not present[slot]:
                blocks.by_slot.pop(slot, None)
                continue
            block = blocks.block(slot, facts)
            used.append((slot, block))
            self.has_nodes[slot] = True
            self.levels[slot] = block.levels
        self.group_labels: list[dict[str, str]] = [labels for _, b in used for labels in b.group_labels]
        group_taints: list[list[Taint]] = [taints for _, b in used for taints in b.group_taints]
        slots = np.array([slot for slot, _ in used], dtype=np.intp)
        n_groups = np.array([len(b.group_labels) for _, b in used], dtype=np.intp)
        n_rows = np.array([len(b.row_count) for _, b in used], dtype=np.intp)
        offsets = np.concatenate(([0], np.cumsum(n_groups)[:-1])).astype(np.intp) if len(used) else n_groups
        self.group_slot: Index = np.repeat(slots, n_groups)
        self.row_slot: Index = np.repeat(slots, n_rows)
        empty = np.zeros(0, dtype=np.intp)
        self.row_group: Index = (
            np.concatenate([b.row_group + off for (_, b), off in zip(used, offsets, strict=True)])
            if used
            else empty
        )
        self.row_count: Ints = (
            np.concatenate([b.row_count for _, b in used]) if used else np.zeros(0, dtype=np.int64)
        )
        self.row_vector: Index = np.concatenate([b.row_vector for _, b in used]) if used else empty
        width = self.n_resources
        self.group_alloc: Ints = (
            np.concatenate([b.group_alloc for _, b in used]) if used else np.zeros((0, width), dtype=np.int64)
        )
        self.group_alloc_known: Mask = (
            np.concatenate([b.group_alloc_known for _, b in used]) if used else np.zeros(0, dtype=np.bool_)
        )
        self.group_nodes: Ints = (
            np.concatenate([b.group_nodes for _, b in used]) if used else np.zeros(0, dtype=np.int64)
        )
        self.free_vectors: Ints = blocks.pool.array()
        self.row_free: Ints = self.free_vectors[self.row_vector]
        # Topology levels: per level key, its position in each cluster's list (widest first;
        # -1: not one of that cluster's levels); the host level is implicit and tightest.
        self.level_keys = sorted({key for levels in self.levels for key in levels})
        self.level_pos: dict[str, Ints] = {key: np.full(n, -1, dtype=np.int64) for key in self.level_keys}
        for slot, levels in enumerate(self.levels):
            for i, key in enumerate(levels):
                self.level_pos[key][slot] = i
        self.host_pos: Ints = np.array([len(levels) for levels in self.levels], dtype=np.int64)
        # Rows of one cluster are contiguous: segments for per-cluster reductions.
        if len(self.row_slot):
            changes = np.flatnonzero(np.diff(self.row_slot)) + 1
            self.seg_start: Index = np.concatenate(([0], changes)).astype(np.intp)
        else:
            self.seg_start = np.zeros(0, dtype=np.intp)
        self.seg_slot: Index = self.row_slot[self.seg_start]
        self._labels: dict[str, LabelColumn] = {}
        distinct: dict[str, Taint] = {}
        for taints in group_taints:
            for t in taints:
                distinct.setdefault(taint_id(t), t)
        self.taint_ids = sorted(distinct)
        self.taints = [distinct[k] for k in self.taint_ids]
        tcol = {k: i for i, k in enumerate(self.taint_ids)}
        self.taint_matrix: Mask = np.zeros((len(self.group_slot), len(self.taints)), dtype=np.bool_)
        for g, taints in enumerate(group_taints):
            for t in taints:
                self.taint_matrix[g, tcol[taint_id(t)]] = True
        # Pure memo of per-job results over all clusters, valid as long as these arrays are.
        self.memo: dict[tuple[Any, ...], Any] = {}

    def per_cluster(self, values: Ints) -> Ints:
        """Per cluster slot: the sum of ``values`` (one per row) over its rows."""
        out = np.zeros(self.n_clusters, dtype=np.int64)
        if len(self.seg_start):
            out[self.seg_slot] = np.add.reduceat(values, self.seg_start)
        return out

    def per_cluster_max(self, values: Ints) -> Ints:
        """Per cluster slot: the largest of ``values`` (rows x columns or rows) over its rows."""
        shape = (self.n_clusters, *values.shape[1:])
        out = np.zeros(shape, dtype=np.int64)
        if len(self.seg_start):
            out[self.seg_slot] = np.maximum.reduceat(values, self.seg_start)
        return out

    def remember(self, key: tuple[Any, ...], value: Any) -> None:
        """Memo a per-cluster result, forgetting all when they would hold too many numbers."""
        if len(self.memo) * max(self.n_clusters, 1) > _MEMO_NUMBERS:
            self.memo.clear()
        self.memo[key] = value

    @property
    def n_groups(self) -> int:
        return len(self.group_slot)

    def label(self, key: str) -> LabelColumn:
        """The label ``key`` over groups (the same column type the cluster table has)."""
        column = self._labels.get(key)
        if column is None:
            ids: dict[str, int] = {}
            value_ids = np.full(self.n_groups, -1, dtype=np.int32)
            numeric = np.full(self.n_groups, np.nan, dtype=np.float64)
            for g, labels in enumerate(self.group_labels):
                value = labels.get(key)
                if value is None:
                    continue
                value_ids[g] = ids.setdefault(value, len(ids))
                with contextlib.suppress(ValueError):
                    numeric[g] = int(value)
            column = LabelColumn(value_ids=value_ids, ids=ids, numeric=numeric)
            self._labels[key] = column
        return column

    def domains(self, key: str) -> tuple[Index, Index]:
        """Topology domains of level ``key``: per group its domain id (-1: the group has no such
        label), and per domain its cluster slot. A domain is one (cluster, label value)."""
        memo_key = ("domains", key.encode())
        cached = self.memo.get(memo_key)
        if cached is not None:
            out: tuple[Index, Index] = cached
            return out
        column = self.label(key)
        has = column.value_ids >= 0
        pair = self.group_slot.astype(np.int64) * (len(column.ids) + 1) + column.value_ids.astype(np.int64)
        group_domain = np.full(self.n_groups, -1, dtype=np.intp)
        domain_slot: Index = np.zeros(0, dtype=np.intp)
        if has.any():
            uniq, inverse = np.unique(pair[has], return_inverse=True)
            group_domain[has] = inverse
            domain_slot = (uniq // (len(column.ids) + 1)).astype(np.intp)
        out = (group_domain, domain_slot)
        self.remember(memo_key, out)
        return out


def node_arrays(table: ClusterTable) -> NodeArrays:
    """The table's node arrays, rebuilt only when the facts or the table's shape changed."""
    table.build()
    key = (table.version, table.facts_version)
    cached = table.derived.get("nodes")
    if cached is not None and cached[0] == key:
        arrays: NodeArrays = cached[1]
        return arrays
    width = (len(table.resources), 0)
    kept = table.derived.get("node_blocks")
    blocks: Blocks = kept[1] if kept is not None and kept[0] == width else Blocks(table.resources.names)
    arrays = NodeArrays(table.records, blocks, table.present)
    if len(blocks.pool.vectors) > 4 * len(arrays.row_slot) + 4_096:  # mostly vectors no row uses any more
        blocks = Blocks(table.resources.names)
        arrays = NodeArrays(table.records, blocks, table.present)
    table.derived["node_blocks"] = (width, blocks)
    table.derived["nodes"] = (key, arrays)
    return arrays
