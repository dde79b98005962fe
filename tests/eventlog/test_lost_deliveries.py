"""Deliveries lost on the way (connection dropped while the server was sending): with no acks
the server does not resend them, so the reader must notice the hole and ask again."""

from __future__ import annotations

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from eventlog.jetstream.fetch import StreamFetcher
from tests.waiting import Unmet, eventually

N = 20


async def drop_one_delivery(fetcher: StreamFetcher, *, index: int) -> None:
    """Remove the ``index``-th queued delivery, as a dropped connection would have."""
    assert fetcher._sub is not None
    queue = fetcher._sub.items
    await eventually(lambda: len(queue) > index or Unmet(len(queue)), what=f"{index + 1} deliveries queued")
    del queue[index]


async def test_sequencer_recovers_an_inbox_delivery_lost_in_transit(jslog: JetStreamLog) -> None:
    for i in range(N):
        await jslog.inbox.publish(ev.ClusterHeartbeat(cluster=f"c{i}"))
    seq = jslog.sequencer("a")
    first = await seq.pull(max_items=5, timeout_s=1.0)  # the fetcher now has more on the way
    assert [i.inbox_seq for i in first] == [1, 2, 3, 4, 5]
    assert seq._fetcher is not None
    await drop_one_delivery(seq._fetcher, index=2)  # inbox seq 8 never arrives
    await seq.append_inputs(first, at_ms=1)
    while seq.last_inbox_seq < N:
        items = await seq.pull(max_items=5, timeout_s=1.0)
        await seq.append_inputs(items, at_ms=1)
    copied = [e.inbox_seq async for batch in jslog.reader.read() for e in batch]
    assert copied == list(range(1, N + 1))


async def test_replay_recovers_a_log_delivery_lost_in_transit(jslog: JetStreamLog) -> None:
    seq = jslog.sequencer("a")
    await seq.append_decisions([ev.ClusterLost(cluster=f"c{i}") for i in range(N)], at_ms=1)
    reader = jslog.reader.read(batch=4)
    got = [e.seq for e in await anext(reader)]
    # Reach into the generator's fetcher: the one replay is reading from right now.
    fetcher = reader.ag_frame.f_locals["fetcher"]  # type: ignore[attr-defined]
    await drop_one_delivery(fetcher, index=3)
    async for batch in reader:
        got += [e.seq for e in batch]
    assert got == list(range(1, N + 1))
