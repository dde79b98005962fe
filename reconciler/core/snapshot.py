"""``dump_state`` / ``load_state``: the state as msgpack (data only, no pickle: a snapshot from
the bucket can never run code). Derived structures (arrays, indexes, running pool, compiled
profiles) are rebuilt on load; everything a later ``decide`` depends on is in the snapshot.
"""

from __future__ import annotations

import msgspec
from msgspec import Struct

from eventlog.events import PolicyLoaded, QueuesConfigured
from reconciler.core import phases
from reconciler.core.clusters import ClusterRecord
from reconciler.core.framework.registry import Registry
from reconciler.core.jobs import Claim, JobRecord
from reconciler.core.plugins import BUILTINS
from reconciler.core.state import State

SNAPSHOT_VERSION = 1


class Snapshot(Struct, kw_only=True):
    version: int = SNAPSHOT_VERSION
    seq: int
    now_ms: int
    policy: PolicyLoaded | None
    policy_override: PolicyLoaded | None
    resources: list[str]
    clusters: list[ClusterRecord]
    jobs: list[JobRecord]
    claims: list[Claim]
    pending: list[str]
    help: bool
    waiting: list[str]
    timers: list[tuple[int, str]]
    last_was_decision: bool
    open_batch: tuple[list[str], bool] | None = None
    unsubmitted: dict[str, str] = {}
    freed: list[str] = []
    open_freed: list[str] = []
    placed_low: int | None = None
    open_placed_low: int | None = None
    unclaimed: int | None = None
    open_unclaimed: int | None = None
    queues: QueuesConfigured | None = None
    quota_freed: list[str] = []
    open_quota_freed: list[str] = []


class _Loading(Snapshot, kw_only=True):
    """The same snapshot, its jobs left encoded: each is decoded and interned in turn, so a load
    never holds every job's own copy of its spec at once (the peak RSS of a restore)."""

    jobs: list[msgspec.Raw]  # type: ignore[assignment]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Loading)
_job_decoder = msgspec.msgpack.Decoder(JobRecord)


class SnapshotError(ValueError):
    pass


def dump_state(state: State) -> bytes:
    return _encoder.encode(
        Snapshot(
            seq=state.seq,
            now_ms=state.now_ms,
            policy=state.policy,
            policy_override=state.policy_override,
            resources=list(state.clusters.resources.names),
            clusters=state.clusters.records,
            jobs=list(state.jobs.values()),
            claims=list(state.claims.values()),
            pending=list(state.pending),
            help=state.help,
            waiting=list(state.waiting),
            timers=list(state.timers),
            last_was_decision=state.last_was_decision,
            open_batch=state.open_batch,
            unsubmitted=dict(state.unsubmitted),
            freed=list(state.freed),
            open_freed=list(state.open_freed),
            placed_low=state.placed_low,
            open_placed_low=state.open_placed_low,
            unclaimed=state.unclaimed,
            open_unclaimed=state.open_unclaimed,
            queues=state.queues,
            quota_freed=list(state.quota_freed),
            open_quota_freed=list(state.open_quota_freed),
        )
    )


def load_state(raw: bytes, *, plugins: Registry = BUILTINS) -> State:
    """The state a snapshot holds, its profiles compiled against ``plugins`` (not part of the
    snapshot: which plugins exist is the environment's, as for ``new_state``)."""
    try:
        snap = _decoder.decode(raw)
    except msgspec.DecodeError as err:
        raise SnapshotError(f"not a kdispatch core snapshot: {err}") from None
    if snap.version != SNAPSHOT_VERSION:
        raise SnapshotError(f"snapshot version {snap.version}, this core reads {SNAPSHOT_VERSION}: replay from the log")
    state = State(policy=snap.policy, policy_override=snap.policy_override, plugins=plugins)
    state.seq, state.now_ms = snap.seq, snap.now_ms
    state.install_policy()
    for name in snap.resources:
        state.clusters.resources.add(name)
    for record in snap.clusters:
        state.clusters.upsert(record)
    state.clusters.build()
    for i, raw in enumerate(snap.jobs):
        try:
            job = state.interned.record(_job_decoder.decode(raw))
        except msgspec.DecodeError as err:
            raise SnapshotError(f"not a kdispatch core snapshot: {err} (in $.jobs[{i}])") from None
        state.jobs[job.key] = job
        for copy in job.copies:
            state.by_cluster.setdefault(copy.cluster, {})[job.key] = None
        if job.phase == phases.PLACED and job.cluster is not None and job.cluster in state.clusters.index:
            state.pool.add(
                job.key,
                cluster=state.clusters.index[job.cluster],
                priority=job.priority,
                started_ms=job.placed_at_ms or 0,
                demand=job.demand,
                seqno=job.submitted_seq,
                evictions=job.evictions,
            )
            if job.evicting_for:
                state.pool.set_evicting(job.key)
    def own(key: str) -> str:
        """The record's own key string for a key decoded again (one string per job, not one per index)."""
        job = state.jobs.get(key)
        return job.key if job is not None else key

    state.claims = {c.preemptor: c for c in snap.claims}
    state.pending = dict.fromkeys(map(own, snap.pending))
    state.help = snap.help
    state.waiting = dict.fromkeys(map(own, snap.waiting))
    state.timers = [(at_ms, own(key)) for at_ms, key in snap.timers]
    state.last_was_decision = snap.last_was_decision
    state.open_batch = (list(snap.open_batch[0]), snap.open_batch[1]) if snap.open_batch else None
    state.unsubmitted = dict(snap.unsubmitted)
    state.freed = dict.fromkeys(snap.freed)
    state.open_freed = list(snap.open_freed)
    state.placed_low = snap.placed_low
    state.open_placed_low = snap.open_placed_low
    state.unclaimed = snap.unclaimed
    state.open_unclaimed = snap.open_unclaimed
    state.install_queues(snap.queues)  # usage is recounted from the charges jobs hold
    state.quota_freed = dict.fromkeys(snap.quota_freed)
    state.open_quota_freed = list(snap.open_quota_freed)
    return state
