"""Every worker's Kueue ClusterQueues (as reported) as flat arrays over all clusters at once.

One row per (worker ClusterQueue, flavor), flavors of a queue contiguous and in Kueue's order;
flavors listing the same resources form one resource group (as Kueue's ``resourceGroups``).
What does not depend on our own copies in flight is computed once per facts version: each
row's own unused quota, its borrowing room and what the rest of its cohort can lend it. Built
lazily (``worker_queues``) when the table or the facts change, from per-worker blocks of which
only the reporting workers' are rebuilt; heartbeats do not touch it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from reconciler.core.clusters import ClusterTable, Mask
from reconciler.core.facts import ClusterFacts

Ints = npt.NDArray[np.int64]
Index = npt.NDArray[np.intp]

UNLIMITED = 1 << 60


class QueueBlock:
    """One worker's ClusterQueues as rows, built from its facts object and kept as long as that
    object is its facts (cohorts are a worker's own, so lending is computed here too)."""

    def __init__(self, facts: ClusterFacts, col: dict[str, int]) -> None:
        self.facts = facts
        r = len(col)
        self.names = list(facts.queues)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.stopped = [q.stopped for q in facts.queues.values()]
        fl_cq: list[int] = []
        self.fl_name: list[str] = []
        fl_group: list[int] = []
        cohort_key: list[tuple[str, str] | None] = []  # (cohort, flavor): who lends to whom
        rows: list[list[list[int]]] = []
        listed: list[list[bool]] = []
        groups = 0
        for g, queue in enumerate(facts.queues.values()):
            group_of: dict[tuple[str, ...], int] = {}
            for flavor in queue.flavors:
                covered = tuple(sorted(flavor.resources))
                if covered not in group_of:
                    group_of[covered] = groups
                    groups += 1
                fl_cq.append(g)
                self.fl_name.append(flavor.name)
                fl_group.append(group_of[covered])
                cohort_key.append((queue.cohort, flavor.name) if queue.cohort else None)
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
                rows.append(row)
                listed.append(seen)
        f = len(fl_cq)
        self.n_groups = groups
        self.fl_cq: Index = np.array(fl_cq, dtype=np.intp)
        self.fl_group: Index = np.array(fl_group, dtype=np.intp)
        table = np.array(rows, dtype=np.int64).reshape(f, 4, r)
        self.nominal: Ints = table[:, 0]
        self.used: Ints = table[:, 1]
        self.borrow_limit: Ints = table[:, 2]
        lend_limit = table[:, 3]
        self.listed: Mask = np.array(listed, dtype=np.bool_).reshape(f, r)
        # What each row could lend its cohort now (unused nominal, up to its lending limit), and
        # what it already borrows from it.
        lendable = np.maximum(np.minimum(lend_limit, self.nominal - self.used), 0)
        borrowed = np.maximum(self.used - self.nominal, 0)
        self.pool_other: Ints = np.zeros((f, r), dtype=np.int64)
        keys = sorted({k for k in cohort_key if k is not None})
        if keys:
            key_id = {k: i for i, k in enumerate(keys)}
            in_cohort = np.array([k is not None for k in cohort_key], dtype=np.bool_)
            key_of = np.array([key_id[k] if k is not None else -1 for k in cohort_key], dtype=np.intp)
            pool = np.zeros((len(keys), r), dtype=np.int64)
            np.add.at(pool, key_of[in_cohort], lendable[in_cohort] - borrowed[in_cohort])
            # The rest of the cohort: its pool without this row's own unused quota (its own is
            # counted as its own), less what every member already borrows, this one included.
            self.pool_other[in_cohort] = np.maximum(pool[key_of[in_cohort]] - lendable[in_cohort], 0)


class QueueBlocks:
    """Per table: the queue blocks of every worker that reported queues."""

    def __init__(self, resources: list[str]) -> None:
        self.col = {name: i for i, name in enumerate(resources)}
        self.by_slot: dict[int, QueueBlock] = {}

    def block(self, slot: int, facts: ClusterFacts) -> QueueBlock:
        block = self.by_slot.get(slot)
        if block is None or block.facts is not facts:
            block = self.by_slot[slot] = QueueBlock(facts, self.col)
        return block


class WorkerQueues:
    def __init__(self, records: list[Any], blocks: QueueBlocks, present: Mask) -> None:
        n, r = len(records), len(blocks.col)
        self.n_clusters = n
        self.kueue: Mask = np.zeros(n, dtype=np.bool_)
        self.local_queues: list[dict[str, str]] = [{} for _ in range(n)]
        self.blocks: list[QueueBlock | None] = [None] * n
        self.cq_offset: Ints = np.zeros(n, dtype=np.int64)
        used: list[tuple[int, QueueBlock]] = []
        for slot, rec in enumerate(records):
            facts = rec.facts
            if facts is None or not facts.kueue or not present[slot]:
                blocks.by_slot.pop(slot, None)
                continue
            block = blocks.block(slot, facts)
            self.kueue[slot] = True
            self.local_queues[slot] = facts.local_queues
            self.blocks[slot] = block
            used.append((slot, block))
        n_cq = np.array([len(b.names) for _, b in used], dtype=np.intp)
        n_fl = np.array([len(b.fl_cq) for _, b in used], dtype=np.intp)
        n_gr = np.array([b.n_groups for _, b in used], dtype=np.intp)
        cq_off = np.concatenate(([0], np.cumsum(n_cq)[:-1])).astype(np.intp) if used else n_cq
        gr_off = np.concatenate(([0], np.cumsum(n_gr)[:-1])).astype(np.intp) if used else n_gr
        slots = np.array([slot for slot, _ in used], dtype=np.intp)
        self.cq_offset[slots] = cq_off
        self.n_cq = int(n_cq.sum())
        self.cq_name: list[str] = [name for _, b in used for name in b.names]
        self.cq_slot_arr: Index = np.repeat(slots, n_cq)
        self.cq_stopped_arr: Mask = np.array([s for _, b in used for s in b.stopped], dtype=np.bool_)

        def cat(parts: list[Any], empty: Any) -> Any:
            return np.concatenate(parts) if parts else empty

        none = np.zeros(0, dtype=np.intp)
        self.fl_cq: Index = cat([b.fl_cq + off for (_, b), off in zip(used, cq_off, strict=True)], none)
        self.fl_group: Index = cat([b.fl_group + off for (_, b), off in zip(used, gr_off, strict=True)], none)
        self.fl_slot: Index = np.repeat(slots, n_fl)
        self.fl_name: list[str] = [name for _, b in used for name in b.fl_name]
        grid = np.zeros((0, r), dtype=np.int64)
        self.nominal: Ints = cat([b.nominal for _, b in used], grid)
        self.used: Ints = cat([b.used for _, b in used], grid)
        self.borrow_limit: Ints = cat([b.borrow_limit for _, b in used], grid)
        self.pool_other: Ints = cat([b.pool_other for _, b in used], grid)
        self.listed: Mask = cat([b.listed for _, b in used], np.zeros((0, r), dtype=np.bool_))
        self.cq_names = sorted(set(self.cq_name))
        self.cq_name_id: Index = np.array(_ids(self.cq_name, self.cq_names), dtype=np.intp)
        self.fl_names = sorted(set(self.fl_name))
        self.fl_name_id: Index = np.array(_ids(self.fl_name, self.fl_names), dtype=np.intp)
        self.memo: dict[Any, Any] = {}

    def cq_row(self, slot: int, name: str) -> int:
        """The row of the worker's ClusterQueue ``name``, or -1."""
        block = self.blocks[slot]
        i = block.index.get(name) if block is not None else None
        return -1 if i is None else int(self.cq_offset[slot]) + i

    def cq_of(self, lq: str) -> Index:
        """Per cluster slot: the CQ row the LocalQueue ``lq`` points to there; -1 no such
        LocalQueue (or the worker reported no queues), -2 a ClusterQueue it did not report."""
        key = ("lq", lq)
        cached = self.memo.get(key)
        if cached is None:
            cached = np.full(self.n_clusters, -1, dtype=np.intp)
            for slot in np.flatnonzero(self.kueue).tolist():
                name = self.local_queues[slot].get(lq)
                if name is not None:
                    row = self.cq_row(slot, name)
                    cached[slot] = row if row >= 0 else -2
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
    width = (len(table.resources), 0)
    kept = table.derived.get("queue_blocks")
    blocks: QueueBlocks = (
        kept[1] if kept is not None and kept[0] == width else QueueBlocks(table.resources.names)
    )
    arrays = WorkerQueues(table.records, blocks, table.present)
    table.derived["queue_blocks"] = (width, blocks)
    table.derived["queues"] = (key, arrays)
    return arrays
