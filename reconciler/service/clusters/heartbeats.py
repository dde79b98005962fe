"""Which cluster heartbeats go to the inbox, and under which message id.

Every observer checks its cluster every ``interval`` (``clusters[].heartbeatInterval``), but a
heartbeat that says nothing new costs log space and tells the core one thing only: the cluster
is alive. So a heartbeat is published

- at once when what it reports changed (reachability, or the usage it carries), and
- otherwise at most once per *keepalive* period: the largest multiple of the interval that is at
  most a quarter of the cluster's ``workerLostTimeout`` (at least one interval). The core declares
  a cluster Lost when no heartbeat reached the log for ``workerLostTimeout``; a keepalive every
  quarter of it leaves three to miss before that.

Several reconciler replicas observe the same clusters. Their checks are aligned on a wall-clock
grid (the middle of each interval, so clock skew of up to half an interval does not matter) and
the message ids depend only on the cluster, the grid window and what is reported, so the inbox's
de-duplication window keeps one copy of what two replicas saw at the same moment:

- a keepalive: ``hb/<cluster>/k<window of the keepalive period>``;
- a change: ``hb/<cluster>/<window of the interval>/<before>-<after>`` (digests of what was
  reported before and now; the transition is in the id so that a change back, A→B→A within one
  window, is not mistaken for a duplicate).

Pure: the caller passes the time.
"""

from __future__ import annotations

import hashlib

from eventlog import codec
from eventlog.events import ClusterHeartbeat


def keepalive_ms(*, interval_ms: int, lost_timeout_ms: int | None) -> int:
    """The keepalive period for a cluster checked every ``interval_ms`` and declared Lost after
    ``lost_timeout_ms`` of silence (``None``: unknown, keep alive at every check)."""
    interval_ms = max(interval_ms, 1)
    if lost_timeout_ms is None:
        return interval_ms
    return interval_ms * max(1, (lost_timeout_ms // 4) // interval_ms)


def _digest(hb: ClusterHeartbeat) -> str:
    report = ClusterHeartbeat(cluster=hb.cluster, reachable=hb.reachable, usage=dict(sorted(hb.usage.items())))
    return hashlib.sha256(codec.encode(report)).hexdigest()[:12]


class HeartbeatGate:
    """Decides, check by check, which heartbeats of one cluster to publish."""

    def __init__(self, cluster: str, *, interval_ms: int, keepalive_ms: int | None = None) -> None:
        self.cluster = cluster
        self.interval_ms = max(interval_ms, 1)
        self.keepalive_ms = max(keepalive_ms or self.interval_ms, self.interval_ms)
        self._last: str | None = None  # digest of the last state published (or recorded silent)
        self._last_ms = 0
        self._last_window = -1
        self.published = 0
        self.suppressed = 0

    def next_check_ms(self, now_ms: int) -> int:
        """The next point of the grid (the middle of an interval) strictly after ``now_ms``."""
        half = self.interval_ms // 2
        return ((now_ms - half) // self.interval_ms + 1) * self.interval_ms + half

    def observe(self, hb: ClusterHeartbeat, now_ms: int) -> str | None:
        """The message id to publish ``hb`` under, or None if it says nothing new yet."""
        digest = _digest(hb)
        window = now_ms // self.keepalive_ms
        if digest != self._last:
            msg_id = f"hb/{self.cluster}/{now_ms // self.interval_ms}/{self._last or '-'}-{digest}"
        elif window != self._last_window or now_ms - self._last_ms >= self.keepalive_ms - self.interval_ms // 2:
            # The second test is a floor, should checks drift off the grid (a busy event loop).
            msg_id = f"hb/{self.cluster}/k{window}"
        else:
            self.suppressed += 1
            return None
        self._last, self._last_ms, self._last_window = digest, now_ms, window
        self.published += 1
        return msg_id
