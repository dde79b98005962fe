"""One scheduling cycle for one job: filter, score, rank. Two ways to run the filters:

- ``feasible`` (the hot path): the static filters' survivors come from a cache keyed by the job's
  spec, and the dynamic filters (health, headroom) only look at those survivors. Enough to
  dispatch.
- ``evaluate`` with ``full=True``: every filter on every cluster, so each cluster's complete
  verdict is known — the unschedulable summary reports a rejected cluster under its first
  failing filter (profile order), preemption needs the clusters that fail *only* for lack of
  free capacity, and explain shows everything.

Scoring is kube-scheduler's fixed pipeline: score -> normalize -> check range -> weight -> sum;
ties go to the cluster whose name sorts first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from reconciler.core.clusters import Mask
from reconciler.core.framework.interface import (
    MAX_SCORE,
    CycleInput,
    FilterPlugin,
    FilterResult,
    ScorePlugin,
    Scores,
    Slots,
)
from reconciler.core.framework.profile import CompiledProfile
from reconciler.core.framework.status import Code, Reason

_CACHE_LIMIT = 4_096
# Per-table arrays the caches may hold, in bytes per cache (bool masks: one byte per cluster;
# raw scores: eight), so the memo stays bounded whatever the number of distinct specs.
_ARRAY_BUDGET = 64 << 20


@dataclass
class Evaluation:
    ranked: Slots  # clusters that passed, best first
    totals: Scores  # aligned with ranked
    plugin_scores: list[tuple[str, int, Scores]]  # (plugin, weight, normalized) aligned with ranked
    # Only for full evaluations: verdicts of every filter over every cluster.
    filters: list[tuple[str, FilterResult]] = field(default_factory=list)
    passed: Mask | None = None
    resolvable: Mask | None = None  # rejected only by UNSCHEDULABLE codes of preemptible filters


def run_filter(name: str, plugin: FilterPlugin, inp: CycleInput, slots: Slots) -> FilterResult:
    """A plugin that raises rejects every cluster with code ERROR and the exception as the
    reason: the job shows up as unschedulable with the cause, and the leader keeps running."""
    try:
        result = plugin.filter(inp, slots)
        if len(result.verdict) != len(slots):
            raise ValueError(f"returned {len(result.verdict)} verdicts for {len(slots)} clusters")
        return result
    except Exception as err:  # a third-party bug must not stop dispatching for everyone
        reason = Reason(Code.ERROR, f"{name} failed: {type(err).__name__}: {err}")
        return FilterResult(verdict=np.ones(len(slots), dtype=np.int32), reasons=[reason], failed=True)


def run_score(
    plugin: ScorePlugin, inp: CycleInput, candidates: Slots, *, memo: tuple[CompiledProfile, int] | None = None
) -> Scores:
    """Normalized, range-checked scores; a plugin that raises scores 0 everywhere. With
    ``memo`` (the profile and the plugin's index in it), raw scores of a plugin with a cache key
    are read from the profile's cache."""
    norm = _normalized(plugin, inp, candidates, memo)
    out: Scores = np.minimum(np.maximum(norm, 0), MAX_SCORE).astype(np.int64, copy=False)
    return out


def _normalized(
    plugin: ScorePlugin, inp: CycleInput, candidates: Slots, memo: tuple[CompiledProfile, int] | None
) -> Scores:
    """What the plugin's normalize makes of its raw scores, not range-checked yet (zeros if it
    raised or gave the wrong number)."""
    try:
        raw = _raw_scores(plugin, inp, candidates, memo) if memo is not None else None
        if raw is None:
            raw = plugin.score(inp, candidates)
        norm = plugin.normalize(raw)
        if len(norm) != len(candidates):
            raise ValueError("wrong number of scores")
    except Exception:  # a third-party bug must not stop dispatching for everyone
        return np.zeros(len(candidates), dtype=np.int64)
    return norm


def _raw_scores(
    plugin: ScorePlugin, inp: CycleInput, candidates: Slots, memo: tuple[CompiledProfile, int]
) -> Scores | None:
    """Raw scores of the candidates from the scores over every present cluster, computed once
    per cache key; None when the plugin has no key (or failed over every cluster: it is then
    asked about the candidates alone, as always)."""
    profile, index = memo
    part_key = plugin.cache_key(inp.job)
    if part_key is None:
        return None
    table = inp.clusters
    _fresh(profile, table.version, len(table))
    key = (index, part_key)
    every: Scores | None = profile.score_parts.get(key)
    if every is None:
        present = np.flatnonzero(table.present)
        try:
            raw = np.asarray(plugin.score(inp, present))
            if raw.shape != (len(present),):
                return None
        except Exception:  # scored per job instead, where a failure scores 0 as always
            return None
        every = np.zeros(len(table), dtype=raw.dtype)
        every[present] = raw
        profile.score_parts[key] = every
    out: Scores = every[candidates]
    return out


def _fresh(profile: CompiledProfile, version: int, clusters: int) -> None:
    masks = _ARRAY_BUDGET // max(clusters, 1)
    if (
        profile.cache_version != version
        or len(profile.cache) > _CACHE_LIMIT
        or len(profile.static_ok) > masks
        or len(profile.parts) > masks
        or len(profile.score_parts) > masks // 8
    ):
        profile.cache.clear()
        profile.static_ok.clear()
        profile.parts.clear()
        profile.score_parts.clear()
        profile.cache_version = version


def static_survivors(profile: CompiledProfile, inp: CycleInput) -> Mask:
    """Clusters passing every static filter (bool mask), cached per job spec and table version."""
    table = inp.clusters
    if profile.cache_version != table.version:
        _fresh(profile, table.version, len(table))
    static_ok: Mask | None = profile.static_ok.get(inp.job.static_key)
    if static_ok is None:
        _fresh(profile, table.version, len(table))  # (the size limits: checked when the memo grows)
        static_ok = _by_parts(profile, inp)
        if static_ok is None:
            static_ok = _cascade(profile, inp)
        profile.static_ok[inp.job.static_key] = static_ok
    return static_ok


def _cascade(profile: CompiledProfile, inp: CycleInput) -> Mask:
    """Every static filter on the survivors of the ones before it."""
    table = inp.clusters
    slots = np.flatnonzero(table.present)
    for name, plugin in profile.filters:
        if plugin.static and len(slots):
            slots = slots[run_filter(name, plugin, inp, slots).passed()]
    static_ok = np.zeros(len(table), dtype=np.bool_)
    static_ok[slots] = True
    return static_ok


def _by_parts(profile: CompiledProfile, inp: CycleInput) -> Mask | None:
    """The same survivors as ``_cascade``, from each filter's verdicts for its part of the job
    (``FilterPlugin.cache_key``), computed once over every present cluster: a job spec never
    seen before is mostly a new combination of parts seen before. None when a static filter
    has no key (a third-party one: its verdicts are only known on the survivors, so the
    cascade runs as it always did) or failed (the cascade then says what it says)."""
    table = inp.clusters
    ok = table.present.copy()
    for i, (name, plugin) in enumerate(profile.filters):
        if not plugin.static:
            continue
        part_key = plugin.cache_key(inp.job)
        if part_key is None:
            return None
        key = (i, part_key)
        part: Mask | None = profile.parts.get(key)
        if part is None:
            present = np.flatnonzero(table.present)
            part = np.zeros(len(table), dtype=np.bool_)
            if len(present):
                result = run_filter(name, plugin, inp, present)
                if result.failed:
                    return None
                part[present] = result.verdict == 0
            profile.parts[key] = part
        np.logical_and(ok, part, out=ok)
    return ok


def active_filters(profile: CompiledProfile, inp: CycleInput) -> list[tuple[str, FilterPlugin]]:
    """The profile's dynamic filters that are not idle with this table (memo per version)."""
    table = inp.clusters
    key = (table.version, table.facts_version)
    if profile.active is None or profile.active[0] != key:
        dynamic = [(name, plugin) for name, plugin in profile.filters if not plugin.static]
        profile.active = (key, [(name, plugin) for name, plugin in dynamic if not plugin.idle(table)])
    return profile.active[1]


def idle_scores(profile: CompiledProfile, inp: CycleInput) -> frozenset[int]:
    """The indexes of the profile's score plugins that are idle with this table (memo per version)."""
    table = inp.clusters
    key = (table.version, table.facts_version)
    if profile.idle_scores is None or profile.idle_scores[0] != key:
        idle = frozenset(i for i, (_, _, plugin) in enumerate(profile.scores) if plugin.idle(table))
        profile.idle_scores = (key, idle)
    return profile.idle_scores[1]


def feasible(profile: CompiledProfile, inp: CycleInput, *, spec_key: bytes) -> Slots:
    """Clusters passing every filter, by cascading: each filter sees the previous survivors.
    Idle filters pass everyone and are not asked; a filter that skipped changes nothing."""
    slots, _ = dynamic_survivors(profile, inp, static_survivors(profile, inp).nonzero()[0])
    return slots


def dynamic_survivors(profile: CompiledProfile, inp: CycleInput, slots: Slots) -> tuple[Slots, bool]:
    """Which of ``slots`` pass the active dynamic filters (cascading), and whether a filter
    failed (raised) on the way: its verdicts are then not the clusters' own."""
    failed = False
    for name, plugin in active_filters(profile, inp):
        if len(slots):
            kept = _survivors(plugin, inp, slots)
            if kept is not None:
                slots = kept
                continue
            result = run_filter(name, plugin, inp, slots)
            failed = failed or result.failed
            if not result.skipped or result.verdict.any():
                slots = slots[result.passed()]
    return slots, failed


def _survivors(plugin: FilterPlugin, inp: CycleInput, slots: Slots) -> Slots | None:
    """The plugin's own shortcut to the clusters that pass (``FilterPlugin.survivors``); None
    when it has none or it raised (``run_filter`` then reports what ``filter`` does)."""
    try:
        return plugin.survivors(inp, slots)
    except Exception:  # the same plugin's filter says how it fails
        return None


def rank(profile: CompiledProfile, inp: CycleInput, *, candidates: Slots) -> Evaluation:
    table = inp.clusters
    n = len(candidates)
    if n == 0:
        return Evaluation(ranked=candidates, totals=np.zeros(0, dtype=np.int64), plugin_scores=[])
    idle = idle_scores(profile, inp)
    asked: list[Scores] = []
    weights: list[int] = []
    for i, (_, weight, plugin) in enumerate(profile.scores):
        if i not in idle:  # (an idle one scores 0 everywhere: adds nothing to the totals)
            asked.append(np.asarray(_normalized(plugin, inp, candidates, (profile, i))))
            weights.append(weight)
    # Range check, weights and sum for every plugin at once: one matrix, a few numpy calls
    # (per plugin they cost more than the arithmetic on a few dozen clusters).
    rows: list[Scores]
    if len(asked) == 1:  # (most profiles score with one plugin: no matrix)
        only = np.maximum(asked[0], 0)
        np.minimum(only, MAX_SCORE, out=only)
        only = only.astype(np.int64, copy=False)
        totals: Scores = only * weights[0]
        rows = [only]
    elif asked:
        scores = np.concatenate(asked).reshape(len(asked), n)
        if scores.dtype == np.int64:  # (a new array: clamped in place)
            np.maximum(scores, 0, out=scores)
            np.minimum(scores, MAX_SCORE, out=scores)
        else:
            scores = np.minimum(np.maximum(scores, 0), MAX_SCORE).astype(np.int64, copy=False)
        totals = np.asarray(weights, dtype=np.int64).dot(scores)
        rows = list(scores)
    else:
        totals = np.zeros(n, dtype=np.int64)
        rows = []
    it = iter(rows)
    per_plugin = [
        (name, weight, np.zeros(n, dtype=np.int64) if i in idle else next(it))
        for i, (name, weight, _) in enumerate(profile.scores)
    ]
    if n == 1:
        return Evaluation(ranked=candidates, totals=totals, plugin_scores=per_plugin)
    order = np.lexsort((table.name_rank[candidates], -totals))
    return Evaluation(
        ranked=candidates[order],
        totals=totals[order],
        plugin_scores=[(name, w, s[order]) for name, w, s in per_plugin],
    )


def totals_of(profile: CompiledProfile, inp: CycleInput, *, candidates: Slots) -> list[int] | None:
    """``rank``'s total score per candidate, in plain integers (for a few clusters numpy's calls
    cost more than the arithmetic); None when a plugin's scores are not integers."""
    idle = idle_scores(profile, inp)
    totals = [0] * len(candidates)
    for i, (_, weight, plugin) in enumerate(profile.scores):
        if i in idle:
            continue
        norm = np.asarray(_normalized(plugin, inp, candidates, (profile, i)))
        if norm.dtype.kind not in "iu":
            return None
        for k, score in enumerate(norm.tolist()):
            totals[k] += min(max(score, 0), MAX_SCORE) * weight
    return totals


def evaluate(
    profile: CompiledProfile, inp: CycleInput, *, spec_key: bytes, scores: bool = True, full: bool = False
) -> Evaluation:
    if not full:
        candidates = feasible(profile, inp, spec_key=spec_key)
        if scores:
            return rank(profile, inp, candidates=candidates)
        order = np.argsort(inp.clusters.name_rank[candidates], kind="stable")
        return Evaluation(ranked=candidates[order], totals=np.zeros(len(candidates), np.int64), plugin_scores=[])
    table = inp.clusters
    _fresh(profile, table.version, len(table))
    n = len(table)
    every = np.arange(n, dtype=np.intp)
    results = []
    for i, (name, plugin) in enumerate(profile.filters):
        if plugin.static:
            key = (inp.job.static_key, i)
            result = profile.cache.get(key)
            if result is None:
                result = run_filter(name, plugin, inp, every)
                profile.cache[key] = result
        else:
            result = run_filter(name, plugin, inp, every)
        results.append((name, result))
    passed = table.present.copy()
    hard = np.zeros(n, dtype=np.bool_)
    for i, (_, result) in enumerate(results):
        if result.skipped:
            continue
        passed &= result.verdict == 0
        if not profile.filters[i][1].preemptible:
            hard |= result.verdict != 0  # see FilterPlugin.preemptible
        elif any(r.code != Code.UNSCHEDULABLE for r in result.reasons):
            codes = np.array([0] + [int(r.code != Code.UNSCHEDULABLE) for r in result.reasons], dtype=np.bool_)
            hard |= codes[result.verdict]
    resolvable = table.present & ~passed & ~hard
    candidates = np.flatnonzero(passed)
    if scores:
        ranked = rank(profile, inp, candidates=candidates)
    else:
        order = np.argsort(table.name_rank[candidates], kind="stable")
        ranked = Evaluation(ranked=candidates[order], totals=np.zeros(len(candidates), np.int64), plugin_scores=[])
    ranked.filters, ranked.passed, ranked.resolvable = results, passed, resolvable
    return ranked


def rejection_summary(evaluation: Evaluation, *, present: Mask) -> dict[str, int]:
    """Rejected clusters counted under their first failing filter's reason (full evaluations)."""
    assert evaluation.passed is not None, "rejection_summary needs a full evaluation"
    undecided: npt.NDArray[np.bool_] = present & ~evaluation.passed
    counts: dict[str, int] = {}
    for _, result in evaluation.filters:
        if result.skipped or not undecided.any():
            continue
        verdict = np.where(undecided, result.verdict, 0)
        tally = np.bincount(verdict, minlength=len(result.reasons) + 1)
        for i, reason in enumerate(result.reasons, start=1):
            if tally[i]:
                counts[reason.message] = counts.get(reason.message, 0) + int(tally[i])
        undecided &= verdict == 0
    return counts


def summary_message(counts: dict[str, int]) -> str:
    """"3 clusters: taint gpu=h100:NoSchedule not tolerated; 2: insufficient nvidia.com/gpu"."""
    if not counts:
        return "no clusters registered"
    parts = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    out = []
    for i, (message, count) in enumerate(parts):
        noun = (" cluster" if count == 1 else " clusters") if i == 0 else ""
        out.append(f"{count}{noun}: {message}")
    return "; ".join(out)
