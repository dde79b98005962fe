"""The core's state: everything the log has said, in the shape ``decide`` needs.

Mutated only by ``fold``. ``decide`` reads it (and fills pure memo caches) but never changes
anything that could alter a later decision, which is what makes replay exact.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from eventlog.events import PolicyLoaded, QueuesConfigured, Resources
from reconciler.core import phases
from reconciler.core.clusters import REMOVED, ClusterTable
from reconciler.core.framework.profile import CompiledProfile, compile_policy
from reconciler.core.framework.registry import Registry
from reconciler.core.intern import Interner
from reconciler.core.jobs import Charge, Claim, Copy, JobRecord
from reconciler.core.pending import PendingIndex
from reconciler.core.plugins import BUILTINS
from reconciler.core.pool import RunningPool
from reconciler.core.queues.admit import queue_of
from reconciler.core.queues.tree import QueueTree, compile_queues
from reconciler.core.queues.usage import Usage
from reconciler.core.views import ViewMemo

DEFAULT_WORKER_LOST_TIMEOUT_MS = 60_000
DEFAULT_CLAIM_TTL_MS = 120_000
DEFAULT_REQUEUE_BACKOFF_MS = 10_000
# A deleted job's record is dropped this long (log time) after its deletion once nothing refers
# to it any more (no copies, no quota, no claim): without it the state grows with every job ever
# submitted. Reports that arrive later about it are ignored, as they are for unknown jobs.
RETIRE_DELETED_AFTER_MS = 600_000


@dataclass
class State:
    seq: int = 0
    now_ms: int = 0
    policy: PolicyLoaded | None = None
    policy_override: PolicyLoaded | None = None
    # The plugins profiles are compiled against: handed in by whoever builds the state (the shell
    # adds third-party ones it discovered), never looked up here.
    plugins: Registry = BUILTINS
    profiles: dict[str, CompiledProfile] = field(default_factory=dict)
    profile_errors: dict[str, str] = field(default_factory=dict)
    clusters: ClusterTable = field(default_factory=ClusterTable)
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)  # preemptor key -> claim
    # Work for the next decide: jobs whose inputs changed, and whether cluster capacity or shape
    # changed in a way that could let waiting jobs fit (then every waiting job is re-evaluated).
    pending: dict[str, None] = field(default_factory=dict)
    help: bool = False
    # Clusters whose free capacity grew: waiting jobs that could fit there get another look.
    freed: dict[str, None] = field(default_factory=dict)
    open_freed: list[str] = field(default_factory=list)  # freed, set aside while folding a batch
    # Lowest priority among jobs placed since: waiting jobs above it may now have victims.
    placed_low: int | None = None
    open_placed_low: int | None = None
    # Highest priority of claims that turned into their preemptor's nomination since: the
    # capacity they held is offered again to jobs at or below it.
    unclaimed: int | None = None
    open_unclaimed: int | None = None
    waiting: dict[str, None] = field(default_factory=dict)  # Queued/Unschedulable, not suspended
    index: PendingIndex = field(default_factory=PendingIndex)  # the waiting jobs, in lanes (pending.py)
    by_cluster: dict[str, dict[str, None]] = field(default_factory=dict)  # cluster -> jobs with copies
    timers: list[tuple[int, str]] = field(default_factory=list)  # heap of (deadline ms, job key)
    last_was_decision: bool = False
    open_batch: tuple[list[str], bool] | None = None  # (pending keys, help) while folding a batch
    unsubmitted: dict[str, str] = field(default_factory=dict)  # seen by the watcher, never submitted
    # Deleted jobs in the order they were deleted: (deleted at ms, job key, uid), see ``retire``.
    deleted: deque[tuple[int, str, str]] = field(default_factory=deque)
    # Tenancy: the last queue configuration, compiled (None: tenancy off), and quota usage.
    queues: QueuesConfigured | None = None
    tree: QueueTree | None = None
    usage: Usage | None = None
    # Root queues or cohorts whose quota usage dropped: their waiting jobs get another look.
    quota_freed: dict[str, None] = field(default_factory=dict)
    open_quota_freed: list[str] = field(default_factory=list)
    pool: RunningPool = field(init=False)
    view_memo: ViewMemo = field(default_factory=ViewMemo)  # pure memo (never affects results)
    # Pure: one shared copy of the specs, strings and reasons records hold (never a value).
    interned: Interner = field(default_factory=Interner)

    def __post_init__(self) -> None:
        self.pool = RunningPool(self.clusters.resources)

    # ---- policy ------------------------------------------------------------------------------

    @property
    def effective_policy(self) -> PolicyLoaded | None:
        return self.policy_override or self.policy

    def install_policy(self) -> None:
        self.profiles, self.profile_errors = compile_policy(self.effective_policy, self.plugins)

    @property
    def worker_lost_timeout_ms(self) -> int:
        p = self.effective_policy
        return p.worker_lost_timeout_ms if p else DEFAULT_WORKER_LOST_TIMEOUT_MS

    @property
    def claim_ttl_ms(self) -> int:
        p = self.effective_policy
        return p.claim_ttl_ms if p else DEFAULT_CLAIM_TTL_MS

    @property
    def requeue_backoff_ms(self) -> int:
        p = self.effective_policy
        return p.requeue_backoff_ms if p else DEFAULT_REQUEUE_BACKOFF_MS

    def resolve_priority(self, job: JobRecord) -> int:
        if job.priority_class:
            p = self.effective_policy
            if p and job.priority_class in p.priority_classes:
                return p.priority_classes[job.priority_class]
        return job.event_priority

    # ---- tenancy ----------------------------------------------------------------------------

    def install_queues(self, config: QueuesConfigured | None) -> None:
        """Compile the config and recount usage from the charges jobs hold. Jobs nominated or
        placed before tenancy was on are charged now, to the first flavor of each group (they
        are not evicted: the config changed under them, as in Kueue)."""
        self.queues = config
        self.tree = compile_queues(config) if config is not None else None
        self.usage = Usage(self.tree) if self.tree is not None else None
        if self.tree is None or self.usage is None:
            return
        tree = self.tree
        for key in sorted(self.jobs):
            job = self.jobs[key]
            if job.charge is not None:
                self.usage.apply(job.charge, +1)
            elif job.phase in phases.CHARGED:
                self.charge(job, first_flavors(tree, job))

    def charge(self, job: JobRecord, flavors: dict[str, str]) -> None:
        """The job was nominated: it holds its queue's quota in these flavors from now on."""
        self.release(job)
        if self.tree is None or self.usage is None:
            return
        node = queue_of(self.tree, job)
        if not isinstance(node, int):
            return
        job.charge = charge_for(self.tree.nodes[node].name, job.demand, flavors)
        self.usage.apply(job.charge, +1)

    def release(self, job: JobRecord) -> None:
        charge = job.charge
        if charge is None:
            return
        job.charge = None
        if self.usage is not None and self.usage.apply(charge, -1):
            assert self.tree is not None
            root = self.tree.root_of(self.tree.queue[charge.cluster_queue])
            self.quota_freed[self.tree.nodes[root].name] = None

    # ---- bookkeeping used by fold (the state is the ``transitions.Books`` of a fold) -----------

    def mark(self, key: str) -> None:
        self.pending[key] = None

    def timer(self, at_ms: int | None, key: str) -> None:
        if at_ms is not None:
            heapq.heappush(self.timers, (at_ms, key))

    def set_phase(self, job: JobRecord, phase: str) -> None:
        job.phase = phase
        if job.charge is not None and phase not in phases.CHARGED:
            self.release(job)
        if phase in phases.WAITING and not job.suspended:
            self.waiting[job.key] = None
        else:
            self.waiting.pop(job.key, None)

    def count(self, job: JobRecord, copy: Copy) -> None:
        if not copy.counted and copy.cluster in self.clusters.index:
            self.clusters.add_assumed(self.clusters.index[copy.cluster], job.demand, sign=+1)
            copy.counted = True

    def uncount(self, job: JobRecord, copy: Copy) -> None:
        if copy.counted:
            self.clusters.add_assumed(self.clusters.index[copy.cluster], job.demand, sign=-1)
            copy.counted = False
            self.freed[copy.cluster] = None

    def add_copy(self, job: JobRecord, *, cluster: str, attempt: int, state: str) -> Copy:
        copy = job.copy(cluster, attempt)
        if copy is None:
            copy = Copy(cluster=cluster, attempt=attempt, state=state)
            job.copies = (*job.copies, copy)
            held = self.by_cluster.get(cluster)
            if held is None:  # (not ``setdefault``: a new empty dict per copy)
                held = self.by_cluster[cluster] = {}
            held[job.key] = None
        else:
            copy.state = state
        return copy

    def drop_copy(self, job: JobRecord, copy: Copy) -> None:
        self.uncount(job, copy)
        job.copies = tuple(c for c in job.copies if c is not copy)
        if not any(c.cluster == copy.cluster for c in job.copies):
            self.by_cluster.get(copy.cluster, {}).pop(job.key, None)

    def nominated_hold(self, job: JobRecord) -> str:
        """What the job's nominated, not yet admitted copies hold (``StrategySpec.nominated_hold``;
        absent: "all", as before the field existed)."""
        profile = self.profiles.get(job.placement.profile)
        return (profile.spec.strategy.nominated_hold if profile is not None else None) or "all"

    def health(self, cluster: str) -> str:
        slot = self.clusters.index.get(cluster)
        return self.clusters.records[slot].health if slot is not None else REMOVED

    def started(self, job: JobRecord, cluster: str) -> None:
        self.placed_low = lowest(self.placed_low, job.priority)
        self.pool.add(
            job.key,
            cluster=self.clusters.index[cluster],
            priority=job.priority,
            started_ms=self.now_ms,
            demand=job.demand,
            seqno=job.submitted_seq,
            evictions=job.evictions,
        )

    def stopped(self, job: JobRecord) -> None:
        self.pool.remove(job.key)

    def claim_used(self, job: JobRecord) -> None:
        claim = self.claims.pop(job.key, None)
        if claim is not None:
            self.unclaimed = highest(self.unclaimed, claim.priority)

    def wake(self, job: JobRecord, at_ms: int | None) -> None:
        self.timer(at_ms, job.key)

    def retire(self) -> None:
        """Drop the records of jobs deleted ``RETIRE_DELETED_AFTER_MS`` ago that nothing refers
        to; one still referred to (a copy not yet gone, quota, a claim) waits another
        period. A pure function of the log, so every replica and every replay drops the same."""
        deleted = self.deleted
        if not deleted or deleted[0][0] + RETIRE_DELETED_AFTER_MS > self.now_ms:
            return
        victims = self.claimed_victims() if self.claims else {}
        while deleted and deleted[0][0] + RETIRE_DELETED_AFTER_MS <= self.now_ms:
            _, key, uid = deleted.popleft()
            job = self.jobs.get(key)
            if job is None or job.ref.uid != uid or job.phase != phases.DELETED:
                continue  # a new job under the same name, or dropped already
            if job.copies or job.charge is not None or key in self.claims or key in victims:
                deleted.append((self.now_ms, key, uid))
                continue
            del self.jobs[key]
            self.view_memo.recent.pop(key, None)

    def claimed_victims(self) -> dict[str, str]:
        """victim key -> preemptor key, over all live claims."""
        return {v: c.preemptor for c in self.claims.values() for v in c.victims}


def charge_for(cluster_queue: str, demand: Resources, flavors: dict[str, str]) -> Charge:
    amounts = [(flavor, r, demand[r]) for r, flavor in flavors.items() if demand.get(r, 0) > 0]
    amounts.sort()  # (a list sorted in place: no generator for ``sorted`` to drain)
    return Charge(cluster_queue=cluster_queue, amounts=amounts)


def first_flavors(tree: QueueTree, job: JobRecord) -> dict[str, str]:
    """For a job charged without a decision (tenancy switched on under it): the first flavor of
    each group that lists the resource, whether or not it fits."""
    node = queue_of(tree, job)
    if not isinstance(node, int):
        return {}
    out: dict[str, str] = {}
    for group in tree.nodes[node].groups:
        for r in group.covered:
            for flavor in group.flavors:
                if r in job.demand and r not in out and (flavor, r) in tree.column:
                    out[r] = flavor
    return out


def lowest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def highest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def claim_vector_total(claims: list[Claim]) -> Resources:
    total: Resources = {}
    for c in claims:
        for k, v in c.claim.items():
            total[k] = total.get(k, 0) + v
    return total
