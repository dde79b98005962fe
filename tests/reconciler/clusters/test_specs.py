"""A copy's spec, built from the log entries the projection points at (``desired.JobSources``)
and read back through ``specs.SpecReader`` on the in-memory log."""

from __future__ import annotations

import asyncio

import pytest

from eventlog import events as ev
from eventlog.memory import MemoryLog
from eventlog.store import InboxItem
from reconciler.service.clusters.base import RemoteSpec
from reconciler.service.clusters.desired import Desired, JobSources, SpecUnreadable, remote_spec
from reconciler.service.clusters.specs import SpecReader

JOB = ev.JobRef(namespace="a", name="b", uid="u")
ONE = [ev.PodSet(name="main", count=1, requests={"cpu": 1000})]
TWO = [ev.PodSet(name="main", count=2, requests={"cpu": 1000})]
THREE = [ev.PodSet(name="main", count=3, requests={"cpu": 1000})]


async def logged(*events: ev.InputEvent) -> tuple[MemoryLog, Desired]:
    """The events appended to a fresh log, and the projection folded from it."""
    mlog = MemoryLog()
    await mlog.sequencer("test").append_inputs([InboxItem(None, e) for e in events], at_ms=1)
    desired = Desired()
    for entry in mlog.entries:
        desired.fold(entry)
    return mlog, desired


async def test_each_part_of_the_spec_comes_from_the_last_entry_that_set_it() -> None:
    mlog, desired = await logged(
        ev.JobSubmitted(job=JOB, pod_sets=ONE, priority=5, runtime_ms=60_000, queue="q", manifest={"v": 1}),
        ev.JobUpdated(job=JOB, pod_sets=TWO, priority=9),
        ev.JobUpdated(job=JOB, pod_sets=TWO, manifest={"v": 2}),
        ev.JobUpdated(job=JOB, pod_sets=THREE),
    )
    sources = desired.sources("u")
    assert sources == JobSources(submitted=1, pod_sets=4, priority=2, manifest=3)
    events = {e.seq: e.event for e in mlog.entries if isinstance(e.event, ev.JobSubmitted | ev.JobUpdated)}
    assert remote_spec(("u", "w1", 2), sources, events) == RemoteSpec(
        job=JOB,
        cluster="w1",
        attempt=2,
        pod_sets=THREE,
        priority=9,
        runtime_ms=60_000,
        queue="q",
        manifest={"v": 2},
    )
    with pytest.raises(
        SpecUnreadable, match="log entry 3, which holds the manifest of job uid u, is missing"
    ):
        remote_spec(("u", "w1", 2), sources, {k: v for k, v in events.items() if k != 3})


async def test_a_resubmission_starts_the_spec_over() -> None:
    _, desired = await logged(
        ev.JobSubmitted(job=JOB, pod_sets=ONE, manifest={"v": 1}),
        ev.JobUpdated(job=JOB, pod_sets=TWO, priority=9, manifest={"v": 2}),
        ev.JobSubmitted(job=JOB, pod_sets=ONE, manifest={"v": 3}),
    )
    assert desired.sources("u") == JobSources(3, 3, 3, 3)


async def test_the_copies_of_one_nomination_read_an_old_entry_once_then_from_the_cache() -> None:
    other = ev.JobRef(namespace="a", name="c", uid="v")
    mlog, desired = await logged(
        ev.JobSubmitted(job=JOB, pod_sets=ONE, manifest={"v": 1}),
        ev.JobSubmitted(job=other, pod_sets=ONE, manifest={"w": 1}),
    )
    specs = SpecReader(mlog.reader, desired, cache_entries=1)
    for entry in mlog.entries:
        specs.saw(entry)  # as the actuator folds them: only the last one stays
    one, two = await asyncio.gather(specs.spec(("u", "w1", 1)), specs.spec(("u", "w2", 1)))
    assert one is not None and two is not None and one.manifest == two.manifest == {"v": 1}
    assert (one.cluster, two.cluster) == ("w1", "w2")
    assert specs.gets == 1
    again = await specs.spec(("u", "w3", 1))
    assert again is not None and again.manifest == {"v": 1} and specs.gets == 1
    assert await specs.spec(("nobody", "w1", 1)) is None


async def test_an_entry_the_log_no_longer_has_is_unreadable() -> None:
    mlog, desired = await logged(ev.JobSubmitted(job=JOB, pod_sets=ONE, manifest={"v": 1}))
    mlog.entries[0] = ev.LogEntry(seq=1, at_ms=1, event=ev.Tick())  # as if compacted away
    with pytest.raises(SpecUnreadable, match="log entry 1 should hold a job's spec but is a Tick"):
        await SpecReader(mlog.reader, desired).spec(("u", "w1", 1))
