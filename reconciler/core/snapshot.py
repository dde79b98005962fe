"""``dump_state`` / ``load_state``: the state as msgpack (data only, no pickle: a snapshot from
the bucket can never run code). Derived structures (arrays, indexes, running pool, compiled
profiles) are rebuilt on load; everything a later ``decide`` depends on is in the snapshot.
"""

from __future__ import annotations

from collections import deque

import msgspec
import numpy as np
import numpy.typing as npt
from msgspec import Struct

from eventlog.events import Placement, PodSet, PolicyLoaded, QueuesConfigured
from reconciler.core import phases
from reconciler.core.clusters import ClusterRecord
from reconciler.core.framework.registry import Registry
from reconciler.core.jobs import NO_PLACEMENT, Claim, JobRecord
from reconciler.core.plugins import BUILTINS
from reconciler.core.state import State

SNAPSHOT_VERSION = 2  # 2: each distinct spec written once (``specs``); version 1 still loads
_V1 = 1


class Snapshot(Struct, kw_only=True):
    """Version 1: every job with its own spec (what dump_state wrote before version 2)."""

    version: int = _V1
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
    # None in snapshots from before deleted jobs were retired: their deleted jobs start the
    # retirement period at the snapshot's time.
    deleted: list[tuple[int, str, str]] | None = None


class _Loading(Snapshot, kw_only=True):
    """A version 1 snapshot, its jobs left encoded: each is decoded and interned in turn, so a
    load never holds every job's own copy of its spec at once (the peak RSS of a restore)."""

    jobs: list[msgspec.Raw]  # type: ignore[assignment]


class SpecEntry(Struct, array_like=True, gc=False):
    """What jobs of one spec share, written once; a job's demand and spec key are derived."""

    placement: Placement
    pod_sets: list[PodSet]


class SnapshotV2(Struct, kw_only=True):
    """Version 2: the distinct specs once, each job with the index of its own (``job_specs``:
    little-endian uint32, in ``jobs`` order: no int object per job) and without the spec's fields. ``jobs`` comes last: ``dump_state``
    writes it one job at a time after the rest, so no second copy of the records is made."""

    version: int = SNAPSHOT_VERSION
    seq: int
    now_ms: int
    policy: PolicyLoaded | None
    policy_override: PolicyLoaded | None
    resources: list[str]
    clusters: list[ClusterRecord]
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
    deleted: list[tuple[int, str, str]] | None = None  # see ``Snapshot.deleted``
    specs: list[SpecEntry] = []
    job_specs: bytes = b""
    jobs: list[msgspec.Raw] = []


class _Version(Struct):
    version: int = _V1


_encoder = msgspec.msgpack.Encoder()
_exact = msgspec.msgpack.Encoder()  # the spec table's key: equal bytes, equal down to dict order
_version_decoder = msgspec.msgpack.Decoder(_Version)
_v1_decoder = msgspec.msgpack.Decoder(_Loading)
_v2_decoder = msgspec.msgpack.Decoder(SnapshotV2)
_job_decoder = msgspec.msgpack.Decoder(JobRecord)
_INDEX = np.dtype("<u4")
_JOBS_LAST = b"\xa4jobs\x90"  # the empty ``jobs`` array ending the encoded header


class SnapshotError(ValueError):
    pass


def dump_state(state: State) -> bytes:
    out = bytearray()
    dump_state_into(state, out)
    return bytes(out)


def dump_state_into(state: State, out: bytearray) -> None:
    """``dump_state``, appended to ``out``: a caller that wraps the dump (the leader's stored
    snapshot) writes it in place instead of holding the dump and a copy (at a million jobs,
    hundreds of MB each)."""
    specs: list[SpecEntry] = []
    job_specs = np.empty(len(state.jobs), dtype=_INDEX)
    by_objects: dict[tuple[int, int], int] = {}  # records of one spec share its objects (intern)
    by_value: dict[bytes, int] = {}
    for i, job in enumerate(state.jobs.values()):
        objects = (id(job.placement), id(job.pod_sets))
        index = by_objects.get(objects)
        if index is None:
            value = _exact.encode((job.placement, job.pod_sets))
            index = by_value.get(value)
            if index is None:
                index = by_value[value] = len(specs)
                specs.append(SpecEntry(placement=job.placement, pod_sets=job.pod_sets))
            by_objects[objects] = index
        job_specs[i] = index
    start = len(out)
    _encoder.encode_into(  # straight into ``out``: the distinct specs are most of it, not copied
        SnapshotV2(
            seq=state.seq,
            now_ms=state.now_ms,
            policy=state.policy,
            policy_override=state.policy_override,
            resources=list(state.clusters.resources.names),
            clusters=state.clusters.records,
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
            deleted=list(state.deleted),
            specs=specs,
            job_specs=job_specs.tobytes(),
        ),
        out,
        start,
    )
    assert out.endswith(_JOBS_LAST), "SnapshotV2.jobs must be its last field"
    del out[-1:]
    out += b"\xdd" + len(state.jobs).to_bytes(4, "big")  # array 32: the jobs, one at a time
    replace = msgspec.structs.replace
    for job in state.jobs.values():  # without the spec's fields: left out as defaults
        bare = replace(job, placement=NO_PLACEMENT, pod_sets=[], demand={}, spec_key=b"")
        _encoder.encode_into(bare, out, len(out))


def load_state(raw: bytes | bytearray, *, plugins: Registry = BUILTINS) -> State:
    """The state a snapshot holds, its profiles compiled against ``plugins`` (not part of the
    snapshot: which plugins exist is the environment's, as for ``new_state``)."""
    snap: _Loading | SnapshotV2
    try:
        version = _version_decoder.decode(raw).version
        if version not in (_V1, SNAPSHOT_VERSION):
            raise SnapshotError(
                f"snapshot version {version}, this core reads {_V1} and {SNAPSHOT_VERSION}: replay from the log"
            )
        snap = _v1_decoder.decode(raw) if version == _V1 else _v2_decoder.decode(raw)
    except msgspec.DecodeError as err:
        raise SnapshotError(f"not a kdispatch core snapshot: {err}") from None
    specs: list[SpecEntry] | None = None
    spec_of: npt.NDArray[np.uint32] | None = None
    if isinstance(snap, SnapshotV2):
        if len(snap.job_specs) != len(snap.jobs) * _INDEX.itemsize:
            raise SnapshotError("not a kdispatch core snapshot: $.job_specs does not give one spec per job")
        specs, spec_of = snap.specs, np.frombuffer(snap.job_specs, dtype=_INDEX)
    state = State(policy=snap.policy, policy_override=snap.policy_override, plugins=plugins)
    state.seq, state.now_ms = snap.seq, snap.now_ms
    state.install_policy()
    for name in snap.resources:
        state.clusters.resources.add(name)
    for record in snap.clusters:
        state.clusters.upsert(record)
    state.clusters.build()
    for i, encoded in enumerate(snap.jobs):
        try:
            job = _job_decoder.decode(encoded)
            if specs is not None and spec_of is not None:
                spec = specs[int(spec_of[i])]
                job.placement, job.pod_sets = spec.placement, spec.pod_sets
        except (msgspec.DecodeError, IndexError) as err:
            raise SnapshotError(f"not a kdispatch core snapshot: {err} (in $.jobs[{i}])") from None
        job = state.interned.record(job)  # the demand and spec key are derived here
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
    state.index.rebuild(state.jobs, state.waiting)
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
    if snap.deleted is not None:
        state.deleted = deque((at_ms, own(key), uid) for at_ms, key, uid in snap.deleted)
    else:  # a snapshot from before deleted jobs were retired: their period starts now
        state.deleted = deque(
            (snap.now_ms, job.key, job.ref.uid) for job in state.jobs.values() if job.phase == phases.DELETED
        )
    return state
