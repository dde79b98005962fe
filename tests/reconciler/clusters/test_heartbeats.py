"""Which heartbeats are published: changes at once, otherwise one keepalive per period, with
message ids that two replicas observing the same cluster share."""

from __future__ import annotations

import itertools

from eventlog.events import ClusterHeartbeat
from reconciler.service.clusters.heartbeats import HeartbeatGate, keepalive_ms

IDLE = ClusterHeartbeat(cluster="east", usage={"cpu": 1000})
BUSY = ClusterHeartbeat(cluster="east", usage={"cpu": 9000})
DOWN = ClusterHeartbeat(cluster="east", reachable=False)


def test_keepalive_is_a_quarter_of_the_lost_timeout_in_whole_intervals() -> None:
    assert keepalive_ms(interval_ms=5_000, lost_timeout_ms=60_000) == 15_000
    assert keepalive_ms(interval_ms=5_000, lost_timeout_ms=70_000) == 15_000  # 17.5 s rounded down
    assert keepalive_ms(interval_ms=5_000, lost_timeout_ms=10_000) == 5_000  # never below one interval
    assert keepalive_ms(interval_ms=5_000, lost_timeout_ms=None) == 5_000


def checks(gate: HeartbeatGate, *, start_ms: int, until_ms: int) -> list[int]:
    out, now = [], start_ms
    while now < until_ms:
        out.append(now)
        now = gate.next_check_ms(now)
    return out


def test_an_unchanged_cluster_is_kept_alive_once_per_period_never_later() -> None:
    gate = HeartbeatGate("east", interval_ms=5_000, keepalive_ms=15_000)
    published = [t for t in checks(gate, start_ms=1_000, until_ms=600_000) if gate.observe(IDLE, t)]
    gaps = [b - a for a, b in itertools.pairwise(published)]
    assert len(published) == 40  # one per 15 s over 10 min (instead of 120 checks)
    # At most the period plus half an interval (the first check is off the grid): far inside the
    # 60 s worker-lost timeout, which three keepalives in a row would have to miss.
    assert max(gaps) <= 15_000 + 2_500


def test_changes_are_published_at_once_and_a_change_back_is_not_a_duplicate() -> None:
    gate = HeartbeatGate("east", interval_ms=5_000, keepalive_ms=15_000)
    first = gate.observe(IDLE, 2_500)
    assert first is not None
    assert gate.observe(IDLE, 7_500) is None  # nothing new within the keepalive period
    to_busy = gate.observe(BUSY, 12_500)
    back = gate.observe(IDLE, 12_600)  # same interval window, back to the first state
    assert to_busy is not None and back is not None and len({first, to_busy, back}) == 3
    assert gate.observe(DOWN, 13_000) is not None  # reachability changed


def test_two_replicas_checking_on_the_grid_send_the_same_ids() -> None:
    a = HeartbeatGate("east", interval_ms=5_000, keepalive_ms=15_000)
    b = HeartbeatGate("east", interval_ms=5_000, keepalive_ms=15_000)
    # Started at different moments, the replicas settle on the same grid points.
    ids_a = {gate_id for t in checks(a, start_ms=1_234, until_ms=300_000) if (gate_id := a.observe(IDLE, t))}
    ids_b = {gate_id for t in checks(b, start_ms=3_999, until_ms=300_000) if (gate_id := b.observe(IDLE, t + 40))}
    assert ids_a == ids_b  # 40 ms of clock skew included: the inbox keeps one of each


def test_a_cluster_back_from_silence_is_news_even_if_unchanged() -> None:
    gate = HeartbeatGate("east", interval_ms=1_000, keepalive_ms=10_000)
    assert gate.observe(IDLE, 500)
    assert gate.observe(DOWN, 1_500)  # what a silent simulated cluster reports (not published)
    assert gate.observe(IDLE, 2_500)  # back: published at once, not at the next keepalive
