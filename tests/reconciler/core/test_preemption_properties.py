"""Hypothesis: crowded clusters, priorities, claims, evictions, expiries, losses."""

from __future__ import annotations

import os
from collections import Counter

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import events as ev
from reconciler.core import DEFAULT_PROFILE, dump_state, summary
from tests.reconciler.core.checks import (
    check_log_invariants,
    check_state_invariants,
    fold_via_snapshot,
    replay_verify,
)
from tests.reconciler.core.harness import Harness, cluster, job

POLICY = ev.PolicyLoaded(
    profiles=[msgspec.structs.replace(DEFAULT_PROFILE, round_timeout_ms=15_000)],
    worker_lost_timeout_ms=40_000,
    claim_ttl_ms=30_000,
    requeue_backoff_ms=5_000,
)


def check_claims(h: Harness) -> None:
    owners: Counter[str] = Counter()
    for claim in h.state.claims.values():
        owners.update(claim.victims)
        preemptor = h.state.jobs[claim.preemptor]
        for victim in claim.victims:
            assert h.state.jobs[victim].priority < preemptor.priority
    assert all(n == 1 for n in owners.values()), f"a victim in two claims: {owners}"


@settings(max_examples=int(os.environ.get("KD_EXAMPLES", "40")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_preemption_worlds(data: st.DataObject) -> None:
    h = Harness(policy=POLICY)
    h.inputs(*(cluster(f"c{i}", cpu=8_000) for i in range(3)))
    h.step()
    n = 0
    for _ in range(int(os.environ.get("KD_STEPS", "35"))):
        op = data.draw(st.sampled_from(["submit", "submit", "admit", "evicted", "time", "silence", "finish"]))
        if op == "submit":
            h.inputs(
                job(
                    f"j{n}",
                    cpu=data.draw(st.sampled_from([2_000, 4_000, 8_000])),
                    priority=data.draw(st.sampled_from([0, 1, 5, 9])),
                )
            )
            n += 1
        elif op == "admit":
            nominated = sorted(j.key for j in h.state.jobs.values() if j.phase == "Nominated")
            if not nominated:
                continue
            j = h.state.jobs[data.draw(st.sampled_from(nominated))]
            h.inputs(ev.RemoteAdmitted(job=j.ref, cluster=data.draw(st.sampled_from(j.nominated)), attempt=j.attempt))
        elif op == "evicted":  # workers carry out Evicts (or not: claims then expire)
            evicting = sorted(j.key for j in h.state.jobs.values() if j.evicting_for and j.cluster)
            if not evicting:
                continue
            j = h.state.jobs[data.draw(st.sampled_from(evicting))]
            h.inputs(ev.RemoteEvicted(job=j.ref, cluster=j.cluster or "", attempt=j.attempt))
        elif op == "finish":
            placed = sorted(j.key for j in h.state.jobs.values() if j.phase == "Placed")
            if not placed:
                continue
            j = h.state.jobs[data.draw(st.sampled_from(placed))]
            h.inputs(ev.RemoteFinished(job=j.ref, cluster=j.cluster or "", attempt=j.attempt))
        elif op == "time":
            h.advance(data.draw(st.sampled_from([2_000, 16_000, 31_000])))
            check_claims(h)
            continue
        elif op == "silence":
            name = data.draw(st.sampled_from(["c0", "c1", "c2"]))
            h.silent.symmetric_difference_update({name})
            continue
        h.step()
        check_claims(h)
    check_log_invariants(h.log)
    check_state_invariants(h.state)
    # One claim (one cluster) per job at a time: a new claim only after the last one ended.
    live: dict[str, int] = {}
    for e in h.log:
        if isinstance(e.event, ev.PreemptionClaimed):
            assert e.event.preemptor.key not in live
            live[e.event.preemptor.key] = e.seq
        elif isinstance(e.event, ev.ClaimExpired):
            live.pop(e.event.preemptor.key, None)
        elif isinstance(e.event, ev.Nominated):
            live.pop(e.event.job.key, None)
    replayed = replay_verify(h.log)
    assert dump_state(replayed) == dump_state(h.state)
    cut = data.draw(st.integers(0, len(h.log)))
    assert summary(fold_via_snapshot(h.log, cut)) == summary(h.state)
