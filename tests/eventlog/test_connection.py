"""Connection options against real servers: TLS with a client certificate, and clear errors."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import TlsFiles, connect
from tests.eventlog.nats_jwt import operator_setup


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def _issue(
    *, name: str, issuer_key: ec.EllipticCurvePrivateKey, issuer: x509.Name | None, ca: bool, path: Path
) -> tuple[ec.EllipticCurvePrivateKey, x509.Name]:
    key = issuer_key if issuer is None else ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
    cert = builder.sign(issuer_key, hashes.SHA256())
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(path.with_suffix(".key"), key)
    return key, subject


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    _, ca_name = _issue(name="kd-test-ca", issuer_key=ca_key, issuer=None, ca=True, path=tmp_path / "ca")
    _issue(name="nats-server", issuer_key=ca_key, issuer=ca_name, ca=False, path=tmp_path / "server")
    _issue(name="kdispatch", issuer_key=ca_key, issuer=ca_name, ca=False, path=tmp_path / "client")
    return tmp_path


async def test_tls_with_client_certificate(pki: Path, tmp_path: Path) -> None:
    tls_args = [
        "--tlscert", str(pki / "server.pem"),
        "--tlskey", str(pki / "server.key"),
        "--tlscacert", str(pki / "ca.pem"),
        "--tlsverify",
    ]  # fmt: skip
    async with EmbeddedNats(data_dir=tmp_path / "store", extra_args=tls_args) as server:
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
