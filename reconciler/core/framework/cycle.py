"""One scheduling cycle for one job: run every filter, score the survivors, rank them.

The pipeline is fixed (kube-scheduler's): filter -> score -> normalize -> check range -> weight
-> sum; ties go to the cluster whose name sorts first. Every filter runs on every cluster (a few
vectorised operations each) so that a cluster's complete verdict is known: the summary reports
each rejected cluster under its first failing filter, and preemption needs to know which
clusters fail *only* for lack of free capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reconciler.core.clusters import Mask
from reconciler.core.framework.interface import MAX_SCORE, CycleInput, FilterResult, Scores, Slots
from reconciler.core.framework.profile import CompiledProfile
from reconciler.core.framework.status import Code

_CACHE_LIMIT = 20_000


@dataclass
class Evaluation:
    filters: list[tuple[str, FilterResult]]
    passed: Mask
    resolvable: Mask  # rejected, but only by filters whose code is UNSCHEDULABLE (preemption helps)
    ranked: Slots  # clusters that passed, best first
    totals: Scores  # aligned with ranked
    plugin_scores: list[tuple[str, int, Scores]]  # (plugin, weight, normalized) aligned with ranked


def run_filters(profile: CompiledProfile, inp: CycleInput, *, spec_key: bytes) -> list[tuple[str, FilterResult]]:
    table = inp.clusters
    if profile.cache_version != table.version:
        profile.cache.clear()
        profile.cache_version = table.version
    elif len(profile.cache) > _CACHE_LIMIT:
        profile.cache.clear()
    out = []
    for i, (name, plugin) in enumerate(profile.filters):
        if plugin.static:
            key = (spec_key, i)
            result = profile.cache.get(key)
            if result is None:
                result = plugin.filter(inp)
                profile.cache[key] = result
        else:
            result = plugin.filter(inp)
        out.append((name, result))
    return out


def evaluate(profile: CompiledProfile, inp: CycleInput, *, spec_key: bytes, scores: bool = True) -> Evaluation:
    table = inp.clusters
    n = len(table)
    results = run_filters(profile, inp, spec_key=spec_key)
    passed = table.present.copy()
    hard = np.zeros(n, dtype=np.bool_)
    for _, result in results:
        if result.skipped:
            continue
        failing = result.verdict > 0
        passed &= ~failing
        if any(r.code != Code.UNSCHEDULABLE for r in result.reasons):
            codes = np.array([0] + [int(r.code != Code.UNSCHEDULABLE) for r in result.reasons], dtype=np.bool_)
            hard |= codes[result.verdict]
    resolvable = table.present & ~passed & ~hard
    candidates = np.flatnonzero(passed)
    if not scores or len(candidates) == 0:
        order = np.lexsort((table.name_rank[candidates],)) if len(candidates) else candidates
        return Evaluation(results, passed, resolvable, candidates[order], np.zeros(len(candidates), np.int64), [])
    totals = np.zeros(len(candidates), dtype=np.int64)
    per_plugin = []
    for name, weight, plugin in profile.scores:
        raw = plugin.score(inp, candidates)
        norm = np.clip(plugin.normalize(raw), 0, MAX_SCORE).astype(np.int64)
        totals += norm * weight
        per_plugin.append((name, weight, norm))
    order = np.lexsort((table.name_rank[candidates], -totals))
    return Evaluation(
        filters=results,
        passed=passed,
        resolvable=resolvable,
        ranked=candidates[order],
        totals=totals[order],
        plugin_scores=[(name, w, s[order]) for name, w, s in per_plugin],
    )


def rejection_summary(evaluation: Evaluation, *, present: Mask) -> dict[str, int]:
    """Rejected clusters counted under their first failing filter's reason."""
    undecided = present & ~evaluation.passed
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
