"""Numbers from a recorded run: waits, copies, preemptions, utilization, makespan.

Everything is computed from integer milliseconds and rounded once at the end, so the same run
gives byte-identical JSON. Percentiles are nearest-rank (``reconciler.edge.percentile``).
"""

from __future__ import annotations

import itertools
from typing import Any

from reconciler.edge.percentile import percentile
from reconciler.simulate.recorder import JobRecord, Recorder

UTILIZATION_BUCKETS = 200


def seconds(ms: int | None) -> float | None:
    return None if ms is None else round(ms / 1000, 3)


def _share(count: int, total: int) -> float | None:
    return round(100 * count / total, 2) if total else None


def wait_stats(records: list[JobRecord]) -> dict[str, Any]:
    """Waits of the placed jobs: the mean beside the tail, and how many waited at all.

    On a trace where most jobs are admitted at once, a percentile jumps from the admission
    latency to hours as the share of waiting jobs crosses it; the shares over 1 s (the simulated
    admission latency) and over 60 s say how many jobs that tail is made of."""
    waits = sorted(w for r in records if (w := r.wait_ms) is not None)
    return {
        "jobs": len(records),
        "placed": len(waits),
        "wait_mean_s": seconds(round(sum(waits) / len(waits))) if waits else None,
        "wait_p50_s": seconds(percentile(waits, 50)),
        "wait_p90_s": seconds(percentile(waits, 90)),
        "wait_p95_s": seconds(percentile(waits, 95)),
        "wait_p99_s": seconds(percentile(waits, 99)),
        "waited_over_1s_pct": _share(sum(1 for w in waits if w > 1_000), len(waits)),
        "waited_over_60s_pct": _share(sum(1 for w in waits if w > 60_000), len(waits)),
    }


OUTCOMES = (
    "finished",
    "deleted_before_placement",
    "deleted_after_placement",
    "running_at_end",
    "waiting_at_end_after_placement",
    "never_placed",
)


def outcome(record: JobRecord, *, running: bool) -> str:
    """The one final bucket a job ends in (``OUTCOMES``). A job that finished is finished, even
    if its user deleted it while its copy was finishing."""
    if record.finished_ms is not None:
        return "finished"
    if record.deleted_ms is not None:
        return "deleted_before_placement" if record.placed_ms is None else "deleted_after_placement"
    if record.placed_ms is None:
        return "never_placed"
    # Placed once; now running, or requeued (preempted, its cluster lost) and not placed again.
    return "running_at_end" if running else "waiting_at_end_after_placement"


def outcomes(recorder: Recorder) -> dict[str, int]:
    """Every job in exactly one bucket; the buckets add up to the job count."""
    counts = dict.fromkeys(OUTCOMES, 0)
    for r in recorder.jobs.values():
        counts[outcome(r, running=recorder.is_running(r.uid))] += 1
    return counts


def utilization(
    steps: list[tuple[int, int]], *, capacity: int, start_ms: int, end_ms: int, buckets: int = UTILIZATION_BUCKETS
) -> tuple[float | None, list[list[float]]]:
    """(mean, [[bucket start s, mean fraction]...]) of a step function of GPUs in use."""
    if capacity <= 0 or end_ms <= start_ms:
        return None, []
    span = end_ms - start_ms
    edges = [start_ms + span * i // buckets for i in range(buckets + 1)]
    area = [0] * buckets
    total = 0
    points = [*steps, (end_ms, 0)]
    for (t0, used), (t1, _) in itertools.pairwise(points):
        lo, hi = max(t0, start_ms), min(t1, end_ms)
        if hi <= lo or used == 0:
            continue
        total += used * (hi - lo)
        b = min(buckets - 1, (lo - start_ms) * buckets // span)
        while b < buckets and edges[b] < hi:
            a0, a1 = max(lo, edges[b]), min(hi, edges[b + 1])
            if a1 > a0:
                area[b] += used * (a1 - a0)
            b += 1
    series = [
        [round((edges[b] - start_ms) / 1000, 3), round(area[b] / (capacity * (edges[b + 1] - edges[b])), 4)]
        for b in range(buckets)
        if edges[b + 1] > edges[b]
    ]
    return round(total / (capacity * span), 4), series


def profile_results(
    recorder: Recorder, *, gpu_capacity: int, clusters: int, unfinished_phases: dict[str, int] | None = None
) -> dict[str, Any]:
    records = list(recorder.jobs.values())
    start = recorder.first_ms or 0
    ends = [r.finished_ms for r in records if r.finished_ms is not None]
    end = max(ends) if ends else start
    nominated = [r for r in records if r.copies]
    copies = sum(len(r.copies) for r in records)
    attempts = sum(len({attempt for _, attempt in r.copies}) for r in records)
    mean_util, series = utilization(recorder.gpu_steps, capacity=gpu_capacity, start_ms=start, end_ms=end)
    by_class: dict[str, list[JobRecord]] = {}
    for r in records:
        by_class.setdefault(r.priority_class, []).append(r)
    out: dict[str, Any] = wait_stats(records)
    final = outcomes(recorder)
    out.update(
        {
            "outcomes": final,
            "finished": final["finished"],
            "deleted": final["deleted_before_placement"] + final["deleted_after_placement"],
            "deleted_before_placement": final["deleted_before_placement"],
            "unfinished": final["running_at_end"] + final["waiting_at_end_after_placement"] + final["never_placed"],
            "remote_copies": copies,
            "remote_copies_per_job": round(copies / len(nominated), 3) if nominated else None,
            # Per dispatch attempt: the strategy's own write amplification, without the extra
            # attempts that preemptions and worker losses cause.
            "remote_copies_per_attempt": round(copies / attempts, 3) if attempts else None,
            "clusters": clusters,
            # Victims evicted for a preemptor (one per Evict), not the claims that asked for them.
            "preemptions": recorder.preemptions,
            "preemption_claims": recorder.claims,
            "claims_expired": recorder.claims_expired,
            "evictions": sum(r.evictions for r in records),
            "replaced": sum(1 for r in records if r.placements > 1),
            "requeues": dict(sorted(recorder.requeue_reasons.items())),
            "unschedulable_decisions": sum(r.unschedulable for r in records),
            "clusters_lost": recorder.clusters_lost,
            "gpu_utilization": mean_util,
            "gpu_utilization_series": series,
            "makespan_s": seconds(end - start),
            "log_entries": recorder.entries,
            "decisions": recorder.decisions,
            "by_priority_class": {name: wait_stats(rs) for name, rs in sorted(by_class.items())},
            "by_cluster": {
                name: {"placed": t.placed, "finished": t.finished, "preempted": t.preempted}
                for name, t in sorted(recorder.clusters.items())
            },
        }
    )
    if unfinished_phases:
        out["unfinished_phases"] = dict(sorted(unfinished_phases.items()))
    return out


def placement_rows(recorder: Recorder, *, profile: str, origin_ms: int) -> list[dict[str, Any]]:
    """One row per job for placements.jsonl; times in seconds from the start of the trace."""

    def rel(ms: int | None) -> float | None:
        return None if ms is None else seconds(ms - origin_ms)

    return [
        {
            "job": r.key,
            "profile": profile,
            "cluster": r.cluster,
            "submitted": rel(r.submitted_ms),
            "placed": rel(r.placed_ms),
            "finished": rel(r.finished_ms),
            "deleted": rel(r.deleted_ms),
            "wait_s": seconds(r.wait_ms),
            "priority_class": r.priority_class,
            "copies": len(r.copies),
            "placements": r.placements,
        }
        for r in recorder.jobs.values()
    ]
