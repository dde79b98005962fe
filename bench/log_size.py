"""Log size per million entries per replica, and what each lever takes off, on a real nats-server.

    .venv/bin/python bench/log_size.py [--entries 200000] [--snapshot-every 100000]

The same fleet mix of log entries is written, in one run on one server, to streams that differ
only in the lever under test; bytes on disk are read from each stream's directory after a clean
stop (blocks, indexes, metadata: what a replica stores) and scaled to one million entries.

The fleet mix (bench/sizing.py's job life, with the object as admitted in every JobSubmitted):
half the jobs live their whole life (submitted, nominated, created, admitted, placed, finished,
cleaned up, gone), half wait behind quota (submitted, then ``Unschedulable``); two heartbeats per
job; a capacity report (``ClusterCapacityReported``: node groups with free-node histograms and the
worker's ClusterQueues, the largest inputs) every 10 jobs.

Levers:
- plain: the log stream as ``eventlog.jetstream`` created it before (file store, no compression),
  with the headers the sequencer sends. The baseline.
- s2: the same with ``compression: s2`` (nats-server >= 2.10; replay reads the same bytes back).
- msgpack+s2: the entries encoded with msgpack instead of canonical JSON (a compact encoding of
  every entry: no key quoting, binary integers), on the s2 stream.
- retention: s2, and entries older than the latest snapshot purged (``purge(seq=...)``, after
  ``kdispatch export`` has written them to JSONL for whole-history replay): what stays is the tail
  after the last snapshot, plus the snapshot in the object store.

The last line is the headline: s2 bytes per million entries per replica and its ratio to plain.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from nats.js.api import StoreCompression
from sizing import T0, heartbeat, job_events

from eventlog import codec, subjects
from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import connect
from eventlog.jetstream.publish import Outgoing, Publisher
from eventlog.jetstream.sequencer import INBOX_LAST_HEADER

FLOOR_MB_PER_MILLION = 300.0
CLUSTERS = 50


def capacity_report(i: int) -> ev.ClusterCapacityReported:
    """One worker's capacity facts: 4 node groups of 8 free-node bins, and 2 ClusterQueues."""
    groups = [
        ev.NodeGroup(
            id=f"pool-{g}",
            labels={"topology.kubernetes.io/zone": f"zone-{g % 3}", "nvidia.com/gpu.product": "A100-SXM4-80GB", "node.kubernetes.io/instance-type": "p4d.24xlarge"},
            bins=[ev.FreeBin(count=1 + (i + b) % 7, free={"cpu": 1000 * (b + 1), "memory": (b + 1) << 32, "nvidia.com/gpu": b % 8}) for b in range(8)],
        )
        for g in range(4)
    ]
    queues = [
        ev.WorkerQueueFact(
            name=f"cq-{q}",
            cohort="all",
            flavors=[ev.FlavorFact(name="a100", resources={"nvidia.com/gpu": ev.QuotaFact(nominal=64, used=(i * 7 + q) % 64)})],
        )
        for q in range(2)
    ]
    return ev.ClusterCapacityReported(cluster=f"worker-{i % CLUSTERS:03d}", node_groups=groups, queues=queues)


def fleet_mix(target: int) -> list[ev.LogEntry]:
    out: list[ev.LogEntry] = []
    seq, at_ms, i = 0, T0, 0

    def add(event: ev.AnyEvent, batch: tuple[int, int] | None = None) -> None:
        nonlocal seq
        seq += 1
        inbox = None if ev.is_decision(event) else seq
        out.append(ev.LogEntry(seq=seq, at_ms=at_ms, event=event, inbox_seq=inbox, batch=batch, leader="kdispatch-reconciler-0"))

    while seq < target:
        at_ms += 200
        life = job_events(i)
        if i % 2:  # waits behind quota
            add(life[0])
            queue = f"team-{i % 100:03}"
            submitted = life[0]
            assert isinstance(submitted, ev.JobSubmitted)
            job = submitted.job
            reasons = {f"QuotaExceeded: ClusterQueue {queue}": CLUSTERS}
            message = f"queue {queue}: nvidia.com/gpu 16/8 nominal, cohort has 0 to lend (borrowing limit 8)"
            add(ev.Unschedulable(job=job, reasons=reasons, message=message), (0, 1))
        else:
            for event in life:
                add(event, (0, 1) if ev.is_decision(event) else None)
        for k in range(2):
            add(heartbeat(2 * i + k))
        if i % 10 == 0:
            add(capacity_report(i))
        i += 1
    return out[:target]


async def write(publisher: Publisher, name: str, entries: list[ev.LogEntry], payloads: list[bytes]) -> None:
    prefix = f"size.{name}"
    batch: list[Outgoing] = []
    for entry, payload in zip(entries, payloads, strict=True):
        headers = {"Nats-Expected-Last-Sequence": str(entry.seq - 1), "Nats-Msg-Id": f"log-{entry.seq}"}
        if entry.inbox_seq is None:
            headers[INBOX_LAST_HEADER] = str(entry.seq - 1)
        batch.append((subjects.subject_for(entry.event, prefix=prefix), payload, headers))
        if len(batch) >= 2000:
            acks = await publisher.publish(batch, timeout_s=30.0)
            assert all(a is not None and a.error is None for a in acks), acks[:3]
            batch = []
    if batch:
        acks = await publisher.publish(batch, timeout_s=30.0)
        assert all(a is not None and a.error is None for a in acks), acks[:3]


def key(lever: str) -> str:
    return lever.replace("+", "-")


def stream(lever: str) -> str:
    return f"SIZE_{key(lever).upper()}"


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--snapshot-every", type=int, default=100_000, help="entries between snapshots (retention keeps the tail after the last)")
    parser.add_argument("--snapshot-bytes-per-job", type=float, default=900.0, help="core snapshot size per live job (bench/fleet.py prints it)")
    args = parser.parse_args()
    print(f"building {args.entries:,} log entries of the fleet mix...", flush=True)
    entries = fleet_mix(args.entries)
    payloads = [codec.encode(e) for e in entries]
    json_bytes = sum(map(len, payloads))
    kinds: dict[str, int] = {}
    for e, p in zip(entries, payloads, strict=True):
        kinds[type(e.event).__name__] = kinds.get(type(e.event).__name__, 0) + len(p)
    top = sorted(kinds.items(), key=lambda kv: -kv[1])[:4]
    print("largest by payload bytes: " + ", ".join(f"{k} {v / json_bytes:.0%}" for k, v in top))
    levers = {
        "plain": StoreCompression.NONE,
        "s2": StoreCompression.S2,
        "msgpack+s2": StoreCompression.S2,
        "retention": StoreCompression.S2,
    }
    packed = [msgspec.msgpack.encode(e) for e in entries]
    msgpack_bytes = sum(map(len, packed))
    with tempfile.TemporaryDirectory(prefix="kd-bench-logsize-") as tmp:
        server = EmbeddedNats(data_dir=Path(tmp))
        await server.start_async()
        try:
            jlog = await connect(server.url, root="sizebench")
            base = jlog._stream_configs()[1]
            publisher = Publisher(jlog.nc)
            for name, compression in levers.items():
                config = dataclasses.replace(base, name=stream(name), subjects=[f"size.{key(name)}.>"], compression=compression)
                await jlog.js.add_stream(config)
                started = time.perf_counter()
                await write(publisher, key(name), entries, packed if name.startswith("msgpack") else payloads)
                print(f"  wrote {name}: {len(entries) / (time.perf_counter() - started):,.0f} entries/s", flush=True)
            # Retention: keep what follows the last snapshot (the rest is in the JSONL export).
            last_snapshot = (len(entries) // args.snapshot_every) * args.snapshot_every
            if last_snapshot == len(entries):
                last_snapshot -= args.snapshot_every
            await jlog.js.purge_stream(stream("retention"), seq=last_snapshot + 1)
            state = {name: (await jlog.js.stream_info(stream(name))).state for name in levers}
            await jlog.close()
        finally:
            await server.stop_async()
        stores = {p.name: p for p in Path(tmp).rglob("streams/*") if p.is_dir()}
        disk = {name: dir_bytes(stores[stream(name)]) for name in levers}
    n = len(entries)
    per_m = {name: disk[name] * 1_000_000 / n for name in levers}
    jobs_live = sum(1 for e in entries if isinstance(e.event, ev.JobSubmitted)) // 2  # the waiting half
    snapshot_mb = jobs_live * args.snapshot_bytes_per_job / 1e6
    print(f"entries: {n:,}; JSON payloads {json_bytes / n:,.0f} B/entry, msgpack {msgpack_bytes / n:,.0f} B/entry "
          f"(ratio {msgpack_bytes / json_bytes:.2f}, payload only)")
    print(f"{'lever':<11} {'disk MB':>9} {'B/entry':>8} {'MB per million':>15} {'vs plain':>9} {'messages kept':>14}")
    for name in levers:
        print(f"{name:<11} {disk[name] / 1e6:>9.1f} {disk[name] / n:>8.0f} {per_m[name] / 1e6:>15.0f} "
              f"{disk[name] / disk['plain']:>8.2f}x {state[name].messages:>14,}")
    print(f"retention keeps the {n - last_snapshot:,} entries after the snapshot at {last_snapshot:,} "
          f"(plus that snapshot in the object store: ~{snapshot_mb:,.0f} MB for {jobs_live:,} live jobs "
          f"at {args.snapshot_bytes_per_job:.0f} B/job), whatever the history's length")
    s2 = per_m["s2"] / 1e6
    ok = s2 <= FLOOR_MB_PER_MILLION
    print(f"HEADLINE log size with s2: {s2:,.0f} MB per million entries per replica ({disk['s2'] / disk['plain']:.2f}x plain "
          f"{per_m['plain'] / 1e6:,.0f} MB; floor {FLOOR_MB_PER_MILLION:.0f} MB)" + ("" if ok else " [FLOOR MISSED]"))


if __name__ == "__main__":
    asyncio.run(main())
