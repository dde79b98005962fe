"""The Kubernetes worker adapter against emulated API servers, over HTTP with kubernetes-asyncio."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from eventlog import events as ev
from reconciler.service.clusters.base import RemoteSpec
from reconciler.service.clusters.kube import KubeWorker
from tests.reconciler.clusters.conftest import ApiServer, Recorder, batch_job
from tests.waiting import eventually

GROUP = ("batch", "v1", "jobs")
WL = ("kueue.x-k8s.io", "v1beta1", "workloads")
CQ = ("kueue.x-k8s.io", "v1beta1", "clusterqueues")


def ref(name: str = "train") -> ev.JobRef:
    return ev.JobRef(namespace="team-a", name=name, uid=f"uid-{name}")


def spec(name: str = "train", *, attempt: int = 1) -> RemoteSpec:
    return RemoteSpec(
        job=ref(name),
        cluster="w1",
        attempt=attempt,
        pod_sets=[ev.PodSet(name="main", count=1, requests={"cpu": 500})],
        manifest=batch_job(name, uid=f"uid-{name}"),
    )


class Running:
    def __init__(self, worker: KubeWorker, recorder: Recorder, server: ApiServer) -> None:
        self.worker = worker
        self.recorder = recorder
        self.server = server


@pytest.fixture
async def start_worker(api_servers: Callable[..., Any]) -> AsyncIterator[Callable[..., Any]]:
    stops: list[tuple[asyncio.Event, asyncio.Task[None]]] = []

    async def start(*, kueue: bool | None = None, **kw: Any) -> Running:
        """``kueue``: True/False = the worker runs Kueue or not (and says so in config);
        None = it runs Kueue and the adapter has to detect it."""
        server: ApiServer = await api_servers("w1", kueue=kueue is not False)
        worker = KubeWorker(
            "w1",
            server.api(role="worker", cluster="w1"),
            manager_id="mgr-1",
            heartbeat_interval_s=0.1,
            heartbeat_timeout_s=0.5,
            usage_interval_s=0.1,
            kueue=kueue,
            **kw,
        )
        recorder = Recorder()
        stop = asyncio.Event()
        stops.append((stop, asyncio.create_task(worker.run(recorder, stop))))
        return Running(worker, recorder, server)

    yield start
    for stop, task in stops:
        stop.set()
        await asyncio.wait_for(task, 30)


def facts(r: Recorder, kind: type[Any], attempt: int | None = None) -> list[Any]:
    return [e for e in r.of(kind) if attempt is None or e.attempt == attempt]


async def test_create_makes_one_clean_copy_and_reports_it(start_worker: Callable[..., Any]) -> None:
    run = await start_worker()
    await run.worker.create(spec())
    await run.worker.create(spec())  # a restarted or second actuator: no second copy, no error
    objs = run.server.emulator.objects(*GROUP)
    assert len(objs) == 1
    copy = objs[0]
    labels = copy["metadata"]["labels"]
    assert labels["kdispatch.io/origin"] == "mgr-1"
    assert labels["kdispatch.io/job-uid"] == "uid-train"
    assert labels["kdispatch.io/attempt"] == "1"
    assert "kueue.x-k8s.io/queue-name" not in labels  # no Kueue on this worker
    assert "managedBy" not in copy["spec"]  # the worker's job controller runs it
    assert copy["spec"]["suspend"] is False
    assert "selector" not in copy["spec"]
    assert "batch.kubernetes.io/controller-uid" not in copy["spec"]["template"]["metadata"]["labels"]
    assert copy["metadata"]["uid"] != "uid-train"
    created = await eventually(lambda: facts(run.recorder, ev.RemoteCreated), what="RemoteCreated")
    assert created == [ev.RemoteCreated(job=ref(), cluster="w1", attempt=1)]


async def test_job_status_without_kueue_reports_admitted_and_finished(
    start_worker: Callable[..., Any],
) -> None:
    run = await start_worker(kueue=False)
    await run.worker.create(spec())
    emu = run.server.emulator
    emu.patch_status(*GROUP, "team-a", "train", {"startTime": "2026-01-01T00:00:00Z", "active": 1})
    await eventually(lambda: facts(run.recorder, ev.RemoteAdmitted), what="RemoteAdmitted")
    emu.patch_status(
        *GROUP, "team-a", "train", {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
    )
    done = await eventually(lambda: facts(run.recorder, ev.RemoteFinished), what="RemoteFinished")
    assert done == [ev.RemoteFinished(job=ref(), cluster="w1", attempt=1, succeeded=True)]


async def test_with_kueue_the_copy_waits_for_kueue_and_workload_conditions_are_facts(
    start_worker: Callable[..., Any],
) -> None:
    run = await start_worker()  # detects Kueue: ClusterQueues are served
    emu = run.server.emulator
    await eventually(lambda: run.worker.kueue, what="Kueue detected")
    await run.worker.create(spec())
    copy = emu.get(*GROUP, "team-a", "train")
    assert copy is not None
    assert copy["spec"]["suspend"] is True  # Kueue unsuspends it on admission
    assert copy["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "user-queue"
    # what Kueue does: a Workload owned by the job, then Admitted, then Evicted
    emu.put(
        *WL,
        {
            "metadata": {
                "name": "job-train-abc",
                "namespace": "team-a",
                "ownerReferences": [{"kind": "Job", "name": "train", "uid": copy["metadata"]["uid"]}],
            },
        },
    )
    emu.patch_status(*WL, "team-a", "job-train-abc", {"conditions": [{"type": "Admitted", "status": "True"}]})
    await eventually(lambda: facts(run.recorder, ev.RemoteAdmitted), what="RemoteAdmitted")
    emu.patch_status(
        *WL,
        "team-a",
        "job-train-abc",
        {"conditions": [{"type": "Evicted", "status": "True", "reason": "Preempted"}]},
    )
    evicted = await eventually(lambda: facts(run.recorder, ev.RemoteEvicted), what="RemoteEvicted")
    assert evicted[0].reason == "Preempted"


@pytest.fixture
def with_kueue_quota() -> Callable[[ApiServer], None]:
    def add(server: ApiServer) -> None:
        server.emulator.put(
            *CQ,
            {
                "metadata": {"name": "cq"},
                "spec": {
                    "resourceGroups": [
                        {
                            "flavors": [
                                {
                                    "name": "default",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "64"},
                                        {"name": "nvidia.com/gpu", "nominalQuota": 8},
                                    ],
                                }
                            ]
                        }
                    ]
                },
                "status": {
                    "flavorsReservation": [
                        {
                            "name": "default",
                            "resources": [
                                {"name": "cpu", "total": "1500m"},
                                {"name": "nvidia.com/gpu", "total": "2"},
                            ],
                        }
                    ]
                },
            },
        )

    return add


async def test_heartbeats_capacity_and_usage_come_from_cluster_queues(
    start_worker: Callable[..., Any], with_kueue_quota: Callable[[ApiServer], None]
) -> None:
    run = await start_worker(kueue=True, labels={"region": "eu"})
    with_kueue_quota(run.server)
    updated = await eventually(lambda: facts(run.recorder, ev.ClusterUpdated), what="ClusterUpdated")
    assert updated[0].capacity == {"cpu": 64_000, "nvidia.com/gpu": 8}
    assert updated[0].labels == {"region": "eu"}
    hb = await eventually(
        lambda: [h for h in facts(run.recorder, ev.ClusterHeartbeat) if h.usage], what="heartbeat with usage"
    )
    assert hb[-1].reachable and hb[-1].usage == {"cpu": 1500, "nvidia.com/gpu": 2}


async def test_delete_removes_only_the_asked_attempt_and_reports_gone(
    start_worker: Callable[..., Any],
) -> None:
    run = await start_worker(kueue=False)
    await run.worker.create(spec(attempt=2))
    await run.worker.delete(ref(), 1)  # an older attempt: the copy there now is attempt 2
    assert run.server.emulator.get(*GROUP, "team-a", "train") is not None
    await run.worker.delete(ref(), 2)
    assert run.server.emulator.get(*GROUP, "team-a", "train") is None
    gone = await eventually(lambda: facts(run.recorder, ev.RemoteGone, 2), what="RemoteGone")
    assert gone == [ev.RemoteGone(job=ref(), cluster="w1", attempt=2)]


async def test_a_superseded_copy_of_ours_is_replaced_a_foreign_object_is_rejected(
    start_worker: Callable[..., Any],
) -> None:
    run = await start_worker(kueue=False)
    await run.worker.create(spec(attempt=1))
    run.worker.wanted = lambda uid, attempt: attempt == 2  # the log moved on to attempt 2
    await run.worker.create(spec(attempt=2))
    copy = run.server.emulator.get(*GROUP, "team-a", "train")
    assert copy is not None and copy["metadata"]["labels"]["kdispatch.io/attempt"] == "2"
    run.server.emulator.put(*GROUP, {"metadata": {"name": "other", "namespace": "team-a"}, "spec": {}})
    await run.worker.create(spec("other"))
    rejected = facts(run.recorder, ev.RemoteRejected)
    assert [r.job.name for r in rejected] == ["other"]
    assert "did not create" in rejected[0].reason


async def test_worker_outage_heartbeats_unreachable_then_facts_resume(
    start_worker: Callable[..., Any],
) -> None:
    run = await start_worker(kueue=False)
    await run.worker.create(spec())
    await eventually(lambda: facts(run.recorder, ev.RemoteCreated), what="RemoteCreated")
    await run.server.kill()
    await eventually(
        lambda: [h for h in facts(run.recorder, ev.ClusterHeartbeat) if not h.reachable],
        what="unreachable heartbeat",
    )
    # while it is down, the job finishes there
    run.server.emulator.patch_status(
        *GROUP, "team-a", "train", {"conditions": [{"type": "Complete", "status": "True"}]}
    )
    await run.server.start()  # back on the same port, with its objects
    done = await eventually(
        lambda: facts(run.recorder, ev.RemoteFinished), what="RemoteFinished after reconnect"
    )
    assert done[0].succeeded
    seen = len(facts(run.recorder, ev.ClusterHeartbeat))
    await eventually(
        lambda: [h for h in facts(run.recorder, ev.ClusterHeartbeat)[seen:] if h.reachable],
        what="reachable heartbeat again",
    )


async def test_copies_lists_only_ours(start_worker: Callable[..., Any]) -> None:
    run = await start_worker(kueue=False)
    await run.worker.create(spec("a"))
    await run.worker.create(spec("b", attempt=3))
    run.server.emulator.put(*GROUP, {"metadata": {"name": "foreign", "namespace": "team-a"}, "spec": {}})
    copies = await run.worker.copies()
    assert sorted((c.name, c.job_uid, c.attempt) for c in copies) == [("a", "uid-a", 1), ("b", "uid-b", 3)]


async def test_evict_removes_the_copy_and_reports_evicted(start_worker: Callable[..., Any]) -> None:
    run = await start_worker(kueue=True)
    await run.worker.create(spec())
    await run.worker.evict(ref(), 1, reason="Preempted")
    assert run.server.emulator.get(*GROUP, "team-a", "train") is None
    assert facts(run.recorder, ev.RemoteEvicted) == [
        ev.RemoteEvicted(job=ref(), cluster="w1", attempt=1, reason="Preempted")
    ]
    await eventually(lambda: facts(run.recorder, ev.RemoteGone), what="RemoteGone")


async def test_a_dispatched_workload_is_created_active_and_followed_through_the_workload_watch(
    start_worker: Callable[..., Any],
) -> None:
    """A Kueue Workload is a kind of its own: its copy is active, and the Workload watch (the one
    that follows Kueue's Workloads of other copies) reports its admission and end. A Workload Kueue
    made for another copy, with our labels copied onto it, is not taken for a copy."""
    run = await start_worker(kueue=True)
    job = ev.JobRef(
        namespace="team-a", name="wl", uid="uid-wl", api_version="kueue.x-k8s.io/v1beta1", kind="Workload"
    )
    held = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "team-a", "uid": "uid-wl"},
        "spec": {"active": False, "podSets": [{"name": "main", "count": 1}]},
    }
    await run.worker.create(RemoteSpec(job=job, cluster="w1", attempt=1, manifest=held))
    copy = run.server.emulator.get(*WL, "team-a", "wl")
    assert copy is not None and copy["spec"]["active"] is True
    labels = dict(copy["metadata"]["labels"])
    run.server.emulator.put(
        *WL,
        {
            "metadata": {
                "name": "job-train-1",
                "namespace": "team-a",
                "labels": labels,
                "ownerReferences": [{"kind": "Job", "name": "train", "uid": "other"}],
            }
        },
    )
    await eventually(lambda: facts(run.recorder, ev.RemoteCreated), what="copy reported")
    run.server.emulator.patch_status(
        *WL, "team-a", "wl", {"conditions": [{"type": "Admitted", "status": "True"}]}
    )
    await eventually(lambda: facts(run.recorder, ev.RemoteAdmitted), what="admission reported")
    finished = {"type": "Finished", "status": "True", "reason": "Succeeded"}
    run.server.emulator.patch_status(*WL, "team-a", "wl", {"conditions": [finished]})
    [done] = await eventually(lambda: facts(run.recorder, ev.RemoteFinished), what="end reported")
    assert done.succeeded and done.job.name == "wl"
    assert {f.job.name for f in run.recorder.events if hasattr(f, "job")} == {"wl"}
    assert [c.name for c in await run.worker.copies()] == ["wl"]
