"""The manager-cluster watcher and status sync against an emulated API server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, MutableMapping
from typing import Any

import pytest

from eventlog import events as ev
from reconciler.service.clusters.desired import Desired
from reconciler.service.clusters.manager import ManagerSync, ManagerWatcher
from reconciler.service.clusters.remote import Origin
from tests.reconciler.clusters import admission
from tests.reconciler.clusters.conftest import ApiServer, Recorder, batch_job, logged
from tests.waiting import eventually

Res = tuple[str, str, str]
JOBS: Res = ("batch", "v1", "jobs")


@pytest.fixture
async def manager(
    api_servers: Callable[..., Any],
) -> AsyncIterator[tuple[ApiServer, Recorder, ManagerWatcher, set[str]]]:
    server: ApiServer = await api_servers("manager")
    recorder = Recorder()
    known: set[str] = set()
    watcher = ManagerWatcher(
        server.api(role="manager", cluster="manager"),
        recorder,
        known=lambda uid: uid in known,
        resync_s=1,
        backfill_after_s=0.3,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    yield server, recorder, watcher, known
    stop.set()
    await asyncio.wait_for(task, 10)


def held(name: str, *, api_version: str, kind: str, uid: str = "") -> dict[str, Any]:
    """A job of any kind as the webhook leaves it: with the annotations the watcher reads."""
    meta: dict[str, Any] = {"name": name, "namespace": "team-a"}
    meta["annotations"] = {"kdispatch.io/placement": "{}", "kdispatch.io/pod-sets": "[]"}
    if uid:
        meta["uid"] = uid
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": {}}


async def relisted(
    server: ApiServer, recorder: Recorder, known: set[str], markers: dict[Res, dict[str, Any]]
) -> None:
    """Make the watcher list ``markers``' resources again (their watches end, as at a resync) and
    wait until it has handled those lists: each marker is put after its resource's list was
    served, so it is reported only once the watcher went past that list, to the watch after it.
    Whatever the re-list would have made it report, it has reported by then."""
    emu = server.emulator
    before = {res: emu.lists(*res) for res in markers}
    emu.drop_watches()
    await eventually(
        lambda: all(emu.lists(*res) > n for res, n in before.items()), what=f"a re-list of {list(markers)}"
    )
    names = set()
    for res, marker in markers.items():
        put = emu.put(*res, marker)
        known.add(put["metadata"]["uid"])
        names.add(put["metadata"]["name"])
    await eventually(
        lambda: names <= {o.job.name for o in recorder.of(ev.JobObserved)},
        what=f"the markers {sorted(names)}, put after the re-list, reported",
    )


async def test_watcher_reports_observed_updated_deleted_for_placed_jobs_only(
    manager: tuple[ApiServer, Recorder, ManagerWatcher, set[str]],
) -> None:
    server, recorder, _, known = manager
    emu = server.emulator
    job = emu.put(*JOBS, batch_job("train"))
    uid = job["metadata"]["uid"]
    known.add(uid)
    plain = batch_job("not-ours")
    del plain["metadata"]["annotations"]
    emu.put(*JOBS, plain)
    observed = await eventually(lambda: recorder.of(ev.JobObserved), what="JobObserved")
    assert {o.job.name for o in observed} == {"train"}
    assert observed[0].job.uid == uid
    assert not observed[0].suspended  # held by kdispatch (managedBy MultiKueue), not by the user
    # our own writes (annotation, status) are not spec changes: no JobUpdated for them, and
    # re-lists do not record the job again
    emu.patch_status(*JOBS, "team-a", "train", {"active": 1})
    await relisted(server, recorder, known, {JOBS: batch_job("marker")})
    assert len(recorder.reported(ev.JobObserved, "train")) == 1
    assert not recorder.reported(ev.JobUpdated, "train")
    # a spec change is, through the webhook (which rewrites the pod sets it computed), and the
    # watcher reports it under the id the webhook recorded it with: the inbox keeps one
    before = emu.get(*JOBS, "team-a", "train")
    assert before is not None
    after, records = admission.updated(before, {**before, "spec": {**before["spec"], "parallelism": 3}})
    emu.update(*JOBS, "team-a", "train", {"metadata": after["metadata"], "spec": after["spec"]})
    updated = await eventually(lambda: recorder.of(ev.JobUpdated), what="JobUpdated")
    assert len(updated) == 1
    assert updated[0].pod_sets == [
        ev.PodSet(name="main", count=3, requests={"cpu": 500, "nvidia.com/gpu": 1})
    ]
    [record] = records
    assert record.msg_id in recorder.ids and record.event.pod_sets == updated[0].pod_sets
    # removed without a watch event (as if while disconnected): the next re-list notices
    emu.remove(*JOBS, "team-a", "train")
    deleted = await eventually(lambda: recorder.of(ev.JobDeleted), what="JobDeleted on re-list")
    assert deleted == [ev.JobDeleted(job=observed[0].job)]


async def test_watcher_backfills_a_job_the_log_does_not_know(
    manager: tuple[ApiServer, Recorder, ManagerWatcher, set[str]],
) -> None:
    server, recorder, watcher, known = manager
    recorded = server.emulator.put(*JOBS, batch_job("recorded"))
    known.add(recorded["metadata"]["uid"])
    lost = batch_job("lost", gpus=2, parallelism=4)
    lost["metadata"]["annotations"]["kdispatch.io/simulated-runtime"] = "1m30s"
    lost["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "high"
    lost["metadata"]["annotations"]["kdispatch.io/priority"] = (
        '{"class":"high","value":1000}'  # the webhook's
    )
    missing = server.emulator.put(*JOBS, lost)
    submitted = await eventually(lambda: recorder.of(ev.JobSubmitted), what="backfilled JobSubmitted")
    # the next re-list shows it again, and the log still does not know it (the fact is on its
    # way): another backfill round records nothing more
    await relisted(server, recorder, known, {JOBS: batch_job("marker")})
    assert await watcher.backfill_due() == 0
    assert len(recorder.reported(ev.JobSubmitted, "lost")) == 1
    assert not recorder.reported(ev.JobSubmitted, "recorded")
    sub = submitted[0]
    assert sub.source == "watch"
    assert sub.job == ev.JobRef(namespace="team-a", name="lost", uid=missing["metadata"]["uid"])
    assert sub.pod_sets == [ev.PodSet(name="main", count=4, requests={"cpu": 500, "nvidia.com/gpu": 2})]
    assert sub.runtime_ms == 90_000
    assert (sub.priority_class, sub.priority) == ("high", 1000)
    assert sub.queue == "user-queue"
    assert sub.placement.dispatch_mode == "MustBeAdmitted"
    assert sub.manifest is not None and sub.manifest["metadata"]["name"] == "lost"


async def test_status_sync_writes_the_placed_copy_status_and_cluster_onto_the_manager_job(
    api_servers: Callable[..., Any],
) -> None:
    server: ApiServer = await api_servers("manager")
    emu = server.emulator
    job = emu.put(*JOBS, batch_job("train"))
    ref = ev.JobRef(namespace="team-a", name="train", uid=job["metadata"]["uid"])
    desired = Desired()
    sync = ManagerSync(server.api(role="manager", cluster="manager"), desired)
    origin = Origin(job=ref, attempt=1, remote_uid="r-1")
    running = {"active": 1, "startTime": "2026-01-01T00:00:00Z"}
    await sync.remote_status("w2", origin, running)  # not placed yet: nothing is written
    await sync.idle()
    assert "status" not in (emu.get(*JOBS, "team-a", "train") or {})
    desired.placed[ref.uid] = ("w2", 1)
    await sync.decided(ev.Placed(job=ref, cluster="w2", attempt=1), desired)
    await sync.idle()
    obj = emu.get(*JOBS, "team-a", "train")
    assert obj is not None
    assert obj["metadata"]["annotations"]["kdispatch.io/cluster"] == "w2"
    assert obj["status"] == running
    await sync.remote_status("w1", Origin(job=ref, attempt=1, remote_uid="r-0"), {"failed": 1})  # a loser
    done = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    await sync.remote_status("w2", origin, done)
    await sync.idle()
    obj = emu.get(*JOBS, "team-a", "train")
    assert obj is not None and obj["status"] == done  # replaced, not merged: "active" is gone
    assert obj["spec"]["suspend"] is True  # the manager copy stays held


async def test_watcher_survives_a_manager_outage_and_catches_up(
    logs: list[MutableMapping[str, Any]], manager: tuple[ApiServer, Recorder, ManagerWatcher, set[str]]
) -> None:
    server, recorder, _, known = manager
    job = server.emulator.put(*JOBS, batch_job("a"))
    known.add(job["metadata"]["uid"])
    await eventually(lambda: recorder.of(ev.JobObserved), what="JobObserved")
    await server.kill()
    await eventually(
        lambda: logged(logs, "watch_disconnected"), what="the watcher to find the manager gone"
    )
    server.emulator.remove(*JOBS, "team-a", "a")  # deleted while it could not see it
    b = server.emulator.put(*JOBS, batch_job("b"))
    known.add(b["metadata"]["uid"])
    await server.start()
    await eventually(lambda: recorder.of(ev.JobDeleted), timeout_s=15, what="JobDeleted after reconnect")
    names = {o.job.name for o in recorder.of(ev.JobObserved)}
    assert names == {"a", "b"}


async def test_one_watch_per_resource_on_the_first_version_the_manager_serves(
    api_servers: Callable[..., Any],
) -> None:
    """MPIJob is listed as kubeflow.org/v1 first: a manager serving only v2beta1 is watched there.
    A Workload served in two versions is one object: it is reported once, not once per version."""
    server: ApiServer = await api_servers("manager")
    emu = server.emulator
    emu.serve("kubeflow.org", "v2beta1", "mpijobs", kind="MPIJob")
    for version in ("v1beta1", "v1beta2"):
        emu.serve("kueue.x-k8s.io", version, "workloads", kind="Workload")
    mpijobs: Res = ("kubeflow.org", "v2beta1", "mpijobs")
    mpi = emu.put(*mpijobs, held("mpi", api_version="kubeflow.org/v2beta1", kind="MPIJob"))
    for version in ("v1beta1", "v1beta2"):  # the same object, as each version shows it
        wl = held("wl", api_version=f"kueue.x-k8s.io/{version}", kind="Workload", uid="wl-uid")
        emu.put("kueue.x-k8s.io", version, "workloads", {**wl, "spec": {"active": False}})
    recorder = Recorder()
    watcher = ManagerWatcher(
        server.api(role="manager", cluster="manager"), recorder, known=lambda _uid: True, resync_s=1
    )
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        observed = await eventually(
            lambda: {o.job.uid for o in recorder.of(ev.JobObserved)} == {mpi["metadata"]["uid"], "wl-uid"},
            what="both jobs observed",
        )
        assert observed
        markers = {
            mpijobs: held("mpi-marker", api_version="kubeflow.org/v2beta1", kind="MPIJob"),
            ("kueue.x-k8s.io", "v1beta1", "workloads"): held(
                "wl-marker", api_version="kueue.x-k8s.io/v1beta1", kind="Workload"
            ),
        }
        await relisted(server, recorder, set(), markers)  # a re-list later: still one report each
        assert len(recorder.reported(ev.JobObserved, "mpi")) == 1
        assert len(recorder.reported(ev.JobObserved, "wl")) == 1
        # a watch on v1beta2 would have started with the one on v1beta1, which has listed twice since
        assert emu.lists("kueue.x-k8s.io", "v1beta2", "workloads") == 0
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_a_backfilled_job_gets_the_cluster_queue_of_the_logs_queue_config(
    api_servers: Callable[..., Any],
) -> None:
    server: ApiServer = await api_servers("manager")
    desired = Desired()  # as the actuator folds the log: the latest QueuesConfigured
    queues = ev.QueuesConfigured(
        cluster_queues=[ev.ClusterQueueSpec(name="cq-a", namespace_selector=ev.LabelSelector())],
        local_queues=[ev.LocalQueueSpec(namespace="team-a", name="user-queue", cluster_queue="cq-a")],
    )
    desired.fold(ev.LogEntry(seq=1, at_ms=1, event=queues))
    recorder = Recorder()
    watcher = ManagerWatcher(
        server.api(role="manager", cluster="manager"),
        recorder,
        known=lambda _uid: False,
        queues=lambda: desired.queues,
        resync_s=1,
        backfill_after_s=0.3,
    )
    server.emulator.put(*JOBS, batch_job("in-queue"))
    server.emulator.put(*JOBS, batch_job("elsewhere", namespace="team-z"))  # no LocalQueue there
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        await eventually(lambda: len(recorder.of(ev.JobSubmitted)) == 2, what="both backfilled")
        by_name = {s.job.name: s.cluster_queue for s in recorder.of(ev.JobSubmitted)}
        assert by_name == {"in-queue": "cq-a", "elsewhere": None}  # waits with the dispatcher's reason
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
