"""Capacity that matches what a worker can really run (#15), end to end: emulated manager and
worker clusters, a real nats-server, the real sequencer loop and core, wired as ``serve`` wires
them. The workers' Kubernetes adapters report their nodes, pods, Kueue queues and topology
(``ClusterCapacityReported``); the default filters plus WorkerQueueFit, NodeFit and TopologyFit
decide. In each world the worker the old totals-only model would pick (the roomiest, which
``CapacityScore`` with TopK k=1 prefers) cannot run the job, and the job goes to the other.
"""

from __future__ import annotations

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
from tests.reconciler.clusters.conftest import ApiServer, batch_job
from tests.reconciler.clusters.test_e2e_kube import JOBS, kubeconfig, log_entries, where
from tests.waiting import eventually

CQ = ("kueue.x-k8s.io", "v1beta1", "clusterqueues")
LQ = ("kueue.x-k8s.io", "v1beta1", "localqueues")
TOPO = ("kueue.x-k8s.io", "v1beta1", "topologies")
NODES = ("", "v1", "nodes")
RACK = "cloud.example.com/rack"
FILTERS = [
    "ClusterHealth",
    "ClusterSelector",
    "ClusterFeasibility",
    "ClusterHeadroom",
    "WorkerQueueFit",
    "NodeFit",
    "TopologyFit",
]


def cluster_queue(name: str, gpus: int) -> dict[str, Any]:
    resources = [{"name": "cpu", "nominalQuota": "256"}, {"name": "nvidia.com/gpu", "nominalQuota": gpus}]
    return {"metadata": {"name": name}, "spec": {"resourceGroups": [{"flavors": [{"name": "default", "resources": resources}]}]}}


def local_queue(cq: str, *, namespace: str = "team-a", name: str = "user-queue") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cq}}


def gpu_node(name: str, gpus: int, *, rack: str = "r1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, RACK: rack}},
        "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": str(gpus)}},
    }


def racks(server: ApiServer) -> None:
    levels = [{"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]
    server.emulator.put(*TOPO, {"metadata": {"name": "racks"}, "spec": {"levels": levels}})


class World:
    def __init__(self, jlog: JetStreamLog, manager: ApiServer, workers: dict[str, ApiServer]) -> None:
        self.jlog, self.manager, self.workers = jlog, manager, workers

    async def submit(self, name: str, pod_set: ev.PodSet) -> None:
        """As the webhook records it: the job on the manager, its JobSubmitted in the inbox."""
        obj = self.manager.emulator.put(*JOBS, batch_job(name))
        ref = ev.JobRef(namespace="team-a", name=name, uid=obj["metadata"]["uid"])
        submitted = ev.JobSubmitted(job=ref, pod_sets=[pod_set], queue="user-queue", manifest=obj)
        await self.jlog.inbox.publish(submitted, msg_id=f"webhook/{ref.uid}")

    async def copies(self, name: str) -> dict[str, int]:
        try:
            return await eventually(lambda: where(self.workers, name), timeout_s=60, what=f"a copy of {name}")
        except AssertionError:
            for e in await log_entries(self.jlog):
                if not isinstance(e.event, ev.ClusterHeartbeat):
                    print("log", e.seq, str(e.event)[:400])
            raise


@pytest.fixture
async def make_world(jslog: JetStreamLog, api_servers: Any, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    contexts: list[Any] = []

    async def make(setups: dict[str, Callable[[ApiServer], None]], *, kueue: bool = True) -> World:
        manager: ApiServer = await api_servers("manager")
        workers: dict[str, ApiServer] = {}
        for name, setup in setups.items():
            srv: ApiServer = await api_servers(name, kueue=kueue)
            srv.emulator.serve(*LQ, kind="LocalQueue")
            srv.emulator.serve(*TOPO, kind="Topology", namespaced=False)
            setup(srv)
            workers[name] = srv
        config = decode_config(
            {
                "manager": {
                    "id": "mgr-cap",
                    "kubeconfig": {"path": kubeconfig(tmp_path / "manager.yaml", manager, "manager")},
                    "resync": "30s",
                },
                "policy": {
                    "profiles": [
                        {
                            "name": "default",
                            "filters": FILTERS,
                            "scores": ["CapacityScore"],
                            "strategy": {"type": "TopK", "k": 1},
                        }
                    ],
                },
                "clusters": [
                    {
                        "name": name,
                        "kubeconfig": {"path": kubeconfig(tmp_path / f"{name}.yaml", srv, name)},
                        "kueue": kueue,
                        "heartbeatInterval": "500ms",
                        "heartbeatTimeout": "2s",
                    }
                    for name, srv in workers.items()
                ],
            }
        )
        settings = Settings(loop=LoopSettings(leader_id="cap", policy=policy_event(config.policy), idle_wait_s=0.02))
        context = running(jslog, config, settings)
        system = await context.__aenter__()
        contexts.append(context)
        await wait_ready(system.loop, timeout_s=20)
        world = World(jslog, manager, workers)

        async def reported() -> bool:
            seen = {e.event.cluster for e in await log_entries(jslog) if isinstance(e.event, ev.ClusterCapacityReported)}
            return seen >= set(workers)

        # Decisions made before the facts are in the log would be made on totals alone.
        await eventually(reported, timeout_s=30, what="every worker's capacity report in the log")
        return world

    yield make
    for context in reversed(contexts):
        await context.__aexit__(None, None, None)


async def test_a_job_is_not_sent_where_its_local_queue_has_no_quota(make_world: Callable[..., Any]) -> None:
    def roomy_elsewhere(srv: ApiServer) -> None:
        # 64 GPUs of quota, but all in a ClusterQueue team-a's LocalQueue does not point to
        srv.emulator.put(*CQ, cluster_queue("research", 64))
        srv.emulator.put(*CQ, cluster_queue("team-a", 0))
        srv.emulator.put(*LQ, local_queue("team-a"))
        srv.emulator.put(*LQ, local_queue("research", namespace="research"))

    def small(srv: ApiServer) -> None:
        srv.emulator.put(*CQ, cluster_queue("team-a", 2))
        srv.emulator.put(*LQ, local_queue("team-a"))

    world = await make_world({"roomy": roomy_elsewhere, "small": small})
    await world.submit("train", ev.PodSet(name="main", count=1, requests={"cpu": 500, "nvidia.com/gpu": 1}))
    assert await world.copies("train") == {"small": 1}


async def test_an_8_gpu_pod_is_not_sent_to_eight_1_gpu_nodes(make_world: Callable[..., Any]) -> None:
    def many_small_nodes(srv: ApiServer) -> None:
        for i in range(16):  # 16 GPUs in all: the roomiest by totals
            srv.emulator.put(*NODES, gpu_node(f"small-{i}", 1))

    def one_big_node(srv: ApiServer) -> None:
        srv.emulator.put(*NODES, gpu_node("big", 8))

    world = await make_world({"fragmented": many_small_nodes, "whole": one_big_node}, kueue=False)
    await world.submit("big-pod", ev.PodSet(name="main", count=1, requests={"cpu": 500, "nvidia.com/gpu": 8}))
    assert await world.copies("big-pod") == {"whole": 1}
    # The same worker takes what fits its nodes: the fragmented one is not rejected for all jobs.
    await world.submit("small-pods", ev.PodSet(name="main", count=4, requests={"cpu": 500, "nvidia.com/gpu": 1}))
    assert await world.copies("small-pods") == {"fragmented": 1}


async def test_a_tas_required_pod_set_goes_only_where_one_domain_holds_it(make_world: Callable[..., Any]) -> None:
    def spread(srv: ApiServer) -> None:
        racks(srv)
        srv.emulator.put(*CQ, cluster_queue("team-a", 64))
        srv.emulator.put(*LQ, local_queue("team-a"))
        for i in range(8):  # 8 GPUs, but 2 per rack
            srv.emulator.put(*NODES, gpu_node(f"n{i}", 1, rack=f"rack-{i // 2}"))

    def one_rack(srv: ApiServer) -> None:
        racks(srv)
        srv.emulator.put(*CQ, cluster_queue("team-a", 4))
        srv.emulator.put(*LQ, local_queue("team-a"))
        for i in range(4):  # 4 GPUs, all in one rack
            srv.emulator.put(*NODES, gpu_node(f"m{i}", 1, rack="rack-9"))

    world = await make_world({"spread": spread, "one-rack": one_rack})
    tas = ev.PodSet(
        name="main",
        count=4,
        requests={"cpu": 500, "nvidia.com/gpu": 1},
        topology=ev.TopologyRequest(required=RACK),
    )
    await world.submit("tas", tas)
    assert await world.copies("tas") == {"one-rack": 1}
    # Without the topology request the roomier worker is preferred: it is the request that decides.
    plain = ev.PodSet(name="main", count=4, requests={"cpu": 500, "nvidia.com/gpu": 1})
    await world.submit("plain", plain)
    assert await world.copies("plain") == {"spread": 1}
