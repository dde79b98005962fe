"""``explain(state, job)``: for the job's evaluation now, every cluster with its verdict.

A rejected cluster shows every filter that rejects it (plugin, code, reason); a feasible one its
normalized score per plugin, weight and total, and its rank. That answers "why there and not
there" for the decision the state is at. The job's own copies are not counted against it, so a
placed job's cluster shows how it looked to the job, not "full because of itself".
"""

from __future__ import annotations

import datetime

import msgspec
import numpy as np
from msgspec import Struct, field

from reconciler.core.framework.cycle import evaluate, rejection_summary, summary_message
from reconciler.core.queues.facts import QueueFacts, queue_facts
from reconciler.core.scratch import Scratch
from reconciler.core.state import State


class Rejection(Struct, frozen=True, kw_only=True):
    plugin: str
    code: str
    reason: str


class PluginScore(Struct, frozen=True, kw_only=True):
    plugin: str
    weight: int
    score: int  # normalized 0..100, before the weight


class ClusterVerdict(Struct, frozen=True, kw_only=True, omit_defaults=True):
    cluster: str
    feasible: bool
    rejections: list[Rejection] = field(default_factory=list)
    scores: list[PluginScore] = field(default_factory=list)
    total: int | None = None
    rank: int | None = None  # 1 = best


class JobExplanation(Struct, frozen=True, kw_only=True, omit_defaults=True):
    job: str
    seq: int
    phase: str
    profile: str
    priority: int
    attempt: int
    strategy: str = ""
    cluster: str | None = None
    nominated: list[str] = field(default_factory=list)
    reason: str = ""
    summary: str = ""
    clusters: list[ClusterVerdict] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)  # human lines about preemption involving the job
    queue: QueueFacts | None = None  # tenancy: its ClusterQueue, quota, share, position


class UnknownJob(KeyError):
    pass


def explain(state: State, job_key: str) -> JobExplanation:
    job = state.jobs.get(job_key)
    if job is None:
        raise UnknownJob(f"no job {job_key!r} in the log (up to seq {state.seq})")
    profile = state.profiles.get(job.placement.profile)
    base = JobExplanation(
        job=job_key,
        seq=state.seq,
        phase=job.phase,
        profile=job.placement.profile,
        priority=job.priority,
        attempt=job.attempt,
        cluster=job.cluster,
        nominated=list(job.nominated),
        reason=job.last_reason,
        claims=_claim_lines(state, job_key),
        queue=queue_facts(state, job),
    )
    if profile is None:
        error = state.profile_errors.get(job.placement.profile, f"profile {job.placement.profile!r} is not defined")
        return msgspec.structs.replace(base, summary=error)
    s = Scratch.start(state)
    for copy in job.copies:  # judge the clusters as if this job were not there yet
        if copy.counted:
            s.release(copy.cluster, job.demand)
            s.copy_done(job, copy.cluster, copy.attempt)
    table = state.clusters
    evaluation = evaluate(profile, s.cycle_input(job), spec_key=job.spec_key, full=True)
    rank = {int(slot): i for i, slot in enumerate(evaluation.ranked)}
    verdicts = []
    for slot in np.argsort(table.name_rank):
        slot = int(slot)
        if not table.present[slot]:
            continue
        name = table.names[slot]
        if slot in rank:
            i = rank[slot]
            verdicts.append(
                ClusterVerdict(
                    cluster=name,
                    feasible=True,
                    scores=[PluginScore(plugin=p, weight=w, score=int(sc[i])) for p, w, sc in evaluation.plugin_scores],
                    total=int(evaluation.totals[i]),
                    rank=i + 1,
                )
            )
            continue
        rejections = []
        for plugin, result in evaluation.filters:
            v = int(result.verdict[slot])
            if v:
                reason = result.reasons[v - 1]
                rejections.append(Rejection(plugin=plugin, code=reason.code.name, reason=reason.message))
        verdicts.append(ClusterVerdict(cluster=name, feasible=False, rejections=rejections))
    verdicts.sort(key=lambda v: (v.rank is None, v.rank or 0, v.cluster))
    counts = rejection_summary(evaluation, present=table.present)
    return msgspec.structs.replace(
        base,
        strategy=profile.spec.strategy.type,
        summary=summary_message(counts) if counts else f"{len(rank)} feasible cluster(s)",
        clusters=verdicts,
    )


def _iso(ms: int) -> str:
    """Log time as people read it (the same form `kdispatch log` prints); integer arithmetic only."""
    stamp = _EPOCH + datetime.timedelta(milliseconds=ms)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _claim_lines(state: State, key: str) -> list[str]:
    lines = []
    for claim in state.claims.values():
        if claim.preemptor == key:
            lines.append(
                f"holds a claim on {claim.cluster} until {_iso(claim.expires_ms)}: evicting {', '.join(claim.victims)}"
            )
        elif key in claim.victims:
            lines.append(f"being preempted on {claim.cluster} by {claim.preemptor} (priority {claim.priority})")
    job = state.jobs[key]
    if job.evicting_for and not lines:
        lines.append(f"evicted for {job.evicting_for}")
    return lines
