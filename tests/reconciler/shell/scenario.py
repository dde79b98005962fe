"""A small, real scenario for the shell tests: a leader term on a JetStream log, fed through the inbox.

Two clusters (east: 8 GPUs, region=east; west: 4 GPUs, region=west), jobs submitted through the
inbox as the webhook would, the nominated copies created and admitted as a worker would report
them. Everything goes through a real nats-server; nothing is faked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog, connect
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready
from tests.waiting import Unmet, eventually

GPU = "nvidia.com/gpu"
POLICY = ev.PolicyLoaded(
    profiles=[
        ev.Profile(
            name="default",
            filters=[
                ev.FilterSpec(name="ClusterHealth"),
                ev.FilterSpec(name="ClusterSelector"),
                ev.FilterSpec(name="ClusterFeasibility"),
                ev.FilterSpec(name="ClusterHeadroom"),
            ],
            scores=[ev.ScoreSpec(name="CapacityScore")],
            strategy=ev.StrategySpec(type="TopK", k=1),
        )
    ],
    worker_lost_timeout_ms=600_000,
)


def job_ref(i: int) -> ev.JobRef:
    return ev.JobRef(namespace="team-a", name=f"job-{i}", uid=f"uid-{i}")


def submission(i: int, *, gpus: int = 1, region: str | None = None) -> ev.JobSubmitted:
    placement = ev.Placement(cluster_selector={"region": region}) if region else ev.Placement()
    return ev.JobSubmitted(
        job=job_ref(i),
        pod_sets=[ev.PodSet(name="main", count=1, requests={"cpu": 1000, GPU: gpus})],
        placement=placement,
    )


CLUSTERS = [
    ev.ClusterRegistered(cluster="east", labels={"region": "east"}, capacity={"cpu": 64_000, GPU: 8}),
    ev.ClusterRegistered(cluster="west", labels={"region": "west"}, capacity={"cpu": 64_000, GPU: 4}),
]


async def publish_clusters(jlog: JetStreamLog, *, scale: int = 1) -> None:
    """Register east and west (``scale`` times their GPUs and CPUs) and a first heartbeat each."""
    for c in CLUSTERS:
        if scale != 1:
            c = msgspec.structs.replace(c, capacity={r: n * scale for r, n in c.capacity.items()})
        await jlog.inbox.publish(c, msg_id=f"register/{c.cluster}")
        await jlog.inbox.publish(ev.ClusterHeartbeat(cluster=c.cluster), msg_id=f"hb/{c.cluster}/0")


async def read_all(jlog: JetStreamLog) -> list[ev.LogEntry]:
    out: list[ev.LogEntry] = []
    async for chunk in jlog.reader.read():
        out.extend(chunk)
    return out


async def wait_for(
    jlog: JetStreamLog, predicate: Callable[[list[ev.LogEntry]], bool], *, timeout_s: float = 20.0
) -> list[ev.LogEntry]:
    """Poll the log until ``predicate(entries)`` holds; those entries."""
    seen: list[list[ev.LogEntry]] = [[]]

    async def check() -> Any:
        seen[0] = await read_all(jlog)
        kinds = [type(e.event).__name__ for e in seen[0]]
        return predicate(seen[0]) or Unmet(f"{len(kinds)} entries: {kinds}")

    await eventually(check, timeout_s=timeout_s, what="the log to satisfy the condition")
    return seen[0]


def decisions_of(entries: list[ev.LogEntry], kind: type[ev.Event]) -> list[ev.LogEntry]:
    return [e for e in entries if isinstance(e.event, kind)]


async def admit(jlog: JetStreamLog, nominated: ev.Nominated, *, cluster: str) -> None:
    """What a worker reports for the copy on ``cluster``: created, then admitted."""
    ref, attempt = nominated.job, nominated.attempt
    key = f"{cluster}/{ref.uid}/{attempt}"
    await jlog.inbox.publish(ev.RemoteCreated(job=ref, cluster=cluster, attempt=attempt), msg_id=f"{key}/created")
    await jlog.inbox.publish(ev.RemoteAdmitted(job=ref, cluster=cluster, attempt=attempt), msg_id=f"{key}/admitted")


@dataclass
class Scenario:
    jobs: list[ev.JobRef] = field(default_factory=list)
    placed: dict[str, str] = field(default_factory=dict)  # job key -> cluster
    last_seq: int = 0


def placed_all(n: int) -> Callable[[list[ev.LogEntry]], bool]:
    return lambda entries: len(decisions_of(entries, ev.Placed)) >= n


async def run_scenario(url: str, root: str, *, jobs: int = 4) -> Scenario:
    """Submit ``jobs`` jobs (job-0 needs 6 GPUs: only east fits; job-1 asks for region=west), admit
    each where it was nominated, and return where they were placed."""
    jlog = await connect(url, root=root)
    loop = LeaderLoop(jlog, LoopSettings(leader_id="scenario", policy=POLICY, idle_wait_s=0.02))
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    try:
        await wait_ready(loop, timeout_s=20)
        await publish_clusters(jlog)
        subs = [submission(0, gpus=6), submission(1, region="west")] + [submission(i) for i in range(2, jobs)]
        for s in subs:
            await jlog.inbox.publish(s, msg_id=f"submit/{s.job.uid}")
        entries = await wait_for(jlog, lambda es: len(decisions_of(es, ev.Nominated)) >= jobs)
        for e in decisions_of(entries, ev.Nominated):
            assert isinstance(e.event, ev.Nominated)
            await admit(jlog, e.event, cluster=e.event.clusters[0])
        entries = await wait_for(jlog, placed_all(jobs))
        result = Scenario(jobs=[s.job for s in subs], last_seq=entries[-1].seq)
        for e in decisions_of(entries, ev.Placed):
            assert isinstance(e.event, ev.Placed)
            result.placed[e.event.job.key] = e.event.cluster
        return result
    finally:
        stop.set()
        await term
        await jlog.close()


async def delete_log(url: str, root: str) -> None:
    jlog = await connect(url, root=root)
    try:
        names = jlog.names
        for stream in (names.inbox_stream, names.log_stream, f"KV_{names.lease_bucket}", f"OBJ_{names.snapshot_bucket}"):
            with contextlib.suppress(Exception):  # absent: nothing to clean
                await jlog.js.delete_stream(stream)
    finally:
        await jlog.close()
