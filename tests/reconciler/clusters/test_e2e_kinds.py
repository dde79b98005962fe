"""Every kind the webhook holds is dispatched end to end, not only batch Jobs.

For a JobSet, a PyTorchJob, a plain Pod and an MPIJob: the user's object goes through the real
webhook (``webhook.admit``, pure) and lands on the emulated manager held, with the pod sets the
webhook computed in its annotations; the webhook's record never reaches the inbox, so the manager
watcher backfills the job from those annotations -> the log -> a copy on the worker with managedBy
cleared and the kind's hold released -> the worker runs it -> its status is synced back onto the
manager object -> finished, and the copy cleaned up. Real nats-server, sequencer loop and core.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from reconciler.config import decode_config
from reconciler.policy import policy_event
from reconciler.service.loop import LoopSettings, wait_ready
from reconciler.service.wiring import Settings, running
from tests.reconciler.clusters import admission
from tests.reconciler.clusters.conftest import ApiServer
from tests.reconciler.clusters.test_e2e_kube import kubeconfig, log_entries
from tests.waiting import eventually

Res = tuple[str, str, str]  # (group, version, plural)
JOBSETS: Res = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
PYTORCHJOBS: Res = ("kubeflow.org", "v1", "pytorchjobs")
MPIJOBS: Res = ("kubeflow.org", "v2beta1", "mpijobs")
PODS: Res = ("", "v1", "pods")
KINDS = {JOBSETS: "JobSet", PYTORCHJOBS: "PyTorchJob", MPIJOBS: "MPIJob"}


def _pod_template(cpu: str) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
    return {"spec": {"restartPolicy": "Never", "containers": [container]}}


def _user(api_version: str, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """What a user submits: opted in by the queue label, not held."""
    meta = {"name": name, "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec}


def jobset(name: str) -> dict[str, Any]:
    job = {"parallelism": 2, "completions": 2, "template": _pod_template("1")}
    spec = {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": job}}]}
    return _user("jobset.x-k8s.io/v1alpha2", "JobSet", name, spec)


def pytorchjob(name: str) -> dict[str, Any]:
    replicas = {
        "Master": {"replicas": 1, "template": _pod_template("2")},
        "Worker": {"replicas": 3, "template": _pod_template("4")},
    }
    return _user("kubeflow.org/v1", "PyTorchJob", name, {"pytorchReplicaSpecs": replicas})


def mpijob(name: str) -> dict[str, Any]:
    replicas = {
        "Launcher": {"replicas": 1, "template": _pod_template("500m")},
        "Worker": {"replicas": 2, "template": _pod_template("8")},
    }
    return _user("kubeflow.org/v2beta1", "MPIJob", name, {"mpiReplicaSpecs": replicas})


def pod(name: str) -> dict[str, Any]:
    return _user("v1", "Pod", name, _pod_template("3")["spec"])


class World:
    def __init__(self, jlog: JetStreamLog, manager: ApiServer, worker: ApiServer) -> None:
        self.jlog = jlog
        self.manager = manager
        self.worker = worker

    def submit(self, res: Res, user_obj: dict[str, Any]) -> dict[str, Any]:
        """Through the webhook onto the manager; its JobSubmitted is lost (never published)."""
        held = admission.admitted(user_obj)
        return self.manager.emulator.put(*res, held)

    def copy(self, res: Res, name: str) -> dict[str, Any] | None:
        return self.worker.emulator.get(*res, "team-a", name)

    def manager_obj(self, res: Res, name: str) -> dict[str, Any]:
        obj = self.manager.emulator.get(*res, "team-a", name)
        assert obj is not None
        return obj

    async def decided(self, kind: type[Any], name: str) -> list[Any]:
        return [
            e.event
            for e in await log_entries(self.jlog)
            if isinstance(e.event, kind) and getattr(e.event, "job", None) and e.event.job.name == name
        ]


@pytest.fixture
async def world(jslog: JetStreamLog, api_servers: Callable[..., Any], tmp_path: Path) -> AsyncIterator[World]:
    manager: ApiServer = await api_servers("manager")
    worker: ApiServer = await api_servers("w1")  # no Kueue: a copy starts as soon as it exists
    for srv in (manager, worker):
        for (group, version, plural), kind in KINDS.items():
            srv.emulator.serve(group, version, plural, kind=kind)
    worker.emulator.put(
        "", "v1", "nodes", {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "64"}}}
    )
    config = decode_config(
        {
            "manager": {
                "id": "mgr-kinds",
                "kubeconfig": {"path": kubeconfig(tmp_path / "manager.yaml", manager, "manager")},
                "resync": "2s",
                "gcInterval": "1s",
            },
            "policy": {
                "profiles": [
                    {
                        "name": "default",
                        "filters": ["ClusterHealth", "ClusterFeasibility", "ClusterHeadroom"],
                        "scores": ["CapacityScore"],
                        "strategy": {"type": "TopK", "k": 1},
                    }
                ],
            },
            "clusters": [
                {
                    "name": "w1",
                    "kubeconfig": {"path": kubeconfig(tmp_path / "w1.yaml", worker, "w1")},
                    "kueue": False,
                    "heartbeatInterval": "200ms",
                    "heartbeatTimeout": "300ms",
                }
            ],
        }
    )
    settings = Settings(
        loop=LoopSettings(leader_id="kinds", policy=policy_event(config.policy), idle_wait_s=0.02),
        backfill_after_s=0.5,
    )
    async with running(jslog, config, settings) as system:
        await wait_ready(system.loop, timeout_s=20)
        yield World(jslog, manager, worker)


# (resource, user object, expected pod sets, where managedBy lives, how the copy is released,
#  the status of a running copy, the status of a finished one)
CASES = {
    "jobset": (
        JOBSETS,
        jobset,
        [ev.PodSet(name="workers", count=4, requests={"cpu": 1000})],
        ("spec",),
        lambda spec: spec["suspend"] is False,
        {"conditions": [], "replicatedJobsStatus": [{"name": "workers", "active": 2}]},
        {"conditions": [{"type": "Completed", "status": "True"}]},
    ),
    "pytorchjob": (
        PYTORCHJOBS,
        pytorchjob,
        [
            ev.PodSet(name="master", count=1, requests={"cpu": 2000}),
            ev.PodSet(name="worker", count=3, requests={"cpu": 4000}),
        ],
        ("spec", "runPolicy"),
        lambda spec: spec["runPolicy"]["suspend"] is False,
        {"startTime": "2026-01-01T00:00:00Z", "conditions": [{"type": "Running", "status": "True"}]},
        {"conditions": [{"type": "Succeeded", "status": "True"}]},
    ),
    "mpijob": (
        MPIJOBS,
        mpijob,
        [
            ev.PodSet(name="launcher", count=1, requests={"cpu": 500}),
            ev.PodSet(name="worker", count=2, requests={"cpu": 8000}),
        ],
        ("spec", "runPolicy"),
        lambda spec: spec["runPolicy"]["suspend"] is False,
        {"startTime": "2026-01-01T00:00:00Z", "conditions": [{"type": "Running", "status": "True"}]},
        {"conditions": [{"type": "Succeeded", "status": "True"}]},
    ),
    "pod": (
        PODS,
        pod,
        [ev.PodSet(name="main", count=1, requests={"cpu": 3000})],
        None,
        lambda spec: "schedulingGates" not in spec,
        {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"},
        {"phase": "Succeeded"},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_held_kind_is_backfilled_dispatched_released_and_synced_back(world: World, case: str) -> None:
    res, make, pod_sets, managed_by_parent, released, running, finished = CASES[case]
    name = f"{case}-1"
    stored = world.submit(res, make(name))
    uid = stored["metadata"]["uid"]
    # held on the manager by the webhook
    if managed_by_parent is None:
        assert stored["spec"]["schedulingGates"] == [{"name": "kdispatch.io/dispatch"}]
    else:
        parent = stored
        for key in managed_by_parent:
            parent = parent[key]
        assert parent["managedBy"] == "kueue.x-k8s.io/multikueue" and parent["suspend"] is True

    copy = await eventually(lambda: world.copy(res, name), timeout_s=20, what=f"a copy of the {case} on w1")
    [submitted] = await world.decided(ev.JobSubmitted, name)
    assert (submitted.source, submitted.job.uid, submitted.pod_sets) == ("watch", uid, pod_sets)
    labels = copy["metadata"]["labels"]
    assert (labels["kdispatch.io/job-uid"], labels["kdispatch.io/attempt"]) == (uid, "1")
    assert released(copy["spec"]), copy["spec"]
    if managed_by_parent is not None:
        parent = copy
        for key in managed_by_parent:
            parent = parent[key]
        assert "managedBy" not in parent

    world.worker.emulator.patch_status(*res, "team-a", name, running)  # the worker's controller runs it

    async def placed() -> bool:
        return any(p.cluster == "w1" for p in await world.decided(ev.Placed, name))

    await eventually(placed, timeout_s=20, what=f"{case} placed")
    await eventually(
        lambda: (
            world.manager_obj(res, name).get("status") == running
            and world.manager_obj(res, name)["metadata"]["annotations"].get("kdispatch.io/cluster") == "w1"
        ),
        what="running status and cluster synced back onto the manager object",
    )
    world.worker.emulator.patch_status(*res, "team-a", name, finished)
    await eventually(
        lambda: (
            world.manager_obj(res, name).get("status", {}).get("phase" if case == "pod" else "conditions")
            == finished.get("phase" if case == "pod" else "conditions")
        ),
        what="final status synced back",
    )
    await eventually(lambda: world.copy(res, name) is None, what="copy cleaned up after finishing")
    assert [f.succeeded for f in await world.decided(ev.Finished, name)] == [True]
    held = world.manager_obj(res, name)
    assert held["spec"] == stored["spec"]  # the manager object stays held: its controller never runs it


async def test_an_update_reported_by_the_webhook_and_the_watcher_is_logged_once(world: World) -> None:
    stored = world.submit(PYTORCHJOBS, pytorchjob("grow"))
    await eventually(lambda: world.copy(PYTORCHJOBS, "grow"), timeout_s=20, what="a copy on w1")

    async def user_update(workers: int, *, webhook_publishes: bool) -> None:
        before = world.manager_obj(PYTORCHJOBS, "grow")
        new = copy.deepcopy(before)
        new["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = workers
        after, records = admission.updated(before, new)
        if webhook_publishes:
            for record in records:
                await world.jlog.inbox.publish(record.event, msg_id=record.msg_id)
        body = {"metadata": after["metadata"], "spec": after["spec"]}
        world.manager.emulator.update(*PYTORCHJOBS, "team-a", "grow", body)

    await user_update(5, webhook_publishes=True)
    # a second change whose record the webhook lost: the watcher alone reports it, after the first
    # (it reports in order), so once it is in the log, both reports of the first have been made
    await user_update(6, webhook_publishes=False)

    async def two_updates() -> list[Any]:
        return [u for u in await world.decided(ev.JobUpdated, "grow") if u.pod_sets[-1].count == 6]

    await eventually(two_updates, timeout_s=20, what="the second update logged")
    updates = await world.decided(ev.JobUpdated, "grow")
    assert [u.pod_sets[-1].count for u in updates] == [5, 6]
    assert all(u.job.uid == stored["metadata"]["uid"] for u in updates)
