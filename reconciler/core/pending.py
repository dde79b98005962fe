"""The waiting jobs, indexed for ``decide``: lanes of interchangeable jobs in dispatch order.

A lane holds the waiting jobs with the same spec (``spec_key``: placement, pod sets, namespace,
LocalQueue), priority, ClusterQueue, clusters already tried, and last verdict (phase and
``Unschedulable`` summary). Everything a decide pass asks of a waiting job that nothing happened
to is a function of those, so one member answers for its lane: whether it is worth a look
(``dispatch.worth_a_look``), what its queue makes of it, what it would be reported. Members are
kept in submission order, which within a lane (one priority) is the dispatch order
(``dispatch.order_key``), so a pass can walk a queue's lanes from their heads and skip, by
position, the members whose turn comes while nothing changes (``queues.lines``).

Lanes whose last verdict says their queue's quota held them (``QuotaExceeded`` of their own
ClusterQueue) or the StrictFIFO head in front of them are also kept by *sleep class* (queue,
cluster count of the summary, kind, priority): news of capacity alone cannot change such a
verdict, so a pass with no quota news for their cohort can leave a whole class unvisited
(``reconciler.core.sleep`` says when, and checks what it relied on). Like the lanes, the classes
are a function of the jobs' folded verdicts, so replay and a restored snapshot rebuild the same.

Kept by ``fold`` (``refresh`` after every event that names a job), rebuilt from the state after
a snapshot is loaded or the policy changes priorities. Nothing here decides anything: a decide
pass that does not use the index (``decide(state, index=False)``) decides the same.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

import msgspec

from reconciler.core.jobs import JobRecord
from reconciler.core.phases import UNSCHEDULABLE

if TYPE_CHECKING:
    from reconciler.core.sleep import ShapeFacts

# (spec key, priority, ClusterQueue, tried, phase, Unschedulable summary)
LaneKey = tuple[bytes, int, str | None, tuple[str, ...], str, tuple[tuple[str, int], ...] | None]


def lane_key(job: JobRecord) -> LaneKey:
    # The summary only counts while the job is Unschedulable (what a report compares it with);
    # equal summaries listed in another order only split a lane, which costs a look, not a decision.
    summary = tuple(job.unschedulable.items()) if job.unschedulable is not None and job.phase == UNSCHEDULABLE else None
    return (job.spec_key, job.priority, job.cluster_queue, job.tried, job.phase, summary)


QUOTA: Final = "quota"  # waits for its own queue's quota (``QuotaExceeded: ClusterQueue <its queue>``)
BEHIND: Final = "behind"  # waits behind its StrictFIFO queue's head (``StrictFIFO: ClusterQueue <its queue>``)
Kind = Literal["quota", "behind"]
# (ClusterQueue, clusters counted in the summary, kind, priority)
SleepKey = tuple[str, int, Kind, int]

_REASONS: dict[str, Kind] = {"QuotaExceeded: ClusterQueue ": QUOTA, "StrictFIFO: ClusterQueue ": BEHIND}
_shape_encoder = msgspec.msgpack.Encoder()


def sleep_key(key: LaneKey, backed_off: bool) -> SleepKey | None:
    """The lane's sleep class, or None. Only lanes none of whose members has backed off (one
    that did may have missed news while it waited out its back-off) and that tried no cluster
    yet (tried clusters change which ones a look may choose). The queue is the one the reason
    names (the job's own, resolved through its LocalQueue if it names none; a change of the
    queues gets every waiting job a look, so the reason names its queue until then)."""
    _, priority, cluster_queue, tried, _, summary = key
    if tried or backed_off or summary is None or len(summary) != 1:
        return None
    reason, clusters = summary[0]
    for prefix, kind in _REASONS.items():
        if reason.startswith(prefix):
            queue = reason[len(prefix) :]
            if cluster_queue is None or cluster_queue == queue:
                return (queue, clusters, kind, priority)
    return None


def shape(job: JobRecord) -> bytes:
    """What filters read of a job besides its namespace and LocalQueue (and priority, in the
    class): jobs of one shape in different queues are feasible on the same clusters."""
    return _shape_encoder.encode((job.placement, job.pod_sets))


@dataclass(eq=False)
class SleepClass:
    key: SleepKey
    lanes: dict[LaneKey, Lane] = field(default_factory=dict)
    shapes: dict[bytes, dict[LaneKey, Lane]] = field(default_factory=dict)  # shape -> its lanes here
    # At most the submission of its first member (lowered as members join, raised only when
    # ``first_seq`` walks the lanes): whether a StrictFIFO head comes first, without a walk.
    low_seq: int = 0


@dataclass(eq=False, slots=True)  # thousands, made and dropped as jobs come and go
class Lane:
    key: LaneKey
    # Members by submission: parallel lists, sorted by sequence number. Removal is lazy (the
    # index's ``of`` says which entries are live) so that moving a whole lane, one job at a
    # time, does not shift the lists for each job.
    seqs: list[int] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    live: int = 0
    head: int = 0  # entries before it are all gone (the lane's heads leave first)
    # Latest back-off any member ever had: before it passes, members are looked at one by one.
    not_before_ms: int = 0
    sleep: SleepClass | None = None
    shape: bytes = b""
    backed: set[str] = field(default_factory=set)  # members that have a back-off (``not_before_ms``)

    @property
    def priority(self) -> int:
        return self.key[1]


@dataclass
class PendingIndex:
    lanes: dict[LaneKey, Lane] = field(default_factory=dict)
    of: dict[str, Lane] = field(default_factory=dict)  # job key -> its lane
    loose: dict[LaneKey, Lane] = field(default_factory=dict)  # the lanes in no sleep class
    classes: dict[SleepKey, SleepClass] = field(default_factory=dict)
    shapes: dict[tuple[bytes, int], dict[LaneKey, Lane]] = field(default_factory=dict)  # (shape, priority) -> lanes in classes
    per_queue: dict[str | None, int] = field(default_factory=dict)  # lanes by ClusterQueue named
    # (spec key, priority, profile) -> a cluster the end-of-pass check last found it fits on
    # (``sleep.check``): asked first, as a hint only (a miss runs the full check), so what it
    # holds never changes a decision, and it is not part of what a snapshot restores.
    fits: dict[tuple[bytes, int, str], int] = field(default_factory=dict)
    # (shape, priority) -> what ``sleep.asleep`` needs of it, kept across passes while it holds
    # (``sleep.ShapeFacts``: checked before each use); derived from the state alone, not restored.
    facts: dict[tuple[bytes, int], ShapeFacts] = field(default_factory=dict)

    def live(self, lane: Lane, i: int, jobs: dict[str, JobRecord]) -> bool:
        key = lane.keys[i]
        if self.of.get(key) is not lane:
            return False
        job = jobs.get(key)
        return job is not None and job.submitted_seq == lane.seqs[i]

    def refresh(self, job: JobRecord | None, key: str, waiting: dict[str, None], *, new: bool = False) -> None:
        """Put the job in the lane it belongs to now (none, unless it is waiting). ``new``: the
        record was just made (a submission), even if an older one had the same key and lane."""
        old = self.of.get(key)
        if job is None or key not in waiting:
            if old is not None:
                self._leave(old, key)
            return
        lk = lane_key(job)
        if old is not None:
            if old.key == lk and not new:
                if job.not_before_ms is not None and job.not_before_ms > old.not_before_ms:
                    old.not_before_ms = job.not_before_ms
                if job.not_before_ms and key not in old.backed:
                    old.backed.add(key)
                    self._wake(old)
                elif not job.not_before_ms and key in old.backed:
                    old.backed.discard(key)
                    self._place(old)
                return
            self._leave(old, key)
        lane = self.lanes.get(lk)
        if lane is None:
            lane = self.lanes[lk] = Lane(key=lk, shape=shape(job))
            self.per_queue[lk[2]] = self.per_queue.get(lk[2], 0) + 1
            self.loose[lk] = lane
            self._join(lane, job, key)
            self._place(lane)
            return
        self._join(lane, job, key)
        if lane.sleep is not None:
            if lane.backed:
                self._wake(lane)
            elif job.submitted_seq < lane.sleep.low_seq:
                lane.sleep.low_seq = job.submitted_seq

    def rebuild(self, jobs: dict[str, JobRecord], waiting: dict[str, None]) -> None:
        self.lanes.clear()
        self.of.clear()
        self.loose.clear()
        self.classes.clear()
        self.shapes.clear()
        self.per_queue.clear()
        self.fits.clear()
        self.facts.clear()
        for key in waiting:
            self.refresh(jobs.get(key), key, waiting)

    def _join(self, lane: Lane, job: JobRecord, key: str) -> None:
        seq = job.submitted_seq
        if not lane.seqs or lane.seqs[-1] < seq:
            lane.seqs.append(seq)  # the usual case: a new submission, or a lane moved in order
            lane.keys.append(key)
        else:
            i = bisect_left(lane.seqs, seq)
            if not (i < len(lane.seqs) and lane.seqs[i] == seq and lane.keys[i] == key):
                lane.seqs.insert(i, seq)
                lane.keys.insert(i, key)
            lane.head = min(lane.head, i)
        lane.live += 1
        self.of[key] = lane
        if job.not_before_ms:
            lane.backed.add(key)
        if job.not_before_ms is not None and job.not_before_ms > lane.not_before_ms:
            lane.not_before_ms = job.not_before_ms

    def _leave(self, lane: Lane, key: str) -> None:
        del self.of[key]
        lane.live -= 1
        if key in lane.backed and lane.live:
            lane.backed.discard(key)
            self._place(lane)
        if lane.live == 0:
            del self.lanes[lane.key]
            self._wake(lane)
            del self.loose[lane.key]
            left = self.per_queue[lane.key[2]] - 1
            if left:
                self.per_queue[lane.key[2]] = left
            else:
                del self.per_queue[lane.key[2]]
            return
        while lane.head < len(lane.keys) and self.of.get(lane.keys[lane.head]) is not lane:
            lane.head += 1
        if len(lane.seqs) > 2 * lane.live + 32:
            keep = [i for i, k in enumerate(lane.keys) if self.of.get(k) is lane]
            lane.seqs = [lane.seqs[i] for i in keep]
            lane.keys = [lane.keys[i] for i in keep]
            lane.head = 0

    def _place(self, lane: Lane) -> None:
        """A loose lane goes to its sleep class, if it has one now."""
        if lane.sleep is not None:
            return
        sk = sleep_key(lane.key, bool(lane.backed))
        if sk is None:
            return
        first = lane.seqs[lane.head]  # (at most its first live member's)
        cls = self.classes.get(sk)
        if cls is None:
            cls = self.classes[sk] = SleepClass(key=sk, low_seq=first)
        del self.loose[lane.key]
        lane.sleep = cls
        cls.lanes[lane.key] = lane
        cls.shapes.setdefault(lane.shape, {})[lane.key] = lane
        self.shapes.setdefault((lane.shape, lane.priority), {})[lane.key] = lane
        cls.low_seq = min(cls.low_seq, first)

    def _wake(self, lane: Lane) -> None:
        """Out of its sleep class for good (a member backed off, or the lane is gone)."""
        cls = lane.sleep
        if cls is None:
            return
        lane.sleep = None
        del cls.lanes[lane.key]
        same = cls.shapes[lane.shape]
        del same[lane.key]
        if not same:
            del cls.shapes[lane.shape]
        alike = self.shapes[(lane.shape, lane.priority)]
        del alike[lane.key]
        if not alike:
            del self.shapes[(lane.shape, lane.priority)]
        if not cls.lanes:
            del self.classes[cls.key]
        self.loose[lane.key] = lane

    def first_seq(self, cls: SleepClass, jobs: dict[str, JobRecord]) -> int:
        """The submission of the class's first live member (walks its lanes; tightens ``low_seq``)."""
        low: int | None = None
        for lane in cls.lanes.values():
            for i in range(lane.head, len(lane.keys)):
                if self.live(lane, i, jobs):
                    low = lane.seqs[i] if low is None else min(low, lane.seqs[i])
                    break
        cls.low_seq = low if low is not None else cls.low_seq
        return cls.low_seq
