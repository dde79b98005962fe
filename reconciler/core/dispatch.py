"""The second half of a decide pass: dispatch waiting jobs, preempt, report the unschedulable.

Jobs go in a stable order: priority (highest first), then claim holders, then submission order,
then key. A job that fits somewhere is nominated by its profile's strategy; one that fits nowhere
may preempt (one claim per job, on exactly one cluster); the rest are reported ``Unschedulable``
at the end of the pass, against the final capacity, and only when the summary changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from eventlog import events as ev
from reconciler.core import phases
from reconciler.core.draft import Draft
from reconciler.core.framework.cycle import (
    Evaluation,
    evaluate,
    rank,
    rejection_summary,
    static_survivors,
    summary_message,
)
from reconciler.core.framework.interface import JobView, Slots
from reconciler.core.framework.profile import CompiledProfile
from reconciler.core.jobs import Claim, JobRecord
from reconciler.core.lifecycle import evict_event
from reconciler.core.preemption import Choice, any_victims, select_victims
from reconciler.core.queues.admit import queue_of
from reconciler.core.scratch import Scratch, job_view
from reconciler.core.spec_classes import Feasible
from reconciler.core.strategies import round_deadline, width

if TYPE_CHECKING:
    from reconciler.core.queues.lines import Groups


def order_key(s: Scratch, job: JobRecord) -> tuple[int, int, int, str]:
    return (-job.priority, 0 if job.key in s.claims else 1, job.submitted_seq, job.key)


def profile_for(s: Scratch, job: JobRecord) -> CompiledProfile | None:
    return s.state.profiles.get(job.placement.profile)


NOMINATED = "nominated"
REQUEUED = "requeued"
WAITING = "waiting"  # for the victims of its claim
CLAIMED = "claimed"
LEFT = "left"
QUOTA = "quota"  # clusters would take it, its queue's quota does not (tenancy)


def dispatch(s: Scratch, drafts: list[Draft]) -> list[Draft]:
    """Nominate or preempt for each draft; returns the ones left unschedulable. (With tenancy,
    ``queues.dispatch`` orders the jobs instead and calls ``attempt`` for each.)"""
    left: list[Draft] = []
    failed_specs: set[tuple[bytes, int, str]] = set()
    for d in sorted(drafts, key=lambda d: order_key(s, d.job)):
        if ready_to_try(s, d):
            attempt(s, d, failed_specs, left)
    return left


def ready_to_try(s: Scratch, d: Draft) -> bool:
    # Only here because capacity came free: nothing it could use came free and no new victims,
    # so its last verdict stands.
    return due(s, d) and not (d.capacity_only and not worth_a_look(s, d.job))


def due(s: Scratch, d: Draft) -> bool:
    """Whether the job may be dispatched at all now (waiting, not suspended, not backing off)."""
    if d.job.suspended or d.phase not in (*phases.WAITING, phases.QUEUED):
        return False
    return d.not_before_ms is None or s.now >= d.not_before_ms


def attempt(
    s: Scratch,
    d: Draft,
    failed_specs: set[tuple[bytes, int, str]],
    left: list[Draft],
    *,
    quota: Callable[[], dict[str, str] | None] | None = None,
) -> str:
    """Place one job on clusters (or preempt for it); returns what became of it. With tenancy,
    ``quota`` is asked once clusters are found: the flavors to charge, or None (``QUOTA``: not
    nominated, its queue cannot admit it now)."""
    job = d.job
    profile = profile_for(s, job)
    if profile is None:
        left.append(d)
        return LEFT
    # Identical jobs that already failed in this pass fail again (capacity only shrinks while
    # dispatching), unless a claim or earlier rounds make this one different.
    memo = (job.spec_key, job.priority, profile.name)
    if memo in failed_specs and not d.tried and job.key not in s.claims and not d.timed_out:
        left.append(d)
        return LEFT
    found = Feasible(s, profile, job)
    table = s.state.clusters
    claim = s.claims.get(job.key)
    claim_cluster = claim.cluster if claim else None
    # Quota before scores: a job its queue cannot admit now (most of them, when queues are
    # full) needs no ranking. Which clusters it would get does not change what quota says.
    flavors: dict[str, str] | None = {}
    if quota is not None and _any_choice(s, d, found, claim_cluster=claim_cluster):
        flavors = quota()
        if flavors is None:
            if not s.claims and found.per_cluster:
                d.seen_feasible = found.seen()
            return QUOTA
    ranked = found.ranked()
    if ranked is None:
        ranked = rank(profile, found.inp or s.cycle_input(job), candidates=found.now()).ranked
    chosen = _choose(s, d, profile=profile, ranked=ranked, claim_cluster=claim_cluster)
    if chosen:
        assert flavors is not None
        deadline = round_deadline(profile.spec.strategy, now_ms=s.now, timeout_ms=profile.spec.round_timeout_ms)
        d.nominate(s, clusters=chosen, deadline_ms=deadline, flavors=flavors)
        return NOMINATED
    if len(ranked) or d.timed_out:  # every feasible cluster was tried: start over later
        d.requeue(s, reason="AdmissionTimeout", cluster=None, backoff=True, message="no cluster admitted the job")
        return REQUEUED
    if claim is not None:
        return WAITING
    # With tenancy, preempting for cluster capacity is pointless if the queue cannot admit it.
    if (
        job.placement.preemption_policy == "PreemptLowerPriority"
        and len(table)
        and any_victims(s, job)
        and (quota is None or quota() is not None)
    ):
        full = evaluate(profile, found.inp or s.cycle_input(job), spec_key=job.spec_key, scores=False, full=True)
        if _preempt(s, d, evaluation=full):
            return CLAIMED
    failed_specs.add(memo)
    left.append(d)
    return LEFT


def worth_a_look(s: Scratch, job: JobRecord, *, fits: FitMemo | None = None) -> bool:
    """Whether a waiting job that nothing happened to could now fit or preempt. ``fits``: what
    ``could_fit`` said in this pass, for jobs alike in everything it reads."""
    profile = profile_for(s, job)
    if profile is None:
        return False
    if s.help or (s.unclaimed is not None and job.priority <= s.unclaimed):
        return True
    if s.usage is not None and _quota_news(s, job):
        return True
    return _may_preempt(s, job) or could_fit(s, job, profile, memo=fits)


# (static key, profile, priority) -> could fit: everything ``could_fit`` reads of a job, as long
# as no claim is held (claims hold capacity back by priority and preemptor).
FitMemo = dict[tuple[bytes, str, int], bool]


def _quota_news(s: Scratch, job: JobRecord) -> bool:
    """Tenancy: quota came free in the job's cohort tree, or jobs were placed that its queue
    may preempt for quota."""
    assert s.usage is not None
    tree = s.usage.tree
    node = queue_of(tree, job)
    if not isinstance(node, int):
        return False
    root = tree.root_of(node)
    if tree.nodes[root].name in s.quota_freed:
        return True
    spec = tree.nodes[node].spec
    if s.victims_below() is None or spec is None:
        return False
    p = spec.preemption
    return p.within_cluster_queue != "Never" or p.reclaim_within_cohort != "Never" or p.borrow_within_cohort != "Never"


def _may_preempt(s: Scratch, job: JobRecord) -> bool:
    low = s.victims_below()
    return (
        low is not None
        and low < job.priority
        and job.placement.preemption_policy == "PreemptLowerPriority"
        and job.key not in s.claims
    )


def could_fit(s: Scratch, job: JobRecord, profile: CompiledProfile, *, memo: FitMemo | None = None) -> bool:
    """Whether the job fits, right now, on a cluster whose free capacity grew. A waiting job
    could not fit anywhere when it was last looked at, and elsewhere capacity only shrank since
    (or it would have been marked), so when this is False nothing changed for it."""
    if not s.freed:
        return False
    view = job_view(s.state, job)
    if view.missing:
        return False
    if memo is not None and not s.claims:
        key = (view.static_key, profile.name, job.priority)
        if key not in memo:
            memo[key] = _fits_freed(s, job, profile, view)
        return memo[key]
    return _fits_freed(s, job, profile, view)


def _fits_freed(s: Scratch, job: JobRecord, profile: CompiledProfile, view: JobView) -> bool:
    slots = np.fromiter(s.freed, dtype=np.intp, count=len(s.freed))
    ok = s.ready[slots]
    static_ok = profile.static_ok.get(view.static_key) if profile.cache_version == s.state.clusters.version else None
    if static_ok is None:
        static_ok = static_survivors(profile, s.cycle_input(job))
    ok &= static_ok[slots]
    if not ok.any():
        return False
    slots = slots[ok]
    free = s.free_for(job)[slots]
    return bool((free >= view.demand_vec).all(axis=1).any())


def _any_choice(s: Scratch, d: Draft, found: Feasible, *, claim_cluster: str | None) -> bool:
    """Whether ``_choose`` will choose any of the feasible clusters (ranked or not: the same set)."""
    if claim_cluster is None and not d.tried:
        return found.any()
    candidates = found.now()
    table = s.state.clusters
    if claim_cluster is not None:
        slot = table.index.get(claim_cluster)
        if slot is not None and bool((candidates == slot).any()):
            return True
    if d.tried:
        tried = np.array([table.index[c] for c in d.tried if c in table.index], dtype=np.intp)
        candidates = candidates[~np.isin(candidates, tried)]
    return len(candidates) > 0  # a strategy's width is at least 1 when any cluster is left


def _choose(s: Scratch, d: Draft, *, profile: CompiledProfile, ranked: Slots, claim_cluster: str | None) -> list[str]:
    table = s.state.clusters
    if claim_cluster is not None:
        slot = table.index.get(claim_cluster)
        if slot is not None and bool((ranked == slot).any()):
            return [claim_cluster]  # the capacity its victims freed is held there for it
    if d.tried:
        tried = np.array([table.index[c] for c in d.tried if c in table.index], dtype=np.intp)
        ranked = ranked[~np.isin(ranked, tried)]
    take = width(profile.spec.strategy, placement=d.job.placement, available=len(ranked))
    names = table.names
    return [names[i] for i in ranked[:take].tolist()]


def _preempt(s: Scratch, d: Draft, *, evaluation: Evaluation) -> bool:
    choice = select_victims(s, d.job, evaluation=evaluation)
    if choice is None:
        return False
    claim_for(s, d, choice)
    return True


def claim_for(s: Scratch, d: Draft, choice: Choice) -> None:
    job = d.job
    state = s.state
    victims = [state.jobs[k] for k in choice.victims]
    expires = s.now + state.claim_ttl_ms
    s.emit(
        ev.PreemptionClaimed(
            preemptor=job.ref,
            cluster=choice.cluster,
            victims=[v.ref for v in victims],
            expires_ms=expires,
            claim=dict(job.demand),
        )
    )
    s.claim_changes += 1
    s.claims[job.key] = Claim(
        preemptor=job.key,
        cluster=choice.cluster,
        victims=list(choice.victims),
        victim_attempts=[v.attempt for v in victims],
        expires_ms=expires,
        priority=job.priority,
        claim=dict(job.demand),
    )
    for victim in victims:  # a quota victim may run elsewhere than where the preemptor goes
        where = s.placed_now.get(victim.key) or victim.cluster or choice.cluster  # placed in this pass: not folded
        s.emit(evict_event(victim, preemptor=job, cluster=where))


def report_unschedulable(s: Scratch, drafts: list[Draft], groups: Groups | None = None) -> None:
    """Against the capacity left after the whole pass, so a second decide finds nothing new.
    (Reporting changes no capacity, so each summary is worked out first and the reports go out
    in dispatch order.) Jobs ``groups`` holds behind a representative are reported as it is."""
    by_spec: dict[tuple[bytes, int, str], dict[str, int]] = {}
    out: list[tuple[Draft, dict[str, int], str]] = []
    present = int(s.state.clusters.present.sum()) if drafts else 0  # (reporting changes no cluster)
    for d in drafts:
        counts, message = _summary(s, d, by_spec, present)
        if not d.requeued and d.job.phase == phases.UNSCHEDULABLE and d.job.unschedulable == counts:
            continue  # (a lane's members share the phase and summary of its representative)
        out.append((d, counts, message))
        if groups is not None:
            for group in groups.of(d):
                for replica in group.replicas(s, groups.exclude):
                    groups.made.append(replica)
                    out.append((replica, counts, message))
    out.sort(key=lambda t: order_key(s, t[0].job))
    for d, counts, message in out:
        d.unschedulable(s, reasons=counts, message=message)


def _summary(
    s: Scratch, d: Draft, by_spec: dict[tuple[bytes, int, str], dict[str, int]], present: int
) -> tuple[dict[str, int], str]:
    table = s.state.clusters
    job = d.job
    if d.queue_wait is not None:
        return {d.queue_wait.key: present}, d.queue_wait.message
    profile = profile_for(s, job)
    if profile is None:
        name = job.placement.profile
        error = s.state.profile_errors.get(name, f"profile {name!r} is not defined")
        counts = {error: present}
    else:
        memo = (job.spec_key, job.priority, profile.name)
        counts = by_spec.get(memo) or {}
        if memo not in by_spec:
            evaluation = evaluate(profile, s.cycle_input(job), spec_key=job.spec_key, scores=False, full=True)
            counts = rejection_summary(evaluation, present=table.present)
            by_spec[memo] = counts
    return counts, summary_message(counts)
