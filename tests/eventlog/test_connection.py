"""Connection options against real servers: TLS with a client certificate, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import TlsFiles, connect
from tests.eventlog.nats_jwt import operator_setup
from tests.eventlog.pki import make_pki, server_tls_args


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    return make_pki(tmp_path)


async def test_tls_with_client_certificate(pki: Path, tmp_path: Path) -> None:
    async with EmbeddedNats(data_dir=tmp_path / "store", extra_args=server_tls_args(pki)) as server:
        url = f"tls://127.0.0.1:{server.port}"
        tls = TlsFiles(ca=str(pki / "ca.pem"), cert=str(pki / "client.pem"), key=str(pki / "client.key"))
        jlog = await connect(url, tls=tls, root="tls")
        try:
            seq = await jlog.inbox.publish(ev.ClusterRemoved(cluster="east"))
            assert seq == 1
        finally:
            await jlog.close()
        # Without the client certificate the server refuses, and connect says where and why.
        with pytest.raises(ConnectionError, match=f"cannot reach NATS at {url}"):
            await connect(url, tls=TlsFiles(ca=str(pki / "ca.pem")), root="tls", connect_timeout_s=1.0)


async def test_missing_credentials_file_is_named(nats_url: str, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.creds"):
        await connect(nats_url, creds=tmp_path / "nope.creds")


async def test_streams_are_created_with_the_replicas_asked_for(nats_url: str, log_root: str) -> None:
    jlog = await connect(nats_url, root=log_root, replicas=1)
    try:
        for stream in (jlog.names.inbox_stream, jlog.names.log_stream):
            info = await jlog.js.stream_info(stream)
            assert info.config.num_replicas == 1
        # R3 on a single server is refused with the server's reason, not a hang.
        with pytest.raises(Exception, match=r"(?i)replicas"):
            await connect(nats_url, root=log_root + "r3", replicas=3)
    finally:
        for stream in (jlog.names.inbox_stream, jlog.names.log_stream):
            await jlog.js.delete_stream(stream)
        await jlog.close()


async def test_reconnecting_keeps_what_an_operator_tuned(nats_url: str, log_root: str) -> None:
    jlog = await connect(nats_url, root=log_root)
    try:
        info = await jlog.js.stream_info(jlog.names.inbox_stream)
        await jlog.js.update_stream(info.config.evolve(max_age=30 * 24 * 3600.0))
        again = await connect(nats_url, root=log_root)
        await again.close()
        info = await jlog.js.stream_info(jlog.names.inbox_stream)
        assert info.config.max_age == 30 * 24 * 3600.0
    finally:
        for stream in (jlog.names.inbox_stream, jlog.names.log_stream):
            await jlog.js.delete_stream(stream)
        await jlog.close()


async def test_the_inbox_keeps_a_week_and_the_log_everything(nats_url: str, log_root: str) -> None:
    """The inbox is a transfer buffer (the log has a copy of what was sequenced); the log is the
    system's memory and is never trimmed by default. An inbox created before the limit existed
    gets it on the next connect."""
    jlog = await connect(nats_url, root=log_root)
    try:
        inbox = await jlog.js.stream_info(jlog.names.inbox_stream)
        log = await jlog.js.stream_info(jlog.names.log_stream)
        assert inbox.config.max_age == 7 * 24 * 3600.0
        assert not log.config.max_age and (log.config.max_bytes or -1) < 0 and (log.config.max_msgs or -1) < 0
        await jlog.js.update_stream(inbox.config.evolve(max_age=0.0))  # as an older version made it
        again = await connect(nats_url, root=log_root)
        await again.close()
        inbox = await jlog.js.stream_info(jlog.names.inbox_stream)
        assert inbox.config.max_age == 7 * 24 * 3600.0
    finally:
        for stream in (jlog.names.inbox_stream, jlog.names.log_stream):
            await jlog.js.delete_stream(stream)
        await jlog.close()


async def test_credentials_file_login_on_an_operator_mode_server(tmp_path: Path) -> None:
    conf, creds = operator_setup(tmp_path)
    async with EmbeddedNats(data_dir=tmp_path / "store", extra_args=["--config", str(conf)]) as server:
        jlog = await connect(server.url, creds=creds, root="creds")
        try:
            assert await jlog.inbox.publish(ev.ClusterRemoved(cluster="east")) == 1
            seq = jlog.sequencer("a")
            await seq.append_inputs(await seq.pull(max_items=10, timeout_s=1.0), at_ms=1)
            assert [e.event async for batch in jlog.reader.read() for e in batch] == [
                ev.ClusterRemoved(cluster="east")
            ]
        finally:
            await jlog.close()
        # Without credentials the server refuses, and connect says where and why.
        with pytest.raises(ConnectionError, match=r"cannot reach NATS .*Authorization Violation"):
            await connect(server.url, root="creds", connect_timeout_s=1.0)
