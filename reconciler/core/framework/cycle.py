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
        return FilterResult(verdict=np.ones(len(slots), dtype=np.int32), reasons=[reason])


def run_score(plugin: ScorePlugin, inp: CycleInput, candidates: Slots) -> Scores:
    """Normalized, range-checked scores; a plugin that raises scores 0 everywhere."""
    try:
        raw = plugin.score(inp, candidates)
        norm = plugin.normalize(raw)
        if len(norm) != len(candidates):
            raise ValueError("wrong number of scores")
    except Exception:  # a third-party bug must not stop dispatching for everyone
        return np.zeros(len(candidates), dtype=np.int64)
    out: Scores = np.minimum(np.maximum(norm, 0), MAX_SCORE).astype(np.int64, copy=False)
    return out


def _fresh(profile: CompiledProfile, version: int) -> None:
    if profile.cache_version != version or len(profile.cache) > _CACHE_LIMIT:
        profile.cache.clear()
        profile.static_ok.clear()
        profile.cache_version = version


def static_survivors(profile: CompiledProfile, inp: CycleInput) -> Mask:
    """Clusters passing every static filter (bool mask), cached per job spec and table version."""
    table = inp.clusters
    _fresh(profile, table.version)
    static_ok: Mask | None = profile.static_ok.get(inp.job.static_key)
    if static_ok is None:
        slots = np.flatnonzero(table.present)
        for name, plugin in profile.filters:
            if plugin.static and len(slots):
                slots = slots[run_filter(name, plugin, inp, slots).passed()]
        static_ok = np.zeros(len(table), dtype=np.bool_)
        static_ok[slots] = True
        profile.static_ok[inp.job.static_key] = static_ok
    return static_ok


def feasible(profile: CompiledProfile, inp: CycleInput, *, spec_key: bytes) -> Slots:
    """Clusters passing every filter, by cascading: each filter sees the previous survivors."""
    slots = np.flatnonzero(static_survivors(profile, inp))
    for name, plugin in profile.filters:
        if not plugin.static and len(slots):
            slots = slots[run_filter(name, plugin, inp, slots).passed()]
    return slots


def rank(profile: CompiledProfile, inp: CycleInput, *, candidates: Slots) -> Evaluation:
    table = inp.clusters
    if len(candidates) == 0:
        return Evaluation(ranked=candidates, totals=np.zeros(0, dtype=np.int64), plugin_scores=[])
    totals = np.zeros(len(candidates), dtype=np.int64)
    per_plugin = []
    for name, weight, plugin in profile.scores:
        norm = run_score(plugin, inp, candidates)
        totals += norm * weight
        per_plugin.append((name, weight, norm))
    if len(candidates) == 1:
        return Evaluation(ranked=candidates, totals=totals, plugin_scores=per_plugin)
    order = np.lexsort((table.name_rank[candidates], -totals))
    return Evaluation(
        ranked=candidates[order],
        totals=totals[order],
        plugin_scores=[(name, w, s[order]) for name, w, s in per_plugin],
    )


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
    _fresh(profile, table.version)
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
