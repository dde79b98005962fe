"""Invariant checks over a log and a state, shared by property and scenario tests."""

from __future__ import annotations

from eventlog import codec
from eventlog import events as ev
from reconciler.core import State, decide, dump_state, fold, load_state, new_state, summary


def replay_verify(log: list[ev.LogEntry], *, policy_override: ev.PolicyLoaded | None = None) -> State:
    """Fold inputs; at each recorded decision batch, decide and compare byte for byte."""
    state = new_state(policy_override=policy_override)
    i = 0
    while i < len(log):
        entry = log[i]
        if entry.batch is not None and entry.batch[0] == 0:
            n = entry.batch[1]
            # A batch cut short by a leader crash has fewer entries than announced: compare the
            # part that was written.
            j = i + 1
            while j < i + n and j < len(log) and log[j].batch is not None and log[j].batch[0] == j - i:
                j += 1
            n = j - i
            recorded = [codec.encode(e.event) for e in log[i : i + n]]
            computed = [codec.encode(d) for d in decide(state)][:n]
            assert computed == recorded, f"replay differs at seq {entry.seq}:\n{computed}\n!=\n{recorded}"
            for e in log[i : i + n]:
                fold(state, e)
            i += n
            continue
        fold(state, entry)
        i += 1
    return state


def fold_all(log: list[ev.LogEntry]) -> State:
    state = new_state()
    for entry in log:
        fold(state, entry)
    return state


def fold_via_snapshot(log: list[ev.LogEntry], cut: int) -> State:
    state = new_state()
    for entry in log[:cut]:
        fold(state, entry)
    state = load_state(dump_state(state))
    for entry in log[cut:]:
        fold(state, entry)
    return state


def check_log_invariants(log: list[ev.LogEntry]) -> None:
    """No job placed on two clusters; every requeue has a reason; victims rank below preemptors."""
    active: dict[str, set[tuple[str, int]]] = {}
    priority: dict[str, int] = {}
    classes: dict[str, int] = {}
    for entry in log:
        e = entry.event
        if isinstance(e, ev.PolicyLoaded):
            classes = dict(e.priority_classes)
        elif isinstance(e, ev.JobSubmitted):
            priority[e.job.key] = classes.get(e.priority_class or "", e.priority)
        elif isinstance(e, ev.JobUpdated) and e.priority is not None:
            priority[e.job.key] = e.priority
        elif isinstance(e, ev.Placed):
            placed = active.setdefault(e.job.key, set())
            assert not placed, f"{e.job.key} placed on {e.cluster} while placed on {placed}"
            placed.add((e.cluster, e.attempt))
        elif isinstance(e, ev.Withdrawn | ev.CleanUp):
            active.get(e.job.key, set()).discard((e.cluster, e.attempt))
        elif isinstance(e, ev.Requeued | ev.Finished):
            active.pop(e.job.key, None)
            if isinstance(e, ev.Requeued):
                assert e.reason and e.message, f"requeue without a reason: {e}"
        elif isinstance(e, ev.PreemptionClaimed):
            for victim in e.victims:
                assert priority[victim.key] < priority[e.preemptor.key]


def check_state_invariants(state: State) -> None:
    """Assumed usage within capacity; each job in exactly one consistent phase."""
    s = summary(state)
    for name, c in s["clusters"].items():
        for resource, amount in c["assumed"].items():
            assert amount <= c["capacity"].get(resource, 0), f"{name}: assumed {resource} {amount} > capacity"
    for key, j in s["jobs"].items():
        job = state.jobs[key]
        counted = [c for c in job.copies if c.counted]
        assert j["phase"] in ("Queued", "Unschedulable", "Suspended", "Nominated", "Placed", "Finished", "Deleted")
        if j["phase"] == "Placed":
            assert j["cluster"] is not None
            assert [c.cluster for c in counted if c.attempt == job.attempt] == [j["cluster"]]
        if j["phase"] in ("Finished", "Deleted", "Queued", "Unschedulable", "Suspended"):
            assert not [c for c in counted if c.attempt == job.attempt], f"{key} {j['phase']} holds capacity"
        if j["phase"] == "Nominated":
            assert j["nominated"], key
