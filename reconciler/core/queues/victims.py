"""Preemption for quota (Kueue's classical rules, fleet-wide), on top of the claim machinery.

A job its queue cannot admit may evict running jobs that hold quota in its cohort tree:
- in its own queue, per ``withinClusterQueue`` (LowerPriority, or LowerOrNewerEqualPriority);
- in another queue that borrows, per ``reclaimWithinCohort`` when the job's queue would stay
  within its nominal quota (LowerPriority or Any), else per ``borrowWithinCohort`` (LowerPriority,
  at most ``maxPriorityThreshold``).
A job in another queue is only taken if the preemptor's queue, once admitted, is no further
above its fair share than the victim's queue once the victim is gone (strictly below when the
preemptor borrows): preemptions never push a queue past its share, and two queues cannot take
the same jobs back and forth. Victims come from the queues most above their share first, then
lowest priority, then the most recently started, then name: the same state always picks the same
set. The claim goes to the cluster the job will run on (one where it fits now, else one where
its victims there make room).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from eventlog.events import QueuePreemption
from reconciler.core.dispatch import claim_for, profile_for
from reconciler.core.draft import Draft
from reconciler.core.framework.cycle import evaluate
from reconciler.core.jobs import Charge, JobRecord
from reconciler.core.preemption import Choice
from reconciler.core.queues.order import weighted
from reconciler.core.queues.usage import Usage
from reconciler.core.scratch import Scratch


@dataclass(frozen=True)
class _Candidate:
    job: JobRecord
    charge: Charge
    queue: int


def preempt_for_quota(s: Scratch, d: Draft, q: int) -> bool:
    assert s.usage is not None
    usage = s.usage
    tree = usage.tree
    spec = tree.nodes[q].spec
    if spec is None:
        return False
    policy = spec.preemption
    if (
        policy.within_cluster_queue == "Never"
        and policy.reclaim_within_cohort == "Never"
        and policy.borrow_within_cohort == "Never"
    ):
        return False
    job = d.job
    need = needed(usage, q, job)
    if need is None:
        return False
    fleet = _fleet(s)
    victims = _choose(s, job, q, need, fleet)
    if not victims:
        return False
    cluster = _cluster(s, d, victims)
    if cluster is None:
        return False
    choice = Choice(
        cluster=cluster,
        victims=[v.key for v in victims],
        max_priority=max(v.priority for v in victims),
        lost_ms=0,
    )
    claim_for(s, d, choice)
    return True


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


def _fleet(s: Scratch) -> dict[str, int]:
    table = s.state.clusters
    if len(table) == 0:
        return {}
    totals = table.capacity[s.ready].sum(axis=0)
    return {name: int(totals[i]) for i, name in enumerate(table.resources.names)}


def _choose(
    s: Scratch, job: JobRecord, q: int, need: list[tuple[int, int]], fleet: dict[str, int]
) -> list[JobRecord]:
    assert s.usage is not None
    usage = s.usage
    tree = usage.tree
    policy = tree.nodes[q].spec.preemption  # type: ignore[union-attr]
    root = tree.root_of(q)
    in_tree = {tree.nodes[n].name: n for n in tree.queues_under(root)}
    pool = s.running()
    claimed = {v for c in s.claims.values() for v in c.victims}
    short = {col for col, amount in need if amount > usage.available(q, col)}
    within_nominal = all(usage.usage[q][col] + amount <= tree.nodes[q].nominal[col] for col, amount in need)
    candidates: list[_Candidate] = []
    for key in sorted(pool.row_of):
        row = pool.row_of[key]
        if not pool.alive[row] or pool.evicting[row] or key in s.gone_jobs or key in claimed or key == job.key:
            continue
        victim = s.state.jobs.get(key)
        if victim is None:
            continue
        charge = s.charge_of(victim)
        if charge is None or charge.cluster_queue not in in_tree:
            continue
        vq = in_tree[charge.cluster_queue]
        if not any(tree.column.get((f, r)) in short and a for f, r, a in charge.amounts):
            continue  # frees nothing the job is short of
        if not _allowed(usage, job, victim, q=q, vq=vq, cols=short, within_nominal=within_nominal, policy=policy):
            continue
        candidates.append(_Candidate(job=victim, charge=charge, queue=vq))
    if not candidates or usage.fits(q, need):
        return []  # nobody to take from, or nothing to take: it waits for reserved quota
    # Most above their share first (computed once: the order must not shift as victims go).
    shares = {c.queue: weighted(usage, c.queue, fleet) for c in candidates}

    def rank(c: _Candidate) -> tuple[int, tuple[bool, Fraction], int, int, str]:
        k = shares[c.queue]
        started = c.job.placed_at_ms or 0
        return (0 if c.queue != q else 1, (not k[0], -k[1]), c.job.priority, -started, c.job.key)

    candidates.sort(key=rank)
    sim = usage.copy()
    taken: list[JobRecord] = []
    borrowing = not within_nominal
    for c in candidates:
        sim.apply(c.charge, -1)
        if c.queue != q and not _fair(sim, q=q, vq=c.queue, need=need, fleet=fleet, strict=borrowing):
            sim.apply(c.charge, +1)
            continue
        taken.append(c.job)
        if sim.fits(q, need):
            return taken
    return []


def _allowed(
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


def _fair(sim: Usage, *, q: int, vq: int, need: list[tuple[int, int]], fleet: dict[str, int], strict: bool) -> bool:
    """The preemptor's queue, admitted, against the victim's queue without the victim."""
    for col, amount in need:
        sim.add(q, col, amount)
    mine = weighted(sim, q, fleet)
    for col, amount in need:
        sim.add(q, col, -amount)
    theirs = weighted(sim, vq, fleet)
    a, b = mine[:2], theirs[:2]
    return a < b if strict else a <= b


def _cluster(s: Scratch, d: Draft, victims: list[JobRecord]) -> str | None:
    job = d.job
    profile = profile_for(s, job)
    if profile is None:
        return None
    table = s.state.clusters
    evaluation = evaluate(profile, s.cycle_input(job), spec_key=job.spec_key, full=True)
    if len(evaluation.ranked):
        return table.names[int(evaluation.ranked[0])]
    if evaluation.resolvable is None:
        return None
    free = s.free_for(job).copy()
    for v in victims:
        if v.cluster is not None and v.cluster in table.index:
            free[table.index[v.cluster]] += table.vector(v.demand)
    demand = table.vector(job.demand)
    ok = evaluation.resolvable & s.ready & (free >= demand).all(axis=1)
    slots = np.flatnonzero(ok)
    if len(slots) == 0:
        return None
    best = slots[np.argsort(table.name_rank[slots], kind="stable")][0]
    return table.names[int(best)]
