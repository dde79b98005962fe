"""What the jobs of one spec class share within a decide pass: their feasible clusters.

Jobs with the same profile, spec (``JobRecord.spec_key``) and priority get the same verdict from
every filter on the same input (``intern.spec_key``; the failed-spec memo of ``dispatch`` and the
summaries of ``report_unschedulable`` rely on it too). A deep backlog is a few such classes, so
most jobs a pass tries would filter the same clusters again; this finds their feasible set from
the last job of the class instead:

- nothing touched since (``Scratch.ticks`` unchanged): the same clusters;
- a few clusters touched since (a nomination touches one) and every active filter ``per_cluster``:
  only those clusters are filtered again, the others' verdicts stand.

Only while no claim is held: claims hold capacity back per priority and preemptor, so jobs of one
class may see different free capacity. The memo lives in the pass's ``Scratch`` and never
outlives it (the table, ``now`` and the profiles do not change within a pass). A pure cache: with
``lookup`` answering None, every job is filtered on its own, as the caches-off comparison checks.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from reconciler.core.clusters import Mask
from reconciler.core.framework.cycle import (
    active_filters,
    dynamic_survivors,
    feasible,
    idle_scores,
    rank,
    static_survivors,
    totals_of,
)
from reconciler.core.framework.interface import CycleInput, Scores, Slots
from reconciler.core.framework.profile import CompiledProfile
from reconciler.core.jobs import JobRecord

if TYPE_CHECKING:
    from reconciler.core.scratch import Scratch

# Clusters touched since the class was last filtered, beyond which filtering every static
# survivor again costs no more than filtering those.
FEW = 8
# What the classes of one pass may hold, in bytes: per class and cluster, a mask byte, a slot
# of the candidates and of the ranked array (8 each) and an entry of the ranking (a tuple of
# three ints, ~120). Past it the memo starts over (a pass over thousands of specs on thousands
# of clusters would otherwise keep a copy of each one's verdicts to its end).
BUDGET = 64 << 20
_PER_CLUSTER = 1 + 8 + 8 + 120

ClassKey = tuple[str, bytes, int]  # profile, spec key, priority


@dataclass(slots=True)
class Seen:
    tick: int  # ``Scratch.ticks`` when ``candidates`` was right
    claim_changes: int
    inp: CycleInput  # the input of the job that filled it: free capacity, health and copies are
    # the pass's own arrays (updated in place), the view one of the class (equal verdicts)
    static_ok: Mask
    passed: Mask | None  # ``candidates`` as a mask, made when first needed (owned here: updated in place)
    candidates: Slots  # never changed once handed out (a new array when the set changes)
    per_cluster: bool  # every active filter judges a cluster by its own row alone
    scores_per_cluster: bool  # so does every score plugin asked (``ScorePlugin.per_cluster``)
    # The candidates best first as (-total score, name rank, slot), right at ``ranked_at``; the
    # slots alone as an array (None: not made since the ranking changed).
    ranking: list[tuple[int, int, int]] | None = None
    ranked_at: int = 0
    ranked: Slots | None = None
    order: list[int] | None = None  # the ranking's slots, in its order (to find a cluster's entry)


class Feasible:
    """A job's feasible clusters, brought up to date from its class only when asked for them
    (``now``): a job its queue turns away needs only to know that some cluster would take it."""

    __slots__ = ("_candidates", "_profile", "_s", "_seen", "inp", "per_cluster")

    def __init__(self, s: Scratch, profile: CompiledProfile, job: JobRecord) -> None:
        self._s = s
        self._profile = profile
        self._seen = lookup(s, profile, job)
        self._candidates: Slots | None = None
        self.inp: CycleInput | None = None  # the job's own input, when it was built to filter
        self.per_cluster = False  # (only known without claims) every active filter is ``per_cluster``
        if self._seen is not None:
            self.per_cluster = self._seen.per_cluster
            return
        inp = self.inp = s.cycle_input(job)
        static_ok = static_survivors(profile, inp)
        self._candidates, failed = dynamic_survivors(profile, inp, static_ok.nonzero()[0])
        if s.claims:
            return
        rules = _rules(s, profile, inp)
        self.per_cluster = rules.per_cluster
        key = (profile.name, job.spec_key, job.priority)
        if failed:  # (an error's verdicts belong to no cluster: nothing to carry to the next job)
            s.classes.pop(key, None)
            return
        if len(s.classes) >= rules.limit:
            s.classes.clear()
        self._seen = s.classes[key] = Seen(
            s.ticks, s.claim_changes, inp, static_ok, None, self._candidates, rules.per_cluster, rules.scores
        )

    def now(self) -> Slots:
        """The clusters passing every filter now, as ``framework.cycle.feasible`` finds them."""
        if self._candidates is None:
            assert self._seen is not None
            self._candidates = refresh(self._s, self._profile, self._seen)
        return self._candidates

    def ranked(self) -> Slots | None:
        """The feasible clusters best first, as ``framework.cycle.rank`` orders them, from the
        class's ranking with the clusters touched since scored again; None: rank the job itself
        (claims held, or a filter or score plugin that is not ``per_cluster``)."""
        seen = self._seen
        if seen is None or not (seen.per_cluster and seen.scores_per_cluster) or self._s.claims:
            return None
        candidates = self.now()
        s = self._s
        table = s.state.clusters
        if seen.ranking is None or seen.order is None or s.ticks - seen.ranked_at > FEW:
            evaluation = rank(self._profile, seen.inp, candidates=candidates)
            seen.ranking, seen.order = _entries(evaluation.ranked, evaluation.totals, table.name_rank)
            seen.ranked = evaluation.ranked
        elif seen.ranked_at != s.ticks:
            _rerank(self._profile, seen, s.touches[seen.ranked_at :], table.name_rank)
        seen.ranked_at = s.ticks
        if seen.ranked is None:
            seen.ranked = np.array(seen.order, dtype=np.intp)
        return seen.ranked

    def any(self) -> bool:
        """Whether any cluster passes now: without filtering again while a cluster that passed
        for the class is untouched since (its verdicts stand, ``per_cluster``)."""
        if self._candidates is None and self._untouched() is not None:
            return True
        return len(self.now()) > 0

    def seen(self) -> tuple[Slots, int, int]:
        """For ``Scratch.still_fits``: clusters that passed every filter, the tick and claim
        changes then. A class's clusters as of when it was last filtered do as well as today's:
        the ones untouched since pass now too."""
        if self._candidates is None and (seen := self._untouched()) is not None:
            return seen.candidates, seen.tick, seen.claim_changes
        return self.now(), self._s.ticks, self._s.claim_changes

    def _untouched(self) -> Seen | None:
        """The class, when some cluster that passed for it is untouched since."""
        seen = self._seen
        assert seen is not None
        ticks = self._s.ticks - seen.tick
        if ticks and len(seen.candidates) <= ticks:  # (else more passed than can have been touched)
            return seen if len(seen.candidates) > len(set(self._s.touches[seen.tick :])) else None
        return seen if len(seen.candidates) else None


class Rules(NamedTuple):
    """What a profile's classes may do in this pass (the table and the profiles are fixed)."""

    per_cluster: bool  # every active filter is ``per_cluster``
    scores: bool  # so is every score plugin asked
    limit: int  # classes kept (``BUDGET``)


def _rules(s: Scratch, profile: CompiledProfile, inp: CycleInput) -> Rules:
    rules = s.class_rules.get(profile.name)
    if rules is None:
        idle = idle_scores(profile, inp)
        rules = s.class_rules[profile.name] = Rules(
            per_cluster=all(plugin.per_cluster for _, plugin in active_filters(profile, inp)),
            scores=all(plugin.per_cluster for i, (_, _, plugin) in enumerate(profile.scores) if i not in idle),
            limit=max(16, BUDGET // (_PER_CLUSTER * max(len(inp.clusters), 1))),
        )
    return rules


def lookup(s: Scratch, profile: CompiledProfile, job: JobRecord) -> Seen | None:
    """The job's class, if its verdicts can be brought up to date (``refresh``); None: filter
    the job itself."""
    if s.claims:
        return None
    seen = s.classes.get((profile.name, job.spec_key, job.priority))
    if seen is None or seen.claim_changes != s.claim_changes:
        return None
    if seen.tick != s.ticks and (not seen.per_cluster or s.ticks - seen.tick > FEW):
        return None
    return seen


def refresh(s: Scratch, profile: CompiledProfile, seen: Seen) -> Slots:
    """The class's feasible clusters now: those touched since it was last filtered, again."""
    if seen.tick == s.ticks:
        return seen.candidates
    touched = sorted({slot for slot in s.touches[seen.tick :] if seen.static_ok[slot]})
    if touched:
        if seen.passed is None:
            seen.passed = np.zeros(len(seen.static_ok), dtype=np.bool_)
            seen.passed[seen.candidates] = True
        slots = np.array(touched, dtype=np.intp)
        kept, failed = dynamic_survivors(profile, seen.inp, slots)
        if failed:  # (the class is filtered job by job from here: the answer stands for this one)
            seen.claim_changes = -1
            return feasible(profile, seen.inp, spec_key=seen.inp.job.spec_key)
        passing = set(kept.tolist())
        passed = seen.passed
        changed = False
        for slot in touched:  # (a few: plain Python costs less than numpy's calls)
            now = slot in passing
            if passed[slot] != now:
                passed[slot] = now
                changed = True
        if changed:
            seen.candidates = np.flatnonzero(passed)  # (a new array: the old one was handed out)
    seen.tick = s.ticks
    return seen.candidates


def _rerank(profile: CompiledProfile, seen: Seen, touches: list[int], name_rank: Slots) -> None:
    """The class's ranking with the clusters touched since scored again (per cluster: each
    scores alone as among all the candidates). A few entries leave and come back in place
    (``bisect``; the ranking is sorted and a slot is in it once), not a sort of the whole; the
    ranking is left as it is (its array too) when the touched clusters score as before."""
    assert seen.ranking is not None and seen.order is not None
    touched = sorted(set(touches))
    order = seen.order
    gone = [order.index(slot) for slot in touched if slot in order]
    passed = seen.passed  # (None: no cluster that passed the static filters was touched)
    again = [slot for slot in touched if passed is not None and passed[slot]]
    back: list[tuple[int, int, int]] = []
    if again:
        slots = np.array(again, dtype=np.intp)
        totals = totals_of(profile, seen.inp, candidates=slots)
        if totals is None:
            evaluation = rank(profile, seen.inp, candidates=slots)
            back = _entries(evaluation.ranked, evaluation.totals, name_rank)[0]
        else:
            back = [(-t, name_rank.item(slot), slot) for slot, t in zip(again, totals, strict=True)]
    ranking = seen.ranking
    if sorted(ranking[i] for i in gone) == sorted(back):
        return  # (the same entries: same order)
    ranking, order = ranking.copy(), order.copy()
    for i in sorted(gone, reverse=True):
        del ranking[i]
        del order[i]
    for entry in back:
        i = bisect_left(ranking, entry)
        ranking.insert(i, entry)
        order.insert(i, entry[2])
    seen.ranking, seen.order, seen.ranked = ranking, order, None


def _entries(ranked: Slots, totals: Scores, name_rank: Slots) -> tuple[list[tuple[int, int, int]], list[int]]:
    """(-total, name rank, slot) per ranked cluster: sorted, the order ``rank`` gives; and the
    slots alone."""
    slots: list[int] = ranked.tolist()
    return list(zip((-totals).tolist(), name_rank[ranked].tolist(), slots, strict=True)), slots
