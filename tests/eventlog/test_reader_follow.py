"""A follower reading the log again and again from where it stopped keeps one consumer."""

from __future__ import annotations

import pytest
from nats.js.errors import NotFoundError

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from eventlog.jetstream.reader import stream_last_seq
from tests.waiting import Unmet, eventually


async def consumers(jslog: JetStreamLog) -> list[str]:
    return sorted(c.name for c in await jslog.js.consumers_info(jslog.names.log_stream))


async def consumers_become(jslog: JetStreamLog, count: int) -> list[str]:
    """Closing a fetcher asks the server to delete its consumer without waiting for the answer."""
    names: list[str] = []

    async def settled() -> bool | Unmet:
        names[:] = await consumers(jslog)
        return len(names) == count or Unmet(names)

    await eventually(settled, what=f"{count} consumer(s) on the log")
    return names


async def seqs(jslog: JetStreamLog, from_seq: int) -> list[int]:
    return [e.seq async for batch in jslog.reader.read(from_seq=from_seq, batch=3) for e in batch]


async def test_reads_that_go_on_where_the_last_stopped_share_a_consumer(jslog: JetStreamLog) -> None:
    seq = jslog.sequencer("a")
    await seq.append_decisions([ev.ClusterLost(cluster=f"c{i}") for i in range(5)], at_ms=1)
    assert await seqs(jslog, 1) == [1, 2, 3, 4, 5]
    first = await consumers(jslog)
    assert len(first) == 1  # parked, not deleted
    assert await seqs(jslog, 6) == []  # nothing new: no read at all
    await seq.append_decisions([ev.ClusterLost(cluster=f"d{i}") for i in range(4)], at_ms=2)
    assert await seqs(jslog, 6) == [6, 7, 8, 9]
    assert await consumers(jslog) == first  # the same consumer went on
    # A read from elsewhere gets its own; the parked one stays for whoever goes on from 10.
    assert await seqs(jslog, 2) == [2, 3, 4, 5, 6, 7, 8, 9]
    assert len(await consumers_become(jslog, 1)) == 1  # that one parked at 10 too: one is closed
    await seq.append_decisions([ev.ClusterLost(cluster="e")], at_ms=3)
    assert await seqs(jslog, 10) == [10]
    await jslog.reader.close()
    await consumers_become(jslog, 0)


async def test_an_abandoned_read_does_not_park(jslog: JetStreamLog) -> None:
    seq = jslog.sequencer("a")
    await seq.append_decisions([ev.ClusterLost(cluster=f"c{i}") for i in range(6)], at_ms=1)
    reading = jslog.reader.read(batch=2)
    assert [e.seq for e in await anext(reading)] == [1, 2]
    await reading.aclose()  # stopped half-way: where it is, nobody knows to go on
    await consumers_become(jslog, 0)
    assert await seqs(jslog, 1) == [1, 2, 3, 4, 5, 6]


async def test_last_seq_as_stream_info_says(jslog: JetStreamLog) -> None:
    await jslog.sequencer("a").append_decisions([ev.ClusterLost(cluster="c")], at_ms=1)
    info = await jslog.js.stream_info(jslog.names.log_stream)
    assert await stream_last_seq(jslog.js, jslog.names.log_stream) == info.state.last_seq == 1
    with pytest.raises(NotFoundError):
        await stream_last_seq(jslog.js, "NO_SUCH_STREAM")
