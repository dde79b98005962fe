"""Three ways to append fenced log entries to a one-replica file stream on a real nats-server, by
batch size: one by one (pipelined, ``Nats-Expected-Last-Sequence`` and ``Nats-Msg-Id`` on each,
``Nats-Expected-Last-Msg-Id`` on each after the first of a batch, an ack each), JetStream's atomic batches (``allow_atomic``: the expected sequence on the first
message, one ack for the commit) and fast-ingest batches (``allow_batched``: the expected
sequence on each, one ack for the batch). CPU per message of this process and of the server
(/proc/<pid>/stat), and the stream's bytes per message. Protocol lines are built here, the same
way for all three, so the client figures compare the acks, not the framing.

    .venv/bin/python bench/batch_kinds.py [--messages N] [--batch B] [--rounds R]

Why the sequencer uses fast-ingest batches and not atomic ones (docs/scaling.md): on a
one-replica file stream the server stages each atomic batch in a file store of its own, created
and removed per batch.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import structlog
from nats.aio.client import Client
from nats.js.api import StorageType, StoreCompression, StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sequencer_batches import cpu_of
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream.connection import open_client
from eventlog.jetstream.rawsub import RawSubscription

WAYS = ("one by one", "atomic", "fast")
_TOKEN = secrets.token_hex(8).encode()  # the sequencer's per-leader token in its message ids
PAYLOAD = (
    b'{"seq":1,"at_ms":1,"leader":"bench","inbox_seq":1,"event":{"type":"JobSubmitted","job":'
    b'{"namespace":"bench","name":"job-1","uid":"job-u1"},"pod_sets":[{"name":"main","count":2,'
    b'"requests":{"cpu":1000}}],"cluster_queue":"team-001"}}'
)


def commands(
    way: str, *, subject: bytes, reply: bytes, batch_id: bytes, first: int, count: int
) -> tuple[bytes, int]:
    """The protocol lines of one batch of ``count`` entries from sequence ``first``, and how
    many replies to wait for."""
    parts: list[bytes] = []
    for i in range(count):
        seq = first + i
        n = i + 1
        if way == "one by one":
            # As the sequencer's: ids with a per-leader token, each entry after the first chained.
            hdr = b"NATS/1.0\r\nNats-Expected-Last-Sequence: %d\r\nNats-Msg-Id: log-%d-%s\r\n" % (
                seq - 1,
                seq,
                _TOKEN,
            )
            if n > 1:
                hdr += b"Nats-Expected-Last-Msg-Id: log-%d-%s\r\n" % (seq - 1, _TOKEN)
            hdr += b"\r\n"
            to = b"%s.%d" % (reply, n)
        elif way == "atomic":
            hdr = b"NATS/1.0\r\nNats-Batch-Id: %s\r\nNats-Batch-Sequence: %d\r\n" % (batch_id, n)
            if n == 1:
                hdr += b"Nats-Expected-Last-Sequence: %d\r\n" % (seq - 1)
            if n == count:
                hdr += b"Nats-Batch-Commit: 1\r\n"
            hdr += b"\r\n"
            to = b"%s.%d" % (reply, n) if n == count else b""  # only the commit is answered
        else:
            hdr = b"NATS/1.0\r\nNats-Expected-Last-Sequence: %d\r\n\r\n" % (seq - 1)
            op = 2 if n == count else 0 if n == 1 else 1
            to = b"%s.%s.500.fail.%d.%d.$FI" % (reply, batch_id, n, op)
        size = len(hdr) + len(PAYLOAD)
        parts.append(
            b"HPUB %s %s %d %d\r\n" % (subject, to, len(hdr), size)
            if to
            else b"HPUB %s %d %d\r\n" % (subject, len(hdr), size)
        )
        parts += [hdr, PAYLOAD, b"\r\n"]
    return b"".join(parts), count if way == "one by one" else 1


async def append(
    way: str, nc: Client, sub: RawSubscription, *, messages: int, batch: int, first: int, tag: str
) -> None:
    for start in range(0, messages, batch):
        count = min(batch, messages - start)
        data, replies = commands(
            way,
            subject=f"{tag}.x".encode(),
            reply=sub.subject[:-2].encode(),
            batch_id=f"{tag}{start}".encode(),
            first=first + start,
            count=count,
        )
        await nc._send_command(data)
        await nc._flush_pending()
        while replies:
            if not sub.items:
                await sub.wait(5.0)
                continue
            _, _, body, _ = sub.items.popleft()
            if b'"type"' in body:  # a fast batch's flow control
                continue
            if b'"error"' in body:
                raise SystemExit(f"{way}: {body!r}")
            replies -= 1


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000, help="messages per round")
    parser.add_argument("--batch", type=int, default=500, help="messages per batch (per append)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.messages < 1:
        parser.error(f"--messages must be at least 1, got {args.messages}")
    if args.batch < 1:
        parser.error(f"--batch must be at least 1, got {args.batch}")
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    results: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="kd-bench-") as tmp:
        server = EmbeddedNats(data_dir=Path(tmp))
        await server.start_async()
        assert server.pid is not None
        try:
            nc = await open_client(server.url, name="bench", timeout_s=10.0)
            js = nc.jetstream()
            tags = {way: f"w{i}" for i, way in enumerate(WAYS)}
            for way, tag in tags.items():
                await js.add_stream(
                    StreamConfig(
                        name=tag.upper(),
                        subjects=[f"{tag}.>"],
                        storage=StorageType.FILE,
                        compression=StoreCompression.S2,
                        duplicate_window=120,
                        allow_atomic=way == "atomic",
                        allow_batched=way == "fast",
                    )
                )
            sub = await RawSubscription(nc, f"{nc.new_inbox()}.>").open()
            for r in range(args.rounds):
                for way in WAYS if r % 2 == 0 else reversed(WAYS):
                    server0, cpu0 = cpu_of(server.pid), time.process_time()
                    first = r * args.messages + 1
                    await append(
                        way, nc, sub, messages=args.messages, batch=args.batch, first=first, tag=tags[way]
                    )
                    cpu = time.process_time() - cpu0
                    await asyncio.sleep(0.3)  # let the server finish what it queued
                    results[way].append((cpu / args.messages, (cpu_of(server.pid) - server0) / args.messages))
            sizes = {}
            for way, tag in tags.items():
                state = (await js.stream_info(tag.upper())).state
                sizes[way] = state.bytes / max(1, state.messages)
            await nc.close()
        finally:
            await server.stop_async()
    print(
        f"{args.messages:,} messages per round in batches of {args.batch}, {args.rounds} rounds each (alternating)"
    )
    for way in WAYS:
        ours = [r[0] * 1e6 for r in results[way]]
        theirs = [r[1] * 1e6 for r in results[way]]
        print(
            f"{way:>10}: this process {statistics.median(ours):5.1f} us/msg; nats-server {statistics.median(theirs):6.1f} us/msg "
            f"({', '.join(f'{x:.1f}' for x in theirs)}); {sizes[way]:.0f} bytes/msg"
        )


if __name__ == "__main__":
    asyncio.run(main())
