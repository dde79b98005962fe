"""End to end with simulated clusters, wired as ``serve``/``demo`` wire them (``service.wiring``)
from a config file with ``simulated:`` clusters: the real leader loop and core, a real nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from reconciler.config import decode_config
from reconciler.policy import policy_event
from reconciler.service.clusters.simulated import SimCluster
from reconciler.service.loop import LoopSettings, wait_ready
from reconciler.service.wiring import Settings, System, running
from reconciler.simworker import CopyState
from tests.waiting import eventually

GPU = "nvidia.com/gpu"


def config(*, runtime: str) -> Any:
    return decode_config(
        {
            "policy": {
                "workerLostTimeout": "1s",
                "requeueBackoff": "100ms",
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
                    "name": name,
                    "simulated": {
                        "capacity": {"cpu": 64, GPU: gpus},
                        "admissionLatency": "50ms",
                        "defaultRuntime": runtime,
                    },
                    "heartbeatInterval": "100ms",
                }
                for name, gpus in (("big", 8), ("small", 4))
            ],
        }
    )


class World:
    def __init__(self, jlog: JetStreamLog, system: System) -> None:
        self.jlog = jlog
        self.system = system

    def sim(self, name: str) -> SimCluster:
        assert self.system.clusters is not None
        worker = self.system.clusters.configured.workers[name]
        assert isinstance(worker, SimCluster)
        return worker

    def copies(self, job: str) -> dict[str, tuple[int, CopyState]]:
        out = {}
        for name in ("big", "small"):
            for c in self.sim(name).model.copies():
                if c.job.name == job:
                    out[name] = (c.attempt, c.state)
        return out

    async def submit(self, name: str, *, runtime_ms: int | None = None) -> None:
        ref = ev.JobRef(namespace="team-a", name=name, uid=f"uid-{name}")
        sub = ev.JobSubmitted(
            job=ref, pod_sets=[ev.PodSet(name="main", count=1, requests={GPU: 2})], runtime_ms=runtime_ms
        )
        await self.jlog.inbox.publish(sub, msg_id=f"webhook/{ref.uid}")

    async def entries(self) -> list[ev.LogEntry]:
        out: list[ev.LogEntry] = []
        async for chunk in self.jlog.reader.read():
            out.extend(chunk)
        return out


def settings(cfg: Any, leader_id: str) -> Settings:
    return Settings(loop=LoopSettings(leader_id=leader_id, policy=policy_event(cfg.policy), idle_wait_s=0.02))


async def start(jslog: JetStreamLog, *, runtime: str) -> AsyncIterator[World]:
    cfg = config(runtime=runtime)
    async with running(jslog, cfg, settings(cfg, "sim-e2e")) as system:
        await wait_ready(system.loop, timeout_s=20)
        yield World(jslog, system)


@pytest.fixture
async def world(jslog: JetStreamLog) -> AsyncIterator[World]:
    async for w in start(jslog, runtime="1h"):
        yield w


async def test_a_job_runs_for_its_runtime_finishes_and_is_cleaned_up(world: World) -> None:
    await world.submit("short", runtime_ms=300)
    await eventually(
        lambda: world.copies("short").get("big", (0, None))[1] is CopyState.ADMITTED, what="admitted"
    )
    await eventually(lambda: not world.copies("short"), what="finished and cleaned up")
    entries = await world.entries()
    kinds = [
        type(e.event).__name__
        for e in entries
        if getattr(e.event, "job", None) and e.event.job.name == "short"
    ]
    for expected in (
        "Nominated",
        "RemoteCreated",
        "RemoteAdmitted",
        "Placed",
        "RemoteFinished",
        "Finished",
        "CleanUp",
    ):
        assert expected in kinds


async def test_a_silent_cluster_is_lost_its_job_moves_and_the_stale_copy_is_withdrawn(world: World) -> None:
    await world.submit("long")
    await eventually(lambda: world.copies("long") == {"big": (1, CopyState.ADMITTED)}, what="running on big")
    world.sim("big").silence(None)  # goes quiet for good (until recovered)
    await eventually(
        lambda: world.copies("long").get("small") == (2, CopyState.ADMITTED),
        timeout_s=15,
        what="re-placed on small",
    )
    assert world.copies("long")["big"] == (1, CopyState.ADMITTED)  # still running there, unreachable
    world.sim("big").recover()
    await eventually(
        lambda: world.copies("long") == {"small": (2, CopyState.ADMITTED)},
        timeout_s=15,
        what="stale copy removed",
    )
    entries = await world.entries()
    assert any(isinstance(e.event, ev.ClusterLost) and e.event.cluster == "big" for e in entries)
    assert any(isinstance(e.event, ev.ClusterRecovered) and e.event.cluster == "big" for e in entries)


async def test_a_cluster_dropped_from_the_config_is_removed_and_its_job_moves(jslog: JetStreamLog) -> None:
    first = start(jslog, runtime="1h")
    world = await anext(first)
    await world.submit("stays")
    await eventually(lambda: world.copies("stays") == {"big": (1, CopyState.ADMITTED)}, what="running on big")
    await first.aclose()  # serve stops; the operator deletes "big" from the config file
    cfg = config(runtime="1h")
    cfg.clusters = [c for c in cfg.clusters if c.name != "big"]
    async with running(jslog, cfg, settings(cfg, "sim-e2e-2")) as system:
        await wait_ready(system.loop, timeout_s=20)
        assert system.clusters is not None
        small = system.clusters.configured.workers["small"]
        assert isinstance(small, SimCluster)

        def moved() -> bool:
            return any(c.job.name == "stays" and c.attempt == 2 for c in small.model.copies())

        await eventually(moved, timeout_s=15, what="job re-placed on small")
        entries = []
        async for chunk in jslog.reader.read():
            entries.extend(chunk)
        removed = [e.event for e in entries if isinstance(e.event, ev.ClusterRemoved)]
        assert removed == [ev.ClusterRemoved(cluster="big")]
