"""Which running jobs a job may preempt across ClusterQueues (Kueue's rules, fleet-wide).

Shared by preemption for quota (``victims``) and priority preemption for cluster capacity
(``reconciler.core.preemption``): a job of another ClusterQueue is only ever taken from a
queue in the same cohort tree that borrows what the preemptor needs, per the preemptor's
``reclaimWithinCohort`` (its queue stays within nominal quota) or ``borrowWithinCohort``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from eventlog.events import QueuePreemption
from reconciler.core.jobs import JobRecord
from reconciler.core.pool import RunningPool
from reconciler.core.queues.admit import queue_of
from reconciler.core.queues.usage import Usage
from reconciler.core.scratch import Scratch


def needed(usage: Usage, q: int, job: JobRecord) -> list[tuple[int, int]] | None:
    """The columns the job would take: in each group, the first flavor listing all it needs."""
    tree = usage.tree
    out: list[tuple[int, int]] = []
    for group in tree.nodes[q].groups:
        wanted = [r for r in group.covered if job.demand.get(r, 0) > 0]
        if not wanted:
            continue
        for flavor in group.flavors:
            cols = [tree.column.get((flavor, r)) for r in wanted]
            if all(c is not None for c in cols):
                out.extend((c, job.demand[r]) for c, r in zip(cols, wanted, strict=True) if c is not None)
                break
        else:
            return None
    covered = {r for g in tree.nodes[q].groups for r in g.covered}
    if any(r not in covered for r in job.demand):
        return None
    return sorted(out)


def allowed(
    usage: Usage,
    job: JobRecord,
    victim: JobRecord,
    *,
    q: int,
    vq: int,
    cols: set[int],
    within_nominal: bool,
    policy: QueuePreemption,
) -> bool:
    tree = usage.tree
    if vq == q:
        if policy.within_cluster_queue == "LowerPriority":
            return victim.priority < job.priority
        if policy.within_cluster_queue == "LowerOrNewerEqualPriority":
            return victim.priority < job.priority or (
                victim.priority == job.priority and victim.submitted_seq > job.submitted_seq
            )
        return False
    node = tree.nodes[vq]
    if not any(usage.usage[vq][col] > node.nominal[col] for col in cols):
        return False  # only queues that borrow what the job needs give it back
    if within_nominal and policy.reclaim_within_cohort != "Never":
        return policy.reclaim_within_cohort == "Any" or victim.priority < job.priority
    if policy.borrow_within_cohort == "LowerPriority":
        threshold = policy.borrow_max_priority_threshold
        return victim.priority < job.priority and (threshold is None or victim.priority <= threshold)
    return False


def keep_priority_victims(s: Scratch, job: JobRecord, pool: RunningPool, eligible: npt.NDArray[np.bool_]) -> None:
    """Priority preemption for cluster capacity, with tenancy: drop from ``eligible`` the jobs
    of other ClusterQueues the preemptor may not take. Within its own queue it preempts lower
    priorities as without tenancy; a job charged to no queue is nobody's to protect."""
    assert s.usage is not None
    usage = s.usage
    tree = usage.tree
    q = queue_of(tree, job)
    spec = tree.nodes[q].spec if isinstance(q, int) else None
    policy = spec.preemption if spec is not None else QueuePreemption()
    jobs, charges, keys, queue_index = s.state.jobs, s.charges, pool.keys, tree.queue
    if isinstance(q, int) and takes_nothing_across(policy):
        # ``allowed`` refuses every other queue's job whatever the usage: keep the queue's own
        # and the jobs charged to no known queue, by name (the common, default rules).
        own = tree.nodes[q].name
        for row in np.flatnonzero(eligible).tolist():
            key = keys[row]
            victim = jobs.get(key)
            if victim is None:
                continue
            charge = charges.get(key, victim.charge)
            if charge is not None and charge.cluster_queue != own and charge.cluster_queue in queue_index:
                eligible[row] = False
        return
    root = tree.root_of(q) if isinstance(q, int) else None
    need = needed(usage, q, job) if isinstance(q, int) else None
    cols = {col for col, _ in need or []}
    within_nominal = isinstance(q, int) and all(
        usage.usage[q][col] + amount <= tree.nodes[q].nominal[col] for col, amount in need or []
    )
    verdicts: dict[tuple[int, int], bool] = {}
    # Once per running job on a candidate cluster, for every preemptor tried: plain lookups only
    # (the pool row's key is the job's key; its charge as ``Scratch.charge_of`` reads it).
    for row in np.flatnonzero(eligible).tolist():
        key = keys[row]
        victim = jobs.get(key)
        if victim is None:
            continue
        charge = charges.get(key, victim.charge)
        if charge is None:
            continue
        vq = queue_index.get(charge.cluster_queue)
        if vq is None or vq == q:
            continue
        memo = (vq, victim.priority)
        verdict = verdicts.get(memo)
        if verdict is None:
            verdict = verdicts[memo] = (
                isinstance(q, int)
                and need is not None
                and tree.root_of(vq) == root
                and allowed(usage, job, victim, q=q, vq=vq, cols=cols, within_nominal=within_nominal, policy=policy)
            )
        if not verdict:
            eligible[row] = False


def takes_nothing_across(policy: QueuePreemption) -> bool:
    """Whether the rules let a job take nothing from other ClusterQueues (``allowed`` is False
    for every job of another queue, whatever the usage): no reclaiming, no borrowing."""
    return policy.reclaim_within_cohort == "Never" and policy.borrow_within_cohort == "Never"
