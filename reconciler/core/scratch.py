"""The scratch view one ``decide`` pass works on: cluster usage and claims *as if* the decisions
emitted so far in this pass were already folded. Nothing here touches the state, so ``decide``
stays pure; the same bookkeeping happens for real when the leader folds the decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from eventlog import events as ev
from eventlog.events import Resources
from reconciler.core import phases
from reconciler.core.clusters import LOST, READY, REMOVED, ClusterTable, Mask
from reconciler.core.framework.interface import CycleInput, JobView
from reconciler.core.inflight import InFlight
from reconciler.core.jobs import Charge, Claim, Copy, JobRecord
from reconciler.core.pool import RunningPool
from reconciler.core.queues.admit import queue_of
from reconciler.core.queues.usage import Usage
from reconciler.core.state import State, charge_for
from reconciler.core.workerqueues import worker_queues

# Past this, ``_shift``'s rows are left to numpy (whose int64 arithmetic wraps where Python's
# integers would not).
_SAFE = 1 << 62

if TYPE_CHECKING:
    from reconciler.core.spec_classes import ClassKey, Rules, Seen


@dataclass
class Scratch:
    state: State
    now: int
    assumed: npt.NDArray[np.int64]
    ready: Mask
    free_base: npt.NDArray[np.int64]
    claims: dict[str, Claim]
    help: bool
    out: list[ev.DecisionEvent] = field(default_factory=list)
    gone_jobs: set[str] = field(default_factory=set)  # stopped running in this pass
    placed_now: dict[str, str] = field(default_factory=dict)  # job -> cluster, Placed in this pass
    freed: set[int] = field(default_factory=set)  # clusters whose free capacity grew (slots)
    unclaimed: int | None = None  # claims released to jobs at or below this priority
    placed_low: int | None = None  # as fold will have it: every Placed of this pass counts
    # Tenancy: quota usage as fold will have it, the charges this pass changed, and the roots
    # whose usage dropped (their waiting jobs get another look).
    usage: Usage | None = None
    charges: dict[str, Charge | None] = field(default_factory=dict)
    quota_freed: set[str] = field(default_factory=set)
    _holds: dict[str, tuple[int, npt.NDArray[np.int64]]] = field(default_factory=dict)
    _pool: tuple[int, RunningPool] | None = None
    _in_flight: InFlight | None = None
    # When each cluster's free capacity, health or in-flight copies last changed in this pass
    # (a tick of ``ticks``; 0: not since the pass began), and how often claims were made or
    # dropped: what a job was found to fit earlier in the pass still holds on clusters
    # untouched since, as long as no claim changed what it may use (``still_fits``).
    ticks: int = 0
    touched_at: npt.NDArray[np.int64] | None = None
    touches: list[int] = field(default_factory=list)  # the slot of each tick (tick t: touches[t - 1])
    claim_changes: int = 0
    _no_kueue: bool = False  # no worker reported queues (the table does not change in a pass)
    classes: dict[ClassKey, Seen] = field(default_factory=dict)  # ``spec_classes``: per spec class
    class_rules: dict[str, Rules] = field(default_factory=dict)  # ``spec_classes``: per profile
    books: object = None  # ``draft``'s view of this scratch as ``transitions.Books``, made once

    @staticmethod
    def start(state: State) -> Scratch:
        table = state.clusters
        table.build()
        assumed = table.assumed.copy()
        return Scratch(
            state=state,
            now=state.now_ms,
            assumed=assumed,
            ready=table.ready.copy(),
            free_base=table.capacity - np.maximum(table.reported, assumed),
            claims=dict(state.claims),
            help=state.help,
            freed={table.index[c] for c in state.freed if c in table.index},
            unclaimed=state.unclaimed,
            placed_low=state.placed_low,
            usage=state.usage.copy() if state.usage is not None else None,
            quota_freed=set(state.quota_freed),
        )

    # ---- tenancy: the same charges and releases as State's, on the pass's copy -----------------

    def charge_of(self, job: JobRecord) -> Charge | None:
        return self.charges.get(job.key, job.charge)

    def charge_quota(self, job: JobRecord, flavors: dict[str, str]) -> None:
        self.release_quota(job)
        if self.usage is None:
            return
        tree = self.usage.tree
        node = queue_of(tree, job)
        if not isinstance(node, int):
            return
        charge = charge_for(tree.nodes[node].name, job.demand, flavors)
        self.charges[job.key] = charge
        self.usage.apply(charge, +1)

    def release_quota(self, job: JobRecord) -> None:
        charge = self.charge_of(job)
        if charge is None:
            return
        self.charges[job.key] = None
        if self.usage is not None and self.usage.apply(charge, -1):
            tree = self.usage.tree
            self.quota_freed.add(tree.nodes[tree.root_of(tree.queue[charge.cluster_queue])].name)

    def victims_below(self) -> int | None:
        """Lowest priority among jobs placed since the last batch, this pass included (even if
        they stopped again later in the pass: fold counts every Placed)."""
        return self.placed_low

    def emit(self, event: ev.DecisionEvent) -> None:
        self.out.append(event)

    def _shift(self, cluster: str, demand: Resources, *, sign: int) -> None:
        table = self.state.clusters
        slot = table.index.get(cluster)
        if slot is None or not demand:
            return
        if self._shift_few(table, slot, demand, sign):
            self.touch(slot)
            return
        row = self.assumed[slot]  # (a view: updated in place)
        if sign > 0:
            row += table.vector(demand)
        else:
            row -= table.vector(demand)
        self.free_base[slot] = table.capacity[slot] - np.maximum(table.reported[slot], row)
        self.touch(slot)

    def _shift_few(self, table: ClusterTable, slot: int, demand: Resources, sign: int) -> bool:
        """``_shift``'s arithmetic on the demanded columns alone, in plain integers (a job asks
        for few resources: numpy's calls on whole rows cost more); only the demanded columns'
        free capacity can change. False, having changed nothing: numbers so large that int64
        might wrap, which numpy's rows then do as before."""
        index = table.resources.index
        assumed, reported, capacity = self.assumed, table.reported, table.capacity
        out: list[tuple[int, int, int]] = []
        for name, value in demand.items():
            col = index.get(name)
            if col is None:
                continue
            row = assumed.item(slot, col) + sign * value
            free = capacity.item(slot, col) - max(reported.item(slot, col), row)
            if not (-_SAFE < row < _SAFE and -_SAFE < free < _SAFE):
                return False
            out.append((col, row, free))
        free_base = self.free_base
        for col, row, free in out:
            assumed[slot, col] = row
            free_base[slot, col] = free
        return True

    def touch(self, slot: int) -> None:
        """Something per-cluster changed on this cluster (free capacity, health, copies)."""
        if self.touched_at is None:
            self.touched_at = np.zeros(len(self.state.clusters), dtype=np.int64)
        self.ticks += 1
        self.touched_at[slot] = self.ticks
        self.touches.append(slot)

    def still_fits(self, seen: tuple[npt.NDArray[np.intp], int, int] | None) -> bool:
        """Whether some cluster a job passed every filter on earlier in this pass (``seen``:
        those clusters, the tick, the claim changes then) is untouched since, with no claim
        made or dropped: its verdicts there are the same now. Only for filters whose verdict on
        a cluster depends on that cluster alone (``FilterPlugin.per_cluster``)."""
        if seen is None or self.claims:
            return False
        slots, tick, claims = seen
        if claims != self.claim_changes or not len(slots):
            return False
        if self.touched_at is None or self.ticks - tick < len(slots):
            return True  # (fewer ticks since than clusters: some cluster is untouched since)
        return bool((self.touched_at[slots] <= tick).any())

    def assume(self, cluster: str, demand: Resources) -> None:
        self._shift(cluster, demand, sign=+1)

    def release(self, cluster: str, demand: Resources) -> None:
        self._shift(cluster, demand, sign=-1)
        slot = self.state.clusters.index.get(cluster)
        if slot is not None:
            self.freed.add(slot)

    def health(self, cluster: str) -> str:
        """As fold will have it: clusters lost or recovered earlier in this pass count as such."""
        table = self.state.clusters
        slot = table.index.get(cluster)
        if slot is None:
            return REMOVED
        if self.ready[slot]:
            return READY
        return REMOVED if table.records[slot].health == REMOVED else LOST

    def gone(self, key: str) -> None:
        """The job stops running in this pass (requeued, finished, its placement withdrawn)."""
        self.gone_jobs.add(key)
        self.placed_now.pop(key, None)

    def drop_claim(self, key: str, *, expired: bool) -> None:
        """Mirror of fold: an expired claim gets every waiting job another look; a claim that
        became its preemptor's nomination only those it held capacity from."""
        claim = self.claims.pop(key, None)
        if claim is None:
            return
        self.claim_changes += 1
        if expired:
            self.help = True
        else:
            self.unclaimed = claim.priority if self.unclaimed is None else max(self.unclaimed, claim.priority)

    def free_for(self, job: JobRecord) -> npt.NDArray[np.int64]:
        """Free capacity as this job sees it: claims of equal or higher priority are held back."""
        held = [c for c in self.claims.values() if c.priority >= job.priority and c.preemptor != job.key]
        if not held:
            return self.free_base
        table = self.state.clusters
        free = self.free_base.copy()
        for claim in held:
            slot = table.index.get(claim.cluster)
            if slot is not None:
                free[slot] -= self.claim_hold(claim)
        return free

    def claim_hold(self, claim: Claim) -> npt.NDArray[np.int64]:
        """What a claim holds back now: the capacity its victims have already freed, up to the
        claim. While a victim still runs its usage blocks the capacity anyway; counting the claim
        on top would hold the same capacity twice."""
        version = len(self.gone_jobs) * 1_000_003 + len(self.placed_now)
        cached = self._holds.get(claim.preemptor)
        if cached is not None and cached[0] == version:
            return cached[1]
        table = self.state.clusters
        still: Resources = {}
        for key in claim.victims:
            victim = self.state.jobs.get(key)
            if victim is None or key in self.gone_jobs:
                continue
            # Only the run the claim evicts counts (a victim placed again is a new run); a victim
            # placed earlier in this pass is running there as far as the batch is concerned.
            attempt = dict(zip(claim.victims, claim.victim_attempts, strict=False)).get(key)
            if attempt != victim.attempt:
                continue
            if self.placed_now.get(key) == claim.cluster:
                running = True
            else:
                counted = any(c.counted and c.cluster == claim.cluster for c in victim.copies)
                running = victim.cluster == claim.cluster and counted
            if running:
                for name, amount in victim.demand.items():
                    still[name] = still.get(name, 0) + amount
        hold: npt.NDArray[np.int64] = np.maximum(table.vector(claim.claim) - table.vector(still), 0)
        self._holds[claim.preemptor] = (version, hold)
        return hold

    def running(self) -> RunningPool:
        """The running set as it will be once this pass is folded: the state's pool plus jobs
        placed in this pass (jobs gone in this pass are excluded by the caller)."""
        pool = self.state.pool
        if not self.placed_now:
            return pool
        if self._pool is not None and self._pool[0] == len(self.placed_now):
            return self._pool[1]
        table = self.state.clusters
        extended = pool.copy()
        for key, cluster in self.placed_now.items():
            job = self.state.jobs[key]
            extended.add(
                key,
                cluster=table.index[cluster],
                priority=job.priority,
                started_ms=self.now,
                demand=job.demand,
                seqno=job.submitted_seq,
                evictions=job.evictions,
            )
        self._pool = (len(self.placed_now), extended)
        return extended

    def cycle_input(self, job: JobRecord) -> CycleInput:
        return CycleInput(
            job=job_view(self.state, job),
            clusters=self.state.clusters,
            free=self.free_for(job),
            ready=self.ready,
            now_ms=self.now,
            in_flight=self.in_flight(),
        )

    # ---- copies a worker's Kueue does not count yet (reconciler.core.inflight) ---------------

    def in_flight(self) -> InFlight | None:
        """Built on first use from the state's copies; None while no worker reported queues."""
        if self._in_flight is not None or self._no_kueue:
            return self._in_flight
        table = self.state.clusters
        queues = worker_queues(table)
        if not queues.kueue.any():
            self._no_kueue = True
            return None
        flight = InFlight()
        for slot in np.flatnonzero(queues.kueue):
            name = table.names[slot]
            for key in self.state.by_cluster.get(name, {}):
                job = self.state.jobs[key]
                for c in job.copies:
                    if c.cluster == name and c.counted and c.state in IN_FLIGHT:
                        flight.add(
                            (key, name, c.attempt),
                            slot=int(slot),
                            local_queue=local_queue(job),
                            demand=table.vector(job.demand),
                        )
        self._in_flight = flight
        return flight

    def copy_counted(self, job: JobRecord, copy: Copy) -> None:
        if copy.state in IN_FLIGHT and (flight := self.in_flight()) is not None:
            table = self.state.clusters
            self.touch(table.index[copy.cluster])
            flight.add(
                (job.key, copy.cluster, copy.attempt),
                slot=table.index[copy.cluster],
                local_queue=local_queue(job),
                demand=table.vector(job.demand),
            )

    def copy_done(self, job: JobRecord, cluster: str, attempt: int) -> None:
        """The copy stopped counting. A copy placed in this pass stays in flight until the pass
        ends (the next pass sees it admitted): within a pass, headroom only shrinks, which lets
        dispatch skip specs that already failed in it."""
        if (flight := self.in_flight()) is not None:
            flight.remove((job.key, cluster, attempt))
            slot = self.state.clusters.index.get(cluster)
            if slot is not None:
                self.touch(slot)


IN_FLIGHT = (phases.COPY_NOMINATED, phases.COPY_CREATED)


def local_queue(job: JobRecord) -> str:
    """The LocalQueue a remote copy of the job lands in on a worker: its own, in its namespace."""
    return f"{job.ref.namespace}/{job.queue or 'default'}"


def job_view(state: State, job: JobRecord) -> JobView:
    """Memoized per (table version, spec, priority): a pure function of the job and the table."""
    return state.view_memo.view(state.clusters, job)
