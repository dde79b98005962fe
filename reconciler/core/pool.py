"""The running set as columns, for preemption: which of our jobs run where, at what priority.

One row per placed job, kept up to date by ``fold`` (O(1) per placement change via a free list),
so choosing victims across 1,000 clusters and 50,000 running jobs is a filter, a sort and a
grouped cumulative sum in numpy rather than a Python loop.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from eventlog.events import Resources
from reconciler.core.resources import ResourceIndex

_GROW = 1024


class RunningPool:
    def __init__(self, resources: ResourceIndex) -> None:
        self.resources = resources
        self.size = 0  # rows in use or freed (high-water mark)
        self.alive: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
        self.evicting: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
        self.cluster: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.priority: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.started: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        # Times the job was evicted before this run (``JobRecord.evictions``): preemption spares
        # a job evicted more often than others of its priority (reconciler.core.preemption).
        self.evicted: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.seqno: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)  # submission seq (tie-break)
        self.demand: npt.NDArray[np.int64] = np.zeros((0, 0), dtype=np.int64)
        self.keys: list[str] = []
        self.names: npt.NDArray[np.str_] = np.zeros(0, dtype="<U16")  # keys as a column, for sorting
        self.row_of: dict[str, int] = {}
        self._free: list[int] = []
        self.version = 0  # bumps when membership or priorities change
        self._order: tuple[int, npt.NDArray[np.intp]] = (-1, np.zeros(0, dtype=np.intp))
        self._demands: list[Resources] = []

    def __len__(self) -> int:
        return len(self.row_of)

    def _ensure(self) -> None:
        cap, cols = len(self.alive), len(self.resources)
        if cols != self.demand.shape[1]:
            demand = np.zeros((cap, cols), dtype=np.int64)
            for row in self.row_of.values():
                demand[row] = self.resources.vector(self._demands[row])
            self.demand = demand
        if self.size <= cap:
            return
        extra = max(_GROW, cap)
        self.alive = np.concatenate([self.alive, np.zeros(extra, dtype=np.bool_)])
        self.evicting = np.concatenate([self.evicting, np.zeros(extra, dtype=np.bool_)])
        self.cluster = np.concatenate([self.cluster, np.zeros(extra, dtype=np.int64)])
        self.priority = np.concatenate([self.priority, np.zeros(extra, dtype=np.int64)])
        self.started = np.concatenate([self.started, np.zeros(extra, dtype=np.int64)])
        self.evicted = np.concatenate([self.evicted, np.zeros(extra, dtype=np.int64)])
        self.seqno = np.concatenate([self.seqno, np.zeros(extra, dtype=np.int64)])
        self.demand = np.concatenate([self.demand, np.zeros((extra, cols), dtype=np.int64)])
        self.keys.extend([""] * extra)
        self.names = np.concatenate([self.names, np.zeros(extra, dtype=self.names.dtype)])
        self._demands.extend([{}] * extra)

    def add(
        self,
        key: str,
        *,
        cluster: int,
        priority: int,
        started_ms: int,
        demand: Resources,
        seqno: int = 0,
        evictions: int = 0,
    ) -> None:
        self.remove(key)
        if self._free:
            row = self._free.pop()
        else:
            row = self.size
            self.size += 1
        self._ensure()
        self.alive[row] = True
        self.evicting[row] = False
        self.cluster[row] = cluster
        self.priority[row] = priority
        self.started[row] = started_ms
        self.evicted[row] = evictions
        self.seqno[row] = seqno
        self.keys[row] = key
        if len(key) > self.names.dtype.itemsize // 4:
            self.names = self.names.astype(f"<U{max(len(key), 2 * (self.names.dtype.itemsize // 4))}")
        self.names[row] = key
        self._demands[row] = demand
        self.demand[row] = self.resources.vector(demand)
        self.row_of[key] = row
        self.version += 1

    def remove(self, key: str) -> None:
        row = self.row_of.pop(key, None)
        if row is not None:
            self.alive[row] = False
            self._free.append(row)
            self.version += 1

    def set_evicting(self, key: str) -> None:
        row = self.row_of.get(key)
        if row is not None:
            self.evicting[row] = True

    def set_priority(self, key: str, priority: int) -> None:
        row = self.row_of.get(key)
        if row is not None and self.priority[row] != priority:
            self.priority[row] = priority
            self.version += 1

    def matrix(self) -> npt.NDArray[np.int64]:
        self._ensure()
        return self.demand

    def victim_order(self) -> npt.NDArray[np.intp]:
        """Live rows by (cluster, priority, most recently started, submission order), cached
        until the running set changes: preemption filters this instead of sorting each time."""
        if self._order[0] != self.version:
            rows = np.flatnonzero(self.alive[: self.size])
            order = np.lexsort(
                (self.seqno[rows], -self.started[rows], self.priority[rows], self.cluster[rows])
            )
            self._order = (self.version, rows[order])
        return self._order[1]

    def copy(self) -> RunningPool:
        """An independent copy (for a decide pass that must not touch the state's pool)."""
        other = RunningPool(self.resources)
        other.size = self.size
        for name in ("alive", "evicting", "cluster", "priority", "started", "evicted", "seqno", "demand", "names"):
            setattr(other, name, getattr(self, name).copy())
        other.keys = list(self.keys)
        other.row_of = dict(self.row_of)
        other._free = list(self._free)
        other._demands = list(self._demands)
        return other
