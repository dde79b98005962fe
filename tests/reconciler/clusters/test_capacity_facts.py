"""Capacity facts: what the Kubernetes adapter reports of a worker's nodes, pods and Kueue queues
(reconciler/service/clusters/capacity_facts.py), through the adapter against an emulated worker,
plus the reporter's rounding, grouping and change rules on their own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from eventlog import events as ev
from reconciler.service.clusters.capacity_facts import (
    ReportDiffer,
    WorkerState,
    coarse,
    queue_fact,
    round_down,
)
from reconciler.service.clusters.kube import KubeWorker
from tests.reconciler.clusters.conftest import ApiServer, Recorder
from tests.waiting import eventually

NODES = ("", "v1", "nodes")
PODS = ("", "v1", "pods")
CQ = ("kueue.x-k8s.io", "v1beta1", "clusterqueues")
LQ = ("kueue.x-k8s.io", "v1beta1", "localqueues")
TOPO = ("kueue.x-k8s.io", "v1alpha1", "topologies")
GI = 1024**3


def node(name: str, *, gpus: int = 1, cpu: str = "8", rack: str = "r1", **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "cloud.example.com/rack": rack,
                "nvidia.com/gpu.product": "A100",
                "unrelated": name,  # differs per node, but does not split groups
            },
        },
        "spec": extra.get("spec", {}),
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}},
    }


def pod(name: str, on: str, *, cpu: str = "1", gpus: int = 0, phase: str = "Running") -> dict[str, Any]:
    requests = {"cpu": cpu, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {
        "metadata": {"name": name, "namespace": "other-team"},
        "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {"requests": requests}}]},
        "status": {"phase": phase},
    }


def cluster_queue(name: str, gpus: int, *, used: int = 0, cohort: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "a100",
                        "resources": [
                            {"name": "cpu", "nominalQuota": "64"},
                            {"name": "nvidia.com/gpu", "nominalQuota": gpus, "lendingLimit": 1},
                        ],
                    }
                ],
            }
        ]
    }
    if cohort:
        spec["cohort"] = cohort
    status = {"flavorsReservation": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu", "total": str(used)}]}]}
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def local_queue(namespace: str, name: str, cq: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cq}}


RACKS = {
    "metadata": {"name": "default"},
    "spec": {"levels": [{"nodeLabel": "cloud.example.com/rack"}, {"nodeLabel": "kubernetes.io/hostname"}]},
}


# -- through the adapter ---------------------------------------------------------------------------


class Running:
    def __init__(self, worker: KubeWorker, recorder: Recorder, server: ApiServer) -> None:
        self.worker, self.recorder, self.server = worker, recorder, server

    def reports(self) -> list[ev.ClusterCapacityReported]:
        return self.recorder.of(ev.ClusterCapacityReported)


@pytest.fixture
async def worker(api_servers: Callable[..., Any]) -> AsyncIterator[Callable[..., Any]]:
    stops: list[tuple[asyncio.Event, asyncio.Task[None]]] = []

    async def start(setup: Callable[[ApiServer], None], *, interval_s: float = 0.05) -> Running:
        server: ApiServer = await api_servers("w1", kueue=True)
        server.emulator.serve(*LQ, kind="LocalQueue")
        server.emulator.serve(*TOPO, kind="Topology", namespaced=False)
        setup(server)
        w = KubeWorker(
            "w1",
            server.api(role="worker", cluster="w1"),
            manager_id="mgr-1",
            kueue=True,
            heartbeat_interval_s=0.1,
            heartbeat_timeout_s=0.5,
            capacity_interval_s=interval_s,
        )
        recorder = Recorder()
        stop = asyncio.Event()
        stops.append((stop, asyncio.create_task(w.run(recorder, stop))))
        return Running(w, recorder, server)

    yield start
    for stop, task in stops:
        stop.set()
        await asyncio.wait_for(task, 30)


def _world(server: ApiServer) -> None:
    emu = server.emulator
    for i in range(4):
        emu.put(*NODES, node(f"n{i}", gpus=8, rack="r1" if i < 2 else "r2"))
    emu.put(*NODES, node("cordoned", spec={"unschedulable": True}))
    emu.put(*PODS, pod("busy", "n0", cpu="2", gpus=8))
    emu.put(*PODS, pod("done", "n1", cpu="7", phase="Succeeded"))  # holds nothing any more
    emu.put(*CQ, cluster_queue("gpu-cq", 16, used=8, cohort="all"))
    emu.put(*LQ, local_queue("team-a", "user-queue", "gpu-cq"))
    emu.put(*TOPO, RACKS)


async def test_the_first_report_is_the_whole_worker_grouped_by_topology_and_rounded_down(
    worker: Callable[..., Any],
) -> None:
    run = await worker(_world)
    (first,) = await eventually(run.reports, what="a capacity report")
    assert first.full and first.cluster == "w1"
    assert first.topology_levels == ["cloud.example.com/rack", "kubernetes.io/hostname"]
    by_rack = {g.labels["cloud.example.com/rack"]: g for g in first.node_groups}
    assert set(by_rack) == {"r1", "r2"}  # the cordoned node (rack r1, 1 GPU) is not offered
    r1 = by_rack["r1"]
    assert r1.labels == {"cloud.example.com/rack": "r1", "nvidia.com/gpu.product": "A100"}
    mem = 32 * GI
    assert r1.bins == [
        ev.FreeBin(count=1, free={"cpu": 5600, "memory": mem}),  # n0: its 8 GPUs are taken; 6 cpus rounded down
        ev.FreeBin(count=1, free={"cpu": 8000, "memory": mem, "nvidia.com/gpu": 8}),
    ]
    assert by_rack["r2"].bins == [ev.FreeBin(count=2, free={"cpu": 8000, "memory": mem, "nvidia.com/gpu": 8})]
    assert r1.allocatable == {"cpu": 8000, "memory": mem, "nvidia.com/gpu": 8}  # one node when empty, exact
    (queue,) = first.queues
    gpu = queue.flavors[0].resources["nvidia.com/gpu"]
    assert (queue.name, queue.cohort, gpu.nominal, gpu.used, gpu.lending_limit) == ("gpu-cq", "all", 16, 8, 1)
    assert first.local_queues == {"team-a/user-queue": "gpu-cq"}


async def test_changes_report_only_the_changed_group_and_queue(worker: Callable[..., Any]) -> None:
    run = await worker(_world)
    await eventually(run.reports, what="the full report")
    emu = run.server.emulator
    emu.put(*PODS, pod("new", "n3", cpu="250m", gpus=2))
    # (a heartbeat that times out on a loaded machine makes the next report full again: skipped)
    delta = await eventually(lambda: [r for r in run.reports()[1:] if not r.full], what="a change report")
    change = delta[0]
    assert change.queues == [] and change.local_queues is None
    (group,) = change.node_groups
    assert group.labels["cloud.example.com/rack"] == "r2"
    mem = 32 * GI
    assert group.bins == [
        ev.FreeBin(count=1, free={"cpu": 6400, "memory": mem, "nvidia.com/gpu": 6}),  # 7750m rounded down
        ev.FreeBin(count=1, free={"cpu": 8000, "memory": mem, "nvidia.com/gpu": 8}),
    ]
    emu.remove(*CQ, "", "gpu-cq")  # no watch event: seen at the next list
    emu.put(*CQ, cluster_queue("cpu-cq", 0))
    more = await eventually(lambda: [r for r in run.reports()[2:] if r.queues and not r.full], what="a queue change")
    assert [q.name for q in more[0].queues] == ["cpu-cq"]
    assert more[0].node_groups == []


async def test_a_report_is_rate_bounded(worker: Callable[..., Any]) -> None:
    run = await worker(_world, interval_s=3600)
    await eventually(run.reports, what="the full report")
    emu = run.server.emulator
    emu.put(*PODS, pod("new", "n3", gpus=1))
    # The pod was followed (the state knows it) but nothing more is reported within the interval.
    await eventually(
        lambda: run.worker.capacity_state.changed and "other-team/new" in run.worker.capacity_state._pods,
        what="pod seen",
    )
    assert len(run.reports()) == 1


# -- the rules on their own --------------------------------------------------------------------------


def test_rounding_is_down_to_steps_and_three_significant_binary_digits_leaving_out_zeros_and_pods() -> None:
    free = {"cpu": 799, "memory": 300 * 1024**2, "nvidia.com/gpu": 0, "pods": 100, "example.com/x": 3}
    assert round_down(free) == (("cpu", 700), ("example.com/x", 3), ("memory", 256 * 1024**2))
    # 19 steps of 100m: 8, 10, 12, 14, 16, 20, ... steps: 1600m, never more than there is
    assert round_down({"cpu": 1999, "nvidia.com/gpu": 8}) == (("cpu", 1600), ("nvidia.com/gpu", 8))
    assert [coarse(n) for n in (7, 8, 9, 15, 16, 19, 24, 31)] == [7, 8, 8, 14, 16, 16, 24, 28]


def test_a_worker_without_kueue_reports_no_queue_facts() -> None:
    state = WorkerState()
    state.on_node("LISTED", node("a"))
    full, _ = ReportDiffer("w").next_report(state, now_ms=0) or pytest.fail("no full report")
    assert full.local_queues is None and full.queues == [] and len(full.node_groups) == 1


def test_taints_split_groups_and_a_vanished_group_is_reported_without_bins() -> None:
    state = WorkerState()
    tainted = node("t", spec={"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]})
    state.on_node("LISTED", node("a"))
    state.on_node("LISTED", tainted)
    differ = ReportDiffer("w", min_interval_ms=1000)
    full, first_id = differ.next_report(state, now_ms=0) or pytest.fail("no full report")
    assert full.full and len(full.node_groups) == 2
    assert [g.taints for g in full.node_groups if g.taints] == [[ev.Taint(key="gpu", value="yes", effect="NoSchedule")]]
    state.on_node("DELETED", tainted)
    assert differ.next_report(state, now_ms=500) is None  # too soon
    change, change_id = differ.next_report(state, now_ms=1000) or pytest.fail("no change report")
    (gone,) = change.node_groups
    assert gone.bins == [] and gone.id in {g.id for g in full.node_groups if g.taints}
    assert differ.next_report(state, now_ms=5000) is None  # nothing new
    # Back as it was (A, B, A): a new message id, so the inbox does not drop it as a duplicate.
    state.on_node("ADDED", tainted)
    back, back_id = differ.next_report(state, now_ms=6000) or pytest.fail("no change report")
    assert back.node_groups and back_id not in (first_id, change_id)
    differ.reset()
    again, _ = differ.next_report(state, now_ms=7000) or pytest.fail("no full report")
    assert again.full and again.node_groups == full.node_groups


def test_two_replicas_that_saw_the_same_changes_use_the_same_ids() -> None:
    ids = []
    for _ in range(2):
        state, differ = WorkerState(), ReportDiffer("w", min_interval_ms=10)
        state.on_node("LISTED", node("a"))
        first = differ.next_report(state, now_ms=100)
        state.on_pod("ADDED", pod("p", "a"))
        second = differ.next_report(state, now_ms=200)
        assert first and second
        ids.append((first[1], second[1]))
    assert ids[0] == ids[1]


def test_flavors_keep_kueues_order_group_after_group() -> None:
    cq = {
        "metadata": {"name": "q"},
        "spec": {
            "stopPolicy": "Hold",
            "resourceGroups": [
                {"flavors": [{"name": n, "resources": [{"name": "cpu", "nominalQuota": 4}]} for n in ("on-demand", "spot")]},
                {"flavors": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}]},
            ],
        },
    }
    fact = queue_fact(cq)
    assert [f.name for f in fact.flavors] == ["on-demand", "spot", "a100"]
    assert [set(f.resources) for f in fact.flavors] == [{"cpu"}, {"cpu"}, {"nvidia.com/gpu"}]
    assert fact.stopped


def test_without_a_topology_object_the_configured_levels_group_nodes() -> None:
    state = WorkerState(default_levels=("cloud.example.com/rack",))
    state.on_node("LISTED", node("a", rack="r1"))
    state.on_node("LISTED", node("b", rack="r2"))
    assert sorted(g.labels["cloud.example.com/rack"] for g in state.node_groups().values()) == ["r1", "r2"]
    state.on_topology("LISTED", {"metadata": {"name": "t"}, "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]}})
    (only,) = state.node_groups().values()  # the host level never splits groups: a bin row is a node
    assert only.bins == [ev.FreeBin(count=2, free={"cpu": 8000, "memory": 32 * GI, "nvidia.com/gpu": 1})]
