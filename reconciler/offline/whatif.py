"""``replay --profile FILE``: what would another policy have done with the same world?

The *outside* inputs of the log are replayed at their recorded times: submissions, updates and
deletions of jobs, cluster registrations and removals, heartbeats (their timing and
reachability — so worker losses happen when they happened), and silences (a cluster that went
Lost is silent from its last heartbeat until it came back). Everything that depended on our own
decisions is simulated instead, by one ``SimWorker`` per cluster (``reconciler.simworker``):

- a job runs for the time it was observed running (admitted -> finished in the log); a job
  never seen finishing runs for its ``runtime_ms`` hint, or past the end of the log;
- a cluster admits after the median latency observed on it from nomination to admission (the
  actuator's creation and the worker's queueing together);
- reported usage is the simulated worker's (our jobs as this policy placed them);
- a request to a silent cluster is held and applied when the silence ends (its latest intent
  per copy), as the live actuator retries until it sticks: a copy nominated into a silence is
  created afterwards, not lost for good.

A comparison runs this twice, the recorded policy and the other one on the same model, so the
policy's effect is told apart from the model's error (``reconciler.offline.report``).

The queue configuration (``QueuesConfigured``) is followed as recorded, at its times; with
``replay --queues FILE`` the run starts with that one instead and the log's are left out.

The leader's pattern is kept: one input batch per virtual instant, fold, ``decide``, one
decision batch, fold, then the decisions are applied to the simulated workers. No NATS, no clock.
Simplifications (documented in docs/cli.md): a ``ClusterUpdated`` changes labels and taints but
the simulated quota stays the registered one; other tenants' usage is not modelled.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise

import msgspec

from eventlog import codec
from eventlog import events as ev
from eventlog.store import LogReader
from reconciler import core
from reconciler.edge.logsource import format_ms
from reconciler.edge.plugins import PluginSet, installed
from reconciler.offline.outcomes import Outcomes
from reconciler.simworker import SimWorker

# A run that takes this many steps without time moving is stuck (a model bug), not busy.
MAX_STEPS_AT_ONE_TIME = 10_000

# Jobs never seen finishing run until well past any log's end.
FOREVER_MS = 10 * 365 * 24 * 3600 * 1000

OUTSIDE = (
    ev.JobSubmitted,
    ev.JobObserved,
    ev.JobUpdated,
    ev.JobDeleted,
    ev.ClusterRegistered,
    ev.ClusterUpdated,
    ev.ClusterRemoved,
    ev.ClusterHeartbeat,
)


# ---------------------------------------------------------------------------------------------
# What the log observed, to drive the simulated workers
# ---------------------------------------------------------------------------------------------


@dataclass
class Observed:
    inputs: list[ev.LogEntry] = field(default_factory=list)  # outside inputs, in log order
    runtime_ms: dict[str, int] = field(default_factory=dict)  # job uid -> admitted..finished
    latency_ms: dict[str, list[int]] = field(default_factory=dict)  # cluster -> nominated..admitted
    silences: list[tuple[int, str, int | None]] = field(default_factory=list)  # (start, cluster, end)
    end_ms: int = 0
    recorded: Outcomes = field(default_factory=Outcomes)
    policies: list[ev.LogEntry] = field(default_factory=list)  # PolicyLoaded, in log order
    queues: list[ev.LogEntry] = field(default_factory=list)  # QueuesConfigured, in log order

    @property
    def policy(self) -> ev.PolicyLoaded | None:
        """The recorded policy in force at the end (``None``: the log records none)."""
        last = self.policies[-1].event if self.policies else None
        return last if isinstance(last, ev.PolicyLoaded) else None

    def policy_changes(self) -> int:
        """How many times the recorded policy changed (plugin provenance aside: the core ignores it)."""
        kinds = [_decisive(e.event) for e in self.policies if isinstance(e.event, ev.PolicyLoaded)]
        return sum(1 for a, b in pairwise(kinds) if a != b)


def _decisive(policy: ev.PolicyLoaded) -> bytes:
    return codec.encode(msgspec.structs.replace(policy, plugins=None))


async def observe(reader: LogReader, *, until_seq: int | None, until_ms: int | None) -> Observed:
    seen = Observed()
    nominated: dict[tuple[str, str, int], int] = {}
    admitted: dict[tuple[str, int], int] = {}
    lost: dict[str, int] = {}
    async for chunk in reader.read(until_seq=until_seq, until_ms=until_ms):
        for entry in chunk:
            e = entry.event
            seen.end_ms = max(seen.end_ms, entry.at_ms)
            seen.recorded.observe(entry)
            if isinstance(e, OUTSIDE):
                seen.inputs.append(entry)
            elif isinstance(e, ev.PolicyLoaded):
                seen.policies.append(entry)
            elif isinstance(e, ev.QueuesConfigured):
                seen.queues.append(entry)
            match e:
                case ev.Nominated(job=ref, clusters=clusters, attempt=a):
                    for c in clusters:
                        nominated.setdefault((ref.uid, c, a), entry.at_ms)
                case ev.RemoteAdmitted(job=ref, cluster=c, attempt=a):
                    admitted[(ref.uid, a)] = entry.at_ms
                    if (ref.uid, c, a) in nominated:
                        seen.latency_ms.setdefault(c, []).append(entry.at_ms - nominated[(ref.uid, c, a)])
                case ev.RemoteFinished(job=ref, attempt=a) if (ref.uid, a) in admitted:
                    seen.runtime_ms[ref.uid] = entry.at_ms - admitted[(ref.uid, a)]
                case ev.ClusterLost(cluster=c, last_seen_ms=last):
                    lost[c] = last or entry.at_ms
                case ev.ClusterHeartbeat(cluster=c, reachable=True) if c in lost:
                    seen.silences.append((lost.pop(c), c, entry.at_ms))
                case _:
                    pass
    seen.silences += [(start, c, None) for c, start in sorted(lost.items())]
    seen.silences.sort(key=lambda s: (s[0], s[1]))
    return seen


# ---------------------------------------------------------------------------------------------
# The virtual-time run
# ---------------------------------------------------------------------------------------------


def baseline_policy(seen: Observed) -> ev.PolicyLoaded | None:
    """The policy of the baseline run: the recorded one, as an override exactly as a ``--profile``
    is applied (so a profile equal to it yields the same run, bit for bit); ``None`` when the log
    changed policy on the way, so the baseline must follow the recorded changes at their times."""
    return seen.policy if seen.policy_changes() == 0 else None


class WhatIf:
    """One virtual-time run under ``policy``; ``None``: the log's own policies, as they changed."""

    def __init__(
        self,
        seen: Observed,
        policy: ev.PolicyLoaded | None,
        *,
        plugins: PluginSet | None = None,
        queues: ev.QueuesConfigured | None = None,
    ) -> None:
        """``queues``: the queue configuration to run under from the start, in place of the log's
        (``None``: the log's, as they changed)."""
        self.seen = seen
        self.queues = queues
        registry = (plugins if plugins is not None else installed()).registry
        self.state = core.new_state(policy_override=policy, plugins=registry)
        self._follow_policies = policy is None
        self.workers: dict[str, SimWorker] = {}
        self.jobs: dict[str, ev.JobSubmitted] = {}
        self.outcomes = Outcomes()
        self.log: list[ev.LogEntry] = []  # every entry the run made, as a leader would have logged it
        self.seq = 0
        self.now_ms = 0
        self._last_tick_deadline: int | None = None
        # Requests a silent worker did not take, per cluster: the latest per copy, in order.
        self._held: dict[str, dict[tuple[str, int], Callable[[int], bool]]] = {}

    def _append(self, events: Iterable[ev.AnyEvent], *, decisions: bool) -> list[ev.LogEntry]:
        events = list(events)
        out: list[ev.LogEntry] = []
        for i, event in enumerate(events):
            self.seq += 1
            entry = ev.LogEntry(
                seq=self.seq,
                at_ms=self.now_ms,
                event=event,
                batch=(i, len(events)) if decisions else None,
                leader="whatif",
            )
            self.state = core.fold(self.state, entry)
            self.outcomes.observe(entry)
            self.log.append(entry)
            out.append(entry)
        return out

    def _worker_for(self, event: ev.ClusterRegistered) -> SimWorker:
        latencies = self.seen.latency_ms.get(event.cluster, [])
        return SimWorker(
            event.cluster,
            event.capacity,
            admission_latency_ms=int(statistics.median(latencies)) if latencies else 0,
            default_runtime_ms=FOREVER_MS,
        )

    def _outside(self, entry: ev.LogEntry) -> ev.InputEvent | ev.PolicyLoaded | None:
        e = entry.event
        match e:
            case ev.QueuesConfigured():
                return e
            case ev.ClusterRegistered():
                self.workers.setdefault(e.cluster, self._worker_for(e))
            case ev.JobSubmitted():
                self.jobs[e.job.uid] = e
            case ev.JobUpdated(job=ref) if ref.uid in self.jobs:
                self.jobs[ref.uid] = ev.JobSubmitted(
                    job=ref,
                    pod_sets=e.pod_sets,
                    priority=e.priority if e.priority is not None else self.jobs[ref.uid].priority,
                    placement=self.jobs[ref.uid].placement,
                    runtime_ms=self.jobs[ref.uid].runtime_ms,
                )
            case ev.PolicyLoaded():
                return e
            case ev.ClusterHeartbeat(cluster=c, reachable=True) if c in self.workers:
                # Timing and reachability as recorded; usage as this policy's placements make it.
                hb = self.workers[c].heartbeat(entry.at_ms)
                return hb if hb.reachable else None
            case _:
                pass
        assert isinstance(e, OUTSIDE)
        return e

    def _runtime(self, uid: str) -> int:
        observed = self.seen.runtime_ms.get(uid)
        if observed is not None:
            return observed
        hint = self.jobs[uid].runtime_ms if uid in self.jobs else None
        return hint if hint is not None else FOREVER_MS

    def _actuate(self, decision: ev.DecisionEvent) -> None:
        match decision:
            case ev.Nominated(job=ref, clusters=clusters, attempt=attempt):
                job = self.jobs.get(ref.uid)
                if job is None:
                    return
                runtime = self._runtime(ref.uid)
                for name in clusters:
                    if name in self.workers:
                        create = partial(self.workers[name].create, ref, attempt, job.pod_sets, job.priority, runtime)
                        self._request(name, (ref.uid, attempt), create)
            case ev.Withdrawn(job=ref, cluster=name, attempt=attempt) | ev.CleanUp(
                job=ref, cluster=name, attempt=attempt
            ) if name in self.workers:
                self._request(name, (ref.uid, attempt), partial(self.workers[name].delete, ref.uid, attempt))
            case ev.Evict(job=ref, cluster=name, attempt=attempt, reason=reason) if name in self.workers:
                evict = partial(self.workers[name].evict, ref.uid, attempt, reason=reason)
                self._request(name, (ref.uid, attempt), evict)
            case _:
                pass

    def _request(self, cluster: str, key: tuple[str, int], request: Callable[[int], bool]) -> None:
        held = self._held.get(cluster)
        if held and key in held:
            del held[key]  # superseded: only the latest intent about a copy stands
        if not request(self.now_ms):
            self._held.setdefault(cluster, {})[key] = request

    def _retry_held(self, t: int) -> None:
        for cluster in sorted(self._held):
            if self.workers[cluster].is_silent(t):
                continue
            held = self._held.pop(cluster)
            for key, request in held.items():
                if not request(t):
                    self._held.setdefault(cluster, {})[key] = request

    def _step(self, inputs: list[ev.InputEvent | ev.PolicyLoaded]) -> None:
        self._append(inputs, decisions=False)
        decided = core.decide(self.state)
        self._append(decided, decisions=True)
        for decision in decided:
            self._actuate(decision)

    def run(self) -> None:
        pending = list(self.seen.inputs)
        if self._follow_policies:
            pending = sorted(pending + self.seen.policies, key=lambda entry: entry.seq)
        if self.queues is None:
            pending = sorted(pending + self.seen.queues, key=lambda entry: entry.seq)
        initial: list[ev.InputEvent | ev.PolicyLoaded] = [self.queues] if self.queues is not None else []
        silences = list(self.seen.silences)
        i = 0
        end = self.seen.end_ms
        same_time = 0
        while True:
            deadline = core.next_deadline(self.state)
            if deadline is not None and self._last_tick_deadline is not None and deadline <= self._last_tick_deadline:
                deadline = None  # already ticked past it; the core will move it on its next input
            times = [pending[i].at_ms] if i < len(pending) else []
            times += [s[0] for s in silences[:1]]
            times += [t for t in (w.next_event_ms() for w in self.workers.values()) if t is not None]
            if deadline is not None:
                times.append(deadline)
            if not times:
                return
            t = max(min(times), self.now_ms)
            if t > end:
                return
            same_time = same_time + 1 if t == self.now_ms else 0
            if same_time > MAX_STEPS_AT_ONE_TIME:
                raise RuntimeError(f"what-if run stuck: {same_time} steps at {format_ms(t)} without time moving")
            self.now_ms = t
            while silences and silences[0][0] <= t:
                start, cluster, until = silences.pop(0)
                if cluster in self.workers:
                    self.workers[cluster].silence(until, now_ms=start)
            inputs, initial = initial, []  # the --queues configuration comes before anything else
            while i < len(pending) and pending[i].at_ms <= t:
                event = self._outside(pending[i])
                if event is not None:
                    inputs.append(event)
                i += 1
            self._retry_held(t)
            for name in sorted(self.workers):
                inputs.extend(self.workers[name].advance(t))
            if deadline is not None and deadline <= t:
                inputs.append(ev.Tick())
                self._last_tick_deadline = deadline
            if inputs:
                self._step(inputs)
