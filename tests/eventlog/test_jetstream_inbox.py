"""The inbox on a real nats-server: publish, de-duplication, the embedded default."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from eventlog import codec
from eventlog import events as ev
from eventlog.embedded import EmbeddedError, EmbeddedNats
from eventlog.jetstream import JetStreamLog, connect
from eventlog.jetstream.connection import open_client
from eventlog.store import LogError, PublishTimeout

JOB = ev.JobRef(namespace="team-a", name="train.v1", uid="u-1")


async def test_publish_returns_increasing_inbox_seqs(jslog: JetStreamLog) -> None:
    first = await jslog.inbox.publish(ev.JobDeleted(job=JOB), msg_id="a")
    second = await jslog.inbox.publish(ev.ClusterRemoved(cluster="east"), msg_id="b")
    assert (first, second) == (1, 2)


async def test_republished_msg_id_is_stored_once(jslog: JetStreamLog) -> None:
    event = ev.RemoteAdmitted(job=JOB, cluster="east", attempt=1)
    first = await jslog.inbox.publish(event, msg_id="same")
    again = await jslog.inbox.publish(event, msg_id="same")
    info = await jslog.js.stream_info(jslog.names.inbox_stream)
    assert again == first
    assert info.state.messages == 1


async def test_subject_is_filterable_and_payload_holds_the_true_name(jslog: JetStreamLog) -> None:
    await jslog.inbox.publish(ev.JobDeleted(job=JOB))
    msg = await jslog.js.get_last_msg(
        jslog.names.inbox_stream, f"{jslog.names.inbox_prefix}.job.deleted.team-a.*"
    )
    assert msg.subject == f"{jslog.names.inbox_prefix}.job.deleted.team-a.train~2Ev1"
    assert codec.decode_event(msg.data) == ev.JobDeleted(job=JOB)


async def test_embedded_server_starts_stores_and_stops(tmp_path: Path) -> None:
    jlog = await connect(None, data_dir=tmp_path / "store")
    url = jlog.url
    seq = await jlog.inbox.publish(ev.ClusterRemoved(cluster="east"))
    await jlog.close()
    assert seq == 1
    assert (tmp_path / "store" / "jetstream").is_dir()
    # Stopped: nobody listens there any more, and connect says so instead of hanging.
    with pytest.raises(ConnectionError, match="cannot reach NATS"):
        await open_client(url, timeout_s=0.5)


async def test_a_second_embedded_server_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    first = await EmbeddedNats(data_dir=tmp_path).start_async()
    try:
        # The lock names both processes: the server to stop and the process that started it.
        owner = f"in use by nats-server pid {first.pid} of pid {os.getpid()} at {re.escape(first.url)}"
        with pytest.raises(EmbeddedError, match=owner):
            await EmbeddedNats(data_dir=tmp_path).start_async()
        assert first.running()
    finally:
        await first.stop_async()
    again = await EmbeddedNats(data_dir=tmp_path).start_async()  # free again once stopped
    await again.stop_async()


async def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    busy = EmbeddedNats(data_dir=tmp_path / "a")
    await busy.start_async()
    try:
        clash = EmbeddedNats(data_dir=tmp_path / "b", port=busy.port)  # port already taken
        with pytest.raises(EmbeddedError, match="exited with code"):
            await clash.start_async()
        assert not clash.running()
    finally:
        await busy.stop_async()


async def test_publishing_outside_the_inbox_is_an_error_a_person_can_act_on(jslog: JetStreamLog) -> None:
    with pytest.raises(LogError, match=r"no stream answers on nowhere\.x .*takes t\w+\.in\.>"):
        await jslog.inbox.publish_raw("nowhere.x", b"{}")


async def test_publishing_on_a_closed_connection_is_a_publish_timeout(nats_url: str, log_root: str) -> None:
    jlog = await connect(nats_url, root=log_root)
    await jlog.close()
    with pytest.raises(PublishTimeout, match="not connected"):
        await jlog.inbox.publish(ev.Tick())


async def test_publish_many_is_one_burst_and_idempotent_by_msg_id(jslog: JetStreamLog) -> None:
    facts: list[tuple[ev.InputEvent, str | None]] = [
        (ev.ClusterHeartbeat(cluster=f"c{i}"), f"hb/c{i}") for i in range(50)
    ]
    first = await jslog.inbox.publish_many(facts)
    again = await jslog.inbox.publish_many(facts)  # a retried burst: nothing stored twice
    assert first == again == list(range(1, 51))
    seq = jslog.sequencer("a")
    items: list[Any] = []
    while batch := await seq.pull(max_items=100, timeout_s=1.0):  # a loaded machine delivers in parts
        items += batch
    assert [i.event for i in items] == [event for event, _ in facts]
