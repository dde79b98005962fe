"""``decide(state)``: everything the state calls for, as one batch of decisions. Pure.

Order within a batch (the actuator carries decisions out in this order):
1. cluster health (ClusterLost / ClusterRecovered);
2. jobs already dispatched: reports, loss, suspension, admission, drift, taints, timeouts, and
   withdrawal of unwanted copies; then claims that expired or whose preemptor is gone, and
   Evicts a claim still owes — all capacity releases happen here;
3. dispatch of waiting jobs (Nominated, PreemptionClaimed + Evict);
4. Unschedulable summaries, computed against the final capacity.
Folding the batch and deciding again yields nothing (the fixpoint replay relies on).
"""

from __future__ import annotations

import numpy as np

from eventlog import events as ev
from reconciler.core import phases
from reconciler.core.clusters import LOST
from reconciler.core.dispatch import FitMemo, dispatch, report_unschedulable, worth_a_look
from reconciler.core.draft import Draft
from reconciler.core.jobs import JobRecord
from reconciler.core.lifecycle import cluster_health, evict_claimed, expire_claims, handle_job
from reconciler.core.pending import Lane
from reconciler.core.queues.admit import queue_of
from reconciler.core.queues.dispatch import dispatch_queues, final_reasons
from reconciler.core.queues.lines import Fallback, Groups, Lanes, walkable
from reconciler.core.scratch import Scratch
from reconciler.core.sleep import Asleep, asleep, check
from reconciler.core.state import State


def decide(state: State, *, index: bool = True) -> list[ev.DecisionEvent]:
    """``index=False``: without the pending index (every waiting job looked at one by one); the
    same decisions, slower when the queue is deep."""
    if quiet(state):
        return []
    s, _ = decide_pass(state, index=index)
    return s.out


def quiet(state: State) -> bool:
    """Whether a pass would decide nothing, known without starting one: no job marked, no claim,
    no capacity or quota news, and no cluster due to be lost or recovered. (The leader decides
    after every input batch, and most batches are heartbeats and reports that ask for nothing;
    replay --verify checks each of those boundaries too.) Mirrors ``decide_pass``: any of
    these would make it look at a job or emit a cluster event."""
    if (
        state.pending
        or state.claims
        or state.help
        or state.freed
        or state.unclaimed is not None
        or state.placed_low is not None
        or state.quota_freed
    ):
        return False
    table = state.clusters
    if len(table) == 0:
        return True
    # The deadlines first: they bring the table's arrays up to date (``build``), which a state
    # only folded (a term's rebuild from the log, no snapshot) has not had done yet.
    due = state.now_ms >= table.lost_deadlines(state.worker_lost_timeout_ms)
    if (table.ready & due).any():
        return False
    return not any(
        table.records[i].health == LOST and table.records[i].heard_while_lost
        for i in np.flatnonzero(table.present & ~table.ready)
    )


def decide_pass(state: State, *, index: bool = True) -> tuple[Scratch, list[Draft]]:
    """``decide``, with what the pass expects fold to make of its decisions: the scratch (capacity,
    claims) and a draft of every job it looked at (``s.out`` holds the decisions)."""
    if index:
        try:
            return _pass(state, index=True)
        except Fallback:
            pass
    return _pass(state, index=False)


def _pass(state: State, *, index: bool) -> tuple[Scratch, list[Draft]]:
    s = Scratch.start(state)
    lost, recovered = cluster_health(s)
    keys = dict(state.pending)
    for cluster in (*lost, *recovered):
        for key in state.by_cluster.get(cluster, {}):
            keys[key] = None
    drafts: dict[str, Draft] = {}
    for key in sorted(keys):
        job = state.jobs.get(key)
        if job is None:
            continue
        drafts[key] = handle_job(s, job)
    expire_claims(s, drafts)
    evict_claimed(s)
    candidates = [d for d in drafts.values() if d.phase in phases.WAITING]
    groups = Groups(exclude=drafts)
    lanes: Lanes | None = None
    slept: Asleep | None = None
    # Capacity came free (or may, when a preemptor's claim turns into its nomination), or new
    # jobs run that could be preempted: waiting jobs get another look. Dispatch skips, cheaply,
    # those that cannot fit where capacity came free and cannot preempt the newcomers.
    if (
        s.help
        or s.freed
        or s.claims
        or s.unclaimed is not None
        or s.victims_below() is not None
        or s.quota_freed
    ):
        # With no claim that could turn into a nomination mid-pass, capacity only shrinks while
        # dispatching, so the cheap check can run up front instead of at each job's turn.
        early = not s.help and not s.claims
        if index and early:
            slept = asleep(s, candidates)
            lanes = _by_lane(s, drafts, candidates, slept)
        else:
            for key in state.waiting:
                if key in drafts:
                    continue
                job = state.jobs[key]
                if early and not worth_a_look(s, job):
                    continue
                candidates.append(Draft.of(job, capacity_only=True))
    if s.usage is None:
        left = dispatch(s, candidates)
    else:
        left = dispatch_queues(s, candidates, lanes=lanes, groups=groups)
        final_reasons(s, left)
        if slept is not None:
            check(s, slept)
    report_unschedulable(s, left, groups)
    return s, [*drafts.values(), *(d for d in candidates if d.capacity_only), *groups.made]


def _by_lane(s: Scratch, drafts: dict[str, Draft], candidates: list[Draft], slept: Asleep) -> Lanes | None:
    """The waiting jobs worth a look, a lane of the pending index at a time (one member answers
    for all), but for the sleep classes ``slept`` leaves unvisited (``reconciler.core.sleep``).
    With tenancy, lanes whose queue can be walked from its head are returned for
    ``dispatch_queues`` to walk; the members of any other lane worth a look are drafted here,
    one by one, as without the index."""
    state = s.state
    jobs = state.jobs
    index = state.index
    tree = s.usage.tree if s.usage is not None else None
    lanes = Lanes(again=slept.again) if tree is not None else None
    fits: FitMemo = {}
    # Lanes that differ only in their members' last verdict or clusters tried are worth a look alike.
    worths: dict[tuple[bytes, int, str | None], bool] = {}
    for lane in slept.awake(index):
        first = _first(s, lane, drafts)
        if first is None:
            continue
        alike = lane.key[:3]
        worth = worths.get(alike)
        if worth is None:
            worth = worths[alike] = worth_a_look(s, first, fits=fits)
        if lanes is not None and tree is not None:
            q = queue_of(tree, first)
            if isinstance(q, int):
                lanes.by_queue.setdefault(q, []).append(lane)
                if lane.not_before_ms <= s.now and walkable(tree, q):
                    lanes.walkable.add(id(lane))
                    if worth:
                        lanes.walk.setdefault(q, []).append(lane)
                    continue
        if worth:
            candidates.extend(
                Draft.of(jobs[k], capacity_only=True)
                for i, k in enumerate(lane.keys[lane.head :], lane.head)
                if k not in drafts and index.live(lane, i, jobs)
            )
    return lanes


def _first(s: Scratch, lane: Lane, drafts: dict[str, Draft]) -> JobRecord | None:
    jobs = s.state.jobs
    for i in range(lane.head, len(lane.keys)):
        key = lane.keys[i]
        if key not in drafts and s.state.index.live(lane, i, jobs):
            return jobs[key]
    return None
