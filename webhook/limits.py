"""How much work the webhook takes on at once, so an overload is shed fast instead of piling up
in memory (issue 18: at 2,000 reviews/s an unbounded server grew from 61 MB to ~700 MB).

Three bounds, sized for the deploy manifest's 512 MiB limit (docs/webhook.md, "Load limits"):
- reviews in flight (``max_in_flight``) and their bodies' bytes (``max_bytes_in_flight``): one
  more is answered at once with 429 and ``Retry-After``, before its body is read
  (``webhook.server``);
- open connections (``max_connections``): one more is closed as soon as it is accepted, before
  aiohttp allocates anything for it (``BoundedTCPSite``); a TLS handshake that does not finish
  within ``HANDSHAKE_TIMEOUT_S`` is dropped.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

from aiohttp import web

DEFAULT_MAX_IN_FLIGHT = 256
DEFAULT_MAX_BYTES_IN_FLIGHT = 32 * 1024 * 1024
DEFAULT_MAX_CONNECTIONS = 512  # each TLS connection holds ~0.4 MiB (asyncio's 256 KiB buffer, OpenSSL)
HANDSHAKE_TIMEOUT_S = 10.0  # the apiserver's default timeoutSeconds: it has given up by then
KEEPALIVE_TIMEOUT_S = 30.0  # an idle connection's buffers are released after this
RETRY_AFTER_S = 1

# Sizing (measured: tests/webhook/test_faults.py, docs/webhook.md "Load limits").
AT_REST_MIB = 60.0  # the process after start-up, NATS connected
PER_CONNECTION_MIB = 0.4  # asyncio's 256 KiB TLS read buffer, OpenSSL's state, aiohttp's
BODY_EXPANSION = 4  # a review in flight: its body, the decoded JSON, the recorded manifest


def memory_ceiling_mib(*, max_connections: int, max_bytes_in_flight: int) -> float:
    """What the webhook may hold at its limits; the container's memory limit must be above it."""
    return AT_REST_MIB + max_connections * PER_CONNECTION_MIB + BODY_EXPANSION * max_bytes_in_flight / 2**20


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.abort()  # nothing read: the client sees a reset


class BoundedTCPSite(web.TCPSite):
    """A ``TCPSite`` that closes connections beyond ``max_connections`` on accept."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        *,
        max_connections: int,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 1024,
        on_refused: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context, backlog=backlog)
        self.max_connections = max_connections
        self._on_refused = on_refused

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site; TCPSite.start would listen unbounded
        server = self._runner.server
        assert server is not None
        limit, refused = self.max_connections, self._on_refused

        def open_connections() -> int:
            # asyncio's count includes connections still in their TLS handshake, which a burst
            # is mostly made of; aiohttp's (the fallback) only those past it.
            active = getattr(self._server, "_active_count", None)
            return active if isinstance(active, int) else len(server.connections)

        def factory() -> asyncio.Protocol:
            if open_connections() >= limit:
                refused()
                return _Refused()
            return server()

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            factory,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if self._ssl_context is not None else None,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port
