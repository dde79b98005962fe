"""next_deadline: the sequencer ticks exactly when the core has something to do, never in a loop."""

from __future__ import annotations

from eventlog import events as ev
from reconciler.core import next_deadline
from tests.reconciler.core.harness import Harness, cluster, job, of_type, ref


def drive_by_deadlines(h: Harness, *, until_ms: int) -> list[tuple[int, list[str]]]:
    """Tick only at next_deadline (no heartbeats), like the sequencer on a quiet system."""
    fired = []
    while (at := next_deadline(h.state)) is not None and at <= until_ms:
        assert at > h.state.now_ms or not fired, "a deadline in the past: would busy-loop"
        decisions = h.tick(at)
        fired.append((at, [type(d).__name__ for d in decisions]))
    return fired


def test_deadlines_are_round_timeouts_backoffs_and_worker_loss() -> None:
    h = Harness()
    start = h.now
    h.inputs(cluster("a", lost_timeout_ms=500_000), cluster("b", cpu=8_000, lost_timeout_ms=500_000))
    [n] = h.feed(job("j"))
    assert next_deadline(h.state) == n.deadline_ms == start + 60_000
    fired = drive_by_deadlines(h, until_ms=start + 200_000)
    # round timeout on a -> next round on b -> timeout -> requeue with back-off -> a again
    assert [f[0] - start for f in fired] == [60_000, 120_000, 130_000, 190_000]
    assert fired[0][1] == ["Withdrawn", "Nominated"]
    assert fired[1][1] == ["Withdrawn", "Requeued"]
    assert fired[2][1] == ["Nominated"]
    # Once placed, the old round deadline may still wake the sequencer once (timers are not
    # cancelled, so that next_deadline never changes state) but it decides nothing; then nothing
    # is due before the clusters' worker-lost timeout.
    nominated = h.state.jobs["team/j"].nominated
    assert fired[3][1] == ["Withdrawn", "Nominated"] and nominated == ("b",)
    assert h.feed(ev.RemoteAdmitted(job=ref("j"), cluster="b", attempt=2))[0] == ev.Placed(
        job=ref("j"), cluster="b", attempt=2
    )
    fired = drive_by_deadlines(h, until_ms=start + 400_000)
    assert fired == [(start + 250_000, [])]
    assert next_deadline(h.state) == start + 500_000


def test_claim_expiry_is_a_deadline() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=4_000, lost_timeout_ms=10**9))
    h.feed(job("low", cpu=4_000))
    h.feed(ev.RemoteAdmitted(job=ref("low"), cluster="a", attempt=1))
    [claim] = of_type(h.feed(job("hi", cpu=4_000, priority=9)), ev.PreemptionClaimed)
    fired = drive_by_deadlines(h, until_ms=claim.expires_ms)
    # The stubborn victim is still "being evicted": it cannot be claimed again, so the job waits.
    assert fired[-1] == (claim.expires_ms, ["ClaimExpired", "Unschedulable"])
