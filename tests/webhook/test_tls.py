"""Serving certificates: self-signed for development, files reloaded when they change on disk."""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509

from eventlog.embedded import free_port
from webhook.tls import CertFiles, self_signed


def _serial(pem: Path) -> int:
    return x509.load_pem_x509_certificate(pem.read_bytes()).serial_number


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text="ok")


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[CertFiles, int, ssl.SSLContext, Path]]:
    """A live cert pair under tmp_path/live served over HTTPS; a client trusting both dev CAs."""
    ca_a, cert_a, key_a = self_signed(tmp_path / "a")
    ca_b, _, _ = self_signed(tmp_path / "b")
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(cert_a, live / "tls.crt")
    shutil.copy(key_a, live / "tls.key")
    certs = CertFiles(live / "tls.crt", live / "tls.key")
    app = web.Application()
    app.router.add_get("/healthz", _ok)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=certs.context).start()
    client = ssl.create_default_context(cafile=str(ca_a))
    client.load_verify_locations(cafile=str(ca_b))
    try:
        yield certs, port, client, tmp_path
    finally:
        await runner.cleanup()


async def _peer_serial(port: int, client: ssl.SSLContext) -> int:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        writer.close()
        await writer.wait_closed()


async def test_rotated_files_are_served_to_new_connections(served: tuple[CertFiles, int, ssl.SSLContext, Path]) -> None:
    certs, port, client, root = served
    assert await _peer_serial(port, client) == _serial(root / "a" / "tls.crt")
    assert not certs.reload_if_changed()  # nothing changed on disk

    # cert-manager writes the key first: a pair that does not match yet is not loaded.
    shutil.copy(root / "b" / "tls.key", root / "live" / "tls.key.new")
    os.replace(root / "live" / "tls.key.new", root / "live" / "tls.key")
    assert not certs.reload_if_changed()
    assert await _peer_serial(port, client) == _serial(root / "a" / "tls.crt")

    shutil.copy(root / "b" / "tls.crt", root / "live" / "tls.crt.new")
    os.replace(root / "live" / "tls.crt.new", root / "live" / "tls.crt")
    assert certs.reload_if_changed()
    assert await _peer_serial(port, client) == _serial(root / "b" / "tls.crt")


def test_self_signed_is_reused_until_names_change(tmp_path: Path) -> None:
    ca, cert, key = self_signed(tmp_path)
    first = cert.read_bytes()
    assert self_signed(tmp_path)[1].read_bytes() == first
    _, cert2, _ = self_signed(tmp_path, names=["kdispatch-webhook.kdispatch-system.svc", "localhost"])
    assert cert2.read_bytes() != first
    parsed = x509.load_pem_x509_certificate(cert2.read_bytes())
    sans = parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "kdispatch-webhook.kdispatch-system.svc" in sans.get_values_for_type(x509.DNSName)
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    # the CA bundle verifies the serving certificate (what the apiserver does with caBundle)
    ctx = ssl.create_default_context(cafile=str(ca))
    assert ctx.get_ca_certs()[0]["subject"]


def test_unloadable_files_stop_start_up(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    with pytest.raises(RuntimeError, match="cannot load the TLS certificate"):
        CertFiles(tmp_path / "tls.crt", tmp_path / "tls.key")
