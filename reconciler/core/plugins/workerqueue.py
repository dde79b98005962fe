"""WorkerQueueFit: the worker's own Kueue would admit the job's copy now.

The copy lands in the job's LocalQueue (its ``queue``, default "default", in its namespace) on
the worker, which points to one of the worker's ClusterQueues. That queue admits the gang's
total requests when, in each resource group the requests touch, some flavor (tried in order)
has room for all of them: its own unused nominal quota, plus what the rest of its cohort can
lend (unused quota up to each lender's lending limit, less what members already borrow), up to
its borrowing limit. Our own copies sent to that queue and not admitted yet count as used:
Kueue's reported usage does not have them.

A worker that never reported queues passes (a plain scheduler, or facts not yet reported).
Computed over every reported (ClusterQueue, flavor) row of every worker at once.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from reconciler.core.clusters import ClusterTable
from reconciler.core.framework.interface import CycleInput, FilterPlugin, FilterResult, JobView, Slots
from reconciler.core.framework.status import Code, Reason
from reconciler.core.inflight import InFlight
from reconciler.core.plugins.amounts import amount
from reconciler.core.plugins.nodefit import Verdicts
from reconciler.core.workerqueues import WorkerQueues, worker_queues

NAME = "WorkerQueueFit"

Mask = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]


def queue_fit(
    job: JobView, queues: WorkerQueues, names: list[str], in_flight: InFlight | None
) -> tuple[npt.NDArray[np.int32], list[Reason]]:
    n = queues.n_clusters
    out = Verdicts(n)
    lq = f"{job.namespace}/{job.queue}"
    cq_of = queues.cq_of(lq)
    out.reject(
        queues.kueue & (cq_of == -1), Code.UNSCHEDULABLE_AND_UNRESOLVABLE, f"no LocalQueue {lq} on worker"
    )
    out.reject(
        queues.kueue & (cq_of == -2),
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        f"LocalQueue {lq} on worker points to a ClusterQueue the worker does not report",
    )
    valid = queues.kueue & (cq_of >= 0)
    if not valid.any():
        return out.verdict, out.reasons
    stopped = valid & queues.cq_stopped_arr[np.maximum(cq_of, 0)]
    for g in np.unique(cq_of[stopped]):
        out.reject(
            stopped & (cq_of == g),
            Code.UNSCHEDULABLE,
            f"ClusterQueue {queues.cq_name[g]} on worker is stopped",
        )
    cols = np.flatnonzero(job.demand_vec > 0)
    if len(cols) == 0:
        return out.verdict, out.reasons
    need = job.demand_vec[cols]
    # The flavor rows of the queue each cluster's LocalQueue points to.
    rows = (
        np.flatnonzero(cq_of[queues.fl_slot] == queues.fl_cq) if len(queues.fl_cq) else np.zeros(0, np.intp)
    )
    listed = queues.listed[np.ix_(rows, cols)]
    cq_rows = queues.fl_cq[rows]
    # A requested resource no flavor of the queue lists: Kueue cannot admit the workload there.
    covered = np.zeros((queues.n_cq, len(cols)), dtype=np.bool_)
    np.logical_or.at(covered, cq_rows, listed)
    for j, c in enumerate(cols):
        lacking = valid & ~covered[np.maximum(cq_of, 0), j]
        for g in np.unique(cq_of[lacking & out.open()]):
            out.reject(
                lacking & (cq_of == g),
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                f"ClusterQueue {queues.cq_name[g]} on worker has no quota for {names[c]}",
            )
    per_cq = in_flight.per_cq(queues, len(names)) if in_flight is not None else None
    avail = queues.available(rows, cols, per_cq)
    enough = avail >= need
    relevant = listed.any(axis=1)
    flavor_ok = relevant & (enough | ~listed).all(axis=1)
    groups = queues.fl_group[rows]
    group_ok = np.zeros(int(groups.max()) + 1 if len(groups) else 0, dtype=np.bool_)
    group_relevant = np.zeros_like(group_ok)
    np.logical_or.at(group_ok, groups, flavor_ok)
    np.logical_or.at(group_relevant, groups, relevant)
    failing_row = relevant & group_relevant[groups] & ~group_ok[groups]
    if not failing_row.any():
        return out.verdict, out.reasons
    # Per failing queue: its first failing flavor and the first resource short there, named.
    first = np.full(queues.n_cq, -1, dtype=np.intp)
    idx = np.flatnonzero(failing_row)[::-1]  # later rows first, so the first row wins
    first[cq_rows[idx]] = idx
    short_cq = np.flatnonzero(first >= 0)
    at = first[short_cq]
    short_col = np.argmax(listed[at] & ~enough[at], axis=1)
    left = avail[at, short_col]
    where = queues.cq_slot_arr[short_cq]
    keep = valid[where] & out.open()[where]
    if not keep.any():
        return out.verdict, out.reasons
    where = where[keep]
    keys = np.stack(
        [queues.cq_name_id[short_cq[keep]], queues.fl_name_id[rows[at[keep]]], short_col[keep], left[keep]],
        axis=1,
    )
    distinct, inverse = np.unique(keys, axis=0, return_inverse=True)
    for u, (name_id, flavor_id, j, value) in enumerate(distinct.tolist()):
        res = int(cols[int(j)])
        mask = np.zeros(n, dtype=np.bool_)
        mask[where[inverse.reshape(-1) == u]] = True
        out.reject(
            mask,
            Code.UNSCHEDULABLE,
            f"ClusterQueue {queues.cq_names[name_id]} on worker: needs "
            f"{amount(names[res], int(job.demand_vec[res]))}, "
            f"{amount(names[res], value, bare=True)} left in flavor {queues.fl_names[flavor_id]}",
        )
    return out.verdict, out.reasons


class WorkerQueueFit(FilterPlugin):
    name = NAME
    per_cluster = True
    preemptible = False  # victims' pods/quota are not located in the facts (docs/capacity.md)

    def idle(self, clusters: ClusterTable) -> bool:
        return not worker_queues(clusters).kueue.any()

    def filter(self, inp: CycleInput, slots: Slots) -> FilterResult:
        queues = worker_queues(inp.clusters)
        if not queues.kueue.any():
            return FilterResult.passing(len(slots))
        verdict, reasons = queue_fit(inp.job, queues, inp.clusters.resources.names, inp.in_flight)
        return FilterResult(verdict=verdict[slots], reasons=reasons)
