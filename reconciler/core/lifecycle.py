"""The first half of a decide pass: what happened to clusters and to jobs already dispatched.

Worker loss and recovery, claim expiry, worker reports (finished, evicted, rejected, gone),
suspension, admission (first admitted wins), spec drift, NoExecute taints, round timeouts, and
the withdrawal of every remote copy the log no longer wants. Everything that releases capacity
happens here, before any job is dispatched in the same pass.
"""

from __future__ import annotations

import numpy as np

from eventlog import events as ev
from reconciler.core import phases
from reconciler.core.clusters import LOST, READY, taint_id
from reconciler.core.draft import Draft
from reconciler.core.framework.cycle import run_filter
from reconciler.core.framework.interface import CycleInput
from reconciler.core.framework.tolerations import eviction_delay_ms
from reconciler.core.jobs import JobRecord
from reconciler.core.queues.admit import draining
from reconciler.core.scratch import Scratch, job_view
from reconciler.core.state import State


def cluster_health(s: Scratch) -> tuple[list[str], list[str]]:
    """Emit ClusterLost / ClusterRecovered; returns (lost now, recovered now), sorted by name."""
    state = s.state
    table = state.clusters
    if len(table) == 0:
        return [], []
    silent = table.ready & (s.now >= table.lost_deadlines(state.worker_lost_timeout_ms))
    lost = sorted(table.names[i] for i in np.flatnonzero(silent))
    down = np.flatnonzero(table.present & ~table.ready)
    recovered = sorted(
        table.names[i] for i in down if table.records[i].health == LOST and table.records[i].heard_while_lost
    )
    for name in lost:
        slot = table.index[name]
        s.emit(ev.ClusterLost(cluster=name, last_seen_ms=table.records[slot].last_seen_ms))
        s.ready[slot] = False
        s.touch(slot)
    for name in recovered:
        s.emit(ev.ClusterRecovered(cluster=name))
        s.ready[table.index[name]] = True
        s.touch(table.index[name])
        s.help = True
    return lost, recovered


def expire_claims(s: Scratch, drafts: dict[str, Draft]) -> None:
    """Claims past their expiry, or whose preemptor no longer waits (as of this pass)."""
    state = s.state
    table = state.clusters
    for key in sorted(s.claims):
        claim = s.claims[key]
        job = state.jobs.get(key)
        slot = table.index.get(claim.cluster)
        phase = drafts[key].phase if key in drafts else job.phase if job else phases.DELETED
        gone = job is None or phase not in phases.WAITING or job.suspended
        if s.now >= claim.expires_ms or gone or slot is None or not s.ready[slot]:
            s.emit(ev.ClaimExpired(preemptor=job.ref if job else _ref(key), cluster=claim.cluster))
            s.drop_claim(key, expired=True)


def evict_claimed(s: Scratch) -> None:
    """Evict every victim of a live claim that has not been told yet. Normally the Evicts go out
    with the claim; after a leader died between the two, this is how the next one finishes."""
    state = s.state
    for key in sorted(s.claims):
        claim = s.claims[key]
        preemptor = state.jobs[key]
        for victim_key in claim.victims:
            victim = state.jobs.get(victim_key)
            if victim is None or victim.phase != phases.PLACED or not claim.wants(victim):
                continue
            if victim_key in s.gone_jobs:  # stopped running earlier in this pass
                continue
            if victim.evicting_for is None:
                s.emit(evict_event(victim, preemptor=preemptor, cluster=claim.cluster))


def evict_event(victim: JobRecord, *, preemptor: JobRecord, cluster: str) -> ev.Evict:
    return ev.Evict(
        job=victim.ref,
        cluster=cluster,
        attempt=victim.attempt,
        preemptor=preemptor.ref,
        reason=f"Preempted by {preemptor.key} (priority {preemptor.priority} > {victim.priority})",
    )


def _ref(key: str) -> ev.JobRef:
    namespace, _, name = key.partition("/")
    return ev.JobRef(namespace=namespace, name=name, uid="")


def handle_job(s: Scratch, job: JobRecord) -> Draft:
    """Apply everything that happened to one job; the draft says whether it needs dispatching."""
    d = Draft.of(job)
    if untouched(job):
        return d
    if not d.terminal:
        _reports(s, d)
    if not d.terminal:
        _half_done(s, d)
        _clusters_gone(s, d)
        _suspension(s, d)
        _drain(s, d)
        _admission(s, d)
        _placed_checks(s, d)
        _round_timeout(s, d)
    _reconcile_copies(s, d)
    return d


def untouched(job: JobRecord) -> bool:
    """No report, no copy, no round nominated or placed: every check of ``handle_job`` reads one
    of these, so it has nothing to do (a new job, or one waiting again)."""
    return not job.reports and not job.copies and job.phase not in phases.CHARGED


def _ready(s: Scratch, cluster: str) -> bool:
    slot = s.state.clusters.index.get(cluster)
    return slot is not None and bool(s.ready[slot])


def _reports(s: Scratch, d: Draft) -> None:
    job = d.job
    for rep in job.reports:
        if d.terminal:
            return
        current = rep.attempt == d.attempt
        if rep.kind == "finished":
            here = d.cluster == rep.cluster or rep.cluster in d.nominated
            # Finished on an old copy (e.g. while its cluster was unreachable) counts as long as
            # the new attempt has not been admitted anywhere: the job is not run twice.
            if (current and here) or (not current and d.phase != phases.PLACED):
                d.finish(s, cluster=rep.cluster, attempt=rep.attempt, succeeded=rep.succeeded)
            continue
        if not current:
            continue  # a fact about a superseded copy: reconciling copies cleans it up
        reason: ev.RequeueReason
        if rep.kind == "rejected":
            reason = "Rejected"
        elif job.evicting_for is not None:
            reason = "Preempted"
        else:
            reason = "Evicted"
        message = rep.reason or f"remote copy {rep.kind} on {rep.cluster}"
        if d.cluster == rep.cluster and d.phase == phases.PLACED:
            if rep.kind != "gone":
                d.withdraw(s, cluster=rep.cluster, attempt=rep.attempt, reason=message)
            d.requeue(s, reason=reason, cluster=rep.cluster, backoff=reason != "Preempted", message=message)
        elif rep.cluster in d.nominated:
            d.withdraw(s, cluster=rep.cluster, attempt=rep.attempt, reason=message)
            if not d.nominated and d.phase == phases.NOMINATED:
                d.requeue(s, reason=reason, cluster=rep.cluster, backoff=True, message=message)


def _half_done(s: Scratch, d: Draft) -> None:
    """States only a decision batch cut short by a leader crash leaves behind: finish the job."""
    if d.phase == phases.PLACED and d.cluster is None:
        d.requeue(s, reason="Evicted", cluster=None, backoff=False, message="placement withdrawn")
    elif d.phase == phases.NOMINATED and not d.nominated and d.admitted_on is None:
        d.timed_out = True
        d.phase = phases.QUEUED
        s.release_quota(d.job)  # re-nominated or requeued in this pass, either way let go


def _clusters_gone(s: Scratch, d: Draft) -> None:
    if d.phase == phases.PLACED and d.cluster is not None:
        health = s.health(d.cluster)
        if health != READY:
            reason: ev.RequeueReason = "WorkerLost" if health == LOST else "ClusterRemoved"
            d.requeue(s, reason=reason, cluster=d.cluster, backoff=False, message=f"cluster {d.cluster} {health.lower()}")
            return
    if d.phase == phases.NOMINATED:
        gone = [c for c in d.nominated if s.health(c) != READY]
        for cluster in gone:
            d.withdraw(s, cluster=cluster, attempt=d.attempt, reason=f"cluster {cluster} {s.health(cluster).lower()}")
        if gone and not d.nominated:
            reason = "WorkerLost" if s.health(gone[0]) == LOST else "ClusterRemoved"
            d.requeue(s, reason=reason, cluster=gone[0], backoff=False, message=f"cluster {gone[0]} unavailable")


def _suspension(s: Scratch, d: Draft) -> None:
    if not d.job.suspended or d.phase not in (phases.NOMINATED, phases.PLACED):
        return
    for cluster in list(d.nominated):
        d.withdraw(s, cluster=cluster, attempt=d.attempt, reason="suspended on the manager")
    if d.cluster is not None:
        d.withdraw(s, cluster=d.cluster, attempt=d.attempt, reason="suspended on the manager")
    d.requeue(s, reason="Suspended", cluster=None, backoff=False, message="suspended on the manager")


def _drain(s: Scratch, d: Draft) -> None:
    """Tenancy: a ClusterQueue (or LocalQueue) with stopPolicy HoldAndDrain evicts what it
    admitted; the jobs wait, held, until the policy is lifted."""
    if s.usage is None or d.phase not in phases.CHARGED:
        return
    why = draining(s.usage.tree, d.job)
    if not why:
        return
    for cluster in list(d.nominated):
        d.withdraw(s, cluster=cluster, attempt=d.attempt, reason=why)
    if d.cluster is not None:
        d.withdraw(s, cluster=d.cluster, attempt=d.attempt, reason=why)
    d.requeue(s, reason="Evicted", cluster=None, backoff=False, message=why)


def _admission(s: Scratch, d: Draft) -> None:
    winner = d.admitted_on
    if d.phase == phases.NOMINATED and winner is not None and winner in d.nominated:
        d.place(s, winner)


def _nominated_drift(s: Scratch, d: Draft) -> None:
    """Pod sets changed while copies wait for admission: drop the copies that no longer fit."""
    if d.phase != phases.NOMINATED or not d.job.spec_changed:
        return
    why = ""
    for cluster in list(d.nominated):
        slot = s.state.clusters.index.get(cluster)
        why = _no_longer_fits(s.state, d.job, slot=slot) if slot is not None else "cluster gone"
        if why:
            d.withdraw(s, cluster=cluster, attempt=d.attempt, reason=f"spec changed: {why}")
    if not d.nominated and why:
        d.requeue(s, reason="SpecChanged", cluster=None, backoff=False, message=why)


def _placed_checks(s: Scratch, d: Draft) -> None:
    _nominated_drift(s, d)
    if d.phase != phases.PLACED or d.cluster is None:
        return
    job = d.job
    state = s.state
    slot = state.clusters.index[d.cluster]
    if job.spec_changed:
        why = _no_longer_fits(state, job, slot=slot)
        if why:
            d.withdraw(s, cluster=d.cluster, attempt=d.attempt, reason=f"spec changed: {why}")
            d.requeue(s, reason="SpecChanged", cluster=None, backoff=False, message=why)
            return
    record = state.clusters.records[slot]
    for taint in record.taints:
        if taint.effect != "NoExecute":
            continue
        delay = eviction_delay_ms(job.placement.cluster_tolerations, taint)
        tid = taint_id(taint)
        if delay is not None and s.now >= record.taint_since_ms.get(tid, s.now) + delay:
            message = f"taint {tid} not tolerated" + (f" after {delay // 1000}s" if delay else "")
            cluster = d.cluster
            d.withdraw(s, cluster=cluster, attempt=d.attempt, reason=message)
            d.requeue(s, reason="Evicted", cluster=cluster, backoff=False, message=message)
            return


def _no_longer_fits(state: State, job: JobRecord, *, slot: int) -> str:
    """The first static filter (labels, taints, total capacity) the new spec fails there."""
    profile = state.profiles.get(job.placement.profile) or state.profiles.get("default")
    if profile is None:
        return ""
    table = state.clusters
    inp = CycleInput(job=job_view(state, job), clusters=table, free=table.free(), ready=table.ready, now_ms=state.now_ms)
    here = np.array([slot], dtype=np.intp)
    for name, plugin in profile.filters:
        if plugin.static:
            result = run_filter(name, plugin, inp, here)
            if result.verdict[0]:
                return f"{name}: {result.reasons[int(result.verdict[0]) - 1].message}"
    return ""


def _round_timeout(s: Scratch, d: Draft) -> None:
    job = d.job
    if d.phase != phases.NOMINATED or d.admitted_on is not None or job.deadline_ms is None:
        return
    if s.now < job.deadline_ms:
        return
    for cluster in list(d.nominated):
        d.withdraw(s, cluster=cluster, attempt=d.attempt, reason="AdmissionTimeout: not admitted within the round")
    d.timed_out = True
    d.phase = phases.QUEUED
    s.release_quota(d.job)  # re-nominated or requeued in this pass, either way let go


def _reconcile_copies(s: Scratch, d: Draft) -> None:
    """Withdraw (or clean up) every copy the job no longer wants, once its cluster is reachable."""
    for copy in list(d.copies):
        cluster, attempt, copy_state = copy.cluster, copy.attempt, copy.state
        if copy_state == phases.COPY_WITHDRAWING:
            continue
        wanted = (
            not d.terminal
            and attempt == d.attempt
            and (cluster in d.nominated or cluster == d.cluster)
        )
        if wanted or not _ready(s, cluster):
            continue
        if copy_state == phases.COPY_STALE:
            reason = "superseded while the cluster was lost"
        elif attempt != d.attempt:
            reason = f"stale copy of attempt {attempt} (now {d.attempt})"
        else:
            reason = "no longer wanted"
        d.withdraw(s, cluster=cluster, attempt=attempt, reason=reason)
