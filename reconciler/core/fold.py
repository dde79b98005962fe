"""``fold(state, entry)``: apply one log entry (an input fact or a decision) to the state.

Inputs record facts and mark what ``decide`` must look at; decisions carry out what was decided.
How an event moves the job it names is ``transitions`` (shared with decide); here is what else
the state keeps: the job's record (reports, deadlines, reasons, counters), clusters, claims, and
the work left for ``decide``. Time is the entry's ``at_ms``: timers whose deadline it passes mark
their jobs for ``decide``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from eventlog import events as ev
from reconciler.core import phases, transitions
from reconciler.core.clusters import LOST, READY, REMOVED, ClusterRecord, taint_id
from reconciler.core.fold_capacity import capacity_reported
from reconciler.core.framework.tolerations import eviction_delay_ms
from reconciler.core.jobs import Claim, JobRecord, Report
from reconciler.core.queues.admit import draining
from reconciler.core.state import State, highest, lowest


def fold(state: State, entry: ev.LogEntry) -> State:
    event = entry.event
    kind = type(event)
    how = _HOW.get(kind)
    if how is None:  # not one of the log's types (a subclass, say): no handler, as before
        how = _how(kind)
    handler, job_handler, decision, field, submitted = how
    batch = entry.batch
    opens = decision and (batch[0] == 0 if batch else not state.last_was_decision)
    if state.open_batch is not None and (opens or not decision):
        _batch_cut_short(state)
    if opens:
        _batch_opens(state)
    state.last_was_decision = decision
    state.seq = entry.seq
    if entry.at_ms != state.now_ms:  # entries of a batch share one at_ms: and records one int
        state.now_ms = entry.at_ms
    timers = state.timers
    if timers and timers[0][0] <= state.now_ms:
        _fire_timers(state)
    if state.deleted:
        state.retire()
    if job_handler is not None:
        key = getattr(event, field).key  # made once, for the handler and the index
        job_handler(state, event, key)
        # What decide's pending index knows of the job follows it.
        state.index.refresh(state.jobs.get(key), key, state.waiting, new=submitted)
    elif handler is not None:
        handler(state, event)
    if decision and (batch is None or batch[0] == batch[1] - 1):
        _batch_closes(state)
    return state


# A decision batch is what one decide produced after looking at everything pending. When the
# whole batch is folded, that work is done. A batch cut short (the leader died while appending)
# leaves the work pending, so the next leader's decide completes it.


def _batch_opens(state: State) -> None:
    state.open_batch = (list(state.pending), state.help)
    state.open_freed = list(state.freed)
    state.open_placed_low = state.placed_low
    state.open_unclaimed = state.unclaimed
    state.open_quota_freed = list(state.quota_freed)
    state.quota_freed = {}
    state.help = False  # help raised by this batch's own decisions must survive its close
    state.freed = {}
    state.placed_low = None
    state.unclaimed = None


def _batch_closes(state: State) -> None:
    if state.open_batch is None:
        return
    keys, _ = state.open_batch
    for key in keys:
        state.pending.pop(key, None)
        job = state.jobs.get(key)
        if job is not None:
            job.reports = ()
            job.spec_changed = False
    state.open_batch = None
    state.open_freed = []
    state.open_placed_low = None
    state.open_unclaimed = None
    state.open_quota_freed = []


def _batch_cut_short(state: State) -> None:
    if state.open_batch is None:
        return
    state.help = state.help or state.open_batch[1]
    for cluster in state.open_freed:
        state.freed[cluster] = None
    state.placed_low = lowest(state.placed_low, state.open_placed_low)
    state.unclaimed = highest(state.unclaimed, state.open_unclaimed)
    for root in state.open_quota_freed:
        state.quota_freed[root] = None
    state.open_batch = None
    state.open_freed = []
    state.open_placed_low = None
    state.open_unclaimed = None
    state.open_quota_freed = []


def _fire_timers(state: State) -> None:
    timers = state.timers
    while timers and timers[0][0] <= state.now_ms:
        _, key = heapq.heappop(timers)
        state.mark(key)


def _job(state: State, key: str, ref: ev.JobRef) -> JobRecord | None:
    job = state.jobs.get(key)
    if job is None or job.ref.uid != ref.uid:
        return None
    return job


# ---- manager-side inputs ----------------------------------------------------------------------


def _submitted(state: State, e: ev.JobSubmitted, key: str) -> None:
    ref = e.job
    old = state.jobs.get(key)
    if old is not None and old.ref.uid == ref.uid and transitions.ignores(old.phase, e):
        return
    if state.unsubmitted:
        state.unsubmitted.pop(key, None)
    shared = state.interned
    spec = shared.spec(ref, e.placement, e.pod_sets, e.queue)
    priority_class, queue, cluster_queue = e.priority_class, e.queue, e.cluster_queue
    job = JobRecord(
        ref=shared.ref(ref),
        pod_sets=spec.pod_sets,
        demand=spec.demand,
        spec_key=spec.spec_key,
        event_priority=e.priority,
        priority_class=None if priority_class is None else shared.string(priority_class),
        placement=spec.placement,
        submitted_seq=state.seq,
        submitted_at_ms=state.now_ms,
        suspended=e.suspended,
        runtime_ms=e.runtime_ms,
        queue=None if queue is None else shared.string(queue),
        cluster_queue=None if cluster_queue is None else shared.string(cluster_queue),
        key=key,
    )
    job.priority = state.resolve_priority(job)
    if old is not None:
        state.release(old)
        state.pool.remove(old.ref.key)
        state.waiting.pop(old.key, None)
    state.jobs[key] = job
    state.set_phase(job, phases.SUSPENDED if e.suspended else phases.QUEUED)
    state.pending[key] = None  # (``state.mark``)


def _observed(state: State, e: ev.JobObserved, key: str) -> None:
    """The manager watcher saw a job. One the log never had a submission for is listed in the
    summary (``unsubmitted``) so the shell can submit it from the manager object."""
    job = state.jobs.get(key)
    if job is None or job.ref.uid != e.job.uid:
        state.unsubmitted[key] = e.job.uid


def _updated(state: State, e: ev.JobUpdated, key: str) -> None:
    job = _job(state, key, e.job)
    if job is None or transitions.ignores(job.phase, e):
        return
    if e.pod_sets and list(e.pod_sets) != job.pod_sets:
        counted = [c for c in job.copies if c.counted]
        for c in counted:
            state.uncount(job, c)
        spec = state.interned.spec(job.ref, job.placement, e.pod_sets, job.queue)
        job.pod_sets, job.demand, job.spec_key = spec.pod_sets, spec.demand, spec.spec_key
        for c in counted:
            state.count(job, c)
        if job.charge is not None:  # the quota it holds follows its demand, in the same flavors
            state.charge(job, job.charge.flavors)
        job.spec_changed = True
        state.help = True
    if e.priority is not None:
        job.event_priority = e.priority
    if e.priority_class is not None:
        job.priority_class = e.priority_class
    job.priority = state.resolve_priority(job)
    state.pool.set_priority(job.key, job.priority)
    if transitions.apply(job, e, state):
        state.mark(job.key)


def _deleted(state: State, e: ev.JobDeleted, key: str) -> None:
    state.unsubmitted.pop(key, None)
    job = _job(state, key, e.job)
    if job is not None and transitions.apply(job, e, state):
        state.mark(job.key)
        state.deleted.append((state.now_ms, job.key, job.ref.uid))


# ---- cluster inputs ----------------------------------------------------------------------------


def _registered(state: State, e: ev.ClusterRegistered | ev.ClusterUpdated) -> None:
    table = state.clusters
    slot = table.index.get(e.cluster)
    old = table.records[slot] if slot is not None else None
    since = dict(old.taint_since_ms) if old else {}
    current = {taint_id(t) for t in e.taints if t.effect == "NoExecute"}
    for tid in sorted(current):
        since.setdefault(tid, state.now_ms)
    since = {k: v for k, v in since.items() if k in current}
    record = ClusterRecord(
        name=e.cluster,
        labels=dict(e.labels),
        taints=list(e.taints),
        capacity=dict(e.capacity),
        reported=dict(old.reported) if old else {},
        assumed=dict(old.assumed) if old else {},
        health=old.health if old and old.health != REMOVED else READY,
        last_seen_ms=state.now_ms if old is None or old.health == REMOVED else old.last_seen_ms,
        lost_at_ms=old.lost_at_ms if old and old.health == LOST else None,
        heard_while_lost=old.heard_while_lost if old else False,
        lost_timeout_ms=e.worker_lost_timeout_ms,
        taint_since_ms=since,
        facts=old.facts if old and old.health != REMOVED else None,
    )
    table.upsert(record)
    state.help = True
    # Running jobs may have to leave because of a NoExecute taint: look at them now, and again
    # when a tolerationSeconds runs out.
    for key in sorted(state.by_cluster.get(e.cluster, {})):
        job = state.jobs[key]
        state.mark(key)
        if job.cluster != e.cluster:
            continue
        tolerations = job.placement.cluster_tolerations
        for t in e.taints:
            if t.effect == "NoExecute":
                delay = eviction_delay_ms(tolerations, t)
                if delay:
                    state.timer(since[taint_id(t)] + delay, key)


def _removed(state: State, e: ev.ClusterRemoved) -> None:
    slot = state.clusters.index.get(e.cluster)
    if slot is None:
        return
    state.clusters.records[slot].health = REMOVED
    state.clusters.touch()
    for key in sorted(state.by_cluster.get(e.cluster, {})):
        state.mark(key)


def _heartbeat(state: State, e: ev.ClusterHeartbeat) -> None:
    table = state.clusters
    slot = table.index.get(e.cluster)
    if slot is None or not e.reachable:
        return
    record = table.records[slot]
    if record.health == REMOVED:
        return
    table.build()
    table.seen(slot, state.now_ms)
    before = record.reported
    if record.health == LOST:
        record.heard_while_lost = True
    if any(before.get(k, 0) > e.usage.get(k, 0) for k in before):
        state.freed[e.cluster] = None
    if before != e.usage:
        table.set_reported(slot, e.usage)


# ---- remote facts ----------------------------------------------------------------------------


def _remote_created(state: State, e: ev.RemoteCreated | ev.RemoteAdmitted, key: str) -> None:
    job = _job(state, key, e.job)
    if job is not None and transitions.apply(job, e, state):
        state.mark(job.key)


def _report(kind: str) -> Callable[[State, Any, str], None]:
    def handle(
        state: State, e: ev.RemoteRejected | ev.RemoteEvicted | ev.RemoteFinished | ev.RemoteGone, key: str
    ) -> None:
        job = _job(state, key, e.job)
        if job is None or not transitions.apply(job, e, state):
            return
        job.reports += (
            Report(
                kind=kind,
                cluster=e.cluster,
                attempt=e.attempt,
                succeeded=getattr(e, "succeeded", True),
                reason=getattr(e, "reason", ""),
            ),
        )
        state.mark(job.key)

    return handle


def _policy(state: State, e: ev.PolicyLoaded) -> None:
    if state.policy_override is not None:
        return
    state.policy = e
    _policy_changed(state)


def _policy_changed(state: State) -> None:
    state.install_policy()
    for key, job in state.jobs.items():
        job.priority = state.resolve_priority(job)
        state.pool.set_priority(key, job.priority)
    state.index.rebuild(state.jobs, state.waiting)
    state.help = True


def _queues(state: State, e: ev.QueuesConfigured) -> None:
    was_on = state.tree is not None
    state.install_queues(e)
    if was_on or state.tree is not None:
        state.help = True  # every waiting job is judged against the new queues
    if state.tree is not None:  # admitted jobs of a queue now draining are evicted
        for key in sorted(state.jobs):
            job = state.jobs[key]
            if job.phase in phases.CHARGED and draining(state.tree, job):
                state.mark(key)


# ---- decisions ---------------------------------------------------------------------------------


# The lifecycle moves in ``transitions``; what follows each ``apply`` is the job's record.


def _nominated(state: State, e: ev.Nominated, key: str) -> None:
    job = _job(state, key, e.job)
    if job is None:
        return
    transitions.apply(job, e, state)
    job.deadline_ms = e.deadline_ms
    if job.unschedulable is not None:  # the summary no longer applies
        job.last_reason = ""
    job.unschedulable = None


def _placed(state: State, e: ev.Placed, key: str) -> None:
    job = _job(state, key, e.job)
    if job is None:
        return
    transitions.apply(job, e, state)
    job.placed_at_ms = state.now_ms
    job.deadline_ms = None


def _withdrawn(state: State, e: ev.Withdrawn | ev.CleanUp, key: str) -> None:
    job = _job(state, key, e.job)
    if job is not None:
        transitions.apply(job, e, state)


def _unschedulable(state: State, e: ev.Unschedulable, key: str) -> None:
    job = _job(state, key, e.job)
    if job is None:
        return
    transitions.apply(job, e, state)
    job.unschedulable = state.interned.reasons(e.reasons)
    job.last_reason = state.interned.string(e.message)


def _requeued(state: State, e: ev.Requeued, key: str) -> None:
    job = _job(state, key, e.job)
    if job is None:
        return
    transitions.apply(job, e, state)
    job.placed_at_ms = None
    job.deadline_ms = None
    job.requeues += 1
    job.last_reason = f"{e.reason}: {e.message}" if e.message else e.reason
    job.unschedulable = None
    job.evicting_for = None
    if e.reason in ("Preempted", "Evicted"):
        job.evictions += 1


def _cluster_lost(state: State, e: ev.ClusterLost) -> None:
    slot = state.clusters.index.get(e.cluster)
    if slot is None:
        return
    record = state.clusters.records[slot]
    record.health = LOST
    record.lost_at_ms = state.now_ms
    record.heard_while_lost = False
    state.clusters.touch()


def _cluster_recovered(state: State, e: ev.ClusterRecovered) -> None:
    slot = state.clusters.index.get(e.cluster)
    if slot is None:
        return
    record = state.clusters.records[slot]
    record.health = READY
    record.lost_at_ms = None
    record.heard_while_lost = False
    state.clusters.touch()
    state.help = True


def _claimed(state: State, e: ev.PreemptionClaimed, key: str) -> None:
    job = _job(state, key, e.preemptor)
    if job is None:
        return
    state.claims[job.key] = Claim(
        preemptor=job.key,
        cluster=e.cluster,
        victims=[v.key for v in e.victims],
        victim_attempts=[state.jobs[v.key].attempt if v.key in state.jobs else 0 for v in e.victims],
        expires_ms=e.expires_ms,
        priority=job.priority,
        claim=dict(e.claim),
    )
    job.last_reason = f"preempting {len(e.victims)} job(s) on {e.cluster}"
    job.unschedulable = None
    state.timer(e.expires_ms, job.key)


def _evict(state: State, e: ev.Evict, key: str) -> None:
    job = _job(state, key, e.job)
    if job is None:
        return
    job.evicting_for = e.preemptor.key if e.preemptor else "kdispatch"
    state.pool.set_evicting(job.key)


def _claim_expired(state: State, e: ev.ClaimExpired, key: str) -> None:
    if state.claims.pop(key, None) is not None:
        state.help = True


def _finished(state: State, e: ev.Finished, key: str) -> None:
    job = _job(state, key, e.job)
    if job is None:
        return
    transitions.apply(job, e, state)
    job.succeeded = e.succeeded
    job.deadline_ms = None


# Events about one job: the handler gets the job's key (``ref.key``, made once per entry).
_JOB_HANDLERS: dict[type, Callable[[State, Any, str], None]] = {
    ev.JobSubmitted: _submitted,
    ev.JobObserved: _observed,
    ev.JobUpdated: _updated,
    ev.JobDeleted: _deleted,
    ev.RemoteCreated: _remote_created,
    ev.RemoteAdmitted: _remote_created,
    ev.RemoteRejected: _report("rejected"),
    ev.RemoteEvicted: _report("evicted"),
    ev.RemoteFinished: _report("finished"),
    ev.RemoteGone: _report("gone"),
    ev.Nominated: _nominated,
    ev.Placed: _placed,
    ev.Withdrawn: _withdrawn,
    ev.CleanUp: _withdrawn,
    ev.Unschedulable: _unschedulable,
    ev.Requeued: _requeued,
    ev.PreemptionClaimed: _claimed,
    ev.Evict: _evict,
    ev.ClaimExpired: _claim_expired,
    ev.Finished: _finished,
}

_HANDLERS: dict[type, Callable[[State, Any], None]] = {
    ev.ClusterRegistered: _registered,
    ev.ClusterUpdated: _registered,
    ev.ClusterRemoved: _removed,
    ev.ClusterHeartbeat: _heartbeat,
    ev.ClusterCapacityReported: capacity_reported,
    ev.PolicyLoaded: _policy,
    ev.QueuesConfigured: _queues,
    ev.ClusterLost: _cluster_lost,
    ev.ClusterRecovered: _cluster_recovered,
}


# type -> (handler, job handler, a decision, the field naming the job, a submission): looked up
# once per entry instead of an isinstance over every decision type and a getattr per field.
_How = tuple[
    Callable[[State, Any], None] | None, Callable[[State, Any, str], None] | None, bool, str, bool
]


def _how(kind: type) -> _How:
    fields = getattr(kind, "__struct_fields__", ())
    # The field naming the job (an Evict's optional preemptor is not the job it is about).
    field = next((f for f in ("job", "preemptor") if f in fields), "")
    job_handler = _JOB_HANDLERS.get(kind)
    if job_handler is not None and not field:
        raise TypeError(f"{kind.__name__} has a job handler but names no job")
    return _HANDLERS.get(kind), job_handler, issubclass(kind, ev.DECISION_TYPES), field, kind is ev.JobSubmitted


_HOW: dict[type, _How] = {kind: _how(kind) for kind in ev.ALL_TYPES}
