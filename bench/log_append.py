"""Inbox -> log sequencing throughput on a real nats-server (file storage), side by side with
nats-py's own pipelined publish (``publish_async``) of the same payloads to a plain stream.

Both run in this process against the same server. The sequencer's work per event: pull it from
the inbox, decode it, build and encode the log entry, publish it fenced
(``Nats-Expected-Last-Sequence``, ``Nats-Msg-Id``) and check its ack.

    .venv/bin/python bench/log_append.py [--events N] [--batch B]

Floors (issue 2): >= 10,000 events/s sequenced, and >= 0.4 x the plain pipelined publish.
The last line is the headline figure.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nats.js.api import StorageType, StreamConfig

from eventlog import codec
from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import JetStreamLog, connect
from eventlog.jetstream.publish import Publisher
from eventlog.store import InboxItem
from reconciler.edge.percentile import percentile


def event_mix(n: int) -> list[ev.InputEvent]:
    """What an inbox sees: mostly heartbeats and remote facts, some submissions."""
    out: list[ev.InputEvent] = []
    for i in range(n):
        job = ev.JobRef(namespace=f"team-{i % 7}", name=f"job-{i}", uid=f"uid-{i}")
        match i % 5:
            case 0:
                out.append(
                    ev.JobSubmitted(
                        job=job,
                        pod_sets=[
                            ev.PodSet(name="main", count=1 + i % 4, requests={"cpu": 1000, "memory": 2**30})
                        ],
                        priority=i % 3,
                    )
                )
            case 1 | 2:
                out.append(ev.ClusterHeartbeat(cluster=f"cluster-{i % 5}", usage={"cpu": 1000 * (i % 64)}))
            case 3:
                out.append(ev.RemoteAdmitted(job=job, cluster=f"cluster-{i % 5}", attempt=1))
            case _:
                out.append(ev.RemoteFinished(job=job, cluster=f"cluster-{i % 5}", attempt=1))
    return out


async def fill_inbox(jlog: JetStreamLog, events: list[ev.InputEvent], *, first_id: int = 0) -> None:
    pub = Publisher(jlog.nc)
    for start in range(0, len(events), 2000):
        chunk = events[start : start + 2000]
        batch = [
            (jlog.inbox.subject(e), codec.encode(e), {"Nats-Msg-Id": f"in-{first_id + start + i}"})
            for i, e in enumerate(chunk)
        ]
        acks = await pub.publish(batch, timeout_s=30)
        assert all(a is not None and a.error is None for a in acks)


async def bench_plain(jlog: JetStreamLog, payloads: list[tuple[str, bytes]], *, window: int) -> float:
    """nats-py's pipelined publish: publish_async ``window`` at a time, then await their acks."""
    js = jlog.js
    await js.add_stream(
        StreamConfig(name="BENCH_PLAIN", subjects=["bench.plain.>"], storage=StorageType.FILE)
    )
    t0 = time.perf_counter()
    for start in range(0, len(payloads), window):
        futures = [await js.publish_async(f"bench.plain.{s}", p) for s, p in payloads[start : start + window]]
        await asyncio.gather(*futures)
    elapsed = time.perf_counter() - t0
    await js.delete_stream("BENCH_PLAIN")
    return len(payloads) / elapsed


async def bench_sequencer(jlog: JetStreamLog, n: int, *, batch: int) -> tuple[float, list[float]]:
    seq = jlog.sequencer("bench")
    await seq.resume()
    latencies: list[float] = []
    copied = 0
    t0 = time.perf_counter()
    while copied < n:
        items: list[InboxItem] = await seq.pull(max_items=batch, timeout_s=1.0)
        t1 = time.perf_counter()
        await seq.append_inputs(items, at_ms=int(time.time() * 1000))
        latencies.append(time.perf_counter() - t1)
        copied += len(items)
    elapsed = time.perf_counter() - t0
    return n / elapsed, latencies


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000, help="events per round")
    parser.add_argument("--batch", type=int, default=1000, help="inbox items per pull / append")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of baseline and ours")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))

    events = event_mix(args.events)
    plains: list[float] = []
    ours_: list[float] = []
    latencies: list[float] = []
    with tempfile.TemporaryDirectory(prefix="kd-bench-") as tmp:
        async with EmbeddedNats(data_dir=Path(tmp)) as server:
            jlog = await connect(server.url, root="bench")
            try:
                for round_ in range(args.rounds):
                    await fill_inbox(jlog, events, first_id=round_ * len(events))
                # Same subjects and payload sizes as the log entries the sequencer writes.
                entries = [
                    ev.LogEntry(seq=i + 1, at_ms=1, event=e, inbox_seq=i + 1, leader="bench")
                    for i, e in enumerate(events)
                ]
                payloads = [(f"{type(e.event).__name__}.x", codec.encode(e)) for e in entries]
                for _ in range(args.rounds):  # alternate, so machine load hits both alike
                    plains.append(await bench_plain(jlog, payloads, window=args.batch))
                    rate, lat = await bench_sequencer(jlog, args.events, batch=args.batch)
                    ours_.append(rate)
                    latencies += lat
            finally:
                await jlog.close()

    plain, ours = statistics.median(plains), statistics.median(ours_)
    ratio = ours / plain
    print(
        f"events per round                {args.events:>10,}  (batch {args.batch}, median of {args.rounds})"
    )
    print(
        f"nats-py publish_async, plain    {plain:>10,.0f} events/s   (rounds: {', '.join(f'{r:,.0f}' for r in plains)})"
    )
    print(
        f"kdispatch sequencer, fenced     {ours:>10,.0f} events/s   (rounds: {', '.join(f'{r:,.0f}' for r in ours_)})"
    )
    print(
        f"append batch latency (ms)       p50 {percentile(latencies, 50) * 1000:.1f}  p90 {percentile(latencies, 90) * 1000:.1f}"
        f"  p99 {percentile(latencies, 99) * 1000:.1f}"
    )
    ok = ours >= 10_000 and ratio >= 0.4
    print(f"floors: >= 10,000 events/s and ratio >= 0.4: {'met' if ok else 'NOT met'}")
    print(f"log_append: {ours:,.0f} events/s sequenced = {ratio:.2f} x nats-py pipelined publish")


if __name__ == "__main__":
    asyncio.run(main())
