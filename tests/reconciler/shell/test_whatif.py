"""The what-if engine on a hand-written log: what it reads from the log, and a worker loss replayed."""

from __future__ import annotations

from pathlib import Path

from eventlog import codec
from eventlog import events as ev
from eventlog.jsonl import JsonlLog
from reconciler.offline.whatif import WhatIf, observe

GPU = "nvidia.com/gpu"
T0 = 1_795_000_000_000
JOB = ev.JobRef(namespace="team-a", name="train", uid="u1")
POLICY = ev.PolicyLoaded(
    profiles=[
        ev.Profile(
            name="default",
            filters=[ev.FilterSpec(name="ClusterHealth"), ev.FilterSpec(name="ClusterFeasibility")],
            scores=[ev.ScoreSpec(name="CapacityScore")],
            strategy=ev.StrategySpec(type="TopK", k=1),
        )
    ],
    worker_lost_timeout_ms=5_000,
)


def _log(tmp_path: Path) -> Path:
    """east admits the job 2 s after its nomination and goes silent at +10 s until +40 s."""
    events: list[tuple[int, ev.AnyEvent, tuple[int, int] | None]] = [
        (0, POLICY, None),
        (0, ev.ClusterRegistered(cluster="east", capacity={GPU: 8}), None),
        (0, ev.ClusterRegistered(cluster="west", capacity={GPU: 4}), None),
        (0, ev.ClusterHeartbeat(cluster="east"), None),
        (0, ev.ClusterHeartbeat(cluster="west"), None),
        (1_000, ev.JobSubmitted(job=JOB, pod_sets=[ev.PodSet(name="m", count=1, requests={GPU: 2})]), None),
        (1_000, ev.Nominated(job=JOB, clusters=["east"], attempt=1), (0, 1)),
        (3_000, ev.RemoteAdmitted(job=JOB, cluster="east", attempt=1), None),
        (3_000, ev.Placed(job=JOB, cluster="east", attempt=1), (0, 1)),
    ]
    events += [(t, ev.ClusterHeartbeat(cluster="west"), None) for t in range(4_000, 60_001, 4_000)]
    events += [(t, ev.ClusterHeartbeat(cluster="east"), None) for t in (4_000, 8_000)]
    events += [(15_000, ev.ClusterLost(cluster="east", last_seen_ms=T0 + 8_000), (0, 1))]
    events += [(t, ev.ClusterHeartbeat(cluster="east"), None) for t in range(40_000, 60_001, 4_000)]
    events.sort(key=lambda e: e[0])
    path = tmp_path / "log.jsonl"
    lines = [
        codec.encode(ev.LogEntry(seq=i + 1, at_ms=T0 + t, event=e, batch=b)).decode() for i, (t, e, b) in enumerate(events)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_observe_reads_latencies_silences_and_outside_inputs(tmp_path: Path) -> None:
    seen = await observe(JsonlLog(_log(tmp_path)), until_seq=None, until_ms=None)
    assert seen.latency_ms == {"east": [2_000]}  # nominated -> admitted
    assert seen.silences == [(T0 + 8_000, "east", T0 + 40_000)]
    kinds = {type(e.event).__name__ for e in seen.inputs}
    assert kinds == {"ClusterRegistered", "ClusterHeartbeat", "JobSubmitted"}  # no decisions, no Remote*
    assert seen.recorded.jobs["team-a/train"].cluster == "east"


async def test_a_worker_loss_is_replayed_under_the_other_policy(tmp_path: Path) -> None:
    seen = await observe(JsonlLog(_log(tmp_path)), until_seq=None, until_ms=None)
    run = WhatIf(seen, POLICY)
    run.run()
    decided = [type(e.event).__name__ for e in run.log if ev.is_decision(e.event)]
    # Placed on east again (same policy), east goes silent, is lost after 5 s without heartbeats,
    # and the job is dispatched elsewhere: the loss was replayed, not just the submissions.
    assert "ClusterLost" in decided
    job = run.outcomes.jobs["team-a/train"]
    assert job.placements[:1] == ["east"] and job.cluster == "west"
