"""Which sleep classes of the pending index a decide pass leaves unvisited, and the check, at the
end of the pass, of what that relied on. (Kueue keeps a ClusterQueue's inadmissible workloads
aside until a workload of its cohort finishes or the quota changes; kube-scheduler its
unschedulable pods until a cluster event could make them fit. This is the same idea, kept exact.)

A lane whose last verdict was its own queue's ``QuotaExceeded`` was, at that look, taken by some
cluster, and its queue could not admit it. Since then its cohort's usage only grew (any release
is news for the cohort: ``quota_freed``, and that pass looked at it). So in a pass whose news is
capacity alone (no quota freed in its cohort, no config change, no claim), its turn goes the same
way: clusters take it, quota does not, its queue preempts nothing (every preemption rule
``Never``) -- it waits with the same reason and the pass is unchanged -- *provided* some cluster
still takes it, at its turn and, for ``final_reasons``, at the end of the pass. Capacity only
shrinks while a pass without claims dispatches, so the end is what to check: ``check`` evaluates
each slept shape the full scan would have looked at (``could_fit`` at the start) against the final
capacity, and if any fits nowhere the pass is redone without the index (``Fallback``), where
that job's reason changes as the full scan has it.

A StrictFIFO queue sleeps whole or not at all: when its head's lane is the only job waiting for
quota, every other job waits behind the head (``StrictFIFO`` reason), and no job of the queue
was marked, a pass tries the head (if anything in the queue is worth a look), the head waits,
and the others are held with the reasons they have; nothing changes, if the head still fits
somewhere at the end (checked whatever ``could_fit`` says: the head is tried with its line).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from eventlog.events import ClusterQueueSpec
from reconciler.core.dispatch import profile_for
from reconciler.core.draft import Draft
from reconciler.core.framework.cycle import active_filters, feasible, run_filter, static_survivors
from reconciler.core.framework.interface import CycleInput
from reconciler.core.framework.profile import CompiledProfile
from reconciler.core.jobs import JobRecord
from reconciler.core.pending import BEHIND, QUOTA, Lane, LaneKey, PendingIndex, SleepClass
from reconciler.core.queues.admit import Wait, admits, assign, hold_reason, queue_of
from reconciler.core.queues.lines import Fallback
from reconciler.core.scratch import Scratch, job_view

# Dynamic filters whose verdict is a function of the job's shape (placement and pod sets),
# priority and the clusters: jobs of one shape in different queues are checked once. One that
# reads the job's LocalQueue is checked per LocalQueue; any other filter keeps every queue awake.
_BY_SHAPE = {
    "reconciler.core.plugins.capacity.ClusterHeadroom",
    "reconciler.core.plugins.health.ClusterHealth",
    "reconciler.core.plugins.nodefit.NodeFit",
    "reconciler.core.plugins.topology.TopologyFit",
}
_BY_LOCAL_QUEUE = {"reconciler.core.plugins.workerqueue.WorkerQueueFit"}
SHAPE = "shape"
LOCAL_QUEUE = "local-queue"


@dataclass
class Asleep:
    # id() of each sleep class the pass leaves unvisited -> the shapes in it it visits after all
    classes: dict[int, set[bytes]] = field(default_factory=dict)
    verify: list[JobRecord] = field(default_factory=list)  # must fit some cluster at the end
    # id() of each class with shapes woken by quota news -> its queue (``again``)
    woken: dict[int, int] = field(default_factory=dict)
    shapes: dict[tuple[bytes, int], ShapeFacts | None] = field(default_factory=dict)
    verified: set[tuple[bytes, int]] = field(default_factory=set)  # shapes whose jobs are in ``verify``
    # (queue, demand) found waiting mid-pass: usage only grows while the pass dispatches, so it stays so
    waits: set[tuple[int, tuple[tuple[str, int], ...]]] = field(default_factory=set)

    def again(self, s: Scratch, lane: Lane, job: JobRecord) -> bool:
        """At its turn (``job``, its next member), whether a lane woken by quota news sleeps
        again for the rest of the pass. The pass started with its queue able to admit it, but
        admissions took quota since: if its queue now gives the reason it waits with, its look
        (and each member's after it: usage only grows while the pass dispatches) ends as its
        last one did, provided a cluster still takes it, which is checked at the end as for any
        slept shape. Such a look is a full attempt (filters, quota) for nothing; in the cohort
        whose quota came free they are most of a deep pass."""
        cls = lane.sleep
        q = self.woken.get(id(cls)) if cls is not None else None
        if q is None or s.usage is None:
            return False
        key = (lane.shape, lane.priority)
        info = self.shapes.get(key)
        summary = lane.key[5]
        if info is None or summary is None or hold_reason(s.usage.tree, job, q) is not None:
            return False
        if (q, info.demand) not in self.waits:
            fit = assign(s.usage, q, job.demand)
            if not isinstance(fit, Wait) or fit.key != summary[0][0]:
                return False
            self.waits.add((q, info.demand))  # (the key names q alone: every lane of its classes has it)
        if key not in self.verified:
            self.verified.add(key)
            _verify(s, key, info, self.verify)
        return True

    def awake(self, index: PendingIndex) -> Iterator[Lane]:
        """The lanes the pass visits."""
        yield from index.loose.values()
        for cls in index.classes.values():
            woken = self.classes.get(id(cls))
            if woken is None:
                yield from cls.lanes.values()
            else:
                for shape in woken:
                    yield from cls.shapes[shape].values()


@dataclass(eq=False)
class ShapeFacts:
    """What a pass needs of one shape at one priority (every job of it answers alike). Kept
    across passes in the index (``PendingIndex.facts``) while its representative still waits
    in a lane of the shape and its profile is the one compiled now (``_still``): everything
    here is a function of those two, and of the cluster table's version for the last two."""

    rep: JobRecord
    profile: CompiledProfile
    kind: str | None  # how its filters are checked (None: not at all: its queue stays awake)
    demand: tuple[tuple[str, int], ...]
    # For ``_could_fit_all``: the table version they were read at, the clusters its static
    # filters pass (None: its view is missing a resource), its demand per column.
    table_version: int = -1
    static_ok: npt.NDArray[np.bool_] | None = None
    demand_vec: npt.NDArray[np.int64] | None = None


def asleep(s: Scratch, candidates: list[Draft]) -> Asleep:
    """The sleep classes this pass leaves unvisited (an ``index`` pass, before dispatch).

    In a cohort with quota news, a lane sleeps on if its queue still cannot admit its jobs with
    the quota as the pass starts (admissions only take more while it dispatches; no claims and
    no job whose round timed out, whose requeue would give quota back mid-pass). What the pass
    relies on is checked per shape and priority across queues (``ShapeFacts``), so a quiet class
    costs a pass a few lookups, not a walk of its lanes."""
    out = Asleep()
    state = s.state
    index = state.index
    if s.usage is None or not index.classes or s.help or s.claims or s.unclaimed is not None:
        return out
    if any(d.timed_out for d in candidates):
        return out
    tree = s.usage.tree
    shapes: dict[tuple[bytes, int], ShapeFacts | None] = {}
    kinds: dict[str, str | None] = {}
    facts = index.facts
    if len(facts) > 2 * len(index.shapes) + 1024:
        facts.clear()  # shapes no longer waiting
    for key, lanes in index.shapes.items():
        info = facts.get(key)
        if info is None or not _still(s, key, info):
            info = _shape(s, lanes, kinds)
            if info is not None:
                facts[key] = info
        if info is not None and info.kind is None:
            return out  # a filter this cannot reason about: every queue stays awake
        shapes[key] = info
    present = int(state.clusters.present.sum()) if len(state.clusters) else 0
    marked: set[int] = set()  # queues with a job of the pass's own (a StrictFIFO line forms)
    for d in candidates:
        where = queue_of(tree, d.job)
        if isinstance(where, int):
            marked.add(where)
    by_queue: dict[str, list[SleepClass]] = {}
    for cls in index.classes.values():
        by_queue.setdefault(cls.key[0], []).append(cls)
    answers: dict[tuple[int, tuple[tuple[str, int], ...]], bool] = {}
    available: dict[int, dict[int, int]] = {}  # queue -> column -> what it may take (usage is fixed here)
    verify: set[tuple[bytes, int]] = set()  # shapes some slept job of which the full scan would try

    def admits_now(q: int, info: ShapeFacts) -> bool:
        assert s.usage is not None
        key = (q, info.demand)
        answer = answers.get(key)
        if answer is None:
            answer = answers[key] = admits(s.usage, q, info.rep.demand, available.setdefault(q, {}))
        return answer

    capacity_only = False  # some BestEffortFIFO class sleeps through capacity news alone
    for name, classes in by_queue.items():
        q = tree.queue.get(name)
        spec = tree.nodes[q].spec if q is not None else None
        if q is None or spec is None or not _never(spec):
            continue
        news = tree.nodes[tree.root_of(q)].name in s.quota_freed
        current = [c for c in classes if c.key[1] == present]
        if spec.queueing_strategy == "StrictFIFO":
            if q in marked or index.per_queue.get(None):
                continue
            head = _head(index, name, current, s)
            if head is None:
                continue
            key = (head.shape, head.priority)
            info = shapes.get(key)
            if info is None or (news and admits_now(q, info)):
                continue
            verify.add(key)  # tried with its line whatever could_fit says
            out.classes.update((id(c), set()) for c in current)
            continue
        for cls in current:
            if cls.key[2] != QUOTA:
                continue
            woken: set[bytes] = set()
            if news:
                for shape in cls.shapes:
                    key = (shape, cls.key[3])
                    info = shapes.get(key)
                    if info is None:
                        continue  # no profile: not worth a look either way
                    if admits_now(q, info):
                        woken.add(shape)
                    else:
                        verify.add(key)  # worth a look for the quota news
                if woken:
                    out.woken[id(cls)] = q
            else:
                capacity_only = True
            out.classes[id(cls)] = woken
    if capacity_only:  # the full scan looks at those that fit where capacity came free or may preempt newcomers
        low = s.victims_below()
        todo = [(key, info) for key, info in shapes.items() if info is not None and key not in verify]
        fits = _could_fit_all(s, [info for _, info in todo])
        for (key, info), fit in zip(todo, fits, strict=True):
            job = info.rep
            preempts = low is not None and low < job.priority and job.placement.preemption_policy == "PreemptLowerPriority"
            if preempts or fit:
                verify.add(key)
    for key in sorted(verify):
        info = shapes[key]
        assert info is not None
        _verify(s, key, info, out.verify)
    out.shapes, out.verified = shapes, verify
    return out


def _could_fit_all(s: Scratch, infos: list[ShapeFacts]) -> list[bool]:
    """``could_fit`` of each shape's representative, the capacity compared in one matrix: the
    freed clusters are a handful and the shapes hundreds, each a few small numpy calls alone.
    Only without claims (``asleep`` stops before otherwise), so every job sees ``free_base``."""
    if not s.freed or not infos:
        return [False] * len(infos)
    assert not s.claims
    state = s.state
    table = state.clusters
    slots = np.fromiter(s.freed, dtype=np.intp, count=len(s.freed))
    ready = s.ready[slots]
    rows: list[int] = []
    masks: list[npt.NDArray[np.bool_]] = []
    demands: list[npt.NDArray[np.int64]] = []
    for i, info in enumerate(infos):
        if info.table_version != table.version:
            _read_table(s, info)
        if info.static_ok is None or info.demand_vec is None:
            continue  # its view is missing a resource
        rows.append(i)
        masks.append(info.static_ok[slots])
        demands.append(info.demand_vec)
    out = [False] * len(infos)
    if not rows:
        return out
    free = s.free_base[slots]  # (freed clusters, resources)
    fit = (free[None, :, :] >= np.stack(demands)[:, None, :]).all(axis=2)  # (shapes, freed clusters)
    ok = np.asarray((fit & np.stack(masks) & ready).any(axis=1))
    for i, yes in zip(rows, ok.tolist(), strict=True):
        out[i] = bool(yes)
    return out


def _read_table(s: Scratch, info: ShapeFacts) -> None:
    """The shape's static verdicts and demand per column against the current cluster table."""
    state = s.state
    table = state.clusters
    view = job_view(state, info.rep)
    info.table_version = table.version
    if view.missing:
        info.static_ok = info.demand_vec = None
        return
    profile = info.profile
    static_ok = profile.static_ok.get(view.static_key) if profile.cache_version == table.version else None
    if static_ok is None:
        static_ok = static_survivors(profile, s.cycle_input(info.rep))
    info.static_ok = static_ok
    info.demand_vec = view.demand_vec


def _verify(s: Scratch, key: tuple[bytes, int], info: ShapeFacts, verify: list[JobRecord]) -> None:
    """The jobs of the shape that must fit some cluster at the end of the pass."""
    if info.kind == SHAPE:
        verify.append(info.rep)
    else:  # per LocalQueue: every lane (such profiles are rare)
        lanes = s.state.index.shapes[key].values()
        verify.extend(m for m in (_member(s, lane) for lane in lanes) if m is not None)


def _never(spec: ClusterQueueSpec) -> bool:
    """No preemption rule: a job its quota holds takes no victims, whatever runs."""
    p = spec.preemption
    return p.within_cluster_queue == "Never" and p.reclaim_within_cohort == "Never" and p.borrow_within_cohort == "Never"


def _still(s: Scratch, key: tuple[bytes, int], info: ShapeFacts) -> bool:
    """Whether facts kept from an earlier pass hold now: the representative still waits in a
    lane of the shape at that priority (same record: a resubmission is another), and its
    profile was not compiled again since (a policy or plugin change)."""
    state = s.state
    rep = info.rep
    lane = state.index.of.get(rep.key)
    return (
        lane is not None
        and lane.sleep is not None
        and lane.key[1] == key[1]
        and lane.shape == key[0]
        and state.jobs.get(rep.key) is rep
        and state.profiles.get(rep.placement.profile) is info.profile
    )


def _shape(s: Scratch, lanes: dict[LaneKey, Lane], kinds: dict[str, str | None]) -> ShapeFacts | None:
    rep = _member(s, next(iter(lanes.values())))
    profile = profile_for(s, rep) if rep is not None else None
    if rep is None or profile is None:
        return None
    if profile.name not in kinds:
        kinds[profile.name] = _kind(profile)
    return ShapeFacts(rep, profile, kinds[profile.name], tuple(sorted(rep.demand.items())))


def check(s: Scratch, slept: Asleep) -> None:
    """At the end of the pass: every slept job the full scan would have looked at still fits
    some cluster, so its look would have ended as its last one did. Else the pass is redone.
    The cluster where the job's spec fit last time is asked first: when its filters decide per
    cluster, passing them there is enough, one cluster instead of all."""
    fits = s.state.index.fits
    if len(fits) > 4 * len(s.state.index.lanes) + 1024:
        fits.clear()  # specs no longer waiting
    for job in slept.verify:
        profile = profile_for(s, job)
        if profile is None:
            raise Fallback
        inp = s.cycle_input(job)
        key = (job.spec_key, job.priority, profile.name)
        slot = fits.get(key)
        if slot is not None and _fits_on(profile, inp, slot):
            continue
        slots = feasible(profile, inp, spec_key=job.spec_key)
        if not len(slots):
            raise Fallback
        fits[key] = int(slots[0])


def _fits_on(profile: CompiledProfile, inp: CycleInput, slot: int) -> bool:
    """Whether the job passes every filter on this one cluster, as ``feasible`` would find it
    there; False (not known) unless every active filter's verdict on a cluster depends on that
    cluster alone (``FilterPlugin.per_cluster``; static ones are cached per cluster)."""
    if slot >= len(inp.clusters) or not static_survivors(profile, inp)[slot]:
        return False
    active = active_filters(profile, inp)
    if not all(plugin.per_cluster for _, plugin in active):
        return False
    one = np.array([slot], dtype=np.intp)
    for name, plugin in active:
        result = run_filter(name, plugin, inp, one)
        if (not result.skipped or result.verdict.any()) and not result.passed()[0]:
            return False
    return True


def _kind(profile: CompiledProfile) -> str | None:
    kind = SHAPE
    for _, plugin in profile.filters:
        if plugin.static:
            continue
        name = f"{type(plugin).__module__}.{type(plugin).__qualname__}"
        if name in _BY_LOCAL_QUEUE:
            kind = LOCAL_QUEUE
        elif name not in _BY_SHAPE:
            return None
    return kind


def _member(s: Scratch, lane: Lane) -> JobRecord | None:
    jobs = s.state.jobs
    index = s.state.index
    for i in range(lane.head, len(lane.keys)):
        if index.live(lane, i, jobs):
            return jobs[lane.keys[i]]
    return None


def _head(index: PendingIndex, name: str, current: list[SleepClass], s: Scratch) -> Lane | None:
    """The StrictFIFO queue's head's lane, if every lane of the queue is in a current class, one
    job waits for quota, and it comes before every job waiting behind it."""
    if index.per_queue.get(name, 0) != sum(len(c.lanes) for c in current):
        return None
    quota = [lane for c in current if c.key[2] == QUOTA for lane in c.lanes.values()]
    if len(quota) != 1 or quota[0].live != 1:
        return None
    head = _member(s, quota[0])
    if head is None:
        return None
    first = (-head.priority, head.submitted_seq)
    jobs = s.state.jobs
    for c in current:
        if c.key[2] == BEHIND and (-c.key[3], c.low_seq) < first and (-c.key[3], index.first_seq(c, jobs)) < first:
            return None
    return quota[0]
