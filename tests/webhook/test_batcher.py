"""Pipelined inbox publishing against a real nats-server: every event acknowledged, in order,
de-duplicated by message id like a plain publish."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from eventlog import codec
from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import JetStreamLog, connect
from eventlog.store import PublishTimeout
from tests.stalling import stall
from tests.waiting import eventually
from webhook.batcher import BatchingInbox


def _event(i: int) -> ev.JobSubmitted:
    return ev.JobSubmitted(job=ev.JobRef(namespace="ns", name=f"job-{i}", uid=f"u{i}"), pod_sets=[ev.PodSet(name="main", count=1)])


async def test_concurrent_publishes_are_batched_and_each_acknowledged(jslog: JetStreamLog) -> None:
    inbox = BatchingInbox(jslog, max_batch=64)
    seqs = await asyncio.gather(*(inbox.publish(_event(i), msg_id=f"m{i}", timeout_s=5) for i in range(300)))
    assert sorted(seqs) == list(range(1, 301))
    again = await asyncio.gather(inbox.publish(_event(7), msg_id="m7", timeout_s=5), inbox.publish(_event(999), msg_id="new", timeout_s=5))
    assert again == [seqs[7], 301]  # a duplicate message id gets the original sequence
    info = await jslog.js.stream_info(jslog.names.inbox_stream)
    assert info.state.messages == 301


async def test_a_closed_connection_fails_every_waiter(jslog: JetStreamLog, nats_url: str) -> None:
    own = await connect(nats_url, root=jslog.names.root)  # the fixture's connection stays open for its clean-up
    inbox = BatchingInbox(own)
    await own.nc.close()
    results = await asyncio.gather(*(inbox.publish(_event(i), msg_id=f"c{i}", timeout_s=1) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, Exception) for r in results)


async def test_an_event_too_large_for_nats_goes_without_its_manifest(jslog: JetStreamLog) -> None:
    inbox = BatchingInbox(jslog)
    big = ev.JobSubmitted(
        job=ev.JobRef(namespace="ns", name="huge", uid="u-huge"),
        pod_sets=[ev.PodSet(name="main", count=1)],
        manifest={"metadata": {"annotations": {"blob": "x" * (jslog.nc.max_payload + 10)}}},
    )
    seq = await inbox.publish(big, msg_id="huge", timeout_s=5)
    msg = await jslog.js.get_msg(jslog.names.inbox_stream, seq)
    assert msg.data is not None
    stored = codec.decode_event(msg.data)
    assert isinstance(stored, ev.JobSubmitted) and stored.job.name == "huge" and stored.manifest is None


async def test_each_waiter_gets_its_own_bound_when_nats_stalls(tmp_path: Path) -> None:
    server = EmbeddedNats(data_dir=tmp_path / "nats")
    await server.start_async()
    jlog = await connect(server.url, root="stall")
    try:
        inbox = BatchingInbox(jlog)
        # Connected, but nothing is acknowledged. Stopped before anything is published: a
        # server still finishing its stop acknowledged both publishes under load (tests/stalling.py).
        pid = await stall(server)
        try:
            slow = asyncio.ensure_future(inbox.publish(_event(1), msg_id="a", timeout_s=3))
            fast = asyncio.ensure_future(inbox.publish(_event(2), msg_id="b", timeout_s=0.3))
            done, _ = await asyncio.wait({slow, fast}, return_when=asyncio.FIRST_COMPLETED)
            assert done == {fast}  # queued after the slow one, bounded by its own deadline
            with pytest.raises(PublishTimeout):
                await fast
            with pytest.raises(PublishTimeout):
                await slow
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        await jlog.close()
        await server.stop_async()


async def test_no_responders_while_the_inbox_has_no_leader_is_retried_within_the_bound(jslog: JetStreamLog) -> None:
    """What a fail-over of the inbox stream looks like to the webhook: "no responders" (503)
    until a leader is elected. Here the stream is gone and comes back; the publish waits for it
    within its bound instead of failing at once (which let reviews be allowed unrecorded)."""
    inbox = BatchingInbox(jslog)
    await jslog.js.delete_stream(jslog.names.inbox_stream)
    publishing = asyncio.create_task(inbox.publish(_event(1), msg_id="nr1", timeout_s=30))

    def refused_and_waiting() -> bool:
        if publishing.done():
            publishing.result()  # the error it gave up with
            raise AssertionError(f"gave up at once: {publishing.result()}")
        return inbox.retries >= 1

    await eventually(refused_and_waiting, what="the inbox to refuse the publish and the batcher to retry")
    await jslog.ensure_streams()  # the stream has a leader again
    seq = await publishing
    msg = await jslog.js.get_msg(jslog.names.inbox_stream, seq)
    assert msg.data is not None and codec.decode_event(msg.data) == _event(1)


async def test_no_responders_past_the_bound_is_a_timeout_that_says_why(jslog: JetStreamLog) -> None:
    inbox = BatchingInbox(jslog)
    await jslog.js.delete_stream(jslog.names.inbox_stream)
    with pytest.raises(PublishTimeout, match="no responders"):
        await inbox.publish(_event(2), msg_id="nr2", timeout_s=0.5)
    await jslog.ensure_streams()  # for the fixture's clean-up


async def test_a_publish_while_nats_restarts_is_recorded_within_the_bound(tmp_path: Path) -> None:
    """The server the webhook is connected to stops and comes back (a rolling restart, a node
    of a cluster): publishes wait for the reconnect within their bound and are then recorded."""
    server = EmbeddedNats(data_dir=tmp_path / "nats")
    await server.start_async()
    port = server.port
    jlog = await connect(server.url, root="restart")
    again: EmbeddedNats | None = None
    try:
        inbox = BatchingInbox(jlog)
        await server.stop_async()
        await eventually(lambda: jlog.nc.is_reconnecting, what="the client to notice")
        publishing = asyncio.gather(*(inbox.publish(_event(i), msg_id=f"r{i}", timeout_s=30) for i in range(5)))
        await eventually(lambda: inbox.retries >= 1, what="the batcher to wait for the reconnect")
        again = EmbeddedNats(data_dir=tmp_path / "nats", port=port)
        await again.start_async()
        seqs = await publishing
        assert sorted(seqs) == [1, 2, 3, 4, 5]
        info = await jlog.js.stream_info(jlog.names.inbox_stream)
        assert info.state.messages == 5  # each once, though retried
    finally:
        await jlog.close()
        if again is not None:
            await again.stop_async()


async def test_an_event_written_to_a_server_that_died_is_published_again_after_the_reconnect(tmp_path: Path) -> None:
    """Written onto the connection, then the server dies before reading it: its ack never comes
    on the new connection, so the batcher publishes it again (same message id) once reconnected."""
    server = EmbeddedNats(data_dir=tmp_path / "nats")
    await server.start_async()
    port = server.port
    jlog = await connect(server.url, root="lost")
    again: EmbeddedNats | None = None
    try:
        inbox = await BatchingInbox(jlog).open()
        await stall(server)  # connected, reads nothing: what is written now is lost with it
        publishing = asyncio.ensure_future(inbox.publish(_event(1), msg_id="lost-1", timeout_s=30))
        await eventually(lambda: inbox.unacknowledged == 1, what="the event to be written")
        server.kill()
        await eventually(lambda: jlog.nc.is_reconnecting, what="the client to notice")
        again = EmbeddedNats(data_dir=tmp_path / "nats", port=port)
        await again.start_async()
        seq = await publishing
        assert inbox.retries >= 1
        msg = await jlog.js.get_msg(jlog.names.inbox_stream, seq)
        assert msg.data is not None and codec.decode_event(msg.data) == _event(1)
        info = await jlog.js.stream_info(jlog.names.inbox_stream)
        assert info.state.messages == 1
    finally:
        await jlog.close()
        if again is not None:
            await again.stop_async()


async def test_a_waiter_that_fails_does_not_stop_the_acks_of_the_others(jslog: JetStreamLog) -> None:
    """Waiters are told from the ack's parse (``send``): one whose callback raises is logged, and
    the events after it in the same batch are still acknowledged to theirs."""
    inbox = await BatchingInbox(jslog).open()
    told: list[int | BaseException] = []
    all_told = asyncio.get_running_loop().create_future()

    def broken(_: int | BaseException) -> None:
        raise RuntimeError("a waiter's bug")

    def keep(outcome: int | BaseException) -> None:
        told.append(outcome)
        if len(told) == 2:
            all_told.set_result(None)

    inbox.send(_event(1), msg_id="w1", timeout_s=5, then=keep)
    inbox.send(_event(2), msg_id="w2", timeout_s=5, then=broken)
    inbox.send(_event(3), msg_id="w3", timeout_s=5, then=keep)
    await asyncio.wait_for(all_told, 10)
    assert told == [1, 3]
    assert await inbox.publish(_event(4), msg_id="w4", timeout_s=5) == 4
