"""The waiting jobs, indexed for ``decide``: lanes of interchangeable jobs in dispatch order.

A lane holds the waiting jobs with the same spec (``spec_key``: placement, pod sets, namespace,
LocalQueue), priority, ClusterQueue, clusters already tried, and last verdict (phase and
``Unschedulable`` summary). Everything a decide pass asks of a waiting job that nothing happened
to is a function of those, so one member answers for its lane: whether it is worth a look
(``dispatch.worth_a_look``), what its queue makes of it, what it would be reported. Members are
kept in submission order, which within a lane (one priority) is the dispatch order
(``dispatch.order_key``), so a pass can walk a queue's lanes from their heads and skip, by
position, the members whose turn comes while nothing changes (``queues.lines``).

Kept by ``fold`` (``refresh`` after every event that names a job), rebuilt from the state after
a snapshot is loaded or the policy changes priorities. Nothing here decides anything: a decide
pass that does not use the index (``decide(state, index=False)``) decides the same.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from reconciler.core.jobs import JobRecord
from reconciler.core.phases import UNSCHEDULABLE

# (spec key, priority, ClusterQueue, tried, phase, Unschedulable summary)
LaneKey = tuple[bytes, int, str | None, tuple[str, ...], str, tuple[tuple[str, int], ...] | None]


def lane_key(job: JobRecord) -> LaneKey:
    # The summary only counts while the job is Unschedulable (what a report compares it with);
    # equal summaries listed in another order only split a lane, which costs a look, not a decision.
    summary = tuple(job.unschedulable.items()) if job.unschedulable is not None and job.phase == UNSCHEDULABLE else None
    return (job.spec_key, job.priority, job.cluster_queue, tuple(job.tried), job.phase, summary)


@dataclass(eq=False)
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

    @property
    def priority(self) -> int:
        return self.key[1]


@dataclass
class PendingIndex:
    lanes: dict[LaneKey, Lane] = field(default_factory=dict)
    of: dict[str, Lane] = field(default_factory=dict)  # job key -> its lane

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
                return
            self._leave(old, key)
        lane = self.lanes.get(lk)
        if lane is None:
            lane = self.lanes[lk] = Lane(key=lk)
        self._join(lane, job, key)

    def rebuild(self, jobs: dict[str, JobRecord], waiting: dict[str, None]) -> None:
        self.lanes.clear()
        self.of.clear()
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
        if job.not_before_ms is not None and job.not_before_ms > lane.not_before_ms:
            lane.not_before_ms = job.not_before_ms

    def _leave(self, lane: Lane, key: str) -> None:
        del self.of[key]
        lane.live -= 1
        if lane.live == 0:
            del self.lanes[lane.key]
            return
        while lane.head < len(lane.keys) and self.of.get(lane.keys[lane.head]) is not lane:
            lane.head += 1
        if len(lane.seqs) > 2 * lane.live + 32:
            keep = [i for i, k in enumerate(lane.keys) if self.of.get(k) is lane]
            lane.seqs = [lane.seqs[i] for i in keep]
            lane.keys = [lane.keys[i] for i in keep]
            lane.head = 0
