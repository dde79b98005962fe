"""Dispatch with tenancy: queues take turns by weighted fair share; quota gates admission.

Each waiting job goes to its ClusterQueue's line (priority, then submission). A tournament
(``order``) picks the queue whose turn it is; its next job is admitted if the queue's quota (or
what its cohort lends) covers it, then placed on clusters exactly as without tenancy. A job that
does not fit waits with a reason that says why in quota terms; under StrictFIFO it holds the
jobs behind it for the pass, under BestEffortFIFO they may pass. Jobs holding a preemption claim
go before everyone, so the quota their victims free is theirs first.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from eventlog.events import ClusterQueueSpec, Resources
from reconciler.core import phases
from reconciler.core.dispatch import (
    CLAIMED,
    LEFT,
    NOMINATED,
    QUOTA,
    REQUEUED,
    WAITING,
    attempt,
    claim_for,
    due,
    order_key,
    profile_for,
    worth_a_look,
)
from reconciler.core.draft import Draft
from reconciler.core.framework.cycle import evaluate, feasible
from reconciler.core.pending import Lane
from reconciler.core.preemption import any_victims, select_victims
from reconciler.core.queues.admit import Assignment, Wait, assign, hold_reason, queue_of
from reconciler.core.queues.lines import Fallback, Groups, Lanes, Line, version
from reconciler.core.queues.order import Tournament
from reconciler.core.queues.rules import needed
from reconciler.core.queues.victims import preempt_for_quota, reclaim_capacity
from reconciler.core.scratch import Scratch


def dispatch_queues(
    s: Scratch, drafts: list[Draft], *, lanes: Lanes | None = None, groups: Groups | None = None
) -> list[Draft]:
    """With ``lanes`` (the pending index, ``lines``), the waiting jobs it holds are walked from
    the heads of their queues instead of being among ``drafts``; ``groups`` collects the jobs
    skipped behind a representative."""
    assert s.usage is not None
    groups = groups if groups is not None else Groups(exclude=())
    if not drafts and not (lanes and lanes.walk):
        return []  # nothing to order (StrictFIFO heads are only tried alongside a job to try)
    tree = s.usage.tree
    left: list[Draft] = []
    failed: set[tuple[bytes, int, str]] = set()
    lines: dict[int, list[Draft]] = {}
    claimants: list[tuple[int, Draft]] = []
    # Not worth a look before the claimants' turns; one whose claim becomes its nomination lets
    # jobs at or below its priority look again (``worth_a_look``), as the next decide would.
    unworthy: list[Draft] = []
    for d in sorted(drafts, key=lambda d: order_key(s, d.job)):
        if not due(s, d):
            continue
        if d.capacity_only and not worth_a_look(s, d.job):
            if s.claims and d.job.key not in s.claims:
                unworthy.append(d)
            continue
        where = queue_of(tree, d.job)
        if isinstance(where, Wait):
            wait(s, d, where, left)
        elif d.job.key in s.claims:
            claimants.append((where, d))
        else:
            lines.setdefault(where, []).append(d)
    walk = {q: list(ls) for q, ls in lanes.walk.items()} if lanes else {}
    for q in walk:
        lines.setdefault(q, [])
    _strict_lines(s, lines, claimants, drafts, lanes, walk)
    again = lanes.again if lanes else None
    queue_lines = {q: Line(s, lines[q], walk.get(q, []), groups, again) for q in sorted(lines)}
    turns = _Turns()
    news = _news(s)
    blockers: dict[int, Draft] = {}
    for q, d in claimants:
        outcome = turns.admit(s, d, q, failed, left)
        if _blocks(tree.nodes[q].spec, outcome):
            blockers.setdefault(q, d)
        if q in queue_lines and _blocks(tree.nodes[q].spec, outcome):
            _block(s, queue_lines[q].rest(), d, left)  # a StrictFIFO head preempting holds its line
            del queue_lines[q]
    if unworthy and _news(s) != news:
        late = [d for d in unworthy if worth_a_look(s, d.job)]
        _join_late(s, late, lines, walk, queue_lines, claimants, blockers, drafts, groups, left)
    tour = Tournament(s.usage, fleet_capacity(s), sorted(queue_lines))
    picked: int | None = None
    while picked is not None or (picked := tour.pick()) is not None:
        q = picked
        line = queue_lines[q]
        head = line.next()
        if head is None:  # its lanes slept again (``Lanes.again``): turns that would change nothing
            tour.retire(q)
            picked = None
            continue
        before = version(s)
        outcome = turns.admit(s, head, q, failed, left)
        line.settle(head, outcome, before, left)
        if _blocks(tree.nodes[q].spec, outcome):
            _block(s, line.rest(), head, left)
        if line.done():
            tour.retire(q)
            picked = None
        elif version(s) != before:
            picked = None  # shares may have moved; else the tournament would pick this queue again
    _second_look(s, left, turns, groups)
    return left


def _news(s: Scratch) -> tuple[object, ...]:
    """What ``worth_a_look`` reads that a claimant's turn can change."""
    return (s.help, s.unclaimed, len(s.freed), len(s.quota_freed), s.placed_low)


def _join_late(
    s: Scratch,
    late: list[Draft],
    lines: dict[int, list[Draft]],
    walk: dict[int, list[Lane]],
    queue_lines: dict[int, Line],
    claimants: list[tuple[int, Draft]],
    blockers: dict[int, Draft],
    drafts: list[Draft],
    groups: Groups,
    left: list[Draft],
) -> None:
    """Jobs found worth a look only after the claimants' turns join the lines, as if they had
    been from the start: a StrictFIFO queue that had no job to try is now tried from its head
    (held by a claimant of its own that was not admitted). No line has been walked yet."""
    assert s.usage is not None
    tree = s.usage.tree
    fresh: dict[int, list[Draft]] = {}
    joined: dict[int, list[Draft]] = {}
    for d in late:
        where = queue_of(tree, d.job)
        if isinstance(where, Wait):
            wait(s, d, where, left)
        elif where not in lines:
            fresh.setdefault(where, []).append(d)
        elif not _strict(tree.nodes[where].spec):  # (a StrictFIFO line holds every waiting job already)
            joined.setdefault(where, []).append(d)
    for q in sorted(joined):
        lines[q] = sorted([*lines[q], *joined[q]], key=lambda d: order_key(s, d.job))
        queue_lines[q] = Line(s, lines[q], walk.get(q, []), groups)
    _strict_lines(s, fresh, claimants, drafts, None, {})
    for q in sorted(fresh):
        lines[q] = fresh[q]
        line = Line(s, fresh[q], [], groups)
        if q in blockers:
            _block(s, line.rest(), blockers[q], left)
        else:
            queue_lines[q] = line


class _Turns:
    """How many jobs each cohort tree admitted before each job's turn, so the second look is
    only for jobs whose tree admitted more after it."""

    def __init__(self) -> None:
        self.admitted: dict[int, int] = {}
        self.seen: dict[str, tuple[int, int]] = {}

    def admit(self, s: Scratch, d: Draft, q: int, failed: set[tuple[bytes, int, str]], left: list[Draft]) -> str:
        assert s.usage is not None
        root = s.usage.tree.root_of(q)
        self.seen[d.job.key] = (root, self.admitted.get(root, 0))
        outcome = _admit(s, d, q, failed, left)
        if outcome == NOMINATED:
            self.admitted[root] = self.admitted.get(root, 0) + 1
        return outcome

    def changed_since(self, key: str) -> bool:
        seen = self.seen.get(key)
        return seen is not None and self.admitted.get(seen[0], 0) > seen[1]


def _second_look(s: Scratch, left: list[Draft], turns: _Turns, groups: Groups) -> None:
    """Queues admitted later in the pass may have started borrowing what a job that waited
    earlier needs, making them its victims; the next decide would find that and preempt, so
    the pass does now, against the final usage, in the order the jobs were tried. Claims do
    not change usage, so one sweep reaches what a decide right after this batch would see."""
    assert s.usage is not None
    tree = s.usage.tree
    # Claims only take victims away, so a job like one that found none finds none either.
    failed: set[tuple[bytes, int, int]] = set()
    for d in list(left):
        why = d.queue_wait
        if not turns.changed_since(d.job.key) or d.timed_out or d.job.key in s.claims:
            continue
        if why is not None and not why.quota:
            continue
        q = queue_of(tree, d.job)
        if not isinstance(q, int) or not _takes_across(tree.nodes[q].spec) or profile_for(s, d.job) is None:
            continue
        memo = (d.job.spec_key, d.job.priority, q)
        if memo in failed:
            continue
        fit = _assign_around_claims(s, d, q)
        if isinstance(fit, Wait):
            taken = fit.quota and preempt_for_quota(s, d, q)
        else:  # it waited for clusters: which jobs of other queues it may take depends on usage
            taken = why is None and (_preempt_by_priority(s, d) or reclaim_capacity(s, d, q))
        if taken:
            if any(g.any_replica(s, groups.exclude) for g in groups.of(d)):
                raise Fallback  # the jobs behind it would each look again, in the order they came
            left.remove(d)
        else:
            failed.add(memo)


def _takes_across(spec: ClusterQueueSpec | None) -> bool:
    """Whether admissions elsewhere in the pass can change what the queue's jobs may preempt:
    all its preemption rules ``Never`` leaves only priority preemption within the queue."""
    if spec is None:
        return False
    p = spec.preemption
    return p.within_cluster_queue != "Never" or p.reclaim_within_cohort != "Never" or p.borrow_within_cohort != "Never"


def _preempt_by_priority(s: Scratch, d: Draft) -> bool:
    profile = profile_for(s, d.job)
    if profile is None or d.job.placement.preemption_policy != "PreemptLowerPriority" or not len(s.state.clusters):
        return False
    if not any_victims(s, d.job):
        return False
    full = evaluate(profile, s.cycle_input(d.job), spec_key=d.job.spec_key, scores=False, full=True)
    choice = select_victims(s, d.job, evaluation=full)
    if choice is None:
        return False
    claim_for(s, d, choice)
    return True


def final_reasons(s: Scratch, left: list[Draft]) -> None:
    """Reasons are reported against the pass's final state: a job that waited for quota while
    clusters would have taken it may since have lost those clusters to jobs after it (a decide
    right after this batch would say so), so capacity comes first, as in ``_admit``."""
    for d in left:
        if d.queue_wait is None or not d.queue_wait.key.startswith("QuotaExceeded"):
            continue
        profile = profile_for(s, d.job)
        if profile is None or s.still_fits(d.seen_feasible):
            continue
        if not len(feasible(profile, s.cycle_input(d.job), spec_key=d.job.spec_key)):
            d.queue_wait = None


def _blocks(spec: ClusterQueueSpec | None, outcome: str) -> bool:
    """Under StrictFIFO a head that is not admitted (waits, or preempts) holds the line."""
    return _strict(spec) and outcome in (LEFT, WAITING, CLAIMED)


def _strict(spec: ClusterQueueSpec | None) -> bool:
    return spec is not None and spec.queueing_strategy == "StrictFIFO"


def _block(s: Scratch, rest: list[Draft], head: Draft, left: list[Draft]) -> None:
    assert s.usage is not None
    q = queue_of(s.usage.tree, head.job)
    name = s.usage.tree.nodes[q].name if isinstance(q, int) else "?"
    blocked = Wait(
        key=f"StrictFIFO: ClusterQueue {name}",
        message=f"behind {head.job.key} in ClusterQueue {name} (StrictFIFO)",
        quota=False,
    )
    for d in rest:
        wait(s, d, blocked, left)


def _admit(s: Scratch, d: Draft, q: int, failed: set[tuple[bytes, int, str]], left: list[Draft]) -> str:
    assert s.usage is not None
    job = d.job
    held = hold_reason(s.usage.tree, job, q)
    if held is not None:
        return wait(s, d, held, left)
    # Clusters first: a job no cluster can take now waits for capacity whatever its quota
    # (reported as such), and only a job that would be placed may preempt for quota.
    verdict: list[Wait] = []

    def quota() -> dict[str, str] | None:
        fit = _assign_around_claims(s, d, q)
        if isinstance(fit, Wait):
            verdict.append(fit)
            return None
        return fit.flavors

    outcome = attempt(s, d, failed, left, quota=quota)
    if outcome == LEFT and left and left[-1] is d:
        return _reclaim_for_capacity(s, d, q, left, verdict, quota)
    if outcome != QUOTA:
        return outcome
    why = verdict[0]
    if job.key in s.claims and not d.timed_out:
        return WAITING  # its victims still hold the quota
    if why.quota and not d.timed_out and preempt_for_quota(s, d, q):
        return CLAIMED
    return wait(s, d, why, left)


def _reclaim_for_capacity(
    s: Scratch, d: Draft, q: int, left: list[Draft], verdict: list[Wait], quota: Callable[[], object]
) -> str:
    """No cluster can take the job now. If that is because queues that borrow fill the clusters,
    it may still take back what they borrow: by preemption for quota when its queue is short
    too, else (its queue within nominal) by reclaiming on one cluster where their going makes
    the job fit. Either way the claim is one the next pass honours, and a job no eviction could
    place keeps its capacity reason."""
    if d.timed_out or d.job.key in s.claims:
        return LEFT
    assert s.usage is not None
    if not _rules_may_take(s.usage.tree.nodes[q].spec):
        return LEFT  # (before asking the quota, a look's cost when nothing could be taken)
    if not verdict:
        quota()
    if verdict:
        if not verdict[0].quota or not preempt_for_quota(s, d, q):
            return LEFT
    elif not reclaim_capacity(s, d, q):
        return LEFT
    left.pop()
    return CLAIMED


def _rules_may_take(spec: ClusterQueueSpec | None) -> bool:
    """Whether preemption for quota or reclaiming could take anything for the queue's jobs: both
    refuse when every rule is ``Never`` (the default), whatever the quota says."""
    return _takes_across(spec)


def _assign_around_claims(s: Scratch, d: Draft, q: int) -> Assignment | Wait:
    """Quota a claim's victims have already freed is held for its preemptor (against jobs at
    or below its priority), as claims hold cluster capacity: nothing is held when the claim is
    made, so the claim itself changes no other job's verdict."""
    assert s.usage is not None
    if not s.claims:  # (nothing held: most jobs of a deep backlog)
        return assign(s.usage, q, d.job.demand)
    holds = _holds(s, d)
    for node, col, amount in holds:
        s.usage.add(node, col, amount)
    try:
        return assign(s.usage, q, d.job.demand)
    finally:
        for node, col, amount in holds:
            s.usage.add(node, col, -amount)


def _holds(s: Scratch, d: Draft) -> list[tuple[int, int, int]]:
    if not s.claims:
        return []
    assert s.usage is not None
    tree = s.usage.tree
    out: list[tuple[int, int, int]] = []
    for key in sorted(s.claims):
        claim = s.claims[key]
        preemptor = s.state.jobs.get(key)
        if key == d.job.key or preemptor is None or claim.priority < d.job.priority:
            continue
        node = queue_of(tree, preemptor)
        if not isinstance(node, int):
            continue
        need = needed(s.usage, node, preemptor)
        if not need:
            continue
        freed: dict[str, int] = {}
        for victim_key in claim.victims:
            victim = s.state.jobs.get(victim_key)
            if victim is not None and s.charge_of(victim) is None:
                for r, amount in victim.demand.items():
                    freed[r] = freed.get(r, 0) + amount
        for col, amount in need:
            held = min(amount, freed.get(tree.columns[col][1], 0))
            if held > 0:
                out.append((node, col, held))
    return out


def wait(s: Scratch, d: Draft, why: Wait, left: list[Draft]) -> str:
    """The job waits for its queue. A round that timed out is requeued instead (backing off, so
    it does not hold a StrictFIFO line): the quota it held is released now, so it must not
    stay nominated."""
    if d.timed_out:
        d.requeue(s, reason="AdmissionTimeout", cluster=None, backoff=True, message=why.message)
        return REQUEUED
    d.queue_wait = why
    left.append(d)
    return LEFT


def _strict_lines(
    s: Scratch,
    lines: dict[int, list[Draft]],
    claimants: list[tuple[int, Draft]],
    drafts: list[Draft],
    lanes: Lanes | None,
    walk: dict[int, list[Lane]],
) -> None:
    """A StrictFIFO queue with a job to try is tried from its head: jobs waiting there that
    nothing happened to (not worth a look on their own) still come first and block the line
    if they do not fit. (With the pending index, its walkable lanes join the line whole.)"""
    assert s.usage is not None
    tree = s.usage.tree
    strict = [q for q in sorted(lines) if (spec := tree.nodes[q].spec) and spec.queueing_strategy == "StrictFIFO"]
    if not strict:
        return
    trying = {d.job.key for line in lines.values() for d in line} | {d.job.key for _, d in claimants}
    drafted = {d.job.key: d for d in drafts}
    wanted = set(strict)
    extra: dict[int, list[Draft]] = {}

    def consider(key: str, q: int) -> None:
        job = s.state.jobs[key]
        d = drafted.get(key) or Draft.of(job, capacity_only=True)
        if d.phase in phases.WAITING and not job.suspended and (d.not_before_ms is None or s.now >= d.not_before_ms):
            extra.setdefault(q, []).append(d)

    if lanes is None:
        for key in s.state.waiting:
            if key in trying:
                continue
            job = s.state.jobs[key]
            q = queue_of(tree, job)
            if not isinstance(q, int) or q not in wanted:
                continue
            consider(key, q)
    else:
        index = s.state.index
        for q in strict:
            walking = {id(lane) for lane in walk.setdefault(q, [])}
            for lane in lanes.by_queue.get(q, []):
                if id(lane) in lanes.walkable:
                    if id(lane) not in walking:
                        walk[q].append(lane)
                    continue
                for i, key in enumerate(lane.keys):
                    if key not in trying and index.live(lane, i, s.state.jobs):
                        consider(key, q)
    for q in sorted(extra):
        lines[q] = sorted([*lines[q], *extra[q]], key=lambda d: order_key(s, d.job))


def fleet_capacity(s: Scratch) -> Resources:
    """Capacity of every Ready cluster, per resource: the denominator of fair shares."""
    table = s.state.clusters
    if len(table) == 0:
        return {}
    totals = s.ready.astype(np.int64) @ table.capacity  # the same sum as capacity[ready], without the copy
    return {name: int(totals[i]) for i, name in enumerate(table.resources.names)}
