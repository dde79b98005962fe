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
set; unless taking, within a priority, the jobs evicted fewest times before first costs no more
(highest victim priority, count): then that set (``spare_the_evicted``). The claim goes to the
cluster the job will run on (one where it fits now, else one where its victims there make room).

A job its queue admits within nominal quota but that no cluster has room for (the queues that
borrow its quota fill the clusters) reclaims too, per ``reclaimWithinCohort``: on one cluster,
jobs of queues still borrowing what it needs, in the same order, until it fits there; the
cluster whose set is cheapest (highest victim priority, count, name) wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from reconciler.core.dispatch import claim_for, profile_for
from reconciler.core.draft import Draft
from reconciler.core.framework.cycle import evaluate
from reconciler.core.jobs import Charge, JobRecord
from reconciler.core.preemption import Choice
from reconciler.core.queues.order import weighted
from reconciler.core.queues.rules import allowed, needed
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
    gone = after_claims(s)
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
        if not allowed(gone, job, victim, q=q, vq=vq, cols=short, within_nominal=within_nominal, policy=policy):
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

    def take(ordered: list[_Candidate]) -> list[JobRecord]:
        sim = usage.copy()
        taken: list[JobRecord] = []
        for c in ordered:
            sim.apply(c.charge, -1)
            if c.queue != q and not _fair(sim, q=q, vq=c.queue, need=need, fleet=fleet, strict=not within_nominal):
                sim.apply(c.charge, +1)
                continue
            taken.append(c.job)
            if sim.fits(q, need):
                return taken
        return []

    by_start = sorted(candidates, key=rank)
    by_history = sorted(by_start, key=lambda c: (*rank(c)[:3], c.job.evictions))  # stable: then as by_start
    return spare_the_evicted(take, by_start, by_history)


def spare_the_evicted(
    take: Callable[[list[_Candidate]], list[JobRecord]], by_start: list[_Candidate], by_history: list[_Candidate]
) -> list[JobRecord]:
    """What ``take`` picks from the candidates in the order with evictions before (fewest first,
    within a priority), when that costs no more (highest victim priority, then count) than what
    it picks in the usual order: a job restarted after an eviction is again the most recently
    started, and would otherwise be the first victim every time (docs/tenancy.md, "Preemption")."""
    taken = take(by_start)
    if not taken or all(a.job.key == b.job.key for a, b in zip(by_start, by_history, strict=True)):
        return taken
    spared = take(by_history)
    if spared and (max(v.priority for v in spared), len(spared)) <= (max(v.priority for v in taken), len(taken)):
        return spared
    return taken


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


def reclaim_capacity(s: Scratch, d: Draft, q: int) -> bool:
    assert s.usage is not None
    usage = s.usage
    tree = usage.tree
    spec = tree.nodes[q].spec
    if spec is None or spec.preemption.reclaim_within_cohort == "Never":
        return False
    job = d.job
    need = needed(usage, q, job)
    nominal = tree.nodes[q].nominal
    if not need or any(usage.usage[q][col] + amount > nominal[col] for col, amount in need):
        return False  # reclaiming is for a queue that stays within its own quota
    cols = [col for col, _ in need]
    # What queues borrow once the victims already claimed are gone: each claim takes its own.
    gone = after_claims(s)
    borrowers = {
        tree.nodes[n].name: n
        for n in tree.queues_under(tree.root_of(q))
        if n != q and _borrows(gone, n, cols)
    }
    profile = profile_for(s, job)
    if not borrowers or profile is None:
        return False
    evaluation = evaluate(profile, s.cycle_input(job), spec_key=job.spec_key, full=True)
    if evaluation.resolvable is None:
        return False
    table = s.state.clusters
    where = evaluation.resolvable & s.ready
    by_slot = _borrowed_by_cluster(s, job, borrowers, where, any_priority=spec.preemption.reclaim_within_cohort == "Any")
    if not by_slot:
        return False
    fleet = _fleet(s)
    shares = {n: weighted(gone, n, fleet) for n in borrowers.values()}
    free = s.free_for(job)
    demand = table.vector(job.demand)
    best: tuple[tuple[int, int, int], int, list[JobRecord]] | None = None
    for slot in sorted(by_slot):
        by_start = sorted(
            by_slot[slot],
            key=lambda c: ((not shares[c.queue][0], -shares[c.queue][1]), c.job.priority, -(c.job.placed_at_ms or 0), c.job.key),
        )

        def take(ordered: list[_Candidate], slot: int = slot) -> list[JobRecord]:
            sim = gone.copy()
            room = free[slot].copy()
            taken: list[JobRecord] = []
            for c in ordered:
                if not _borrows(sim, c.queue, cols):
                    continue  # it gave back all it borrowed: the rest of its jobs are its own
                sim.apply(c.charge, -1)
                if not _fair(sim, q=q, vq=c.queue, need=need, fleet=fleet, strict=False):
                    sim.apply(c.charge, +1)
                    continue
                taken.append(c.job)
                room += table.vector(c.job.demand)
                if (room >= demand).all():
                    return taken
            return []

        by_history = sorted(
            by_start, key=lambda c: ((not shares[c.queue][0], -shares[c.queue][1]), c.job.priority, c.job.evictions)
        )
        taken = spare_the_evicted(take, by_start, by_history)
        if not taken:
            continue
        cost = (max(v.priority for v in taken), len(taken), int(table.name_rank[slot]))
        if best is None or cost < best[0]:
            best = (cost, slot, taken)
    if best is None:
        return False
    _, slot, taken = best
    claim_for(
        s,
        d,
        Choice(cluster=table.names[slot], victims=[v.key for v in taken], max_priority=best[0][0], lost_ms=0),
    )
    return True


def after_claims(s: Scratch) -> Usage:
    """Usage once the victims of the claims made so far are gone (they still hold quota until
    they are): a queue whose borrowing they already give back is not a victim again."""
    assert s.usage is not None
    out = s.usage.copy()
    for key in sorted(s.claims):
        for victim_key in s.claims[key].victims:
            victim = s.state.jobs.get(victim_key)
            charge = s.charge_of(victim) if victim is not None else None
            if charge is not None:
                out.apply(charge, -1)
    return out


def _borrows(usage: Usage, node: int, cols: list[int]) -> bool:
    nominal = usage.tree.nodes[node].nominal
    return any(usage.usage[node][col] > nominal[col] for col in cols)


def _borrowed_by_cluster(
    s: Scratch, job: JobRecord, borrowers: dict[str, int], where: npt.NDArray[np.bool_], *, any_priority: bool
) -> dict[int, list[_Candidate]]:
    """Running jobs of borrowing queues that reclaiming may take, by cluster slot."""
    pool = s.running()
    claimed = {v for c in s.claims.values() for v in c.victims}
    wanted = {r for r, amount in job.demand.items() if amount > 0}
    out: dict[int, list[_Candidate]] = {}
    for key in sorted(pool.row_of):
        row = pool.row_of[key]
        slot = int(pool.cluster[row])
        if not pool.alive[row] or pool.evicting[row] or not where[slot]:
            continue
        if key in s.gone_jobs or key in claimed or key == job.key:
            continue
        victim = s.state.jobs.get(key)
        if victim is None or not (any_priority or victim.priority < job.priority):
            continue
        charge = s.charge_of(victim)
        if charge is None or charge.cluster_queue not in borrowers:
            continue
        if not any(victim.demand.get(r, 0) > 0 for r in wanted):
            continue
        out.setdefault(slot, []).append(_Candidate(job=victim, charge=charge, queue=borrowers[charge.cluster_queue]))
    return out


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
        where = s.placed_now.get(v.key, v.cluster)  # placed in this very pass: not folded yet
        if where is not None and where in table.index:
            free[table.index[where]] += table.vector(v.demand)
    demand = table.vector(job.demand)
    ok = evaluation.resolvable & s.ready & (free >= demand).all(axis=1)
    slots = np.flatnonzero(ok)
    if len(slots) == 0:
        return None
    best = slots[np.argsort(table.name_rank[slots], kind="stable")][0]
    return table.names[int(best)]
