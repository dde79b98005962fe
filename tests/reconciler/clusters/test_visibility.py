"""The status reporter against the kube API stand-in: only a leader writes; a new leader resumes
after what the previous one reported (``observedSeq``), so no Event is written twice; the Events
counters (``kdispatch_events_*_total``) agree with the Events the stand-in holds."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from eventlog import events as ev
from eventlog.memory import MemoryReader
from reconciler.service.clusters.jobview import JobView
from reconciler.service.clusters.visibility import StatusReporter
from reconciler.service.metrics import ReconcilerMetrics
from tests.reconciler.clusters.conftest import ApiServer, batch_job
from tests.waiting import eventually

JOBS = ("batch", "v1", "jobs")
EVENTS = ("events.k8s.io", "v1", "events")


@asynccontextmanager
async def reporting(
    entries: list[ev.LogEntry],
    server: ApiServer,
    *,
    instance: str,
    leading: Callable[[], bool],
    metrics: ReconcilerMetrics | None = None,
    view: JobView | None = None,
) -> AsyncIterator[StatusReporter]:
    api = server.api(role="manager", cluster="manager")
    reporter = StatusReporter(
        MemoryReader(entries),
        api,
        instance=instance,
        leading=leading,
        poll_interval_s=0.01,
        view=view,
        on_event=(metrics or ReconcilerMetrics()).event_written,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(reporter.run(stop))
    try:
        yield reporter
    finally:
        stop.set()
        await task


def events_of(server: ApiServer, name: str) -> dict[str, dict[str, Any]]:
    return {
        e["metadata"]["name"]: e for e in server.emulator.objects(*EVENTS) if e["regarding"]["name"] == name
    }


def counted(metrics: ReconcilerMetrics, which: str) -> dict[str, int]:
    """``kdispatch_events_<which>_total`` by reason, as scraped."""
    return {
        sample.labels["reason"]: int(sample.value)
        for family in metrics.registry.collect()
        if family.name == f"kdispatch_events_{which}"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.value
    }


def status_of(server: ApiServer, name: str) -> dict[str, Any]:
    obj = server.emulator.get(*JOBS, "team-a", name)
    assert obj is not None
    return dict(json.loads(obj["metadata"]["annotations"]["kdispatch.io/status"]))


async def test_only_the_leader_writes_and_a_new_leader_does_not_repeat_itself(api_servers: Any) -> None:
    server: ApiServer = await api_servers("manager")
    obj = server.emulator.put(*JOBS, batch_job("train"))
    job = ev.JobRef(namespace="team-a", name="train", uid=obj["metadata"]["uid"])
    entries = [
        ev.LogEntry(seq=1, at_ms=1000, event=ev.JobSubmitted(job=job, pod_sets=[], queue="user-queue")),
        ev.LogEntry(seq=2, at_ms=2000, event=ev.Nominated(job=job, clusters=["w1"], attempt=1)),
        ev.LogEntry(seq=3, at_ms=3000, event=ev.Placed(job=job, cluster="w1", attempt=1)),
    ]
    leads = False
    async with reporting(entries, server, instance="replica-1", leading=lambda: leads) as follower:
        await eventually(follower.caught_up.is_set, what="caught up")
        await eventually(lambda: follower.view.seq == 3, what="folded")
        assert not events_of(server, "train") and follower.events_written == 0  # not leading: silent
        leads = True
        await eventually(lambda: len(events_of(server, "train")) == 3 and follower.settled(), what="reported")
    first = events_of(server, "train")
    assert sorted(e["reason"] for e in first.values()) == ["Nominated", "Placed", "Queued"]
    assert {e["reportingController"] for e in first.values()} == {"kdispatch.io/dispatcher"}
    status = status_of(server, "train")
    assert (status["phase"], status["queue"], status["cluster"], status["observedSeq"]) == (
        "Placed",
        "user-queue",
        "w1",
        3,
    )
    labels = server.emulator.get(*JOBS, "team-a", "train")["metadata"]["labels"]  # type: ignore[index]
    assert labels["kdispatch.io/cluster"] == "w1"

    # A new leader, from the same log plus a repeat of the nomination and a requeue
    entries.append(
        ev.LogEntry(seq=4, at_ms=4000, event=ev.Requeued(job=job, reason="WorkerLost", cluster="w1"))
    )
    entries.append(ev.LogEntry(seq=5, at_ms=5000, event=ev.Nominated(job=job, clusters=["w1"], attempt=1)))
    metrics = ReconcilerMetrics()
    async with reporting(
        entries, server, instance="replica-2", leading=lambda: True, metrics=metrics
    ) as leader:
        await eventually(
            lambda: leader.settled() and status_of(server, "train")["observedSeq"] == 5, what="resumed"
        )
        assert leader.events_written == 2  # the WorkerLost Event, and the nomination's count: nothing older
    assert counted(metrics, "emitted") == {"WorkerLost": 1, "Nominated": 1}
    # what the object already showed; the nomination's earlier count was replica-1's to count
    assert counted(metrics, "suppressed") == {"Queued": 1, "Placed": 1}
    after = events_of(server, "train")
    assert set(first) <= set(after) and len(after) == 4  # one new Event; no duplicate of any old one
    for name in first:
        if after[name]["reason"] != "Nominated":
            assert after[name]["metadata"]["resourceVersion"] == first[name]["metadata"]["resourceVersion"]
    (nominated,) = [e for e in after.values() if e["reason"] == "Nominated"]
    assert nominated["series"]["count"] == 2 and nominated["reportingInstance"] == "replica-1"
    status = status_of(server, "train")
    assert (status["phase"], status["cluster"], status["position"]) == ("Nominated", None, None)
    labels = server.emulator.get(*JOBS, "team-a", "train")["metadata"]["labels"]  # type: ignore[index]
    assert "kdispatch.io/cluster" not in labels  # requeued: it no longer runs anywhere


async def test_positions_are_refreshed_as_jobs_ahead_leave_the_queue(api_servers: Any) -> None:
    server: ApiServer = await api_servers("manager")
    jobs = []
    for name in ("first", "second"):
        obj = server.emulator.put(*JOBS, batch_job(name))
        jobs.append(ev.JobRef(namespace="team-a", name=name, uid=obj["metadata"]["uid"]))
    entries = [
        ev.LogEntry(seq=i + 1, at_ms=1000, event=ev.JobSubmitted(job=j, pod_sets=[], queue="q"))
        for i, j in enumerate(jobs)
    ]
    async with reporting(entries, server, instance="r", leading=lambda: True) as reporter:
        reporter.refresh_s = 0.05
        await eventually(lambda: reporter.settled() and reporter.status_written == 2, what="reported")
        assert status_of(server, "second")["position"] == 2
        entries.append(
            ev.LogEntry(seq=3, at_ms=2000, event=ev.Nominated(job=jobs[0], clusters=["w1"], attempt=1))
        )
        # "second" itself has no new decision: the periodic refresh moves it up
        await eventually(lambda: status_of(server, "second")["position"] == 1, what="position refreshed")
        assert status_of(server, "second")["observedSeq"] == 2
        assert status_of(server, "first")["position"] is None


async def test_a_new_leader_leaves_jobs_finished_long_ago_alone(api_servers: Any) -> None:
    server: ApiServer = await api_servers("manager")
    old = server.emulator.put(*JOBS, batch_job("old"))
    job = ev.JobRef(namespace="team-a", name="old", uid=old["metadata"]["uid"])
    hour = 3_600_000
    entries = [
        ev.LogEntry(seq=1, at_ms=1000, event=ev.JobSubmitted(job=job, pod_sets=[], queue="q")),
        ev.LogEntry(seq=2, at_ms=2000, event=ev.Finished(job=job, cluster="w1", attempt=1)),
        ev.LogEntry(seq=3, at_ms=hour, event=ev.Tick()),
    ]
    async with reporting(entries, server, instance="r", leading=lambda: True) as reporter:
        await eventually(lambda: reporter.view.seq == 3 and reporter.settled(), what="caught up")
        assert reporter.view.settled_long_ago(job.uid)
        assert reporter.events_written == reporter.status_written == 0
        assert not events_of(server, "old")


async def test_the_events_counters_agree_with_the_events_written(api_servers: Any) -> None:
    server: ApiServer = await api_servers("manager")
    obj = server.emulator.put(*JOBS, batch_job("wide"))
    job = ev.JobRef(namespace="team-a", name="wide", uid=obj["metadata"]["uid"])

    def pending(seq: int, line: str) -> ev.LogEntry:
        return ev.LogEntry(seq=seq, at_ms=1000 + seq, event=ev.Unschedulable(job=job, message=line))

    entries = [
        ev.LogEntry(seq=1, at_ms=1000, event=ev.JobSubmitted(job=job, pod_sets=[], queue="q")),
        *(pending(seq, "no gpu") for seq in (2, 3, 4)),  # one Event, count 3, at the first write
        pending(5, "no memory"),
    ]
    metrics = ReconcilerMetrics()
    view = JobView(burst=2)  # per (job, reason): "no gpu" and "no memory"; a third line is dropped
    async with reporting(
        entries, server, instance="r", leading=lambda: True, metrics=metrics, view=view
    ) as reporter:
        await eventually(lambda: reporter.settled() and reporter.status_written == 1, what="reported")
        entries += [pending(6, "no gpu"), pending(7, "no gpu"), pending(8, "no disk")]
        await eventually(lambda: reporter.settled() and reporter.view.seq == 8, what="reported again")
    assert status_of(server, "wide")["observedSeq"] == 8

    shown = [
        (e["reason"], (e.get("series") or {}).get("count", 1)) for e in events_of(server, "wide").values()
    ]
    assert sorted(shown) == [("Pending", 1), ("Pending", 5), ("Queued", 1)]
    assert view.suppressed == 1  # "no disk"
    # One count per write: the two Pending creates and the patch of "no gpu" from 3 to 5.
    assert counted(metrics, "emitted") == {"Queued": 1, "Pending": 3}
    # Folded between writes (2 into the first write, 1 into the patch), and the dropped line.
    assert counted(metrics, "suppressed") == {"Pending": 4}
    occurrences = sum(count for reason, count in shown if reason == "Pending") + view.suppressed
    assert counted(metrics, "emitted")["Pending"] + counted(metrics, "suppressed")["Pending"] == occurrences
