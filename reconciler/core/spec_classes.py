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

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from reconciler.core.clusters import Mask
from reconciler.core.framework.cycle import active_filters, dynamic_survivors, static_survivors
from reconciler.core.framework.interface import CycleInput, Slots
from reconciler.core.framework.profile import CompiledProfile
from reconciler.core.jobs import JobRecord

if TYPE_CHECKING:
    from reconciler.core.scratch import Scratch

# Clusters touched since the class was last filtered, beyond which filtering every static
# survivor again costs no more than filtering those.
FEW = 8

ClassKey = tuple[str, bytes, int]  # profile, spec key, priority


@dataclass
class Seen:
    tick: int  # ``Scratch.ticks`` when ``candidates`` was right
    claim_changes: int
    inp: CycleInput  # the input of the job that filled it: free capacity, health and copies are
    # the pass's own arrays (updated in place), the view one of the class (equal verdicts)
    static_ok: Mask
    passed: Mask  # ``candidates`` as a mask (owned here: updated in place)
    candidates: Slots  # never changed once handed out (a new array when the set changes)
    per_cluster: bool  # every active filter judges a cluster by its own row alone


class Found(NamedTuple):
    candidates: Slots
    inp: CycleInput | None  # the job's own input, when it was built to filter
    per_cluster: bool  # (only known without claims) every active filter is ``per_cluster``


def feasible_for(s: Scratch, profile: CompiledProfile, job: JobRecord) -> Found:
    """The clusters passing every filter for ``job`` now, as ``framework.cycle.feasible``."""
    seen = lookup(s, profile, job)
    if seen is not None:
        return Found(seen.candidates, None, seen.per_cluster)
    inp = s.cycle_input(job)
    static_ok = static_survivors(profile, inp)
    candidates, failed = dynamic_survivors(profile, inp, static_ok.nonzero()[0])
    if s.claims:
        return Found(candidates, inp, False)
    per_cluster = all(plugin.per_cluster for _, plugin in active_filters(profile, inp))
    key = (profile.name, job.spec_key, job.priority)
    if failed:  # (an error's verdicts belong to no cluster: nothing to carry to the next job)
        s.classes.pop(key, None)
    else:
        passed = np.zeros(len(static_ok), dtype=np.bool_)
        passed[candidates] = True
        s.classes[key] = Seen(s.ticks, s.claim_changes, inp, static_ok, passed, candidates, per_cluster)
    return Found(candidates, inp, per_cluster)


def lookup(s: Scratch, profile: CompiledProfile, job: JobRecord) -> Seen | None:
    """The job's class, its feasible clusters brought up to date; None: filter the job itself."""
    if s.claims:
        return None
    key = (profile.name, job.spec_key, job.priority)
    seen = s.classes.get(key)
    if seen is None or seen.claim_changes != s.claim_changes:
        return None
    if seen.tick == s.ticks:
        return seen
    if not seen.per_cluster or s.ticks - seen.tick > FEW:
        return None
    touched = sorted({slot for slot in s.touches[seen.tick :] if seen.static_ok[slot]})
    if touched:
        slots = np.array(touched, dtype=np.intp)
        kept, failed = dynamic_survivors(profile, seen.inp, slots)
        if failed:
            del s.classes[key]
            return None
        now = np.zeros(len(slots), dtype=np.bool_)
        now[np.searchsorted(slots, kept)] = True  # (survivors are a subsequence of ``slots``)
        if (seen.passed[slots] != now).any():
            seen.passed[slots] = now
            seen.candidates = np.flatnonzero(seen.passed)  # (a new array: the old one was handed out)
    seen.tick = s.ticks
    return seen
