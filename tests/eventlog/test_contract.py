"""The Log contract: one suite, run against MemoryLog and the JetStream log (real nats-server).

Each test uses only the public interface (``.inbox``, ``.sequencer()``, ``.reader``,
``.snapshots``, ``.lease()``), so passing here means the two are interchangeable.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from eventlog import codec, jsonl
from eventlog import events as ev
from eventlog.jetstream import connect
from eventlog.memory import MemoryLog
from eventlog.store import Fenced, InboxItem, LogError, NotLeader
from tests.eventlog import samples
from tests.waiting import Unmet, eventually

AT = 1_700_000_000_000


async def read_all(reader: Any, **bounds: Any) -> list[ev.LogEntry]:
    out: list[ev.LogEntry] = []
    async for batch in reader.read(**bounds):
        assert batch, "read() yields no empty batches"
        out.extend(batch)
    return out


async def pull_until(seq: Any, count: int) -> list[InboxItem]:
    """Pull until ``count`` items came (the inbox is written before this is called)."""
    items: list[InboxItem] = []
    for _ in range(200):
        items += await seq.pull(max_items=count - len(items), timeout_s=0.2)
        if len(items) >= count:
            return items
    raise AssertionError(f"only {len(items)} of {count} inbox items arrived")


async def copy_all(seq: Any, *, at_ms: int = AT) -> list[ev.LogEntry]:
    """Sequence everything in the inbox right now."""
    out: list[ev.LogEntry] = []
    while items := await seq.pull(max_items=100, timeout_s=0.2):
        out += await seq.append_inputs(items, at_ms=at_ms)
    return out


def test_the_samples_cover_every_event_type() -> None:
    """A new event type needs a sample here, or the round trips below would not cover it."""
    assert sorted(type(e).__name__ for e in samples.INPUTS) == sorted(t.__name__ for t in ev.INPUT_TYPES)
    assert sorted(type(e).__name__ for e in samples.DECISIONS) == sorted(
        t.__name__ for t in ev.DECISION_TYPES
    )


class LogContract:
    """Subclasses provide the ``log`` fixture."""

    async def test_every_event_type_round_trips_through_inbox_and_log(self, log: Any) -> None:
        for i, event in enumerate(samples.PUBLISHABLE):
            await log.inbox.publish(event, msg_id=f"sample-{i}")
        seq = log.sequencer("leader-a")
        assert await seq.resume() == (0, 0)
        items = await pull_until(seq, len(samples.PUBLISHABLE))
        assert [i.event for i in items] == samples.PUBLISHABLE
        await seq.append_inputs(items, at_ms=AT)
        await seq.append_inputs([InboxItem(None, samples.INPUTS[-1])], at_ms=AT)  # Rejected, made here
        await seq.append_decisions(samples.DECISIONS, at_ms=AT + 1)

        entries = await read_all(log.reader, batch=7)
        assert [e.event for e in entries] == samples.INPUTS + samples.DECISIONS
        assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
        n_in = len(samples.PUBLISHABLE)
        assert [e.inbox_seq for e in entries[:n_in]] == list(range(1, n_in + 1))
        assert all(e.inbox_seq is None for e in entries[n_in:])
        assert [e.batch for e in entries[n_in + 1 :]] == [
            (i, len(samples.DECISIONS)) for i in range(len(samples.DECISIONS))
        ]
        assert {e.leader for e in entries} == {"leader-a"}
        # Byte for byte: what replay --verify compares.
        for entry in entries:
            assert codec.encode(codec.decode_entry(codec.encode(entry))) == codec.encode(entry)
        assert await log.reader.last_seq() == len(entries)

    async def test_republished_msg_id_is_copied_once(self, log: Any) -> None:
        event = ev.RemoteAdmitted(job=samples.JOB, cluster="east", attempt=1)
        first = await log.inbox.publish(event, msg_id="admitted-1")
        again = await log.inbox.publish(event, msg_id="admitted-1")
        other = await log.inbox.publish(ev.Tick(), msg_id="tick-1")
        assert again == first
        assert other == first + 1
        entries = await copy_all(log.sequencer("a"))
        assert [e.event for e in entries] == [event, ev.Tick()]

    async def test_the_inbox_is_drained_once_everything_stored_was_pulled(self, log: Any) -> None:
        seq = log.sequencer("a")
        await seq.resume()
        for i in range(3):
            await log.inbox.publish(ev.ClusterHeartbeat(cluster=f"c{i}"), msg_id=f"hb-{i}")
        assert not await seq.drained()
        await pull_until(seq, 2)
        assert not await seq.drained()  # one is still stored and not pulled
        await pull_until(seq, 1)
        assert await seq.drained()
        await log.inbox.publish(ev.ClusterHeartbeat(cluster="c9"), msg_id="hb-9")
        assert not await seq.drained()

    async def test_undecodable_inbox_messages_become_rejected_entries_and_sequencing_goes_on(
        self, log: Any
    ) -> None:
        prefix = log.inbox.prefix
        await log.inbox.publish(ev.ClusterRemoved(cluster="a"))
        await log.inbox.publish_raw(f"{prefix}.junk", b"\xff\x00 not json at all")
        await log.inbox.publish_raw(
            f"{prefix}.job.submitted.ns.x", b'{"type":"JobSubmitted","job":{"namespace":1}}'
        )
        await log.inbox.publish_raw(f"{prefix}.decision.placed", codec.encode(samples.DECISIONS[1]))
        await log.inbox.publish(ev.ClusterRemoved(cluster="b"))
        entries = await copy_all(log.sequencer("a"))

        events = [e.event for e in entries]
        assert events[0] == ev.ClusterRemoved(cluster="a")
        assert events[4] == ev.ClusterRemoved(cluster="b")
        rejected = events[1:4]
        assert all(isinstance(r, ev.Rejected) for r in rejected)
        assert [r.inbox_seq for r in rejected] == [2, 3, 4]  # type: ignore[union-attr]
        not_json, wrong_schema, decision = rejected
        assert isinstance(not_json, ev.Rejected) and "not JSON" in not_json.reason
        assert not_json.subject == f"{prefix}.junk"
        assert not_json.raw.endswith("not json at all")
        assert isinstance(wrong_schema, ev.Rejected) and "$.job.namespace" in wrong_schema.reason
        assert isinstance(decision, ev.Rejected) and "leader only" in decision.reason

    async def test_a_decision_among_valid_inputs_is_rejected_alone(self, log: Any) -> None:
        # Every payload decodes (the JetStream sequencer decodes such a batch in one call): the
        # checks after decoding still apply to each message on its own.
        prefix = log.inbox.prefix
        await log.inbox.publish(ev.ClusterRemoved(cluster="a"))
        await log.inbox.publish_raw(f"{prefix}.decision.placed", codec.encode(samples.DECISIONS[1]))
        await log.inbox.publish(ev.ClusterRemoved(cluster="b"))
        events = [e.event for e in await copy_all(log.sequencer("a"))]
        assert events[0] == ev.ClusterRemoved(cluster="a")
        assert isinstance(events[1], ev.Rejected) and "leader only" in events[1].reason
        assert events[1].inbox_seq == 2
        assert events[2] == ev.ClusterRemoved(cluster="b")

    async def test_publishing_outside_the_inbox_is_refused(self, log: Any) -> None:
        with pytest.raises(LogError, match=r"no stream answers on elsewhere\.x"):
            await log.inbox.publish_raw("elsewhere.x", b"{}")

    async def test_restarted_sequencer_resumes_after_the_last_copied_inbox_entry(self, log: Any) -> None:
        for i in range(5):
            await log.inbox.publish(ev.ClusterHeartbeat(cluster=f"c{i}"))
        first = log.sequencer("a")
        await first.resume()
        items = await pull_until(first, 5)
        await first.append_inputs(items[:3], at_ms=AT)
        await first.append_decisions([ev.ClusterLost(cluster="c0")], at_ms=AT)  # last entry: no inbox_seq
        # "Crash": items 4 and 5 were pulled but never appended.
        second = log.sequencer("b")
        assert await second.resume() == (4, 3)
        await log.inbox.publish(ev.ClusterHeartbeat(cluster="c5"))
        rest = await copy_all(second)
        assert [e.inbox_seq for e in rest] == [4, 5, 6]
        entries = await read_all(log.reader)
        assert [e.inbox_seq for e in entries if e.inbox_seq] == [1, 2, 3, 4, 5, 6]
        assert [e.seq for e in entries] == [1, 2, 3, 4, 5, 6, 7]

    async def test_pull_waits_at_most_its_timeout_when_the_inbox_is_empty(self, log: Any) -> None:
        seq = log.sequencer("a")
        assert await seq.pull(max_items=10, timeout_s=0.05) == []

    async def test_appending_an_inbox_entry_twice_is_refused(self, log: Any) -> None:
        await log.inbox.publish(ev.Tick())
        seq = log.sequencer("a")
        items = await pull_until(seq, 1)
        await seq.append_inputs(items, at_ms=AT)
        with pytest.raises(Exception, match="already in the log"):
            await seq.append_inputs(items, at_ms=AT)

    async def test_decision_batches_record_index_and_count(self, log: Any) -> None:
        seq = log.sequencer("a")
        await seq.append_decisions(samples.DECISIONS[:2], at_ms=AT, first_index=0, count=3)
        # A successor completes the batch its predecessor cut short.
        successor = log.sequencer("b")
        await successor.resume()
        await successor.append_decisions(samples.DECISIONS[2:3], at_ms=AT, first_index=2, count=3)
        entries = await read_all(log.reader)
        assert [e.batch for e in entries] == [(0, 3), (1, 3), (2, 3)]
        assert [e.leader for e in entries] == ["a", "a", "b"]
        assert await seq.append_decisions([], at_ms=AT) == []

    async def test_racing_sequencers_exactly_one_wins_each_append(self, log: Any) -> None:
        won: dict[str, list[int]] = {"a": [], "b": []}
        fenced = {"a": 0, "b": 0}

        async def run(name: str) -> None:
            seq = log.sequencer(name)
            await seq.resume()
            while len(won["a"]) + len(won["b"]) < 60:
                try:
                    entries = await seq.append_decisions([ev.ClusterRecovered(cluster=name)], at_ms=AT)
                    won[name] += [e.seq for e in entries]
                except Fenced:
                    fenced[name] += 1
                    seq = log.sequencer(name)  # step down, come back as a fresh leader
                    await seq.resume()
                await asyncio.sleep(0)

        await asyncio.gather(run("a"), run("b"))
        entries = await read_all(log.reader)
        assert [e.seq for e in entries] == list(range(1, len(entries) + 1))  # no gaps, no dups
        assert sorted(won["a"] + won["b"]) == [e.seq for e in entries]  # every win is in the log
        for e in entries:  # ...written by the one that won it
            assert e.event == ev.ClusterRecovered(cluster=e.leader)
            assert e.seq in won[e.leader]
        assert fenced["a"] + fenced["b"] > 0, "the two never raced"

    async def test_a_fenced_sequencer_stays_fenced(self, log: Any) -> None:
        old = log.sequencer("old")
        await old.resume()
        new = log.sequencer("new")
        await new.resume()
        await new.append_decisions([ev.ClusterRecovered(cluster="x")], at_ms=AT)
        with pytest.raises(Fenced):
            await old.append_decisions([ev.ClusterRecovered(cluster="y")], at_ms=AT)
        with pytest.raises(Fenced):
            await old.append_inputs([InboxItem(None, ev.Tick())], at_ms=AT)
        assert [e.leader for e in await read_all(log.reader)] == ["new"]

    async def test_read_bounds_and_batches(self, log: Any) -> None:
        seq = log.sequencer("a")
        for i in range(10):
            await seq.append_inputs([InboxItem(None, ev.Tick())], at_ms=AT + i * 100)
        assert [e.seq for e in await read_all(log.reader, from_seq=4, until_seq=6)] == [4, 5, 6]
        assert [e.seq for e in await read_all(log.reader, until_ms=AT + 250)] == [1, 2, 3]
        assert [e.seq for e in await read_all(log.reader, from_seq=9)] == [9, 10]
        assert await read_all(log.reader, from_seq=11) == []
        sizes = [len(b) async for b in log.reader.read(batch=3)]
        assert sizes == [3, 3, 3, 1]

    async def test_get_reads_one_entry_by_its_sequence(self, log: Any) -> None:
        seq = log.sequencer("a")
        job = ev.JobRef(namespace="n", name="j", uid="u")
        await seq.append_inputs([InboxItem(None, ev.Tick())], at_ms=AT)
        manifest = {"kind": "Job", "metadata": {"name": "j"}, "spec": {"parallelism": 2}}
        await seq.append_inputs(
            [InboxItem(None, ev.JobSubmitted(job=job, pod_sets=[], manifest=manifest))], at_ms=AT
        )
        got = await log.reader.get(2)
        assert got == (await read_all(log.reader, from_seq=2))[0]
        assert isinstance(got.event, ev.JobSubmitted) and got.event.manifest == manifest
        assert await log.reader.get(3) is None and await log.reader.get(0) is None

    async def test_snapshots_latest_at_or_before(self, log: Any) -> None:
        assert await log.snapshots.latest() is None
        big = bytes(range(256)) * 4096  # 1 MiB: more than one NATS message
        await log.snapshots.save(10, b"ten")
        await log.snapshots.save(20, big)
        await log.snapshots.save(30, b"thirty")
        assert await log.snapshots.latest() == (30, b"thirty")
        assert await log.snapshots.latest(at_or_before=29) == (20, big)
        assert await log.snapshots.latest(at_or_before=10) == (10, b"ten")
        assert await log.snapshots.latest(at_or_before=9) is None
        # A bytearray (the leader's snapshot, written in one buffer) is stored as the same bytes.
        await log.snapshots.save(40, bytearray(big))
        assert await log.snapshots.latest() == (40, big)

    async def test_snapshots_latest_into_hands_the_bytes_over_in_pieces_off_the_loop(self, log: Any) -> None:
        import threading

        pieces: list[bytes] = []
        threads: set[threading.Thread] = set()

        def write(piece: bytes) -> None:
            pieces.append(bytes(piece))
            threads.add(threading.current_thread())

        assert await log.snapshots.latest_into(write) is None and not pieces
        big = bytes(range(256)) * 4096  # 1 MiB: more than one NATS message
        await log.snapshots.save(20, big)
        await log.snapshots.save(30, b"thirty")
        assert await log.snapshots.latest_into(write, at_or_before=29) == 20
        assert b"".join(pieces) == big and len(pieces) > 1
        assert threading.main_thread() not in threads
        assert await log.snapshots.latest_into(write, at_or_before=19) is None

    async def test_jsonl_export_reads_back_the_same_entries(self, log: Any, tmp_path: Path) -> None:
        for i, event in enumerate(samples.PUBLISHABLE):
            await log.inbox.publish(event, msg_id=f"s{i}")
        seq = log.sequencer("a")
        await copy_all(seq)
        await seq.append_decisions(samples.DECISIONS, at_ms=AT + 5)
        original = await read_all(log.reader)
        for name in ("log.jsonl", "log.jsonl.gz"):
            path = tmp_path / name
            assert await jsonl.export(log.reader, path) == len(original)
            replay = jsonl.JsonlLog(path)
            assert await read_all(replay, batch=5) == original
            assert await replay.last_seq() == original[-1].seq
            assert [e.seq for e in await read_all(replay, from_seq=3, until_seq=4)] == [3, 4]
        lines = (tmp_path / "log.jsonl").read_bytes().splitlines()
        assert [codec.decode_entry(line) for line in lines] == original

    async def test_lease_second_candidate_takes_over_and_the_old_leader_is_fenced(self, log: Any) -> None:
        first = log.lease("sequencer", 2.0, holder="first")
        second = log.lease("sequencer", 2.0, holder="second")
        await first.acquire(timeout_s=5)
        assert first.valid()
        assert not await second.try_acquire()  # held and renewed: the second waits
        # Renewed every third of the TTL: after the fourth renewal, the first write is older than
        # the TTL and only the renewals can have kept the key.
        await eventually(lambda: first.renewals >= 4 or Unmet(first.renewals), what="four renewals")
        assert not await second.try_acquire()
        assert await second.current_holder() == "first"

        old = log.sequencer("first", lease=first)
        await old.append_decisions([ev.ClusterLost(cluster="x")], at_ms=AT)
        first.stop_renewing()  # the first leader hangs
        await second.acquire(timeout_s=10)
        assert await second.current_holder() == "second"
        new = log.sequencer("second", lease=second)
        await new.resume()
        await new.append_decisions([ev.ClusterRecovered(cluster="x")], at_ms=AT)

        with pytest.raises(NotLeader):  # its own lease check stops it...
            await old.append_decisions([ev.ClusterRecovered(cluster="y")], at_ms=AT)
        with pytest.raises(NotLeader):  # ...and renewing tells it the lease is gone
            await first.renew()
        assert first.lost.is_set()
        unchecked = log.sequencer("first")  # even without the lease check, fencing refuses it
        await unchecked.resume()
        await new.append_decisions([ev.ClusterRecovered(cluster="z")], at_ms=AT)
        with pytest.raises(Fenced):
            await unchecked.append_decisions([ev.ClusterRecovered(cluster="y")], at_ms=AT)
        assert [e.leader for e in await read_all(log.reader)] == ["first", "second", "second"]
        await second.release()
        assert await first.try_acquire()  # released: free at once, no TTL wait
        await first.release()

    async def test_waiting_for_a_held_lease_gives_up_at_its_timeout(self, log: Any) -> None:
        holder = log.lease("sequencer", 5.0, holder="holder")
        await holder.acquire(timeout_s=5)
        with pytest.raises(NotLeader):
            await log.lease("sequencer", 5.0, holder="waiter").acquire(timeout_s=0.3)
        assert await holder.current_holder() == "holder"
        await holder.release()

    async def test_a_new_lease_ttl_replaces_the_old_one(self, log: Any) -> None:
        first = log.lease("sequencer", 5.0, holder="a")
        await first.acquire(timeout_s=5)
        await first.release()
        shorter = log.lease("sequencer", 1.0, holder="b")  # the configuration changed
        await shorter.acquire(timeout_s=5)
        shorter.stop_renewing()  # b crashes: its key must expire after 1 s, not 5
        third = log.lease("sequencer", 1.0, holder="c")
        await third.acquire(timeout_s=3)
        assert await third.current_holder() == "c"
        await third.release()


class TestMemoryLog(LogContract):
    @pytest.fixture
    async def log(self) -> AsyncIterator[MemoryLog]:
        async with MemoryLog() as mlog:
            yield mlog


class TestJetStreamLog(LogContract):
    @pytest.fixture
    async def log(self, jslog: Any) -> Any:
        return jslog

    async def test_a_holder_notices_by_itself_when_its_lease_is_taken(self, log: Any) -> None:
        first = log.lease("sequencer", 1.5, holder="first")
        await first.acquire(timeout_s=5)
        kv = await log.js.key_value(log.names.lease_bucket)
        await kv.delete("sequencer")  # an operator forces a fail-over (`nats kv del`)
        second = log.lease("sequencer", 1.5, holder="second")
        assert await second.try_acquire()
        await asyncio.wait_for(first.lost.wait(), 5)  # its next renewal fails: it steps down
        assert not first.valid()
        assert await first.current_holder() == "second"
        await second.release()

    async def test_a_second_connection_sees_the_same_log(self, log: Any, nats_url: str) -> None:
        seq = log.sequencer("a")
        await seq.append_decisions(samples.DECISIONS[:3], at_ms=AT)
        other = await connect(nats_url, root=log.names.root)
        try:
            assert [e.event for e in await read_all(other.reader)] == samples.DECISIONS[:3]
            assert await other.sequencer("b").resume() == (3, 0)
        finally:
            await other.close()
