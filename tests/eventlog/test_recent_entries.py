"""A process that writes the log and follows it takes its own appends from memory
(``JetStreamLog.keep_recent``), and whatever it did not append from the server, in one order."""

from __future__ import annotations

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog, connect
from eventlog.jetstream.recent import RecentEntries
from eventlog.store import InboxItem
from tests.eventlog.test_reader_follow import consumers, consumers_become


def lost(*names: str) -> list[ev.DecisionEvent]:
    return [ev.ClusterLost(cluster=n) for n in names]


async def entries(jslog: JetStreamLog, from_seq: int = 1, **bounds: int) -> list[ev.LogEntry]:
    return [e async for batch in jslog.reader.read(from_seq=from_seq, batch=2, **bounds) for e in batch]


async def test_own_appends_are_read_without_a_consumer_and_as_the_server_has_them(
    jslog: JetStreamLog, nats_url: str, log_root: str
) -> None:
    recent = jslog.keep_recent(8)
    await jslog.sequencer("a").append_decisions(lost("a", "b", "c", "d", "e"), at_ms=7)
    mine = await entries(jslog)
    assert [e.seq for e in mine] == [1, 2, 3, 4, 5]
    assert recent.served == 5
    assert await consumers(jslog) == []  # nothing was fetched from the server
    other = await connect(nats_url, root=log_root)  # another replica: no appends of its own
    try:
        assert await entries(other) == mine
    finally:
        await other.close()
    assert await entries(jslog, 3, until_seq=4) == mine[2:4]
    assert await entries(jslog, 6) == []
    await jslog.sequencer("a").append_decisions(lost("f", "g"), at_ms=9)
    assert await entries(jslog, 4, until_ms=8) == mine[3:]
    assert [e.seq for e in await entries(jslog, 4)] == [4, 5, 6, 7]
    assert await consumers(jslog) == []


async def test_what_another_writer_appended_comes_from_the_server(
    jslog: JetStreamLog, nats_url: str, log_root: str
) -> None:
    jslog.keep_recent(8)
    await jslog.sequencer("a").append_decisions(lost("a", "b"), at_ms=1)
    other = await connect(nats_url, root=log_root)
    try:  # a new leader elsewhere: ours would be fenced off from now on
        await other.sequencer("b").append_decisions(lost("c", "d"), at_ms=2)
    finally:
        await other.close()
    assert [e.seq for e in await entries(jslog)] == [1, 2]  # ours, from memory: the read ends there
    assert [(e.seq, e.leader) for e in await entries(jslog, 3)] == [(3, "b"), (4, "b")]
    # An upper bound past what was kept goes on at the server in the same read.
    assert [e.seq for e in await entries(jslog, 1, until_seq=4)] == [1, 2, 3, 4]
    await jslog.reader.close()
    await consumers_become(jslog, 0)


async def test_a_reader_behind_what_is_kept_reads_the_server(jslog: JetStreamLog) -> None:
    recent = jslog.keep_recent(4)
    seq = jslog.sequencer("a")
    for i in range(4):
        await seq.append_decisions(lost(f"x{i}", f"y{i}", f"z{i}"), at_ms=i)
    assert recent.last_seq == 12 and recent.take(1, until_seq=None, limit=100) == []
    assert [e.seq for e in await entries(jslog)] == list(range(1, 13))
    assert len(await consumers(jslog)) == 1  # the early entries came from the server


async def test_a_reader_waits_for_an_append_of_its_own_in_flight(
    jslog: JetStreamLog, nats_url: str, log_root: str
) -> None:
    recent = jslog.keep_recent(8)
    await jslog.sequencer("a").append_decisions(lost("a"), at_ms=1)
    other = await connect(nats_url, root=log_root)
    try:  # stored, as an append of ours would be before its acks are in
        await other.sequencer("b").append_decisions(lost("b", "c"), at_ms=2)
    finally:
        await other.close()
    recent.appending(2)
    assert await entries(jslog, 2) == []
    assert await consumers(jslog) == []
    recent.appending(3)  # not where this reader goes on: the server it is
    assert [e.seq for e in await entries(jslog, 2)] == [2, 3]
    recent.appending(None)
    assert [e.seq for e in await entries(jslog, 3)] == [3]


def entry(seq: int) -> ev.LogEntry:
    return ev.LogEntry(seq=seq, at_ms=seq, event=ev.ClusterLost(cluster=f"c{seq}"))


def test_a_gap_starts_the_run_again() -> None:
    recent = RecentEntries(10)
    recent.appended([entry(1), entry(2)])
    recent.appended([entry(5), entry(6)])  # 3 and 4 were written by someone else
    assert recent.take(1, until_seq=None, limit=10) == []
    assert [e.seq for e in recent.take(5, until_seq=None, limit=10)] == [5, 6]


def test_bounded_to_its_capacity_and_a_quarter() -> None:
    recent = RecentEntries(8)
    for seq in range(1, 101):
        recent.appended([entry(seq)])
        assert len(recent) <= 10
        # the last 8 always
        assert len(recent.take(max(1, seq - 7), until_seq=None, limit=1000)) == min(seq, 8)
    assert recent.last_seq == 100
    assert [e.seq for e in recent.take(93, until_seq=95, limit=10)] == [93, 94, 95]
    assert recent.take(80, until_seq=None, limit=10) == []


async def test_decisions_appended_wake_a_follower_inputs_alone_do_not(jslog: JetStreamLog) -> None:
    recent = jslog.keep_recent(8)
    seq = jslog.sequencer("a")
    await seq.append_inputs([InboxItem(inbox_seq=None, event=ev.ClusterHeartbeat(cluster="c"))], at_ms=1)
    assert not recent.decided.is_set() and recent.last_seq == 1
    await seq.append_decisions(lost("c"), at_ms=2)
    assert recent.decided.is_set() and recent.last_seq == 2
