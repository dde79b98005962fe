"""Connecting to NATS: a URL (with optional creds file and TLS files) or the embedded server."""

from __future__ import annotations

import asyncio
import re
import ssl
from pathlib import Path

import structlog
from msgspec import Struct
from nats.aio.client import Client

from eventlog.jetstream.rawsub import FastParser, Sink

log = structlog.get_logger("eventlog.connection")


_WHITESPACE = re.compile(r"\s")


def _parse_header_lines(raw: bytes) -> dict[str, str]:
    """nats-py's header parser, same results, without a Python-level loop per character: on
    replay every log entry carries three headers, and that loop cost more than decoding it."""
    out: dict[str, str] = {}
    for line in raw.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        try:
            key = name.strip().decode("ascii")
        except UnicodeDecodeError:
            continue
        if _WHITESPACE.search(key):
            continue
        out[key] = value.strip().decode("utf-8", "replace")
    return out


_DENIED = re.compile(r'permissions violation for \w+ to "([^"]+)"', re.I)
_DENIED_KEPT = 256


class KdClient(Client):
    """nats-py's client with a faster header parser (see ``_parse_header_lines``), a faster
    protocol parser with raw subscriptions (``eventlog.jetstream.rawsub``), and a memory of the
    subjects the server refused (``permission_denied``)."""

    _parse_header_lines = staticmethod(_parse_header_lines)

    def __init__(self) -> None:
        super().__init__()
        self.denied: dict[str, str] = {}  # subject (lower case, as the server says it) -> error
        self.raw_sinks: dict[int, Sink] = {}  # sid -> where its messages go (RawSubscription)
        self._ps = FastParser(self)

    def _remove_sub(self, sid: int, max_msgs: int = 0) -> None:
        self.raw_sinks.pop(sid, None)
        super()._remove_sub(sid, max_msgs)

    def note_error(self, err: Exception) -> None:
        found = _DENIED.search(str(err))
        if found:
            if len(self.denied) >= _DENIED_KEPT:
                self.denied.pop(next(iter(self.denied)))
            self.denied[found.group(1).lower()] = str(err)


def permission_denied(nc: Client, subject: str) -> str | None:
    """The server's "permissions violation" for ``subject`` if it sent one on this connection:
    the server drops such a message and says so only asynchronously, so a publish that got no
    ack asks here why before reporting a timeout."""
    if isinstance(nc, KdClient):
        return nc.denied.get(subject.lower())
    err = nc.last_error
    text = str(err) if err is not None else ""
    if "permissions violation" in text and f'"{subject.lower()}"' in text.lower():
        return text
    return None


def denied_message(subject: str, violation: str) -> str:
    return (
        f"NATS refused {subject}: {violation.removeprefix('nats: ')}; this connection's user "
        "(nats.nkey / nats.creds) may not publish there (docs/security.md lists what each may)"
    )


class TlsFiles(Struct, frozen=True, kw_only=True):
    """PEM files: ``ca`` to verify the server, ``cert``/``key`` for a client certificate."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None


def ssl_context(tls: TlsFiles | ssl.SSLContext) -> ssl.SSLContext:
    if isinstance(tls, ssl.SSLContext):
        return tls
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls.ca)
    if tls.cert:
        ctx.load_cert_chain(tls.cert, tls.key)
    elif tls.key:
        raise ValueError("TLS key given without a certificate (tls.cert)")
    return ctx


async def open_client(
    url: str,
    *,
    creds: str | Path | None = None,
    tls: TlsFiles | ssl.SSLContext | None = None,
    name: str = "kdispatch",
    timeout_s: float = 10.0,
    nkey: str | Path | None = None,
    inbox_prefix: str | None = None,
) -> Client:
    """Connect to ``url`` (or several, comma-separated), retrying for ``timeout_s``; once connected, reconnect forever (the server may be
    restarting or failing over). Raises ``ConnectionError`` naming the URL and the last error."""
    last_error: list[Exception] = []

    async def _on_error(err: Exception) -> None:
        # An authorization refusal says more than the connection reset that follows it: keep it.
        if not (last_error and "Authorization" in str(last_error[0]) and "Authorization" not in str(err)):
            last_error[:] = [err]
        client.note_error(err)
        log.warning("nats_error", url=url, error=str(err) or type(err).__name__)

    async def _on_disconnect() -> None:
        if not client.is_closed:  # closing on purpose is not news
            log.warning("nats_disconnected", url=url)

    async def _on_reconnect() -> None:
        log.info("nats_reconnected", url=url)

    if creds is not None and not Path(creds).is_file():
        raise FileNotFoundError(f"NATS credentials file {creds} does not exist")
    if nkey is not None and not Path(nkey).is_file():
        raise FileNotFoundError(f"NATS nkey seed file {nkey} does not exist (nats.nkey)")
    client = KdClient()
    servers = [u.strip() for u in url.split(",") if u.strip()]  # a cluster: "nats://a:4222,nats://b:4222"
    connecting = client.connect(
        servers,
        name=name,
        user_credentials=str(creds) if creds is not None else None,
        nkeys_seed=str(nkey) if nkey is not None else None,
        tls=ssl_context(tls) if tls is not None else None,
        error_cb=_on_error,
        disconnected_cb=_on_disconnect,
        reconnected_cb=_on_reconnect,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.25,  # type: ignore[arg-type]  # typed int, takes seconds as float
        connect_timeout=max(1, min(5, int(timeout_s))),
        pending_size=64 * 1024 * 1024,
        # A user may subscribe only to its own replies (eventlog.natsauth.inbox_prefix).
        inbox_prefix=inbox_prefix or "_INBOX",
    )
    try:
        await asyncio.wait_for(connecting, timeout_s)
    except TimeoutError:
        reason = f"{type(last_error[0]).__name__}: {last_error[0]}" if last_error else "no answer"
        await client.close()
        raise ConnectionError(
            f"cannot reach NATS at {url} within {timeout_s}s ({reason}); check the URL, that the server "
            "runs with JetStream enabled, and the credentials/TLS settings"
        ) from None
    return client
