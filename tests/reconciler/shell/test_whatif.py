"""The what-if engine on a hand-written log: what it reads from the log, and a worker loss replayed."""

from __future__ import annotations

import heapq
from pathlib import Path

import msgspec

from eventlog import codec
from eventlog import events as ev
from eventlog.jsonl import JsonlLog
from reconciler import core
from reconciler.offline.whatif import WhatIf, baseline_policy, observe

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


def _log(tmp_path: Path, *extra: tuple[int, ev.AnyEvent]) -> Path:
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
    events += [(t, e, None) for t, e in extra]
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


# ---------------------------------------------------------------------------------------------
# A copy nominated into a silence, and the round timeout, as the live loop has them
# ---------------------------------------------------------------------------------------------

PINNED = ev.JobRef(namespace="team-a", name="pinned", uid="u2")


def _policy(strategy: ev.StrategySpec) -> ev.PolicyLoaded:
    # workerLostTimeout 60 s: east's 32 s silence never makes it Lost, so a nomination lands in it.
    filters = [*POLICY.profiles[0].filters, ev.FilterSpec(name="ClusterPinning")]
    profile = msgspec.structs.replace(POLICY.profiles[0], filters=filters, strategy=strategy, round_timeout_ms=10_000)
    return ev.PolicyLoaded(profiles=[profile], worker_lost_timeout_ms=60_000)


def _with_pinned_job(tmp_path: Path) -> Path:
    """The log above plus a job pinned to east, submitted at +20 s while east is silent."""
    pinned = ev.JobSubmitted(
        job=PINNED,
        pod_sets=[ev.PodSet(name="m", count=1, requests={GPU: 1})],
        placement=ev.Placement(cluster_names=["east"]),
        runtime_ms=5_000,
    )
    return _log(tmp_path, (20_000, pinned))


def nominated_past_deadline(run: WhatIf) -> list[str]:
    """Folding the run's own log: a job still Nominated at an entry later than its round's deadline."""
    state = core.new_state(policy_override=run.state.effective_policy)
    due: list[tuple[int, str]] = []  # (deadline, job key) of every round, earliest first
    late: list[str] = []
    for entry in run.log:
        while due and due[0][0] < entry.at_ms:
            deadline, key = heapq.heappop(due)
            job = state.jobs.get(key)
            if job is not None and job.phase == "Nominated" and job.deadline_ms == deadline:
                late.append(f"{key} at seq {entry.seq}")
        state = core.fold(state, entry)
        if isinstance(entry.event, ev.Nominated) and entry.event.deadline_ms is not None:
            heapq.heappush(due, (entry.event.deadline_ms, entry.event.job.key))
    return late


async def test_a_copy_nominated_into_a_silence_is_created_when_it_ends(tmp_path: Path) -> None:
    seen = await observe(JsonlLog(_with_pinned_job(tmp_path)), until_seq=None, until_ms=None)
    run = WhatIf(seen, _policy(ev.StrategySpec(type="AllAtOnce")))
    run.run()
    facts = [(type(e.event).__name__, e.at_ms - T0) for e in run.log if getattr(e.event, "job", None) == PINNED]
    # AllAtOnce has no round deadline: the live actuator retries the create until east answers
    # (+40 s), and so must the what-if, or the job stays Nominated to the end of the log.
    assert ("Nominated", 20_000) in facts
    assert ("RemoteCreated", 40_000) in facts
    assert run.outcomes.jobs["team-a/pinned"].cluster == "east"
    assert run.outcomes.jobs["team-a/pinned"].finished_ms is not None


async def test_no_round_outlives_its_timeout_in_a_what_if(tmp_path: Path) -> None:
    seen = await observe(JsonlLog(_with_pinned_job(tmp_path)), until_seq=None, until_ms=None)
    run = WhatIf(seen, _policy(ev.StrategySpec(type="TopK", k=1)))
    run.run()
    nominated = [e for e in run.log if isinstance(e.event, ev.Nominated) and e.event.job == PINNED]
    assert nominated[0].event.deadline_ms == T0 + 30_000  # type: ignore[union-attr]
    withdrawn = [e.at_ms - T0 for e in run.log if isinstance(e.event, ev.Withdrawn) and e.event.job == PINNED]
    assert withdrawn[:1] == [30_000]  # the round timed out on time, inside the silence
    assert nominated_past_deadline(run) == []


async def test_the_baseline_follows_the_recorded_policy_changes(tmp_path: Path) -> None:
    """A log whose leader switched to AllAtOnce at +30 s: the baseline run switches there too."""
    everywhere = _policy(ev.StrategySpec(type="AllAtOnce"))
    late = ev.JobRef(namespace="team-a", name="late", uid="u3")
    job = ev.JobSubmitted(job=late, pod_sets=[ev.PodSet(name="m", count=1, requests={GPU: 1})])
    seen = await observe(JsonlLog(_log(tmp_path, (30_000, everywhere), (45_000, job))), until_seq=None, until_ms=None)
    assert seen.policy_changes() == 1 and seen.policy == everywhere
    assert baseline_policy(seen) is None  # no single policy to override with: follow the log
    run = WhatIf(seen, baseline_policy(seen))
    run.run()
    first: dict[str, list[str]] = {}
    for e in run.log:
        if isinstance(e.event, ev.Nominated):
            first.setdefault(e.event.job.name, e.event.clusters)
    # train's first round under TopK-1 (one cluster), late's after the change (AllAtOnce: both,
    # east being back since +40 s).
    assert first == {"train": ["east"], "late": ["east", "west"]}
