"""What happened to every job, read off the log entries as the runner folds them.

The recorder only reads the log (inputs and decisions), exactly what ``kdispatch log`` would
show, so the numbers mean the same thing as in a real deployment: a job waits from its
``JobSubmitted`` to its first ``Placed``; a remote copy is a (cluster, attempt) it was
``Nominated`` to; a preemption is an ``Evict`` with a preemptor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eventlog import events as ev


@dataclass
class JobRecord:
    key: str
    uid: str
    priority_class: str
    gpus: int
    submitted_ms: int
    placed_ms: int | None = None  # first placement
    cluster: str | None = None  # current (last) placement
    attempt: int | None = None
    finished_ms: int | None = None
    succeeded: bool | None = None
    deleted_ms: int | None = None
    copies: set[tuple[str, int]] = field(default_factory=set)
    placements: int = 0
    evictions: int = 0
    requeues: int = 0
    unschedulable: int = 0
    placed_on: list[str] = field(default_factory=list)

    @property
    def wait_ms(self) -> int | None:
        return None if self.placed_ms is None else self.placed_ms - self.submitted_ms


@dataclass
class ClusterTally:
    """Per cluster: what landed there and what happened to it."""

    placed: int = 0
    finished: int = 0
    preempted: int = 0  # our Evicts of a running copy there for a preemptor
    lost: int = 0  # times the cluster was declared Lost
    requeued_by_loss: int = 0  # jobs requeued because this cluster was lost
    replaced_after_loss: int = 0  # of those, placed again (elsewhere or here after recovery)
    # Of those, reported finished on this cluster once it answered again: the copy had run to the
    # end while the cluster was unreachable, so the job is done and is not run twice.
    finished_while_lost: int = 0


@dataclass
class Recorder:
    gpu_resource: str
    jobs: dict[str, JobRecord] = field(default_factory=dict)  # by uid, in submission order
    # GPU in use by placed jobs: (time, amount) at every change, time ascending.
    gpu_steps: list[tuple[int, int]] = field(default_factory=list)
    preemptions: int = 0
    claims: int = 0
    claims_expired: int = 0
    clusters_lost: int = 0
    requeue_reasons: dict[str, int] = field(default_factory=dict)
    entries: int = 0
    decisions: int = 0
    first_ms: int | None = None
    last_ms: int = 0
    clusters: dict[str, ClusterTally] = field(default_factory=dict)
    _lost_from: dict[str, str] = field(default_factory=dict)  # uid -> cluster it was lost with
    _gpu_used: int = 0
    _running: dict[str, int] = field(default_factory=dict)  # uid -> gpus held

    def observe(self, entry: ev.LogEntry) -> None:
        self.entries += 1
        self.last_ms = entry.at_ms
        event = entry.event
        if entry.batch is not None:
            self.decisions += 1
        match event:
            case ev.JobSubmitted():
                self._submitted(event, entry.at_ms)
            case ev.Nominated(job=job, clusters=clusters, attempt=attempt):
                rec = self.jobs.get(job.uid)
                if rec is not None:
                    rec.copies.update((c, attempt) for c in clusters)
            case ev.Placed(job=job, cluster=cluster, attempt=attempt):
                self._placed(job.uid, cluster=cluster, attempt=attempt, at_ms=entry.at_ms)
            case ev.Finished(job=job, cluster=cluster, succeeded=ok):
                self._tally(cluster).finished += 1
                if self._lost_from.get(job.uid) == cluster:
                    del self._lost_from[job.uid]
                    self._tally(cluster).finished_while_lost += 1
                rec = self.jobs.get(job.uid)
                if rec is not None:
                    rec.finished_ms = entry.at_ms
                    rec.succeeded = ok
                self._stop(job.uid, entry.at_ms)
            case ev.Requeued(job=job, reason=reason, cluster=cluster):
                if reason == "WorkerLost" and cluster is not None:
                    self._tally(cluster).requeued_by_loss += 1
                    self._lost_from[job.uid] = cluster
                rec = self.jobs.get(job.uid)
                if rec is not None:
                    rec.requeues += 1
                self.requeue_reasons[reason] = self.requeue_reasons.get(reason, 0) + 1
                self._stop(job.uid, entry.at_ms)
            case ev.Evict(job=job, cluster=cluster, preemptor=preemptor, reason=reason):
                rec = self.jobs.get(job.uid)
                if rec is not None:
                    rec.evictions += 1
                if preemptor is not None or reason == "Preempted":
                    self.preemptions += 1
                    self._tally(cluster).preempted += 1
            case ev.Unschedulable(job=job):
                rec = self.jobs.get(job.uid)
                if rec is not None:
                    rec.unschedulable += 1
            case ev.JobDeleted(job=job):
                rec = self.jobs.get(job.uid)
                if rec is not None and rec.finished_ms is None:
                    rec.deleted_ms = entry.at_ms
                self._stop(job.uid, entry.at_ms)
            case ev.PreemptionClaimed():
                self.claims += 1
            case ev.ClaimExpired():
                self.claims_expired += 1
            case ev.ClusterLost(cluster=cluster):
                self.clusters_lost += 1
                self._tally(cluster).lost += 1
            case _:
                pass

    def is_running(self, uid: str) -> bool:
        """Whether the job holds a placement now (placed, not finished, requeued nor deleted)."""
        return uid in self._running

    def _submitted(self, event: ev.JobSubmitted, at_ms: int) -> None:
        if self.first_ms is None:
            self.first_ms = at_ms
        gpus = sum(ps.count * ps.requests.get(self.gpu_resource, 0) for ps in event.pod_sets)
        self.jobs[event.job.uid] = JobRecord(
            key=event.job.key,
            uid=event.job.uid,
            priority_class=event.priority_class or "default",
            gpus=gpus,
            submitted_ms=at_ms,
        )

    def _tally(self, cluster: str) -> ClusterTally:
        tally = self.clusters.get(cluster)
        if tally is None:
            tally = self.clusters[cluster] = ClusterTally()
        return tally

    def _placed(self, uid: str, *, cluster: str, attempt: int, at_ms: int) -> None:
        self._tally(cluster).placed += 1
        lost_from = self._lost_from.pop(uid, None)
        if lost_from is not None:
            self._tally(lost_from).replaced_after_loss += 1
        rec = self.jobs.get(uid)
        if rec is None:
            return
        rec.placements += 1
        rec.placed_on.append(cluster)
        if rec.placed_ms is None:
            rec.placed_ms = at_ms
        rec.cluster = cluster
        rec.attempt = attempt
        if uid not in self._running:
            self._running[uid] = rec.gpus
            self._set_gpu(at_ms, self._gpu_used + rec.gpus)

    def _stop(self, uid: str, at_ms: int) -> None:
        gpus = self._running.pop(uid, None)
        if gpus is not None:
            self._set_gpu(at_ms, self._gpu_used - gpus)

    def _set_gpu(self, at_ms: int, used: int) -> None:
        self._gpu_used = used
        if self.gpu_steps and self.gpu_steps[-1][0] == at_ms:
            self.gpu_steps[-1] = (at_ms, used)
        else:
            self.gpu_steps.append((at_ms, used))
