"""Every worker's Kueue ClusterQueues (as reported) as flat arrays over all clusters at once.

One row per (worker ClusterQueue, flavor), flavors of a queue contiguous and in Kueue's order;
flavors listing the same resources form one resource group (as Kueue's ``resourceGroups``).
What does not depend on our own copies in flight is computed once per facts version: each
row's own unused quota, its borrowing room and what the rest of its cohort can lend it. Built
lazily (``worker_queues``) when the table or the facts change; heartbeats do not touch it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from reconciler.core.clusters import ClusterTable, Mask

Ints = npt.NDArray[np.int64]
Index = npt.NDArray[np.intp]

UNLIMITED = 1 << 60


class WorkerQueues:
    def __init__(self, records: list[Any], resources: list[str], present: Mask) -> None:
        col = {name: i for i, name in enumerate(resources)}
        n, r = len(records), len(resources)
        self.n_clusters = n
        self.kueue: Mask = np.zeros(n, dtype=np.bool_)
        self.cq_slot: list[int] = []
        self.cq_name: list[str] = []
        self.cq_stopped: list[bool] = []
        self.cq_index: list[dict[str, int]] = [{} for _ in range(n)]  # per slot: CQ name -> row
        self.local_queues: list[dict[str, str]] = [{} for _ in range(n)]
        fl_cq: list[int] = []
        fl_name: list[str] = []
        fl_group: list[int] = []
        fl_cohort_key: list[tuple[int, str, str]] = []  # (slot, cohort, flavor) for lending
        nominal: list[list[int]] = []
        used: list[list[int]] = []
        borrow: list[list[int]] = []
        lend: list[list[int]] = []
        listed: list[list[bool]] = []
        groups = 0
        for slot, rec in enumerate(records):
            facts = rec.facts
            if facts is None or not facts.kueue or not present[slot]:
                continue
            self.kueue[slot] = True
            self.local_queues[slot] = facts.local_queues
            for queue in facts.queues.values():
                g = len(self.cq_slot)
                self.cq_slot.append(slot)
                self.cq_name.append(queue.name)
                self.cq_stopped.append(queue.stopped)
                self.cq_index[slot][queue.name] = g
                group_of: dict[tuple[str, ...], int] = {}
                for flavor in queue.flavors:
                    covered = tuple(sorted(flavor.resources))
                    if covered not in group_of:
                        group_of[covered] = groups
                        groups += 1
                    fl_cq.append(g)
                    fl_name.append(flavor.name)
                    fl_group.append(group_of[covered])
                    fl_cohort_key.append(
                        (slot, queue.cohort or "", flavor.name) if queue.cohort else (-1, "", "")
                    )
                    row = [[0] * r for _ in range(4)]
                    seen = [False] * r
                    for name, q in flavor.resources.items():
                        c = col.get(name)
                        if c is None:
                            continue
                        seen[c] = True
                        row[0][c] = q.nominal
                        row[1][c] = q.used
                        row[2][c] = UNLIMITED if q.borrowing_limit is None else q.borrowing_limit
                        row[3][c] = q.nominal if q.lending_limit is None else min(q.lending_limit, q.nominal)
                    nominal.append(row[0])
                    used.append(row[1])
                    borrow.append(row[2])
                    lend.append(row[3])
                    listed.append(seen)
        f = len(fl_cq)
        self.fl_cq: Index = np.array(fl_cq, dtype=np.intp)
        self.fl_name = fl_name
        self.fl_group: Index = np.array(fl_group, dtype=np.intp)
        self.nominal: Ints = np.array(nominal, dtype=np.int64).reshape(f, r)
        self.used: Ints = np.array(used, dtype=np.int64).reshape(f, r)
        self.borrow_limit: Ints = np.array(borrow, dtype=np.int64).reshape(f, r)
        self.listed: Mask = np.array(listed, dtype=np.bool_).reshape(f, r)
        lend_limit = np.array(lend, dtype=np.int64).reshape(f, r)
        # What each row could lend its cohort now (unused nominal, up to its lending limit), and
        # what it already borrows from it.
        lendable = np.maximum(np.minimum(lend_limit, self.nominal - self.used), 0)
        borrowed = np.maximum(self.used - self.nominal, 0)
        in_cohort = np.array([k[0] >= 0 for k in fl_cohort_key], dtype=np.bool_)
        self.pool_other: Ints = np.zeros((f, r), dtype=np.int64)
        if in_cohort.any():
            keys = {k: i for i, k in enumerate(sorted({k for k in fl_cohort_key if k[0] >= 0}))}
            key_of = np.array([keys.get(k, -1) for k in fl_cohort_key], dtype=np.intp)
            pool = np.zeros((len(keys), r), dtype=np.int64)
            np.add.at(pool, key_of[in_cohort], lendable[in_cohort] - borrowed[in_cohort])
            # The rest of the cohort: its pool without this row's own unused quota (its own is
            # counted as its own), less what every member already borrows, this one included.
            self.pool_other[in_cohort] = np.maximum(pool[key_of[in_cohort]] - lendable[in_cohort], 0)
        self.n_cq = len(self.cq_slot)
        self.cq_names = sorted(set(self.cq_name))
        self.cq_name_id: Index = np.array(_ids(self.cq_name, self.cq_names), dtype=np.intp)
        self.fl_names = sorted(set(fl_name))
        self.fl_name_id: Index = np.array(_ids(fl_name, self.fl_names), dtype=np.intp)
        self.cq_slot_arr: Index = np.array(self.cq_slot, dtype=np.intp)
        self.cq_stopped_arr: Mask = np.array(self.cq_stopped, dtype=np.bool_)
        self.fl_slot: Index = self.cq_slot_arr[self.fl_cq] if f else np.zeros(0, dtype=np.intp)
        # LocalQueue "namespace/name" -> the clusters that have it and the CQ row each points
        # to there (-2: a ClusterQueue the worker did not report).
        lq_rows: dict[str, tuple[list[int], list[int]]] = {}
        for at in np.flatnonzero(self.kueue).tolist():
            for lq, cq in self.local_queues[at].items():
                slots, rows = lq_rows.setdefault(lq, ([], []))
                slots.append(at)
                rows.append(self.cq_index[at].get(cq, -2))
        self.lq_rows = {
            k: (np.array(a, dtype=np.intp), np.array(b, dtype=np.intp)) for k, (a, b) in lq_rows.items()
        }
        self.memo: dict[Any, Any] = {}

    def cq_of(self, lq: str) -> Index:
        """Per cluster slot: the CQ row the LocalQueue ``lq`` points to there; -1 no such
        LocalQueue (or the worker reported no queues), -2 a ClusterQueue it did not report."""
        key = ("lq", lq)
        cached = self.memo.get(key)
        if cached is None:
            cached = np.full(self.n_clusters, -1, dtype=np.intp)
            found = self.lq_rows.get(lq)
            if found is not None:
                cached[found[0]] = found[1]
            self.memo[key] = cached
        out: Index = cached
        return out

    def available(self, rows: Index, cols: Index, in_flight: Ints | None) -> Ints:
        """For flavor ``rows`` and resource ``cols``: what a new workload could still get there
        (own unused quota, then what the cohort can lend up to the borrowing limit), less our
        copies in flight to that ClusterQueue (``in_flight``: per CQ row; None = none)."""
        at = np.ix_(rows, cols)
        nominal = self.nominal[at]
        used = self.used[at]
        if in_flight is not None:
            used = used + in_flight[np.ix_(self.fl_cq[rows], cols)]
        own = np.maximum(nominal - used, 0)
        room = np.maximum(self.borrow_limit[at] - np.maximum(used - nominal, 0), 0)
        out: Ints = own + np.minimum(room, self.pool_other[at])
        return out


def _ids(values: list[str], distinct: list[str]) -> list[int]:
    index = {v: i for i, v in enumerate(distinct)}
    return [index[v] for v in values]


def worker_queues(table: ClusterTable) -> WorkerQueues:
    """The table's worker-queue arrays, rebuilt only when the facts or the table's shape changed."""
    table.build()
    key = (table.version, table.facts_version)
    cached = table.derived.get("queues")
    if cached is not None and cached[0] == key:
        arrays: WorkerQueues = cached[1]
        return arrays
    arrays = WorkerQueues(table.records, table.resources.names, table.present)
    table.derived["queues"] = (key, arrays)
    return arrays
