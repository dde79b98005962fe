"""A tiny leader for tests: fold inputs, decide, append the decisions as one batch, fold them.

Every ``step`` also checks the fixpoint (deciding again right after folding returns nothing), so
every scenario test checks it for free.
"""

from __future__ import annotations

from collections.abc import Iterable

from eventlog import codec
from eventlog import events as ev
from reconciler.core import BUILTINS, Registry, State, decide, fold, new_state
from reconciler.core.decide import decide_pass, quiet


class Harness:
    def __init__(
        self,
        *,
        policy: ev.PolicyLoaded | None = None,
        override: ev.PolicyLoaded | None = None,
        plugins: Registry = BUILTINS,
    ) -> None:
        self.state: State = new_state(policy_override=override, plugins=plugins)
        self.log: list[ev.LogEntry] = []
        self.now = 1_000_000
        self.inbox_seq = 0
        self.silent: set[str] = set()  # clusters that stop heartbeating in ``advance``
        if policy is not None:
            self.inputs(policy)

    def _append(self, event: ev.AnyEvent, *, batch: tuple[int, int] | None = None) -> ev.LogEntry:
        inbox = None
        if batch is None and not isinstance(event, ev.Tick):
            self.inbox_seq += 1
            inbox = self.inbox_seq
        entry = ev.LogEntry(seq=len(self.log) + 1, at_ms=self.now, event=event, inbox_seq=inbox, batch=batch)
        # Round-trip through the codec, as the real log does.
        entry = codec.decode_entry(codec.encode(entry))
        self.log.append(entry)
        fold(self.state, entry)
        return entry

    def inputs(self, *events: ev.InputEvent, at_ms: int | None = None) -> None:
        if at_ms is not None:
            self.now = at_ms
        for e in events:
            self._append(e)

    def step(self, *, check_fixpoint: bool = True) -> list[ev.DecisionEvent]:
        # decide's shortcut (a pass known to decide nothing is not run) must agree with the pass.
        if quiet(self.state):
            assert decide_pass(self.state)[0].out == [], "quiet() skipped a pass that decides"
        decisions = decide(self.state)
        for i, d in enumerate(decisions):
            self._append(d, batch=(i, len(decisions)))
        if check_fixpoint:
            again = decide(self.state)
            assert again == [], f"not a fixpoint: {again}"
        return decisions

    def feed(self, *events: ev.InputEvent, at_ms: int | None = None) -> list[ev.DecisionEvent]:
        self.inputs(*events, at_ms=at_ms)
        return self.step()

    def tick(self, at_ms: int) -> list[ev.DecisionEvent]:
        self.now = at_ms
        self._append(ev.Tick())
        return self.step()

    def advance(self, ms: int, *, beat: bool = True) -> list[ev.DecisionEvent]:
        """Let time pass; every cluster not in ``silent`` heartbeats (same usage) first."""
        self.now += ms
        if beat:
            for record in sorted(self.state.clusters.records, key=lambda r: r.name):
                if record.name not in self.silent and record.health != "Removed":
                    self._append(ev.ClusterHeartbeat(cluster=record.name, usage=dict(record.reported)))
        self._append(ev.Tick())
        return self.step()


def ref(name: str, namespace: str = "team") -> ev.JobRef:
    return ev.JobRef(namespace=namespace, name=name, uid=f"uid-{namespace}-{name}")


def cluster(
    name: str,
    *,
    cpu: int = 64_000,
    gpu: int = 0,
    memory: int = 256 << 30,
    labels: dict[str, str] | None = None,
    taints: Iterable[ev.Taint] = (),
    lost_timeout_ms: int | None = None,
) -> ev.ClusterRegistered:
    capacity = {"cpu": cpu, "memory": memory}
    if gpu:
        capacity["nvidia.com/gpu"] = gpu
    return ev.ClusterRegistered(
        cluster=name, labels=labels or {}, taints=list(taints), capacity=capacity, worker_lost_timeout_ms=lost_timeout_ms
    )


def job(
    name: str,
    *,
    cpu: int = 1000,
    gpu: int = 0,
    count: int = 1,
    priority: int = 0,
    priority_class: str | None = None,
    placement: ev.Placement | None = None,
    suspended: bool = False,
) -> ev.JobSubmitted:
    requests = {"cpu": cpu}
    if gpu:
        requests["nvidia.com/gpu"] = gpu
    return ev.JobSubmitted(
        job=ref(name),
        pod_sets=[ev.PodSet(name="main", count=count, requests=requests)],
        priority=priority,
        priority_class=priority_class,
        placement=placement or ev.Placement(),
        suspended=suspended,
    )


def of_type(decisions: list[ev.DecisionEvent], kind: type) -> list:
    return [d for d in decisions if isinstance(d, kind)]
