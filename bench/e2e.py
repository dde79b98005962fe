"""End-to-end benchmark: 1,000 jobs through the whole in-process pipeline on a real nats-server.

    inbox -> sequencer loop -> log -> core decide -> actuator -> three simulated workers
          -> RemoteCreated/RemoteAdmitted facts -> inbox -> log -> Placed

Side by side, in the same process and on the same server, the baseline is the same pipeline with
no clusters registered, where every job is decided (Unschedulable) without any cluster round
trip: what the log and the core cost alone. Latency is from the moment a job's JobSubmitted is
published to the sequencing time (``at_ms``) of its Placed entry (baseline: its first decision).
Floors (issue 6): 500 jobs/s and p95 under 1 s. For scale, Kueue's MultiKueue benchmark reports
about 100 workloads/s with 1 manager and 3 workers on 32 cores.

Run: ``.venv/bin/python bench/e2e.py [--jobs 1000]``. The last line is the headline figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nats.aio.msg import Msg

from eventlog import codec
from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import JetStreamLog, connect
from reconciler.config import decode_config
from reconciler.edge.logging import configure
from reconciler.edge.percentile import percentile
from reconciler.policy import policy_event
from reconciler.service.loop import LoopSettings, wait_ready
from reconciler.service.wiring import Settings, running

GPU = "nvidia.com/gpu"
MULTIKUEUE_JOBS_PER_S = 100.0

CONFIG = {
    "policy": {
        "profiles": [
            {
                "name": "default",
                "filters": ["ClusterHealth", "ClusterSelector", "ClusterFeasibility", "ClusterHeadroom"],
                "scores": ["CapacityScore"],
                "strategy": {"type": "TopK", "k": 1},
            }
        ]
    },
    "clusters": [
        {
            "name": f"sim-{i}",
            "labels": {"zone": f"z{i}"},
            "simulated": {"capacity": {"cpu": 100_000, GPU: 10_000}, "defaultRuntime": "1h"},
            "heartbeatInterval": "1s",
        }
        for i in range(3)
    ],
}


def submission(i: int) -> ev.JobSubmitted:
    ref = ev.JobRef(namespace="bench", name=f"job-{i}", uid=f"uid-{i:05d}")
    return ev.JobSubmitted(
        job=ref, pod_sets=[ev.PodSet(name="main", count=1, requests={"cpu": 1000, GPU: 1})]
    )


async def submit_all(jlog: JetStreamLog, n: int) -> dict[str, int]:
    """Publish every JobSubmitted, 200 per burst with their acks collected together, as the
    webhook's batcher does under load; returns uid -> submission time (ms)."""
    sent: dict[str, int] = {}
    for start in range(0, n, 200):
        events = [submission(i) for i in range(start, min(n, start + 200))]
        now = time.time_ns() // 1_000_000
        sent.update((e.job.uid, now) for e in events)
        await jlog.inbox.publish_many([(e, f"bench/{e.job.uid}") for e in events], timeout_s=10)
    return sent


async def wait_decided(
    jlog: JetStreamLog, n: int, verbs: tuple[str, ...], *, timeout_s: float
) -> dict[str, int]:
    """uid -> at_ms of the first decision of ``verbs`` about it, once ``n`` jobs have one.

    Reads only those decisions' subjects (``<root>.log.decision.<verb>.>``), so measuring does
    not compete with the pipeline for the CPU by decoding the whole log again."""
    seen: dict[str, int] = {}
    done = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        entry = codec.decode_entry(msg.data)
        job = getattr(entry.event, "job", None)
        if isinstance(job, ev.JobRef):
            seen.setdefault(job.uid, entry.at_ms)
        if len(seen) >= n:
            done.set()

    prefix = jlog.names.log_prefix
    subs = [
        await jlog.js.subscribe(f"{prefix}.decision.{verb}.>", cb=on_msg, ordered_consumer=True)
        for verb in verbs
    ]
    try:
        await asyncio.wait_for(done.wait(), timeout_s)
    except TimeoutError:
        raise SystemExit(f"only {len(seen)} of {n} jobs decided within {timeout_s}s") from None
    finally:
        for sub in subs:
            await sub.unsubscribe()
    return seen


async def run_pipeline(url: str, *, root: str, n: int, with_clusters: bool) -> tuple[float, list[float]]:
    config = decode_config(CONFIG if with_clusters else {**CONFIG, "clusters": []})
    jlog = await connect(url, root=root)
    settings = Settings(
        loop=LoopSettings(leader_id=root, policy=policy_event(config.policy), idle_wait_s=0.01),
        actuate=with_clusters,
    )
    try:
        async with running(jlog, config, settings) as system:
            await wait_ready(system.loop, timeout_s=30)
            if with_clusters:
                await wait_decided_clusters(jlog, 3)
            verbs = ("placed",) if with_clusters else ("unschedulable", "nominated")
            started = time.time_ns() // 1_000_000
            waiter = asyncio.create_task(wait_decided(jlog, n, verbs, timeout_s=120))
            sent = await submit_all(jlog, n)
            decided = await waiter
            last = max(decided.values())
            rate = n / max((last - started) / 1000, 1e-3)
            latencies = [(decided[uid] - sent[uid]) / 1000 for uid in sent]
            return rate, latencies
    finally:
        await jlog.close()


async def wait_decided_clusters(jlog: JetStreamLog, n: int) -> None:
    """Wait until the log has registered the ``n`` clusters (so the timing starts warm)."""
    while True:
        registered = set()
        async for batch in jlog.reader.read():
            registered |= {e.event.cluster for e in batch if isinstance(e.event, ev.ClusterRegistered)}
        if len(registered) >= n:
            return
        await asyncio.sleep(0.05)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    configure(level="warning")
    with tempfile.TemporaryDirectory(prefix="kd-bench-e2e-") as tmp:
        async with EmbeddedNats(data_dir=Path(tmp)) as server:
            base_rate, base_lat = await run_pipeline(
                server.url, root="benchbase", n=args.jobs, with_clusters=False
            )
            rate, lat = await run_pipeline(server.url, root="benche2e", n=args.jobs, with_clusters=True)

    def row(name: str, r: float, lat_s: list[float]) -> str:
        return (
            f"{name:<44} {r:>8,.0f} jobs/s   p50 {percentile(lat_s, 50) * 1000:>6.0f} ms"
            f"   p95 {percentile(lat_s, 95) * 1000:>6.0f} ms   p99 {percentile(lat_s, 99) * 1000:>6.0f} ms"
        )

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"jobs: {args.jobs:,} (1 GPU each), 3 simulated workers, real nats-server, real core and loop")
    print(f"machine: {os.cpu_count()} cores, load average {load} (numbers scale with what else runs)")
    print(row("baseline: log + core only (no clusters)", base_rate, base_lat))
    print(row("pipeline: submit -> Placed via 3 workers", rate, lat))
    print(
        f"pipeline / baseline throughput: {rate / base_rate:.2f}x; vs MultiKueue's ~100/s: {rate / MULTIKUEUE_JOBS_PER_S:.1f}x"
    )
    p95 = percentile(lat, 95)
    ok = rate >= 500 and p95 < 1.0
    print(f"floors: >= 500 jobs/s and p95 < 1 s: {'met' if ok else 'NOT met'}")
    print(f"e2e: {rate:,.0f} jobs/s submit->Placed through 3 simulated workers, p95 {p95 * 1000:.0f} ms")


if __name__ == "__main__":
    asyncio.run(main())
