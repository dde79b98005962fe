"""Our copies a worker's Kueue does not count yet: nominated or created there, not admitted.

Kueue's reported ``used`` only covers admitted workloads, so a worker ClusterQueue's headroom
must also lose what we already sent it. Kept per decide pass (the scratch builds it from the
state's copies and follows the pass's own nominations, placements and withdrawals), keyed per
copy so that adding or removing one twice changes nothing. Plugins read it per worker
ClusterQueue (``per_cq``), which follows the change log instead of summing again.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from reconciler.core.workerqueues import WorkerQueues

Vec = npt.NDArray[np.int64]
CopyKey = tuple[str, str, int]  # job key, cluster, attempt


class InFlight:
    def __init__(self) -> None:
        self.entries: dict[CopyKey, tuple[int, str, Vec]] = {}
        self.log: list[tuple[int, str, Vec, int]] = []
        self._per_cq: tuple[WorkerQueues, int, npt.NDArray[np.int64]] | None = (
            None  # (arrays, log position, sums)
        )

    def add(self, key: CopyKey, *, slot: int, local_queue: str, demand: Vec) -> None:
        if key in self.entries:
            return
        self.entries[key] = (slot, local_queue, demand)
        self.log.append((slot, local_queue, demand, +1))

    def remove(self, key: CopyKey) -> None:
        entry = self.entries.pop(key, None)
        if entry is not None:
            self.log.append((*entry, -1))

    def per_cq(self, queues: WorkerQueues, n_resources: int) -> npt.NDArray[np.int64]:
        """Per worker-CQ row of ``queues``: the demand of our copies in flight to it."""
        start = 0
        sums: npt.NDArray[np.int64] | None = None
        if self._per_cq is not None and self._per_cq[0] is queues:
            _, start, sums = self._per_cq
        if sums is None:
            sums = np.zeros((queues.n_cq, n_resources), dtype=np.int64)
            start = 0
        for slot, lq, demand, sign in self.log[start:]:
            name = queues.local_queues[slot].get(lq)
            cq = queues.cq_row(slot, name) if name is not None else -1
            if cq >= 0:
                sums[cq] += sign * demand
        self._per_cq = (queues, len(self.log), sums)
        return sums
