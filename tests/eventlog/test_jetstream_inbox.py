"""The inbox on a real nats-server: publish, de-duplication, the embedded default."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventlog import codec
from eventlog import events as ev
from eventlog.jetstream import JetStreamLog, connect
from eventlog.jetstream.connection import open_client

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
