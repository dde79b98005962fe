"""Every worker's reported node groups as flat arrays over all clusters at once.

One row per free-capacity bin (``count`` nodes with at least ``free`` left), rows of one cluster
contiguous and in slot order, so per-cluster totals are one ``np.add.reduceat``/``bincount``.
Group attributes (labels, taints) are indexed per group, as the cluster table indexes them per
cluster, so a pod set's node selector, affinity and tolerations are evaluated once per distinct
group, never per node. Built from the records when the facts change (``ClusterTable.nodes``);
heartbeats do not touch it.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import numpy.typing as npt

from eventlog.events import Taint
from reconciler.core.clusters import ClusterTable, LabelColumn, Mask, taint_id

HOSTNAME = "kubernetes.io/hostname"

Ints = npt.NDArray[np.int64]
Index = npt.NDArray[np.intp]


class NodeArrays:
    def __init__(self, records: list[Any], resources: list[str], present: Mask) -> None:
        col = {name: i for i, name in enumerate(resources)}
        n = len(records)
        self.n_clusters = n
        self.n_resources = len(resources)
        self.has_nodes: Mask = np.zeros(n, dtype=np.bool_)
        self.levels: list[list[str]] = [[] for _ in range(n)]
        group_slot: list[int] = []
        self.group_labels: list[dict[str, str]] = []
        group_taints: list[list[Taint]] = []
        row_slot: list[int] = []
        row_group: list[int] = []
        row_count: list[int] = []
        frees: list[list[int]] = []
        for slot, rec in enumerate(records):
            facts = rec.facts
            if facts is None or not facts.node_groups or not present[slot]:
                continue
            self.has_nodes[slot] = True
            self.levels[slot] = list(facts.topology_levels)
            for group in facts.node_groups.values():
                g = len(group_slot)
                group_slot.append(slot)
                self.group_labels.append(group.labels)
                group_taints.append(group.taints)
                for b in group.bins:
                    if b.count <= 0:
                        continue
                    row_slot.append(slot)
                    row_group.append(g)
                    row_count.append(b.count)
                    free = [0] * len(resources)
                    for name, amount in b.free.items():
                        if name in col:
                            free[col[name]] = amount
                    frees.append(free)
        self.group_slot: Index = np.array(group_slot, dtype=np.intp)
        self.row_slot: Index = np.array(row_slot, dtype=np.intp)
        self.row_group: Index = np.array(row_group, dtype=np.intp)
        self.row_count: Ints = np.array(row_count, dtype=np.int64)
        self.row_free: Ints = np.array(frees, dtype=np.int64).reshape(len(row_slot), len(resources))
        # Topology levels: per level key, its position in each cluster's list (widest first;
        # -1: not one of that cluster's levels); the host level is implicit and tightest.
        self.level_keys = sorted({key for levels in self.levels for key in levels})
        self.level_pos: dict[str, Ints] = {key: np.full(n, -1, dtype=np.int64) for key in self.level_keys}
        for slot, levels in enumerate(self.levels):
            for i, key in enumerate(levels):
                self.level_pos[key][slot] = i
        self.host_pos: Ints = np.array([len(levels) for levels in self.levels], dtype=np.int64)
        # Workers round free capacity down to steps, so the same free vector recurs on many
        # rows: per-pod arithmetic runs on the distinct vectors and is gathered back to rows.
        if len(row_slot):
            self.free_vectors, inverse = np.unique(self.row_free, axis=0, return_inverse=True)
            self.row_vector: Index = inverse.reshape(-1).astype(np.intp)
        else:
            self.free_vectors = np.zeros((0, len(resources)), dtype=np.int64)
            self.row_vector = np.zeros(0, dtype=np.intp)
        # Rows of one cluster are contiguous: segments for per-cluster reductions.
        if len(row_slot):
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
        self.taint_matrix: Mask = np.zeros((len(group_slot), len(self.taints)), dtype=np.bool_)
        for g, taints in enumerate(group_taints):
            for t in taints:
                self.taint_matrix[g, tcol[taint_id(t)]] = True
        # Pure memo of per-job results over all clusters, valid as long as these arrays are.
        self.memo: dict[tuple[str, bytes], Any] = {}

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
        self.memo[memo_key] = out
        return out


def node_arrays(table: ClusterTable) -> NodeArrays:
    """The table's node arrays, rebuilt only when the facts or the table's shape changed."""
    table.build()
    key = (table.version, table.facts_version)
    cached = table.derived.get("nodes")
    if cached is not None and cached[0] == key:
        arrays: NodeArrays = cached[1]
        return arrays
    arrays = NodeArrays(table.records, table.resources.names, table.present)
    table.derived["nodes"] = (key, arrays)
    return arrays
