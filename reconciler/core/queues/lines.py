"""A ClusterQueue's line for one pass: its jobs in dispatch order, walked from the head.

The line merges two kinds of source: drafts (jobs the pass already holds: marked ones, and any
it had to look at one by one) and lanes of the pending index (``reconciler.core.pending``:
waiting jobs interchangeable for the pass). A lane's member is only drafted when its turn comes.

Why a lane's jobs can be skipped without changing a decision: a member whose turn ends with it
waiting (left, no decision emitted) leaves the pass exactly as it found it, and the next member
of the lane, asked the same questions of the same scratch, gets the same answer. So once a
member waits with nothing emitted, the lane is *dormant*: the members after it repeat its
outcome (a ``Group``, reported like it) until the scratch changes (``version``). The
tournament keeps picking the same queue while nothing changes (shares move only with
admissions), so the scratch can only change at a turn of this line or after its run ends; from
then on the dormant lanes are walked again from the first member whose turn had not come.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field

from reconciler.core.dispatch import LEFT, order_key
from reconciler.core.draft import Draft
from reconciler.core.jobs import JobRecord
from reconciler.core.pending import Lane
from reconciler.core.queues.tree import QueueTree
from reconciler.core.scratch import Scratch

OrderKey = tuple[int, int, int, str]
Version = tuple[int, int, int]


class Fallback(Exception):
    """The pass met a case where skipped jobs could decide differently (a representative took
    victims in the second look): it is decided again without the index."""


def walkable(tree: QueueTree, q: int) -> bool:
    """Whether the queue's waiting jobs are interchangeable within a lane. Not when its jobs may
    preempt newer jobs of equal priority (``LowerOrNewerEqualPriority``): then which victims a
    job may take depends on its own submission, not only on its lane."""
    spec = tree.nodes[q].spec
    return spec is not None and spec.preemption.within_cluster_queue != "LowerOrNewerEqualPriority"


def version(s: Scratch) -> Version:
    """Changes whenever the pass changes anything a job's turn could depend on: every decision
    is emitted, and capacity and claims have their own counters."""
    return (len(s.out), s.claim_changes, s.ticks)


@dataclass(eq=False)
class Group:
    """Members of a lane whose turn came while their representative's outcome stood: they are
    reported as it is, and drafted only if that report says anything."""

    rep: Draft
    lane: Lane
    lo: int
    hi: int

    def replicas(self, s: Scratch, exclude: Container[str]) -> Iterator[Draft]:
        jobs = s.state.jobs
        index = s.state.index
        for i in range(self.lo, self.hi):
            if index.live(self.lane, i, jobs) and self.lane.keys[i] not in exclude:
                d = Draft.of(jobs[self.lane.keys[i]], capacity_only=True)
                d.queue_wait = self.rep.queue_wait
                d.seen_feasible = self.rep.seen_feasible
                yield d

    def any_replica(self, s: Scratch, exclude: Container[str]) -> bool:
        return next(self.replicas(s, exclude), None) is not None


@dataclass
class Lanes:
    """The pending index as one pass uses it (tenancy): lanes by ClusterQueue, those worth a
    look and walkable (``Line``) by queue, and which lanes are walkable at all (the others'
    members are drafted one by one, as without the index)."""

    by_queue: dict[int, list[Lane]] = field(default_factory=dict)
    walk: dict[int, list[Lane]] = field(default_factory=dict)
    walkable: set[int] = field(default_factory=set)  # id() of lanes
    # Whether a lane at its turn (given its next member) sleeps again for the rest of the pass
    # (``reconciler.core.sleep.Asleep.again``): it is dropped from its line untried.
    again: Callable[[Scratch, Lane, JobRecord], bool] | None = None


@dataclass(eq=False)
class _Run:
    lane: Lane
    pos: int
    rep: Draft | None = None  # while dormant


@dataclass
class Groups:
    """Every group of a pass, by representative, and the jobs no lane may draft (the pass
    holds its own drafts of them)."""

    exclude: Container[str]
    by_rep: dict[int, list[Group]] = field(default_factory=dict)
    made: list[Draft] = field(default_factory=list)  # lane members drafted in the pass

    def add(self, group: Group) -> None:
        self.by_rep.setdefault(id(group.rep), []).append(group)

    def of(self, d: Draft) -> list[Group]:
        return self.by_rep.get(id(d), [])


_DRAFTS = -1


class Line:
    def __init__(
        self,
        s: Scratch,
        drafts: list[Draft],
        lanes: list[Lane],
        groups: Groups,
        again: Callable[[Scratch, Lane, JobRecord], bool] | None = None,
    ) -> None:
        self.s = s
        self.again = again
        self.drafts = drafts  # in dispatch order
        self.keys = [order_key(s, d.job) for d in drafts]  # as sorted (claims made later do not move them)
        self.i = 0
        self.groups = groups
        self.heap: list[tuple[OrderKey, int, int | _Run]] = []
        self.dormant: list[_Run] = []
        self.since: Version | None = None
        self.last: OrderKey | None = None
        self.popped: int | _Run | None = None
        self._n = 0
        self._push_draft()
        for lane in lanes:
            self._push_run(_Run(lane, pos=lane.head))

    # ---- walking -------------------------------------------------------------------------------

    def next(self) -> Draft | None:
        self._wake()
        self._drop_asleep()
        if not self.heap:
            return None
        okey, _, src = heapq.heappop(self.heap)
        self.last = okey
        self.popped = src
        if isinstance(src, _Run):
            job = self.s.state.jobs[src.lane.keys[src.pos]]
            src.pos += 1
            d = Draft.of(job, capacity_only=True)
            src.rep = d
            self.groups.made.append(d)
            return d
        d = self.drafts[self.i]
        self.i += 1
        return d

    def settle(self, d: Draft, outcome: str, before: Version, left: list[Draft]) -> None:
        """After the turn of the job ``next`` gave: a lane member that waited and changed
        nothing makes its lane dormant."""
        src, self.popped = self.popped, None
        if not isinstance(src, _Run):
            self._push_draft()
            return
        if outcome == LEFT and version(self.s) == before and left and left[-1] is d and not d.requeued:
            self.dormant.append(src)
            self.since = before
        else:
            src.rep = None
            self._push_run(src)

    def done(self) -> bool:
        """Nothing left to try: what remains of the dormant lanes repeats their representatives."""
        self._wake()
        self._drop_asleep()
        if self.heap:
            return False
        for run in self.dormant:
            self._repeat(run, len(run.lane.seqs))
        self.dormant = []
        return True

    def rest(self) -> list[Draft]:
        """Every job behind the last one tried (a StrictFIFO head holds them): drafts, and for
        each lane its first member, the rest of the lane grouped behind it."""
        for run in self.dormant:
            self._repeat(run, self._upto(run))
            self._push_run(run)
        self.dormant = []
        out: list[tuple[OrderKey, Draft]] = []
        while self.heap:
            _, _, src = heapq.heappop(self.heap)
            if isinstance(src, _Run):
                job = self.s.state.jobs[src.lane.keys[src.pos]]
                d = Draft.of(job, capacity_only=True)
                self.groups.made.append(d)
                self.groups.add(Group(rep=d, lane=src.lane, lo=src.pos + 1, hi=len(src.lane.seqs)))
                src.pos = len(src.lane.seqs)
            else:
                d = self.drafts[self.i]
                self.i += 1
                self._push_draft()
            out.append((order_key(self.s, d.job), d))
        return [d for _, d in sorted(out, key=lambda t: t[0])]

    # ---- internals -----------------------------------------------------------------------------

    def _wake(self) -> None:
        """The scratch changed since the dormant lanes' representatives waited: members whose
        turn came before the change repeat them; the rest are walked again."""
        if not self.dormant or version(self.s) == self.since:
            return
        for run in self.dormant:
            self._repeat(run, self._upto(run))
            run.rep = None
            self._push_run(run)
        self.dormant = []

    def _drop_asleep(self) -> None:
        """Lanes at the head of the line that sleep again (``again``) leave it untried."""
        again = self.again
        if again is None:
            return
        jobs = self.s.state.jobs
        while self.heap and isinstance(run := self.heap[0][2], _Run):
            if not again(self.s, run.lane, jobs[run.lane.keys[run.pos]]):
                return
            heapq.heappop(self.heap)

    def _upto(self, run: _Run) -> int:
        """Index of the lane's first member after the last job tried in this line."""
        last = self.last
        if last is None:
            return run.pos
        prio = -run.lane.priority
        if prio < last[0]:
            return len(run.lane.seqs)
        if prio > last[0]:
            return run.pos
        return max(run.pos, bisect_right(run.lane.seqs, last[2]))

    def _repeat(self, run: _Run, hi: int) -> None:
        if hi > run.pos and run.rep is not None:
            self.groups.add(Group(rep=run.rep, lane=run.lane, lo=run.pos, hi=hi))
        run.pos = max(run.pos, hi)

    def _push_draft(self) -> None:
        if self.i < len(self.drafts):
            self._n += 1
            heapq.heappush(self.heap, (self.keys[self.i], self._n, _DRAFTS))

    def _push_run(self, run: _Run) -> None:
        lane = run.lane
        jobs = self.s.state.jobs
        index = self.s.state.index
        exclude = self.groups.exclude
        while run.pos < len(lane.seqs) and (not index.live(lane, run.pos, jobs) or lane.keys[run.pos] in exclude):
            run.pos += 1
        if run.pos < len(lane.seqs):
            self._n += 1
            okey = (-lane.priority, 1, lane.seqs[run.pos], lane.keys[run.pos])
            heapq.heappush(self.heap, (okey, self._n, run))
