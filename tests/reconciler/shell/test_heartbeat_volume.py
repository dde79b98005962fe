"""Two ``kdispatch serve`` replicas observe the same idle simulated cluster: the log gets one
heartbeat per keepalive period (a quarter of the worker-lost timeout), not one per check per
replica, and the cluster is never declared Lost for want of heartbeats."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog

from .scenario import wait_for

INTERVAL_MS = 100
LOST_TIMEOUT_MS = 2_000
KEEPALIVE_MS = 500  # a quarter of the worker-lost timeout, in whole intervals
SPAN_MS = 5_000

CONFIG = f"""\
policy:
  workerLostTimeout: {LOST_TIMEOUT_MS}ms
  profiles:
    - name: default
      filters: [ClusterHealth, ClusterFeasibility, ClusterHeadroom]
      scores: [CapacityScore]
      strategy: {{type: TopK, k: 1}}
clusters:
  - name: idle
    heartbeatInterval: {INTERVAL_MS}ms
    simulated:
      capacity: {{cpu: 64, nvidia.com/gpu: 8}}
"""


@pytest.fixture
def replicas(nats_url: str, log_root: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    config = tmp_path / "kdispatch.yaml"
    config.write_text(CONFIG)
    argv = [sys.executable, "-m", "reconciler", "serve", "--nats", nats_url, "--root", log_root]
    procs = [
        subprocess.Popen(
            [*argv, "--config", str(config), "--leader-id", name],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name in ("A", "B")
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _heartbeats(entries: list[ev.LogEntry]) -> list[ev.LogEntry]:
    return [e for e in entries if isinstance(e.event, ev.ClusterHeartbeat) and e.event.cluster == "idle"]


def _span_ms(entries: list[ev.LogEntry]) -> int:
    beats = _heartbeats(entries)
    return beats[-1].at_ms - beats[0].at_ms if beats else 0


async def test_an_idle_cluster_is_kept_alive_not_flooded(
    jslog: JetStreamLog, replicas: list[subprocess.Popen[bytes]]
) -> None:
    entries = await wait_for(jslog, lambda es: _span_ms(es) >= SPAN_MS, timeout_s=60)
    assert all(p.poll() is None for p in replicas)
    beats = _heartbeats(entries)
    span = beats[-1].at_ms - beats[0].at_ms
    per_check_per_replica = 2 * span // INTERVAL_MS  # what was logged before: ~100 over 5 s
    # One keepalive per period (the two replicas' share message ids: the inbox keeps one), plus
    # each replica's first report (off the grid, so not shared).
    assert len(beats) <= span // KEEPALIVE_MS + 4, (len(beats), per_check_per_replica)
    gaps = [b.at_ms - a.at_ms for a, b in itertools.pairwise(beats)]
    assert max(gaps) < LOST_TIMEOUT_MS
    assert not [e for e in entries if isinstance(e.event, ev.ClusterLost)]
