"""Replay of a log from NATS, decoded into LogEntry Structs, side by side with a bare drain of the
same stream by nats-py's ordered consumer (no decoding); then replay of the same log from a JSONL
export. All in this process, against one nats-server (file storage).

    .venv/bin/python bench/log_replay.py [--events N] [--batch B]

Floors (issue 2): >= 30,000 events/s and >= 0.7 x the bare drain; JSONL >= 200,000 events/s.
The last line is the headline figure.

    .venv/bin/python bench/log_replay.py --verify [--events 1000000] [--workers 2] [--profile]

``replay --verify`` (fold, and decide again at every decision batch, compared byte for byte) of
a log as dense in decisions as a real run, made by the core (``bench/verify_log.py``, cached
under the temp dir), side by side with a plain replay (fold only) of the same JSONL file. With ``--workers N`` the same verification runs again spread over N processes
(``replay --verify --workers N``) and its rate is the headline.
Floor (issue 16): >= 50,000 entries/s on 1,000,000 entries.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import structlog
import structlog.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nats.js.api import DeliverPolicy

from bench.log_append import event_mix
from eventlog import codec, jsonl, subjects
from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import JetStreamLog, connect
from eventlog.jetstream.publish import Publisher
from eventlog.jetstream.sequencer import INBOX_LAST_HEADER
from reconciler.edge.percentile import percentile
from reconciler.history import parallel
from reconciler.history import replay as history


def log_entries(n: int) -> list[ev.LogEntry]:
    """A log as the leader writes it: inputs, each followed now and then by a decision batch."""
    out: list[ev.LogEntry] = []
    inputs = event_mix(n)
    for inbox_seq, event in enumerate(inputs, start=1):
        if len(out) >= n:
            break
        out.append(
            ev.LogEntry(
                seq=len(out) + 1,
                at_ms=1_700_000_000_000 + len(out),
                event=event,
                inbox_seq=inbox_seq,
                leader="bench",
            )
        )
        if isinstance(event, ev.JobSubmitted) and len(out) < n:
            decision = ev.Nominated(
                job=event.job, clusters=["cluster-1", "cluster-3"], attempt=1, deadline_ms=1
            )
            out.append(
                ev.LogEntry(
                    seq=len(out) + 1, at_ms=out[-1].at_ms, event=decision, batch=(0, 1), leader="bench"
                )
            )
    return out


async def write_log(jlog: JetStreamLog, entries: list[ev.LogEntry]) -> None:
    """Bench set-up only: the entries exactly as the sequencer stores them, written fast."""
    pub = Publisher(jlog.nc)
    prefix = jlog.names.log_prefix
    for start in range(0, len(entries), 5000):
        chunk = entries[start : start + 5000]
        batch = [
            (
                subjects.subject_for(e.event, prefix=prefix),
                codec.encode(e),
                {"Nats-Expected-Last-Sequence": str(e.seq - 1), "Nats-Msg-Id": f"log-{e.seq}"}
                if e.inbox_seq is not None
                else {
                    "Nats-Expected-Last-Sequence": str(e.seq - 1),
                    "Nats-Msg-Id": f"log-{e.seq}",
                    INBOX_LAST_HEADER: str(entries[e.seq - 2].inbox_seq or 0) if e.seq > 1 else "0",
                },
            )
            for e in chunk
        ]
        acks = await pub.publish(batch, timeout_s=60)
        assert all(a is not None and a.error is None for a in acks), "bench log write failed"


async def bare_drain(jlog: JetStreamLog, n: int) -> float:
    """nats-py's ordered consumer, counting messages, decoding nothing."""
    done = asyncio.Event()
    count = 0

    async def on_msg(_msg: object) -> None:
        nonlocal count
        count += 1
        if count >= n:
            done.set()

    t0 = time.perf_counter()
    sub = await jlog.js.subscribe(
        f"{jlog.names.log_prefix}.>", ordered_consumer=True, cb=on_msg, deliver_policy=DeliverPolicy.ALL
    )
    await done.wait()
    elapsed = time.perf_counter() - t0
    await sub.unsubscribe()
    return n / elapsed


BATCH_GAPS: list[float] = []  # seconds between consecutive batches from NATS (all rounds)


async def replay(
    reader: object, n: int, *, batch: int, gaps: list[float] | None = None
) -> tuple[float, list[ev.LogEntry]]:
    t0 = prev = time.perf_counter()
    count = 0
    last: list[ev.LogEntry] = []
    async for entries in reader.read(batch=batch):  # type: ignore[attr-defined]
        count += len(entries)
        last = entries
        if gaps is not None:
            now = time.perf_counter()
            gaps.append(now - prev)
            prev = now
    elapsed = time.perf_counter() - t0
    assert count == n, f"replayed {count} of {n}"
    return n / elapsed, last


def median(values: list[float]) -> float:
    return statistics.median(values)


async def verify_bench(n: int, *, profile: bool, workers: int) -> None:
    from bench.verify_log import dense_log

    path = dense_log(n)
    log = jsonl.JsonlLog(path)
    t0, c0 = time.perf_counter(), time.process_time()
    plain = await history.replay(log)
    plain_s, plain_cpu = time.perf_counter() - t0, time.process_time() - c0
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    t0, c0 = time.perf_counter(), time.process_time()
    verified = await history.replay(log, verify=True)
    verify_s, verify_cpu = time.perf_counter() - t0, time.process_time() - c0
    if profiler is not None:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
    assert verified.mismatch is None, verified.mismatch.reason
    entries = verified.entries
    rate = entries / verify_s
    print(
        f"log: {entries:,} entries, {verified.inputs:,} inputs, {verified.decisions:,} decisions in "
        f"{verified.batches:,} batches ({path})"
    )
    print(f"replay, fold only:             {plain.entries / plain_s:>10,.0f} entries/s")
    print(
        f"replay --verify:               {rate:>10,.0f} entries/s  ({verified.verified_batches:,} batches "
        f"recomputed, {verified.verified_quiet:,} quiet input batches checked)"
    )
    print(f"  ratio verify / fold only: {plain_s / verify_s:.2f}")
    print(
        f"  per CPU second (a loaded machine counts less): verify {entries / verify_cpu:,.0f} entries/s, "
        f"fold only {plain.entries / plain_cpu:,.0f} entries/s"
    )
    if workers > 1:
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(20))  # for its summary
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0, c0 = time.perf_counter(), time.process_time()
        with structlog.testing.capture_logs() as logs:
            spread = await parallel.verify(log, workers=workers)
        spread_s, spread_cpu = time.perf_counter() - t0, time.process_time() - c0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
        assert spread.mismatch is None and spread.verified_batches == verified.verified_batches
        in_workers = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        split = next(e["worker_cpu_s"] for e in logs if e["event"] == "verified_in_parallel")
        print(
            f"replay --verify --workers {workers}:   {entries / spread_s:>10,.0f} entries/s  "
            f"({verify_s / spread_s:.2f} x one process, same run)"
        )
        print(
            f"  CPU: {spread_cpu:.1f} s in this process (the fold, snapshots) + {in_workers:.1f} s in the workers "
            f"(split {' / '.join(f'{c:.1f}' for c in split)} s); with a core per worker about "
            f"{entries / max(split):,.0f} entries/s (the busiest worker's CPU; a loaded machine counts less)"
        )
        rate, verify_s = entries / spread_s, spread_s
    print(f"floor: >= 50,000 entries/s: {'met' if rate >= 50_000 else 'NOT met'}")
    how = f" on {workers} processes" if workers > 1 else ""
    print(f"log_replay --verify: {rate:,.0f} entries/s{how} = {plain_s / verify_s:.2f} x a fold-only replay")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000, help="entries per batch yielded by read()")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of drain and replay")
    parser.add_argument("--verify", action="store_true", help="replay --verify of a dense log (issue 16)")
    parser.add_argument("--profile", action="store_true", help="with --verify: cProfile the verifying replay")
    parser.add_argument("--workers", type=int, default=1, help="with --verify: also verify on this many processes")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    if args.verify:
        await verify_bench(args.events, profile=args.profile, workers=args.workers)
        return

    entries = log_entries(args.events)
    n = len(entries)
    drains: list[float] = []
    replays: list[float] = []
    with tempfile.TemporaryDirectory(prefix="kd-bench-") as tmp:
        async with EmbeddedNats(data_dir=Path(tmp) / "nats") as server:
            jlog = await connect(server.url, root="bench")
            try:
                t0 = time.perf_counter()
                await write_log(jlog, entries)
                print(f"wrote {n:,} log entries in {time.perf_counter() - t0:.1f}s (set-up, not measured)")
                for _ in range(args.rounds):  # alternate, so machine load hits both alike
                    drains.append(await bare_drain(jlog, n))
                    rate, last = await replay(jlog.reader, n, batch=args.batch, gaps=BATCH_GAPS)
                    replays.append(rate)
                    assert last[-1] == entries[-1]
                path = Path(tmp) / "log.jsonl"
                t0 = time.perf_counter()
                await jsonl.export(jlog.reader, path)
                export_s = time.perf_counter() - t0
            finally:
                await jlog.close()
        file_rates = []
        for _ in range(args.rounds):
            rate, last = await replay(jsonl.JsonlLog(path), n, batch=args.batch)
            file_rates.append(rate)
            assert last[-1] == entries[-1]

    drain, ours, from_file = median(drains), median(replays), median(file_rates)
    ratio = ours / drain
    print(f"events                                  {n:>10,}  (batch {args.batch}, median of {args.rounds})")
    print(
        f"nats-py ordered consumer, bare drain    {drain:>10,.0f} events/s   (rounds: {', '.join(f'{r:,.0f}' for r in drains)})"
    )
    print(
        f"kdispatch reader, decoded LogEntry      {ours:>10,.0f} events/s   (rounds: {', '.join(f'{r:,.0f}' for r in replays)})"
    )
    p50, p90, p99 = (percentile(BATCH_GAPS, p) or 0.0 for p in (50, 90, 99))
    print(
        f"time per batch of {args.batch} from NATS (ms)  p50 {p50 * 1000:.1f}  p90 {p90 * 1000:.1f}"
        f"  p99 {p99 * 1000:.1f}"
    )
    print(f"JSONL export                            {n / export_s:>10,.0f} events/s")
    print(f"kdispatch JsonlLog, decoded LogEntry    {from_file:>10,.0f} events/s")
    ok = ours >= 30_000 and ratio >= 0.7 and from_file >= 200_000
    print(
        f"floors: >= 30,000 events/s, ratio >= 0.7, JSONL >= 200,000 events/s: {'met' if ok else 'NOT met'}"
    )
    print(
        f"log_replay: {ours:,.0f} events/s from NATS = {ratio:.2f} x bare ordered-consumer drain; "
        f"{from_file:,.0f} events/s from JSONL"
    )


if __name__ == "__main__":
    asyncio.run(main())
