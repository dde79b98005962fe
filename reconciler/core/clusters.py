"""Clusters: canonical per-cluster records plus column arrays derived from them.

Records are what snapshots hold; arrays (capacity, usage, health, label and taint indexes) are
rebuilt from the records whenever the set of clusters or their shape changes, and patched in
place for the frequent small changes (heartbeat usage, our own assumed usage). Every plugin reads
the arrays, so evaluating one job against all clusters is a few numpy operations.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from msgspec import Struct, field

from eventlog.events import Resources, Taint
from reconciler.core.facts import ClusterFacts
from reconciler.core.resources import ResourceIndex, Vec

READY = "Ready"
LOST = "Lost"
REMOVED = "Removed"

Mask = npt.NDArray[np.bool_]


class ClusterRecord(Struct, kw_only=True):
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    capacity: Resources = field(default_factory=dict)
    reported: Resources = field(default_factory=dict)  # usage the worker reports (all tenants)
    assumed: Resources = field(default_factory=dict)  # our own copies counted there
    health: str = READY
    last_seen_ms: int = 0
    lost_at_ms: int | None = None
    heard_while_lost: bool = False  # a heartbeat came after ClusterLost: recover it
    lost_timeout_ms: int | None = None  # per-cluster override
    taint_since_ms: dict[str, int] = field(default_factory=dict)  # NoExecute taint -> added at
    facts: ClusterFacts | None = None  # what the worker reported it can run (nodes, its Kueue)


def taint_id(t: Taint) -> str:
    return f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"


@dataclass
class LabelColumn:
    value_ids: npt.NDArray[np.int32]  # -1: label absent
    ids: dict[str, int]
    numeric: npt.NDArray[np.float64]  # nan: absent or not an integer (Gt/Lt never match it)

    def matching(self, values: list[str], slots: npt.NDArray[np.intp]) -> Mask:
        wanted = [self.ids[v] for v in values if v in self.ids]
        if not wanted:
            return np.zeros(len(slots), dtype=np.bool_)
        ids = self.value_ids[slots]
        if len(wanted) == 1:
            return np.asarray(ids == wanted[0])
        return np.isin(ids, np.array(wanted, dtype=np.int32))


class ClusterTable:
    """All clusters ever registered, by stable integer slot (removed ones keep their slot)."""

    def __init__(self) -> None:
        self.records: list[ClusterRecord] = []
        self.index: dict[str, int] = {}
        self.resources = ResourceIndex()
        self.version = 0  # bumps on any change of labels/taints/capacity/membership/health
        self._built_version = -1
        self._labels: dict[str, LabelColumn] = {}
        self.capacity: npt.NDArray[np.int64] = np.zeros((0, 0), dtype=np.int64)
        self.reported: npt.NDArray[np.int64] = np.zeros((0, 0), dtype=np.int64)
        self.assumed: npt.NDArray[np.int64] = np.zeros((0, 0), dtype=np.int64)
        self.ready: Mask = np.zeros(0, dtype=np.bool_)
        self.present: Mask = np.zeros(0, dtype=np.bool_)
        self.last_seen: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.lost_timeout: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.name_rank: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.taints: list[Taint] = []
        self.taint_ids: list[str] = []
        self.taint_matrix: Mask = np.zeros((0, 0), dtype=np.bool_)
        self.names: list[str] = []
        # Bumps when a worker's capacity facts change (``ClusterCapacityReported``): arrays
        # derived from the facts (``reconciler.core.nodes``, ``.workerqueues``) are rebuilt on
        # (version, facts_version), so heartbeats never rebuild them.
        self.facts_version = 0
        self.derived: dict[str, tuple[tuple[int, int], Any]] = {}

    def __len__(self) -> int:
        return len(self.records)

    # ---- changes ---------------------------------------------------------------------------

    def touch(self) -> None:
        self.version += 1

    def upsert(self, record: ClusterRecord) -> int:
        for name in (*record.capacity, *record.reported, *record.assumed):
            self.resources.add(name)
        slot = self.index.get(record.name)
        if slot is None:
            slot = len(self.records)
            self.records.append(record)
            self.index[record.name] = slot
        else:
            self.records[slot] = record
        self.touch()
        return slot

    def set_facts(self, slot: int, facts: ClusterFacts) -> None:
        self.records[slot].facts = facts
        self.facts_version += 1

    def seen(self, slot: int, at_ms: int) -> None:
        self.records[slot].last_seen_ms = at_ms
        if self._built_version == self.version:
            self.last_seen[slot] = at_ms

    def set_reported(self, slot: int, usage: Resources) -> None:
        rec = self.records[slot]
        rec.reported = dict(usage)
        if any(name not in self.resources.index for name in usage):
            for name in usage:
                self.resources.add(name)
            self.touch()
            return
        if self._built_version == self.version:
            self.reported[slot] = self.resources.vector(usage)

    def add_assumed(self, slot: int, demand: Resources, *, sign: int) -> None:
        rec = self.records[slot]
        for name, value in demand.items():
            left = rec.assumed.get(name, 0) + sign * value
            if left:
                rec.assumed[name] = left
            else:
                rec.assumed.pop(name, None)
            if name not in self.resources.index:
                self.resources.add(name)
                self.touch()
        if self._built_version == self.version:
            row, index = self.assumed[slot], self.resources.index
            for name, value in demand.items():  # (a job asks for few resources: no row of zeros)
                row[index[name]] += sign * value

    # ---- derived arrays ----------------------------------------------------------------------

    def build(self) -> None:
        """Bring the arrays up to date with the records (cheap when nothing changed)."""
        if self._built_version == self.version:
            return
        n, r = len(self.records), len(self.resources)
        vec = self.resources.vector
        self.names = [rec.name for rec in self.records]
        self.capacity = np.array([vec(rec.capacity) for rec in self.records], dtype=np.int64).reshape(n, r)
        self.reported = np.array([vec(rec.reported) for rec in self.records], dtype=np.int64).reshape(n, r)
        self.assumed = np.array([vec(rec.assumed) for rec in self.records], dtype=np.int64).reshape(n, r)
        self.ready = np.array([rec.health == READY for rec in self.records], dtype=np.bool_)
        self.present = np.array([rec.health != REMOVED for rec in self.records], dtype=np.bool_)
        self.last_seen = np.array([rec.last_seen_ms for rec in self.records], dtype=np.int64)
        # -1: the policy's workerLostTimeout applies
        self.lost_timeout = np.array(
            [rec.lost_timeout_ms if rec.lost_timeout_ms is not None else -1 for rec in self.records], dtype=np.int64
        )
        order = sorted(range(n), key=lambda i: self.records[i].name)
        self.name_rank = np.empty(n, dtype=np.int64)
        self.name_rank[order] = np.arange(n, dtype=np.int64)
        distinct: dict[str, Taint] = {}
        for rec in self.records:
            for t in rec.taints:
                distinct.setdefault(taint_id(t), t)
        self.taint_ids = sorted(distinct)
        self.taints = [distinct[k] for k in self.taint_ids]
        col = {k: i for i, k in enumerate(self.taint_ids)}
        self.taint_matrix = np.zeros((n, len(self.taints)), dtype=np.bool_)
        for i, rec in enumerate(self.records):
            for t in rec.taints:
                self.taint_matrix[i, col[taint_id(t)]] = True
        self._labels = {}
        self._built_version = self.version
        # Index every label key now: structural changes are rare, decisions are not.
        keys = sorted({key for rec in self.records for key in rec.labels})
        for key in keys:
            self.label(key)

    def label(self, key: str) -> LabelColumn:
        column = self._labels.get(key)
        if column is None:
            ids: dict[str, int] = {}
            value_ids = np.full(len(self.records), -1, dtype=np.int32)
            numeric = np.full(len(self.records), np.nan, dtype=np.float64)
            for i, rec in enumerate(self.records):
                value = rec.labels.get(key)
                if value is None:
                    continue
                value_ids[i] = ids.setdefault(value, len(ids))
                with contextlib.suppress(ValueError):  # Gt/Lt only compare integer labels
                    numeric[i] = int(value)
            column = LabelColumn(value_ids=value_ids, ids=ids, numeric=numeric)
            self._labels[key] = column
        return column

    def free(self) -> npt.NDArray[np.int64]:
        """Capacity minus the larger of reported and our assumed usage, per cluster and resource."""
        self.build()
        used: npt.NDArray[np.int64] = np.maximum(self.reported, self.assumed)
        return self.capacity - used

    def lost_deadlines(self, default_timeout_ms: int) -> npt.NDArray[np.int64]:
        """Per cluster: the time it is declared lost without another heartbeat."""
        self.build()
        timeouts = np.where(self.lost_timeout >= 0, self.lost_timeout, default_timeout_ms)
        deadlines: npt.NDArray[np.int64] = self.last_seen + timeouts
        return deadlines

    def vector(self, amounts: Resources) -> Vec:
        return self.resources.vector(amounts)
