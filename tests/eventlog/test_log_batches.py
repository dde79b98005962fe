"""The sequencer's appends as fast-ingest batches (one ack per append) on a real nats-server:
what is stored, how a deposed leader is fenced at or in the middle of a batch, and the fall-back to
one ack per entry on a Log stream without batches."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog, connect
from eventlog.jetstream.publish import Outgoing, PubAck, Publisher
from eventlog.store import Fenced, InboxItem

AT = 1_700_000_000_000


def spy(seq: Any) -> dict[str, int]:
    """How many times each way of publishing was used."""
    publisher = seq._publisher
    calls = {"batches": 0, "one by one": 0}
    real, real_fast = publisher.publish, publisher.publish_fast

    async def publish(batch: list[Outgoing], *, timeout_s: float) -> list[PubAck | None]:
        calls["one by one"] += 1
        return await real(batch, timeout_s=timeout_s)

    async def publish_fast(batch: list[Outgoing], *, timeout_s: float) -> PubAck | None:
        calls["batches"] += 1
        return await real_fast(batch, timeout_s=timeout_s)

    publisher.publish, publisher.publish_fast = publish, publish_fast
    return calls


async def stored_headers(jslog: JetStreamLog, seq: int) -> dict[str, str]:
    msg = await jslog.js.get_msg(jslog.names.log_stream, seq)
    return dict(msg.headers or {})


async def all_entries(jslog: JetStreamLog) -> list[ev.LogEntry]:
    return [e async for batch in jslog.reader.read() for e in batch]


async def test_an_append_is_one_batch_and_its_entries_keep_the_headers_readers_use(
    jslog: JetStreamLog,
) -> None:
    await jslog.inbox.publish(ev.ClusterHeartbeat(cluster="a"), msg_id="h1")
    seq = jslog.sequencer("a")
    calls = spy(seq)
    items = await seq.pull(timeout_s=2.0)
    entries = await seq.append_inputs([*items, InboxItem(None, ev.Tick())], at_ms=AT)
    await seq.append_decisions([ev.ClusterLost(cluster="a"), ev.ClusterLost(cluster="b")], at_ms=AT)
    assert calls == {"batches": 2, "one by one": 0}
    assert [e.seq for e in entries] == [1, 2]
    assert (await all_entries(jslog))[:2] == entries
    copied, tick, decision = [await stored_headers(jslog, n) for n in (1, 2, 3)]
    assert copied == {"Nats-Expected-Last-Sequence": "0"}  # the input says its inbox seq itself
    assert tick == {"Nats-Expected-Last-Sequence": "1", "Kd-Inbox-Last": "1"}
    assert decision == {"Nats-Expected-Last-Sequence": "2", "Kd-Inbox-Last": "1"}
    again = jslog.sequencer("b")
    assert await again.resume() == (4, 1)  # resume reads Kd-Inbox-Last as before


async def test_a_single_entry_is_published_on_its_own(jslog: JetStreamLog) -> None:
    seq = jslog.sequencer("a")
    calls = spy(seq)
    await seq.append_decisions([ev.ClusterLost(cluster="a")], at_ms=AT)
    assert calls == {"batches": 0, "one by one": 1}


async def test_a_deposed_leader_is_fenced_at_the_first_entry_of_a_batch(jslog: JetStreamLog) -> None:
    old = jslog.sequencer("old")
    await old.resume()
    new = jslog.sequencer("new")
    await new.append_decisions([ev.ClusterLost(cluster="x")], at_ms=AT)
    with pytest.raises(Fenced):
        await old.append_decisions([ev.ClusterLost(cluster=c) for c in "abc"], at_ms=AT)
    assert [e.leader for e in await all_entries(jslog)] == ["new"]


async def test_a_batch_stops_at_the_first_entry_the_server_refuses(jslog: JetStreamLog) -> None:
    """What the sequencer relies on: entries after a refused one are not stored, and the ack
    names the last one stored (here the second of four expects the wrong last sequence)."""
    publisher = Publisher(jslog.nc)
    subject = f"{jslog.names.log_prefix}.x"
    expects = [0, 5, 1, 2]
    batch: list[Outgoing] = [
        (subject, b"%d" % n, b"NATS/1.0\r\nNats-Expected-Last-Sequence: %d\r\n\r\n" % expected)
        for n, expected in enumerate(expects, 1)
    ]
    ack = await publisher.publish_fast(batch, timeout_s=5.0)
    assert ack is not None and ack.error is None
    assert (ack.seq, ack.count) == (1, 1)
    info = await jslog.js.stream_info(jslog.names.log_stream)
    assert info.state.last_seq == 1


async def test_a_deposed_leader_is_fenced_in_the_middle_of_a_batch(jslog: JetStreamLog) -> None:
    """The old leader's batch gets its first entry in; the new leader appends; the server stops
    the old batch at its second entry. The old leader keeps what was its own and steps down."""
    old = jslog.sequencer("old")
    await old.append_decisions([ev.ClusterLost(cluster="w")], at_ms=AT)
    new = jslog.sequencer("new")
    publisher: Any = old._publisher  # type: ignore[attr-defined]
    real_fast = publisher.publish_fast

    async def interleaved(batch: list[Outgoing], *, timeout_s: float) -> PubAck | None:
        publisher.publish_fast = real_fast
        first = await real_fast(batch[:1], timeout_s=timeout_s)
        await new.resume()
        await new.append_decisions([ev.ClusterRecovered(cluster="w")], at_ms=AT)
        rest = await real_fast(batch[1:], timeout_s=timeout_s)
        assert rest is not None and rest.error is not None  # refused: not another leader's entry
        return first  # what the server answers a batch that stopped at its second entry

    publisher.publish_fast = interleaved
    with pytest.raises(Fenced):
        await old.append_decisions([ev.ClusterLost(cluster=c) for c in "xyz"], at_ms=AT)
    stored = await all_entries(jslog)
    assert [(e.leader, e.event) for e in stored] == [
        ("old", ev.ClusterLost(cluster="w")),
        ("old", ev.ClusterLost(cluster="x")),
        ("new", ev.ClusterRecovered(cluster="w")),
    ]
    with pytest.raises(Fenced):  # and stays fenced
        await old.append_decisions([ev.ClusterLost(cluster="q")], at_ms=AT)


async def test_a_lost_ack_after_part_of_a_batch_resends_only_the_rest(jslog: JetStreamLog) -> None:
    seq = jslog.sequencer("a")
    publisher: Any = seq._publisher  # type: ignore[attr-defined]
    real_fast = publisher.publish_fast

    async def two_then_silence(batch: list[Outgoing], *, timeout_s: float) -> PubAck | None:
        publisher.publish_fast = real_fast
        await real_fast(batch[:2], timeout_s=timeout_s)
        return None

    publisher.publish_fast = two_then_silence
    events = [ev.ClusterLost(cluster=c) for c in "vwxyz"]
    entries = await seq.append_decisions(events, at_ms=AT)
    assert [e.seq for e in entries] == [1, 2, 3, 4, 5]
    assert [e.event for e in await all_entries(jslog)] == events
    await seq.append_decisions([ev.ClusterRecovered(cluster="v")], at_ms=AT)  # and goes on


@pytest.mark.parametrize("batches", [True, False], ids=["batches", "one by one"])
async def test_racing_leaders_on_two_connections_never_interleave_within_what_each_was_told(
    jslog: JetStreamLog, nats_url: str, batches: bool
) -> None:
    """Two leaders append one to three entries at a time as fast as they can, each on its own
    connection (so the server may take their messages in any order); a fenced one comes back as a
    fresh leader (a new term). No term's entries have another's between them."""
    other = await connect(nats_url, root=jslog.names.root)
    if not batches:  # after connecting: connect turns batches on
        info = await jslog.js.stream_info(jslog.names.log_stream)
        await jslog.js.update_stream(info.config.evolve(allow_batched=False))
    won: dict[str, list[int]] = {"a": [], "b": []}
    fenced = {"a": 0, "b": 0}
    try:

        async def run(name: str, log: JetStreamLog, sizes: itertools.cycle[int]) -> None:
            seq = log.sequencer(f"{name}0")
            await seq.resume()
            while len(won["a"]) + len(won["b"]) < 90:
                try:
                    events = [ev.ClusterRecovered(cluster=seq.leader_id)] * next(sizes)
                    entries = await seq.append_decisions(events, at_ms=AT)
                    won[name] += [e.seq for e in entries]
                except Fenced:
                    fenced[name] += 1
                    seq = log.sequencer(f"{name}{fenced[name]}")
                    await seq.resume()
                await asyncio.sleep(0)

        await asyncio.gather(
            run("a", jslog, itertools.cycle((3, 1, 2))), run("b", other, itertools.cycle((1, 3, 2, 2)))
        )
    finally:
        await other.close()
    entries = await all_entries(jslog)
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    for e in entries:  # every entry is the one its writer meant for that sequence
        assert e.event == ev.ClusterRecovered(cluster=e.leader)
    for name, seqs in won.items():  # every append a leader was told succeeded is in the log, its own
        assert all(entries[s - 1].leader.startswith(name) for s in seqs)
    terms = [leader for leader, _ in itertools.groupby(e.leader for e in entries)]
    assert len(terms) == len(set(terms)), f"a term wrote again after another one: {terms}"
    assert fenced["a"] + fenced["b"] > 0, "the two never raced"


async def test_a_log_without_batches_is_appended_one_by_one(jslog: JetStreamLog) -> None:
    info = await jslog.js.stream_info(jslog.names.log_stream)
    await jslog.js.update_stream(info.config.evolve(allow_batched=False))
    seq = jslog.sequencer("a")
    calls = spy(seq)
    entries = await seq.append_decisions([ev.ClusterLost(cluster=c) for c in "xy"], at_ms=AT)
    assert calls == {"batches": 0, "one by one": 1}
    first, second = await stored_headers(jslog, 1), await stored_headers(jslog, 2)
    assert first.keys() == {"Nats-Expected-Last-Sequence", "Nats-Msg-Id", "Kd-Inbox-Last"}
    assert second == {
        "Nats-Expected-Last-Sequence": "1",
        "Nats-Msg-Id": second["Nats-Msg-Id"],
        "Nats-Expected-Last-Msg-Id": first["Nats-Msg-Id"],  # stored only right behind the first
        "Kd-Inbox-Last": "0",
    }
    token = first["Nats-Msg-Id"].removeprefix("log-1-")
    assert second["Nats-Msg-Id"] == f"log-2-{token}" and len(token) == 16
    assert [e.event for e in await all_entries(jslog)] == [e.event for e in entries]
    other = jslog.sequencer("a")  # the same leader's next term: ids of its own
    await other.append_decisions([ev.ClusterLost(cluster="z")], at_ms=AT)
    assert (await stored_headers(jslog, 3))["Nats-Msg-Id"] != f"log-3-{token}"


async def test_connecting_turns_batches_on_for_a_log_created_without_them(
    jslog: JetStreamLog, nats_url: str
) -> None:
    info = await jslog.js.stream_info(jslog.names.log_stream)
    await jslog.js.update_stream(info.config.evolve(allow_batched=False))
    again = await connect(nats_url, root=jslog.names.root)
    try:
        info = await again.js.stream_info(again.names.log_stream)
        assert info.config.allow_batched
        seq = again.sequencer("a")
        calls = spy(seq)
        await seq.append_decisions([ev.ClusterLost(cluster=c) for c in "xy"], at_ms=AT)
        assert calls == {"batches": 1, "one by one": 0}
    finally:
        await again.close()


async def test_batches_turned_off_during_a_term_fall_back_to_one_by_one(jslog: JetStreamLog) -> None:
    seq = jslog.sequencer("a")
    await seq.append_decisions([ev.ClusterLost(cluster=c) for c in "ab"], at_ms=AT)
    info = await jslog.js.stream_info(jslog.names.log_stream)
    await jslog.js.update_stream(info.config.evolve(allow_batched=False))
    calls = spy(seq)
    events = [ev.ClusterLost(cluster=c) for c in "xyz"]
    await seq.append_decisions(events, at_ms=AT)
    await seq.append_decisions(events, at_ms=AT)
    assert calls == {"batches": 1, "one by one": 2}  # refused once, then one by one
    stored = await all_entries(jslog)
    assert [e.seq for e in stored] == list(range(1, 9))
    assert [e.event for e in stored][2:] == events * 2


async def test_a_deposed_leader_stores_nothing_one_by_one_past_fewer_entries_of_the_new_one(
    jslog: JetStreamLog,
) -> None:
    """One by one, the old leader's 1st entry is refused (the new leader's is there); its 2nd
    expects the sequence of the new leader's entry, so only the chain of message ids tells it
    apart: it must not be stored, nor the 3rd behind it."""
    info = await jslog.js.stream_info(jslog.names.log_stream)
    await jslog.js.update_stream(info.config.evolve(allow_batched=False))
    old = jslog.sequencer("old")
    await old.resume()
    new = jslog.sequencer("new")
    await new.append_decisions([ev.ClusterLost(cluster="x")], at_ms=AT)
    calls = spy(old)
    with pytest.raises(Fenced):
        await old.append_decisions([ev.ClusterLost(cluster=c) for c in "abc"], at_ms=AT)
    assert calls == {"batches": 0, "one by one": 1}
    assert [(e.leader, e.event) for e in await all_entries(jslog)] == [("new", ev.ClusterLost(cluster="x"))]
    with pytest.raises(Fenced):  # and stays fenced
        await old.append_decisions([ev.ClusterLost(cluster="q")], at_ms=AT)


async def test_a_deposed_leader_one_by_one_is_fenced_by_entries_that_carry_no_id(jslog: JetStreamLog) -> None:
    """The new leader appended as a batch (entries without Nats-Msg-Id): the old one, on a Log
    stream it found without batches, still stores none of its three behind the new leader's two."""
    info = await jslog.js.stream_info(jslog.names.log_stream)
    await jslog.js.update_stream(info.config.evolve(allow_batched=False))
    old = jslog.sequencer("old")
    await old.resume()
    await jslog.js.update_stream(info.config.evolve(allow_batched=True))
    new = jslog.sequencer("new")
    calls = spy(new)
    await new.append_decisions([ev.ClusterLost(cluster=c) for c in "xy"], at_ms=AT)
    assert calls == {"batches": 1, "one by one": 0}
    with pytest.raises(Fenced):
        await old.append_decisions([ev.ClusterLost(cluster=c) for c in "abc"], at_ms=AT)
    assert [e.leader for e in await all_entries(jslog)] == ["new", "new"]
