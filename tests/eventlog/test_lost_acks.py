"""Appends whose acks are lost (network, fail-over): the retry recognises its own stored entries,
nothing is stored twice, and the sequencer carries on; another leader's entry still fences.

Each test runs on a Log stream that takes fast-ingest batches (one ack per append) and on one
that does not (a log created before batches: one ack per entry)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog, JetStreamSequencer
from eventlog.jetstream.publish import Outgoing, PubAck
from eventlog.store import Fenced, LogError, PublishTimeout

AT = 1_700_000_000_000


@pytest.fixture(params=["batches", "one by one"])
async def jslog(request: pytest.FixtureRequest, jslog: JetStreamLog) -> AsyncIterator[JetStreamLog]:
    if request.param == "one by one":
        info = await jslog.js.stream_info(jslog.names.log_stream)
        await jslog.js.update_stream(info.config.evolve(allow_batched=False))
    yield jslog


def lose_acks_once(seq: Any) -> None:
    """The next append reaches the server, but its acks never come back."""
    publisher = seq._publisher
    real, real_fast = publisher.publish, publisher.publish_fast

    def restore() -> None:
        publisher.publish, publisher.publish_fast = real, real_fast

    async def publish(batch: list[Outgoing], *, timeout_s: float) -> list[PubAck | None]:
        restore()
        await real(batch, timeout_s=timeout_s)
        return [None] * len(batch)

    async def publish_fast(batch: list[Outgoing], *, timeout_s: float) -> PubAck | None:
        restore()
        await real_fast(batch, timeout_s=timeout_s)
        return None

    publisher.publish, publisher.publish_fast = publish, publish_fast


async def test_retry_after_lost_acks_recognises_its_own_entries(jslog: JetStreamLog) -> None:
    seq = jslog.sequencer("a")
    await seq.append_decisions([ev.ClusterLost(cluster="x")], at_ms=AT)
    lose_acks_once(seq)
    entries = await seq.append_decisions(
        [ev.ClusterRecovered(cluster="x"), ev.ClusterLost(cluster="y")], at_ms=AT
    )
    assert [e.seq for e in entries] == [2, 3]
    await seq.append_decisions([ev.ClusterRecovered(cluster="y")], at_ms=AT)  # and goes on
    stored = [e async for batch in jslog.reader.read() for e in batch]
    assert [e.seq for e in stored] == [1, 2, 3, 4]
    assert [e.event for e in stored][1:3] == [e.event for e in entries]


async def test_lost_acks_do_not_hide_another_leaders_entry(jslog: JetStreamLog) -> None:
    old = jslog.sequencer("old")
    await old.resume()
    new = jslog.sequencer("new")
    await new.append_decisions([ev.ClusterLost(cluster="x")], at_ms=AT)
    lose_acks_once(old)
    with pytest.raises(Fenced):
        await old.append_decisions([ev.ClusterLost(cluster="x")], at_ms=AT)
    assert [e.leader async for batch in jslog.reader.read() for e in batch] == ["new"]


async def test_an_entry_lost_mid_batch_is_resent_and_the_rest_follow(jslog: JetStreamLog) -> None:
    """The server never got entry 2 of 4 (connection dropped); 3 and 4 were refused for want of
    it. The sequencer re-sends 2, then 3 and 4, and does not mistake that for another leader."""
    seq = jslog.sequencer("a")
    publisher = seq._publisher  # type: ignore[attr-defined]
    real, real_fast = publisher.publish, publisher.publish_fast

    async def drop_second(batch: list[Outgoing], *, timeout_s: float) -> list[PubAck | None]:
        publisher.publish = real
        acks = await real([batch[0], *batch[2:]], timeout_s=timeout_s)
        return [acks[0], None, *acks[1:]]

    async def drop_second_of_batch(batch: list[Outgoing], *, timeout_s: float) -> PubAck | None:
        publisher.publish_fast = real_fast
        return await real_fast([batch[0], *batch[2:]], timeout_s=timeout_s)

    publisher.publish, publisher.publish_fast = drop_second, drop_second_of_batch
    events = [ev.ClusterLost(cluster=c) for c in "wxyz"]
    entries = await seq.append_decisions(events, at_ms=AT)
    assert [e.seq for e in entries] == [1, 2, 3, 4]
    stored = [e async for batch in jslog.reader.read() for e in batch]
    assert [e.event for e in stored] == events


async def test_after_a_failed_append_the_sequencer_resumes_from_the_log(jslog: JetStreamLog) -> None:
    seq = JetStreamSequencer(jslog, "a", retry_s=0.3)
    await seq.append_decisions([ev.ClusterLost(cluster="x")], at_ms=AT)
    publisher = seq._publisher
    real, real_fast = publisher.publish, publisher.publish_fast

    async def half_then_silence(batch: list[Outgoing], *, timeout_s: float) -> list[PubAck | None]:
        if len(batch) > 1:  # the first entry gets through, then the network goes away
            await real(batch[:1], timeout_s=timeout_s)
        return [None] * len(batch)

    async def half_of_batch_then_silence(batch: list[Outgoing], *, timeout_s: float) -> PubAck | None:
        if len(batch) > 1:
            await real_fast(batch[:1], timeout_s=timeout_s)
        return None

    publisher.publish, publisher.publish_fast = half_then_silence, half_of_batch_then_silence
    with pytest.raises(PublishTimeout):
        await seq.append_decisions([ev.ClusterRecovered(cluster="x"), ev.ClusterLost(cluster="y")], at_ms=AT)
    publisher.publish, publisher.publish_fast = real, real_fast
    with pytest.raises(LogError, match=r"resume\(\)"):
        await seq.append_decisions([ev.ClusterLost(cluster="z")], at_ms=AT)
    assert await seq.resume() == (2, 0)  # the log says what got in
    await seq.append_decisions([ev.ClusterLost(cluster="z")], at_ms=AT)
    stored = [e.event async for batch in jslog.reader.read() for e in batch]
    assert stored == [
        ev.ClusterLost(cluster="x"),
        ev.ClusterRecovered(cluster="x"),
        ev.ClusterLost(cluster="z"),
    ]
