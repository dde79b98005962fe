"""``dump_state`` / ``load_state``: the state as msgpack (data only, no pickle: a snapshot from
the bucket can never run code). Derived structures (arrays, indexes, running pool, compiled
profiles) are rebuilt on load; everything a later ``decide`` depends on is in the snapshot.

Version 3 is a sequence of frames, each decoded and folded into the state on its own
(``StateLoader``): a restore holds the state it builds and one frame, never the whole snapshot
and its decoded tree beside it (at a million jobs the snapshot is about 0.35 GB, and the leader
peaked at 2.1 GB while it restored one of version 2). The frames are::

    MAGIC, then frames: 4 bytes of length (big-endian), one msgpack map (its kind in ``k``)
    Head                      everything but the jobs and the lists of job keys, and their counts
    Jobs * ceil(jobs / 1024)  the jobs in slices, with the distinct specs each slice uses first
    Pending, Waiting, Timers, Deleted, Unsubmitted * ceil(n / 4096)   the keyed lists, in slices

Versions 1 and 2 (one msgpack map) still load, whole.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TypeVar

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

SNAPSHOT_VERSION = 3  # 3: frames, loaded one at a time; 2 (each spec once) and 1 still load
_V1, _V2 = 1, 2
# 0xc1 is no msgpack value: a core that reads versions 1-2 refuses version 3 at its first byte
# ("not a kdispatch core snapshot") and replays from the log.
MAGIC = b"\xc1KDS"
JOBS_PER_FRAME = 1024  # about 0.35 MB of frame at fleet jobs' 350 B
KEYS_PER_FRAME = 4096
_CONSUMED_PIECE = 1 << 20
_LENGTH = 4

T = TypeVar("T")


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
    little-endian uint32, in ``jobs`` order: no int object per job) and without the spec's fields.
    Loaded whole: its bytes, and a ``Raw`` per job, beside the state built from them."""

    version: int = _V2
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


class Head(Struct, kw_only=True, tag_field="k", tag="head"):
    """Version 3's first frame: what is not per job, and how many of each per-job item follow."""

    version: int = SNAPSHOT_VERSION
    seq: int
    now_ms: int
    policy: PolicyLoaded | None
    policy_override: PolicyLoaded | None
    resources: list[str]
    clusters: list[ClusterRecord]
    claims: list[Claim]
    help: bool
    last_was_decision: bool
    open_batch: tuple[list[str], bool] | None = None
    freed: list[str] = []
    open_freed: list[str] = []
    placed_low: int | None = None
    open_placed_low: int | None = None
    unclaimed: int | None = None
    open_unclaimed: int | None = None
    queues: QueuesConfigured | None = None
    quota_freed: list[str] = []
    open_quota_freed: list[str] = []
    jobs: int = 0
    pending: int = 0
    waiting: int = 0
    timers: int = 0
    deleted: int = 0
    unsubmitted: int = 0


class Jobs(Struct, tag_field="k", tag="jobs"):
    """A slice of the jobs, without their specs' fields; ``job_specs`` as in version 2 (indexes
    into every spec so far), ``specs`` the ones this slice is the first to use."""

    specs: list[SpecEntry]
    job_specs: bytes
    jobs: list[JobRecord]


class Pending(Struct, tag_field="k", tag="pending"):
    keys: list[str]


class Waiting(Struct, tag_field="k", tag="waiting"):
    keys: list[str]


class Timers(Struct, tag_field="k", tag="timers"):
    items: list[tuple[int, str]]


class Deleted(Struct, tag_field="k", tag="deleted"):
    items: list[tuple[int, str, str]]


class Unsubmitted(Struct, tag_field="k", tag="unsubmitted"):
    items: list[tuple[str, str]]


Frame = Head | Jobs | Pending | Waiting | Timers | Deleted | Unsubmitted
_KEYED = (Pending, Waiting, Timers, Deleted, Unsubmitted)


class _Version(Struct):
    version: int = _V1


_encoder = msgspec.msgpack.Encoder()
_exact = msgspec.msgpack.Encoder()  # the spec table's key: equal bytes, equal down to dict order
_version_decoder = msgspec.msgpack.Decoder(_Version)
_v1_decoder = msgspec.msgpack.Decoder(_Loading)
_v2_decoder = msgspec.msgpack.Decoder(SnapshotV2)
_job_decoder = msgspec.msgpack.Decoder(JobRecord)
_frame_decoder = msgspec.msgpack.Decoder(Frame)
_INDEX = np.dtype("<u4")


class SnapshotError(ValueError):
    pass


def dump_state(state: State) -> bytes:
    out = bytearray()
    dump_state_into(state, out)
    return bytes(out)


def dump_state_into(state: State, out: bytearray) -> None:
    """``dump_state``, appended to ``out``: a caller that wraps the dump (the leader's stored
    snapshot) writes it in place instead of holding the dump and a copy (at a million jobs,
    hundreds of MB each). Only one slice of jobs is copied at a time."""
    out += MAGIC
    _frame(
        out,
        Head(
            seq=state.seq,
            now_ms=state.now_ms,
            policy=state.policy,
            policy_override=state.policy_override,
            resources=list(state.clusters.resources.names),
            clusters=state.clusters.records,
            claims=list(state.claims.values()),
            help=state.help,
            last_was_decision=state.last_was_decision,
            open_batch=state.open_batch,
            freed=list(state.freed),
            open_freed=list(state.open_freed),
            placed_low=state.placed_low,
            open_placed_low=state.open_placed_low,
            unclaimed=state.unclaimed,
            open_unclaimed=state.open_unclaimed,
            queues=state.queues,
            quota_freed=list(state.quota_freed),
            open_quota_freed=list(state.open_quota_freed),
            jobs=len(state.jobs),
            pending=len(state.pending),
            waiting=len(state.waiting),
            timers=len(state.timers),
            deleted=len(state.deleted),
            unsubmitted=len(state.unsubmitted),
        ),
    )
    by_objects: dict[tuple[int, int], int] = {}  # records of one spec share its objects (intern)
    by_value: dict[bytes, int] = {}
    replace = msgspec.structs.replace
    for jobs in _slices(state.jobs.values(), JOBS_PER_FRAME):
        specs: list[SpecEntry] = []
        job_specs = np.empty(len(jobs), dtype=_INDEX)
        for i, job in enumerate(jobs):
            objects = (id(job.placement), id(job.pod_sets))
            index = by_objects.get(objects)
            if index is None:
                value = _exact.encode((job.placement, job.pod_sets))
                index = by_value.get(value)
                if index is None:
                    index = by_value[value] = len(by_value)
                    specs.append(SpecEntry(placement=job.placement, pod_sets=job.pod_sets))
                by_objects[objects] = index
            job_specs[i] = index
        bare = [  # without the spec's fields: left out as defaults
            replace(job, placement=NO_PLACEMENT, pod_sets=[], demand={}, spec_key=b"") for job in jobs
        ]
        _frame(out, Jobs(specs=specs, job_specs=job_specs.tobytes(), jobs=bare))
    for keys in _slices(state.pending, KEYS_PER_FRAME):
        _frame(out, Pending(keys=keys))
    for keys in _slices(state.waiting, KEYS_PER_FRAME):
        _frame(out, Waiting(keys=keys))
    for timers in _slices(state.timers, KEYS_PER_FRAME):
        _frame(out, Timers(items=timers))
    for deleted in _slices(state.deleted, KEYS_PER_FRAME):
        _frame(out, Deleted(items=deleted))
    for unsubmitted in _slices(state.unsubmitted.items(), KEYS_PER_FRAME):
        _frame(out, Unsubmitted(items=unsubmitted))


def _slices(items: Iterable[T], n: int) -> Iterator[list[T]]:
    it = iter(items)
    while chunk := list(islice(it, n)):
        yield chunk


def _frame(out: bytearray, frame: Frame) -> None:
    at = len(out)
    out += bytes(_LENGTH)
    _encoder.encode_into(frame, out, at + _LENGTH)
    out[at : at + _LENGTH] = (len(out) - at - _LENGTH).to_bytes(_LENGTH, "big")


def load_state(
    raw: bytes | bytearray | memoryview, *, plugins: Registry = BUILTINS, consume: bool = False
) -> State:
    """The state a snapshot holds, its profiles compiled against ``plugins`` (not part of the
    snapshot: which plugins exist is the environment's, as for ``new_state``).

    ``consume``: ``raw`` is a bytearray nobody else reads (a forecast's dump of the live state):
    it is emptied from the front as it is loaded, so its memory is given back while the state
    grows (a bytearray shrunk below half its allocation is moved to a smaller one) instead of
    being held whole beside the finished state."""
    if bytes(raw[: len(MAGIC)]) != MAGIC:
        return _load_whole(raw, plugins)
    loader = StateLoader(plugins=plugins)
    if consume and isinstance(raw, bytearray):
        while raw:
            piece = raw[:_CONSUMED_PIECE]  # a copy: no view of ``raw`` may be alive when it shrinks
            del raw[: len(piece)]
            loader.feed(piece)
            del piece
    else:
        loader.feed(raw)
    return loader.close()


class StateLoader:
    """``load_state`` for a snapshot that arrives in pieces: ``feed`` each as it comes (of any
    size), then ``close`` for the state. A version 3 snapshot is folded in frame by frame, so
    what is held besides the state is the frame in progress; versions 1 and 2 are kept whole
    and loaded by ``close``. Not thread-safe: feed it from one thread at a time."""

    def __init__(self, *, plugins: Registry = BUILTINS) -> None:
        self._plugins = plugins
        self._start = bytearray()  # the first bytes, until they say which version
        self._whole: bytearray | None = None  # versions 1 and 2
        self._framed = False
        self._partial = bytearray()  # a frame split between pieces
        self._frames = 0
        self._head: Head | None = None
        self._state: State | None = None
        self._specs: list[SpecEntry] = []
        self._jobs = 0
        self._seen: dict[type, int] = dict.fromkeys(_KEYED, 0)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        if self._whole is not None:
            self._whole += view
            return
        if not self._framed:
            take = len(MAGIC) - len(self._start)
            self._start += view[:take]
            view = view[take:]
            if len(self._start) < len(MAGIC):
                return
            if self._start != MAGIC:
                self._whole, self._start = self._start, bytearray()
                self._whole += view
                return
            self._framed = True
        at = 0
        if self._partial:
            at = self._complete(view)
            if at < 0:
                return
        while len(view) - at >= _LENGTH:
            end = at + _LENGTH + int.from_bytes(view[at : at + _LENGTH], "big")
            if end > len(view):
                break
            self._frame(view[at + _LENGTH : end])
            at = end
        self._partial += view[at:]

    def _complete(self, view: memoryview) -> int:
        """Extend the frame in progress from ``view``: where the rest of ``view`` starts once the
        frame is complete and loaded, or -1 if ``view`` ended first."""
        partial = self._partial
        at = 0
        if len(partial) < _LENGTH:
            at = _LENGTH - len(partial)
            partial += view[:at]
            if len(partial) < _LENGTH:
                return -1
        end = _LENGTH + int.from_bytes(partial[:_LENGTH], "big")
        take = min(end - len(partial), len(view) - at)
        partial += view[at : at + take]
        if len(partial) < end:
            return -1
        self._partial = bytearray()  # ``partial`` is freed once the frame's view of it is
        self._frame(memoryview(partial)[_LENGTH:])
        return at + take

    def _frame(self, body: memoryview) -> None:
        where = f"frame {self._frames}"
        try:
            frame = _frame_decoder.decode(body)
        except (msgspec.DecodeError, ValueError) as err:  # ValueError: a string that is not UTF-8
            raise SnapshotError(f"not a kdispatch core snapshot: {err} (in {where})") from None
        self._frames += 1
        if isinstance(frame, Head):
            self._begin(frame)
            return
        head, state = self._head, self._state
        if head is None or state is None:
            raise SnapshotError(f"not a kdispatch core snapshot: {where} is {frame.__struct_config__.tag!r}, not the head")
        if isinstance(frame, Jobs):
            self._add_jobs(frame, state, head)
            return
        if self._jobs < head.jobs:
            raise SnapshotError(
                f"not a kdispatch core snapshot: {where} ({frame.__struct_config__.tag}) comes after "
                f"{self._jobs} of its {head.jobs} jobs"
            )
        self._seen[type(frame)] += len(frame.keys if isinstance(frame, (Pending, Waiting)) else frame.items)
        own = self._own
        if isinstance(frame, Pending):
            state.pending.update(dict.fromkeys(map(own, frame.keys)))
        elif isinstance(frame, Waiting):
            state.waiting.update(dict.fromkeys(map(own, frame.keys)))
        elif isinstance(frame, Timers):
            state.timers.extend((at_ms, own(key)) for at_ms, key in frame.items)
        elif isinstance(frame, Deleted):
            state.deleted.extend((at_ms, own(key), uid) for at_ms, key, uid in frame.items)
        else:
            state.unsubmitted.update(frame.items)

    def _own(self, key: str) -> str:
        """The record's own key string for a key decoded again (one string per job, not one per index)."""
        assert self._state is not None
        job = self._state.jobs.get(key)
        return job.key if job is not None else key

    def _begin(self, head: Head) -> None:
        if self._head is not None:
            raise SnapshotError(f"not a kdispatch core snapshot: a second head (frame {self._frames - 1})")
        if head.version != SNAPSHOT_VERSION:
            raise SnapshotError(
                f"snapshot version {head.version}, this core reads {_V1}, {_V2} and {SNAPSHOT_VERSION}: replay from the log"
            )
        self._head = head
        self._state = _begin_state(head, self._plugins)

    def _add_jobs(self, frame: Jobs, state: State, head: Head) -> None:
        first = self._jobs
        if len(frame.job_specs) != len(frame.jobs) * _INDEX.itemsize:
            raise SnapshotError(
                f"not a kdispatch core snapshot: $.job_specs does not give one spec per job (in the jobs from {first})"
            )
        if first + len(frame.jobs) > head.jobs:
            raise SnapshotError(f"not a kdispatch core snapshot: more jobs than the {head.jobs} its head counts")
        specs = self._specs
        specs += frame.specs
        spec_of = np.frombuffer(frame.job_specs, dtype=_INDEX)
        for i, job in enumerate(frame.jobs):
            index = int(spec_of[i])
            if index >= len(specs):
                raise SnapshotError(
                    f"not a kdispatch core snapshot: spec {index} of {len(specs)} so far (in $.jobs[{first + i}])"
                )
            spec = specs[index]
            job.placement, job.pod_sets = spec.placement, spec.pod_sets
            _add_job(state, job)
        self._jobs += len(frame.jobs)

    def close(self) -> State:
        """The state, once every piece is fed; ``SnapshotError`` if the snapshot is incomplete."""
        if self._whole is not None:
            whole, self._whole = self._whole, None
            return _load_whole(whole, self._plugins)
        head, state = self._head, self._state
        if not self._framed or head is None or state is None:
            raise SnapshotError("not a kdispatch core snapshot: it ends before its head")
        if self._partial:
            raise SnapshotError(f"not a kdispatch core snapshot: it ends inside frame {self._frames}")
        counted = {
            "jobs": (self._jobs, head.jobs),
            "pending": (self._seen[Pending], head.pending),
            "waiting": (self._seen[Waiting], head.waiting),
            "timers": (self._seen[Timers], head.timers),
            "deleted": (self._seen[Deleted], head.deleted),
            "unsubmitted": (self._seen[Unsubmitted], head.unsubmitted),
        }
        for what, (seen, expected) in counted.items():
            if seen != expected:
                raise SnapshotError(
                    f"not a kdispatch core snapshot: {seen} {what} where its head counts {expected}: is it cut short?"
                )
        self._head = self._state = None
        self._specs = []
        state.index.rebuild(state.jobs, state.waiting)
        _finish_state(state, head)
        return state


def _begin_state(snap: Head | _Loading | SnapshotV2, plugins: Registry) -> State:
    """A state with the snapshot's policy and clusters, ready for its jobs."""
    state = State(policy=snap.policy, policy_override=snap.policy_override, plugins=plugins)
    state.seq, state.now_ms = snap.seq, snap.now_ms
    state.install_policy()
    for name in snap.resources:
        state.clusters.resources.add(name)
    for record in snap.clusters:
        state.clusters.upsert(record)
    state.clusters.build()
    return state


def _add_job(state: State, job: JobRecord) -> None:
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


def _finish_state(state: State, snap: Head | _Loading | SnapshotV2) -> None:
    """What follows the jobs and the keyed lists: claims, the open batch, the tenancy's usage."""
    state.claims = {c.preemptor: c for c in snap.claims}
    state.help = snap.help
    state.last_was_decision = snap.last_was_decision
    state.open_batch = (list(snap.open_batch[0]), snap.open_batch[1]) if snap.open_batch else None
    state.freed = dict.fromkeys(snap.freed)
    state.open_freed = list(snap.open_freed)
    state.placed_low = snap.placed_low
    state.open_placed_low = snap.open_placed_low
    state.unclaimed = snap.unclaimed
    state.open_unclaimed = snap.open_unclaimed
    state.install_queues(snap.queues)  # usage is recounted from the charges jobs hold
    state.quota_freed = dict.fromkeys(snap.quota_freed)
    state.open_quota_freed = list(snap.open_quota_freed)


def _load_whole(raw: bytes | bytearray | memoryview, plugins: Registry) -> State:
    """A snapshot of version 1 or 2: one msgpack map, decoded whole."""
    snap: _Loading | SnapshotV2
    try:
        version = _version_decoder.decode(raw).version
        if version not in (_V1, _V2):
            raise SnapshotError(
                f"snapshot version {version}, this core reads {_V1}, {_V2} and {SNAPSHOT_VERSION}: replay from the log"
            )
        snap = _v1_decoder.decode(raw) if version == _V1 else _v2_decoder.decode(raw)
    except (msgspec.DecodeError, ValueError) as err:  # ValueError: a string that is not UTF-8
        raise SnapshotError(f"not a kdispatch core snapshot: {err}") from None
    specs: list[SpecEntry] | None = None
    spec_of: npt.NDArray[np.uint32] | None = None
    if isinstance(snap, SnapshotV2):
        if len(snap.job_specs) != len(snap.jobs) * _INDEX.itemsize:
            raise SnapshotError("not a kdispatch core snapshot: $.job_specs does not give one spec per job")
        specs, spec_of = snap.specs, np.frombuffer(snap.job_specs, dtype=_INDEX)
    state = _begin_state(snap, plugins)
    for i, encoded in enumerate(snap.jobs):
        try:
            job = _job_decoder.decode(encoded)
            if specs is not None and spec_of is not None:
                spec = specs[int(spec_of[i])]
                job.placement, job.pod_sets = spec.placement, spec.pod_sets
        except (msgspec.DecodeError, ValueError, IndexError) as err:
            raise SnapshotError(f"not a kdispatch core snapshot: {err} (in $.jobs[{i}])") from None
        _add_job(state, job)

    def own(key: str) -> str:
        """The record's own key string for a key decoded again (one string per job, not one per index)."""
        job = state.jobs.get(key)
        return job.key if job is not None else key

    state.pending = dict.fromkeys(map(own, snap.pending))
    state.waiting = dict.fromkeys(map(own, snap.waiting))
    state.index.rebuild(state.jobs, state.waiting)
    state.timers = [(at_ms, own(key)) for at_ms, key in snap.timers]
    state.unsubmitted = dict(snap.unsubmitted)
    _finish_state(state, snap)
    if snap.deleted is not None:
        state.deleted = deque((at_ms, own(key), uid) for at_ms, key, uid in snap.deleted)
    else:  # a snapshot from before deleted jobs were retired: their period starts now
        state.deleted = deque(
            (snap.now_ms, job.key, job.ref.uid) for job in state.jobs.values() if job.phase == phases.DELETED
        )
    return state
