"""``estimate_starts``: when each pending job would start if nothing new arrived.

The state is copied (``core.dump_state``/``load_state``; the live one is never touched) and run
forward in virtual time the way ``kdispatch simulate`` runs a trace: one batch of facts, fold,
``decide``, fold, the decisions applied to one ``SimWorker`` per Ready cluster. The workers start
with the jobs running now, each ending at its expected end (``Durations``: its own expectation,
else its queue's median run time; one already past it ends at once), and the copies waiting for
admission now. A target job's estimate is the time and cluster of its ``Placed``.

What the model leaves out, on purpose: jobs submitted later (an estimate is "if nothing new
came"), other tenants' usage on a worker (a worker's quota is its registered capacity), and
clusters going silent (a Lost cluster stays Lost, a Ready one stays Ready).

Cost is capped: only the first ``limit`` waiting jobs in dispatch order take part (the ones behind
them are removed from the copy: they cannot delay the ones ahead, but for backfill), the run stops
when every target has started, after ``horizon_ms`` of virtual time, or after ``max_steps``
batches. A target not started by then has no estimate.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from eventlog import events as ev
from reconciler import core
from reconciler.core import phases
from reconciler.core.clusters import READY
from reconciler.core.jobs import JobRecord
from reconciler.forecast.durations import Durations
from reconciler.simworker import SimWorker

DEFAULT_LIMIT = 100
DEFAULT_HORIZON_MS = 7 * 24 * 3600 * 1000
MAX_STEPS = 20_000
# Silence is not modelled: no cluster of the copy is ever found lost (nor must it be heartbeaten
# every timeout just to stay Ready, which would be a batch a minute across a week's horizon).
_NEVER_LOST_MS = 100 * 365 * 24 * 3600 * 1000
_LIVE_COPY = (phases.COPY_NOMINATED, phases.COPY_CREATED, phases.COPY_ADMITTED)


@dataclass(frozen=True, slots=True)
class Estimate:
    start_ms: int
    cluster: str


@dataclass(frozen=True)
class Forecast:
    """One forecast: the estimates made from the state at log time ``at_ms``."""

    at_ms: int
    estimates: Mapping[str, Estimate] = field(default_factory=dict)

    def get(self, key: str) -> Estimate | None:
        return self.estimates.get(key)

    def line(self, key: str) -> str:
        """ "expected to start in ~12 min on west-h100", counted from when it was made (so the
        words change only with the forecast); "" without an estimate."""
        return expected_line(self.estimates.get(key), now_ms=self.at_ms)


def dispatch_order(state: core.State, job: JobRecord) -> tuple[int, int, int, str]:
    """``reconciler.core.dispatch.order_key``: priority, claim holders first, then submission."""
    return (-job.priority, 0 if job.key in state.claims else 1, job.submitted_seq, job.key)


def pending_jobs(state: core.State) -> list[JobRecord]:
    """Jobs that have not started: waiting to be dispatched or nominated, in dispatch order."""
    jobs = [
        j
        for j in state.jobs.values()
        if not j.suspended and (j.phase in phases.WAITING or j.phase == phases.NOMINATED)
    ]
    return sorted(jobs, key=lambda j: dispatch_order(state, j))


def estimate_starts(
    state: core.State,
    *,
    now_ms: int,
    durations: Durations,
    limit: int = DEFAULT_LIMIT,
    only: Collection[str] | None = None,
    horizon_ms: int = DEFAULT_HORIZON_MS,
    max_steps: int = MAX_STEPS,
    own: bool = False,
) -> dict[str, Estimate]:
    """Job key -> when and where it would start. ``only``: estimate just these keys (the others
    among the first ``limit`` still take part). Same state and arguments, same answer.
    ``own``: ``state`` is a copy nobody else reads (e.g. just restored from a snapshot): it is run
    forward itself, and left changed, instead of being copied first (at fleet size a copy is
    about a kB per job)."""
    pending = pending_jobs(state)
    waiting = [j for j in pending if j.phase != phases.NOMINATED]
    dropped = {j.key for j in waiting[limit:]}
    targets = {j.key for j in pending if j.key not in dropped and (only is None or j.key in only)}
    if not targets:
        return {}
    return _Forecast(state, now_ms=max(now_ms, state.now_ms), durations=durations, own=own).run(
        targets, dropped=sorted(dropped), horizon_ms=horizon_ms, max_steps=max_steps
    )


class _Forecast:
    def __init__(self, live: core.State, *, now_ms: int, durations: Durations, own: bool = False) -> None:
        self.state = live if own else core.load_state(core.dump_state(live), plugins=live.plugins)
        self.now_ms = now_ms
        self.seq = self.state.seq
        self.durations = durations
        table = self.state.clusters
        for record in table.records:
            record.lost_timeout_ms = _NEVER_LOST_MS
        table.touch()
        self.workers = {
            r.name: SimWorker(
                r.name,
                r.capacity,
                admission_latency_ms=durations.admission_latency_ms.get(r.name, 0),
                default_runtime_ms=durations.default_ms,
            )
            for r in sorted(table.records, key=lambda r: r.name)
            if r.health == READY
        }
        self.started: dict[str, Estimate] = {}
        self.targets: set[str] = set()

    def run(
        self, targets: set[str], *, dropped: list[str], horizon_ms: int, max_steps: int
    ) -> dict[str, Estimate]:
        self.targets = targets
        self._seed()
        first: list[ev.InputEvent] = [ev.JobDeleted(job=self.state.jobs[k].ref) for k in dropped]
        first += [w.heartbeat(self.now_ms) for w in self.workers.values()]
        self._step(first)
        end = self.now_ms + horizon_ms
        for _ in range(max_steps):
            if self.targets <= self.started.keys():
                break
            times = [t for t in (w.next_event_ms() for w in self.workers.values()) if t is not None]
            deadline = core.next_deadline(self.state)
            if deadline is not None:
                times.append(deadline)
            if not times or min(times) > end:
                break
            self.now_ms = max(min(times), self.now_ms)
            inputs: list[ev.InputEvent] = []
            changed: list[str] = []
            for name, worker in self.workers.items():  # sorted by name: a fixed order
                facts = worker.advance_timed(self.now_ms)
                if facts:
                    inputs += [fact for _, fact in facts]
                    changed.append(name)
            inputs += [self.workers[name].heartbeat(self.now_ms) for name in changed]
            if deadline is not None and deadline <= self.now_ms:
                inputs.append(ev.Tick())
            if inputs:
                self._step(inputs)
        return {k: self.started[k] for k in sorted(self.started) if k in self.targets}

    def _seed(self) -> None:
        """The workers as the state sees them now: running copies hold quota until their expected
        end; copies asked for and not yet admitted wait for admission from now on."""
        for key in sorted(self.state.jobs):
            job = self.state.jobs[key]
            runtime = self.durations.runtime_ms(key)
            if job.phase == phases.PLACED and job.cluster in self.workers:
                started = job.placed_at_ms if job.placed_at_ms is not None else self.now_ms
                left = max(started + runtime - self.now_ms, 0)
                worker = self.workers[job.cluster]
                worker.adopt(job.ref, job.attempt, job.pod_sets, job.priority, left, self.now_ms)
            elif job.phase == phases.NOMINATED:
                for copy in job.copies:
                    if (
                        copy.attempt == job.attempt
                        and copy.state in _LIVE_COPY
                        and copy.cluster in self.workers
                    ):
                        worker = self.workers[copy.cluster]
                        worker.create(job.ref, copy.attempt, job.pod_sets, job.priority, runtime, self.now_ms)

    def _step(self, inputs: list[ev.InputEvent]) -> None:
        self._append(inputs, decisions=False)
        decided = core.decide(self.state)
        self._append(decided, decisions=True)
        for decision in decided:
            self._actuate(decision)

    def _append(self, events: list[ev.InputEvent] | list[ev.DecisionEvent], *, decisions: bool) -> None:
        for i, event in enumerate(events):
            self.seq += 1
            entry = ev.LogEntry(
                seq=self.seq,
                at_ms=self.now_ms,
                event=event,
                batch=(i, len(events)) if decisions else None,
                leader="forecast",
            )
            self.state = core.fold(self.state, entry)
            if isinstance(event, ev.Placed):
                key = f"{event.job.namespace}/{event.job.name}"
                self.started.setdefault(key, Estimate(start_ms=self.now_ms, cluster=event.cluster))

    def _actuate(self, decision: ev.DecisionEvent) -> None:
        now = self.now_ms
        match decision:
            case ev.Nominated(job=ref, clusters=clusters, attempt=attempt):
                key = f"{ref.namespace}/{ref.name}"
                job = self.state.jobs.get(key)
                if job is None:
                    return
                for name in clusters:
                    if name in self.workers:
                        runtime = self.durations.runtime_ms(key)
                        self.workers[name].create(ref, attempt, job.pod_sets, job.priority, runtime, now)
            case (
                ev.Withdrawn(job=ref, cluster=name, attempt=attempt)
                | ev.CleanUp(job=ref, cluster=name, attempt=attempt)
            ) if name in self.workers:
                self.workers[name].delete(ref.uid, attempt, now)
            case ev.Evict(job=ref, cluster=name, attempt=attempt, reason=reason) if name in self.workers:
                self.workers[name].evict(ref.uid, attempt, now, reason=reason)
            case _:
                pass


def expected_line(estimate: Estimate | None, *, now_ms: int) -> str:
    """ "expected to start in ~12 min on west-h100", for a person ("" without an estimate)."""
    if estimate is None:
        return ""
    return f"expected to start in {approx(estimate.start_ms - now_ms)} on {estimate.cluster}"


def expected_cell(estimate: Estimate | None, *, now_ms: int) -> str:
    """The same for a table cell: "~12 min on west-h100", "-" without an estimate."""
    if estimate is None:
        return "-"
    return f"{approx(estimate.start_ms - now_ms)} on {estimate.cluster}"


def approx(delta_ms: int) -> str:
    """A wait as a person says it: "<1 min", "~12 min", "~2.5 h", "~3 d"."""
    s = max(delta_ms, 0) // 1000
    if s < 60:
        return "<1 min"
    if s < 3600:
        return f"~{round(s / 60)} min"
    if s < 48 * 3600:
        return f"~{s / 3600:.1f} h".replace(".0 h", " h")
    return f"~{round(s / 86400)} d"
