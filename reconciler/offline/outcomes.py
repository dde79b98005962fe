"""What happened to each job, measured the same way on a recorded log and on a what-if run:
when it was submitted and placed, where, how many remote copies it cost, evictions, finish.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eventlog import events as ev
from reconciler.edge.percentile import percentile


@dataclass
class JobOutcome:
    submitted_ms: int | None = None
    placed_ms: int | None = None  # first placement
    cluster: str | None = None  # last placement
    placements: list[str] = field(default_factory=list)
    copies: int = 0  # remote copies asked for (clusters nominated, all rounds and attempts)
    evictions: int = 0
    finished_ms: int | None = None
    unschedulable: bool = False


class Outcomes:
    def __init__(self) -> None:
        self.jobs: dict[str, JobOutcome] = {}
        # One word, one meaning (as in the demo and simulate): a preemption is a victim evicted
        # for a preemptor; the claims that asked for the evictions are counted apart.
        self.preemptions = 0
        self.preemption_claims = 0

    def _job(self, ref: ev.JobRef) -> JobOutcome:
        job = self.jobs.get(ref.key)
        if job is None:
            job = self.jobs[ref.key] = JobOutcome()
        return job

    def observe(self, entry: ev.LogEntry) -> None:
        e = entry.event
        at = entry.at_ms
        match e:
            case ev.JobSubmitted(job=ref):
                job = self._job(ref)
                if job.submitted_ms is None:
                    job.submitted_ms = at
            case ev.Nominated(job=ref, clusters=clusters):
                self._job(ref).copies += len(clusters)
            case ev.Placed(job=ref, cluster=cluster):
                job = self._job(ref)
                job.placed_ms = at if job.placed_ms is None else job.placed_ms
                job.cluster = cluster
                job.placements.append(cluster)
                job.unschedulable = False
            case ev.Unschedulable(job=ref):
                self._job(ref).unschedulable = True
            case ev.Evict(job=ref, preemptor=preemptor, reason=reason):
                self._job(ref).evictions += 1
                if preemptor is not None or reason == "Preempted":
                    self.preemptions += 1
            case ev.PreemptionClaimed():
                self.preemption_claims += 1
            case ev.Finished(job=ref):
                self._job(ref).finished_ms = at
            case _:
                pass

    def summary(self) -> dict[str, Any]:
        jobs = [j for j in self.jobs.values() if j.submitted_ms is not None]
        waits = sorted(j.placed_ms - j.submitted_ms for j in jobs if j.placed_ms is not None and j.submitted_ms)
        return {
            "jobs": len(jobs),
            "placed": sum(1 for j in jobs if j.placed_ms is not None),
            "finished": sum(1 for j in jobs if j.finished_ms is not None),
            "unschedulable": sum(1 for j in jobs if j.unschedulable and j.placed_ms is None),
            "wait_p50_s": _pct_s(waits, 50),
            "wait_p95_s": _pct_s(waits, 95),
            "wait_max_s": _pct_s(waits, 100),
            "remote_copies_per_job": round(sum(j.copies for j in jobs) / len(jobs), 3) if jobs else 0.0,
            "preemptions": self.preemptions,
            "preemption_claims": self.preemption_claims,
            "evictions": sum(j.evictions for j in jobs),
            "replaced": sum(1 for j in jobs if len(j.placements) > 1),
        }


def _pct_s(waits_ms: list[int], p: int) -> float | None:
    ms = percentile(waits_ms, p)
    return None if ms is None else round(ms / 1000, 3)


def placements_per_cluster(outcomes: Outcomes) -> dict[str, int]:
    """Placements (every ``Placed``, re-placements included) per cluster, by name."""
    counts: dict[str, int] = {}
    for job in outcomes.jobs.values():
        for cluster in job.placements:
            counts[cluster] = counts.get(cluster, 0) + 1
    return dict(sorted(counts.items()))


def change(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """``after - before`` per figure (``None`` where either side has none), keys of both."""
    out: dict[str, Any] = {}
    for name in [*before, *(k for k in after if k not in before)]:
        a, b = before.get(name, 0), after.get(name, 0)
        if isinstance(a, dict) or isinstance(b, dict):
            out[name] = change(a or {}, b or {})
        elif a is None or b is None:
            out[name] = None if a is not b else 0
        else:
            out[name] = round(b - a, 3) if isinstance(a, float) or isinstance(b, float) else b - a
    return out


def differences(
    recorded: Outcomes, whatif: Outcomes, *, wait_tolerance_s: float | None = None
) -> list[dict[str, Any]]:
    """Jobs whose outcome differs: cluster, copies, evictions, placed or not, or the wait (by
    more than ``wait_tolerance_s``; default ``WAIT_TOLERANCE_S``)."""
    tolerance = WAIT_TOLERANCE_S if wait_tolerance_s is None else wait_tolerance_s
    rows: list[dict[str, Any]] = []
    for key in sorted(recorded.jobs):
        a = recorded.jobs[key]
        b = whatif.jobs.get(key, JobOutcome())
        if a.submitted_ms is None:
            continue
        same = (a.cluster, a.copies, a.evictions, a.placed_ms is None) == (
            b.cluster,
            b.copies,
            b.evictions,
            b.placed_ms is None,
        )
        if same and _close(_wait(a), _wait(b), tolerance):
            continue
        rows.append(
            {
                "job": key,
                "cluster": [a.cluster, b.cluster],
                "wait_s": [_wait(a), _wait(b)],
                "copies": [a.copies, b.copies],
                "evictions": [a.evictions, b.evictions],
            }
        )
    return rows


# Between the log and a what-if run, waits closer than this are the same outcome: the latency
# model is a median, not a replay of each admission, so sub-second jitter means nothing there.
# Between two runs of the same model any difference is the policy's, so those compare exactly.
WAIT_TOLERANCE_S = 0.5


def _close(a: float | None, b: float | None, tolerance: float) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= tolerance


def _wait(j: JobOutcome) -> float | None:
    if j.placed_ms is None or j.submitted_ms is None:
        return None
    return round((j.placed_ms - j.submitted_ms) / 1000, 3)
