"""The webhook's HTTP/1.1 server: one asyncio protocol per connection, no web framework.

Why not aiohttp: for a review, aiohttp's machinery (the request and response objects, routing,
the payload stream, its writer) cost more CPU than everything the webhook does besides: over TLS
the bench's bare aiohttp handler took 95-113 us of server CPU per request where the same decode
and answer on a protocol like this one took 32-45 us (same machine, same minutes; docs/sizing.md).
The webhook has five fixed routes and one client, the API server, so what it needs of HTTP is
small: a request head, a body framed by ``Content-Length`` or chunked, keep-alive, and answers in
order.

Why httptools: the parsing is not ours. Request lines, field lines, ``Content-Length`` and chunked
framing are read by llhttp (the parser of Node.js, strict by default; through ``httptools``, as
uvicorn uses it), which refuses what makes request smuggling: ``Content-Length`` with
``Transfer-Encoding``, two lengths, obsolete line folding, a space before a colon, bare LFs. It
also costs less than the regex it replaced (5.6 against 7.9 us per API-server request, the
protocol alone). What this module adds is policy, and the order of answers:

- a head over ``MAX_HEAD`` bytes (431: llhttp has no limit, so the bytes are counted here), HTTP
  other than 1.1 and 1.0, an upgrade or CONNECT (400), a transfer coding other than chunked (501);
  anything llhttp refuses (400, with its reason);
- a body that does not arrive within ``read_timeout_s`` of its head (408, from ``Handler``);
- a connection idle (no request under way) for ``keepalive_s`` is closed.
Each refusal is answered with a status and a reason, and the connection closed.

What a request means is the ``Handler``'s business (``webhook.server``): it sees the head first
(``begin``: method, path, declared length) and may answer at once, before any of the body is kept
(413, 429); otherwise it gets the body (``Exchange.received``) and answers at once or later
through ``respond``. Requests on one connection are answered in order: what the parser reads
while an answer is pending (a pipelining client) is queued and served once it is written.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import ssl
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

import httptools
import structlog

log = structlog.get_logger("webhook.http")

MAX_HEAD = 64 * 1024  # request line and headers; the API server sends a few hundred bytes
PAUSE_AT = 1024 * 1024  # buffered bytes of a next request while the current one is answered
# A refused body still on its way is read and dropped for a while before the connection closes
# (a "lingering close"): a client that is still sending would otherwise get a reset instead of
# the answer. Known length: until it is all in or LINGER_S; chunked: LINGER_UNKNOWN_S.
LINGER_S = 10.0
LINGER_UNKNOWN_S = 2.0
_JSON = b"application/json"
_CRLF = b"\r\n"
_REASONS = {
    100: b"Continue",
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    413: b"Payload Too Large",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    501: b"Not Implemented",
    503: b"Service Unavailable",
}


class Reply:
    """An answer: status, body, its content type, extra header lines (``Name: value\\r\\n`` each),
    and whether the connection closes after it."""

    __slots__ = ("body", "close", "content_type", "headers", "status")

    def __init__(
        self, status: int, body: bytes, *, content_type: bytes = _JSON, headers: bytes = b"", close: bool = False
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers
        self.close = close


Respond = Callable[[Reply], None]


class Exchange(Protocol):
    """One request the handler took on after its head; exactly one of its methods is called."""

    def received(self, body: bytes, respond: Respond) -> Reply | None:
        """The whole body: the answer now, or None and ``respond`` is called once later."""
        ...

    def abandoned(self, why: str) -> Reply | None:
        """The body did not come: ``timeout``, ``too-large`` (a chunked body past ``max_body``)
        or ``closed`` (the connection went). The answer to send, if the connection is still there."""
        ...


class Handler(Protocol):
    max_body: int  # the largest body read (a chunked body past it is abandoned)
    read_timeout_s: float

    def begin(self, method: bytes, path: bytes, declared: int | None) -> Reply | Exchange:
        """A request's head: an answer now (its body is never read), or the exchange for its body."""
        ...


class _Clock:
    """The Date header's value, formatted once a second (RFC 9110 wants one from a server with a clock)."""

    second = 0
    value = b""

    @classmethod
    def date(cls) -> bytes:
        now = int(time.time())
        if now != cls.second:
            cls.second = now
            cls.value = email.utils.formatdate(now, usegmt=True).encode()
        return cls.value


def encode(reply: Reply, *, keep_alive_header: bool = False) -> bytes:
    status = reply.status
    connection = b"Connection: close\r\n" if reply.close else (b"Connection: keep-alive\r\n" if keep_alive_header else b"")
    head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nDate: %s\r\n%s%s\r\n" % (
        status,
        _REASONS.get(status, b"Unknown"),
        reply.content_type,
        len(reply.body),
        _Clock.date(),
        connection,
        reply.headers,
    )
    return head + reply.body


def error(status: int, message: str, *, close: bool = False, headers: bytes = b"") -> Reply:
    """An error answer: ``{"error": message}``."""
    return Reply(status, json.dumps({"error": message}).encode(), headers=headers, close=close)


class _Stop(Exception):
    """Raised from a parser callback to stop the parser: the connection reads nothing more."""


# Where a connection is in the request it serves (the oldest one not yet answered).
_IDLE, _BODY, _SKIP, _ANSWERING, _CLOSING = range(5)


class Connection(asyncio.Protocol):
    """One client connection (after its TLS handshake).

    Two sides: the parser's callbacks (``on_*``, from ``feed_data``) describe the request being
    parsed; the serving side (``_serve_*``) the request being answered. They are the same request
    unless the client pipelines: what is parsed while an answer is pending is queued, in order,
    and served once the answer is written."""

    def __init__(self, handler: Handler, connections: set[Connection], *, keepalive_s: float) -> None:
        self._handler = handler
        self._connections = connections
        self._keepalive_s = keepalive_s
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        # The parsing side: the request being parsed.
        self._url = b""
        self._length: bytes | None = None  # its Content-Length (checked by llhttp)
        self._coding: bytes | None = None  # its Transfer-Encoding
        self._expect = False
        self._fields = 0  # bytes of its head (or trailer section) so far
        self._quiet = 0  # bytes fed since the parser last called back (one field line, growing)
        self._heads = 0  # heads parsed on the connection
        self._parsed = 0  # requests parsed to their end
        self._broken = False  # the parser stopped: nothing more is read
        # The serving side: the request being answered.
        self._state = _IDLE
        self._seq = 0  # requests served; a late answer to a request of a closed connection is dropped
        self._declared: int | None = 0  # its body's declared length (None: chunked)
        self._keep_alive = True
        self._http10 = False
        self._exchange: Exchange | None = None
        self._parts: list[bytes] = []  # its body so far
        self._got = 0  # its bytes
        self._queue: deque[tuple[Callable[..., None], tuple[Any, ...], int]] = deque()
        self._queued = 0  # body bytes in the queue
        self._paused = False
        self._read_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_done = 0.0

    # ---- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._connections.add(self)
        loop = asyncio.get_running_loop()
        self._last_done = loop.time()
        self._idle_timer = loop.call_at(self._last_done + self._keepalive_s, self._check_idle)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        self._transport = None
        self._broken = True
        self._cancel_read_timer()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        exchange, self._exchange = self._exchange, None
        if exchange is not None:  # its body was still coming
            exchange.abandoned("closed")
        self._queue.clear()
        self._parts = []

    def data_received(self, data: bytes) -> None:
        if self._broken:
            return
        self._quiet += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as err:
            if self._broken:  # stopped by a callback (_Stop)
                return
            self._broken = True
            if isinstance(err, httptools.HttpParserCallbackError):  # a bug of ours: say so, not "malformed"
                log.error("http_callback_failed", error=repr(err.__context__), exc_info=err.__context__)
                self._dispatch(self._fail, 500, "internal error")
            else:
                where = "body" if self._heads > self._parsed else "head"
                self._dispatch(self._fail, 400, f"malformed request {where}: {err}")
            return
        if self._quiet > MAX_HEAD:  # a field line (or chunk line) that does not end
            self._broken = True
            self._dispatch(self._fail, 431, f"a request line or header line is over {MAX_HEAD} bytes")
        elif self._state == _BODY and self._read_timer is None:
            self._start_read_timer()  # only when a body did not come whole with its head

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def eof_received(self) -> bool | None:
        return None  # close (a half-closed client gets no more answers)

    # ---- the parser's callbacks --------------------------------------------------------------

    def on_url(self, url: bytes) -> None:
        self._url += url  # in pieces when the request line came in pieces

    def on_header(self, name: bytes, value: bytes) -> None:
        self._quiet = 0
        fields = self._fields + len(name) + len(value) + 4
        self._fields = fields
        if fields > MAX_HEAD:
            self._stop(431, f"the request's header fields are over {MAX_HEAD} bytes")
        key = name.lower()
        if key == b"content-length":
            self._length = value
        elif key == b"transfer-encoding":
            self._coding = value if self._coding is None else self._coding + b"," + value
        elif key == b"expect":
            self._expect = value.strip().lower() == b"100-continue"

    def on_headers_complete(self) -> None:
        self._quiet = 0
        self._heads += 1
        url, self._url = self._url, b""
        if self._state == _CLOSING:
            return
        parser = self._parser
        if self._fields + len(url) > MAX_HEAD:
            self._stop(431, f"the request head is over {MAX_HEAD} bytes")
        self._fields = 0  # from here on, its trailer section's
        version = parser.get_http_version()
        if version != "1.1" and version != "1.0":
            self._stop(400, f"not an HTTP/1.1 request line: version {version} (1.1 and 1.0 are served)")
        if parser.should_upgrade():
            self._stop(400, "a protocol upgrade (Upgrade, CONNECT) is not served")
        coding = self._coding
        if coding is not None and coding.strip().lower() != b"chunked":
            self._stop(501, f"transfer coding {coding[:40].decode(errors='replace')!r} is not supported (only chunked)")
        length = self._length
        declared = int(length) if length is not None else (None if coding is not None else 0)
        args = (parser.get_method(), url.partition(b"?")[0], declared, self._expect, parser.should_keep_alive(), version == "1.0")
        if self._state == _ANSWERING:
            self._queue.append((self._serve_head, args, 0))
        else:
            self._serve_head(*args)

    def on_body(self, body: bytes) -> None:
        self._quiet = 0
        state = self._state
        if state == _BODY:
            self._serve_body(body)
        elif state == _ANSWERING:
            self._later(self._serve_body, body)
        # _SKIP, _CLOSING: a body answered from its head, dropped

    def on_message_complete(self) -> None:
        self._quiet = 0
        self._parsed += 1
        # Trailer fields come through on_header too: nothing of them is kept for the next request.
        self._length = self._coding = None
        self._expect = False
        self._fields = 0
        state = self._state
        if state == _ANSWERING:
            self._queue.append((self._serve_end, (), 0))
        elif state == _CLOSING:
            if self._parsed >= self._seq:  # the refused body is all in: done lingering
                self._broken = True
                self.close()
                raise _Stop
        else:
            self._serve_end()

    def _stop(self, status: int, message: str) -> NoReturn:
        """Refuse the request being parsed (after the answers before it) and stop the parser."""
        self._broken = True
        self._dispatch(self._fail, status, message)
        raise _Stop

    def _dispatch(self, serve: Callable[..., None], *args: Any) -> None:
        state = self._state
        if state == _ANSWERING:
            self._queue.append((serve, args, 0))
        elif state == _CLOSING:
            self.close()
        else:
            serve(*args)

    def _later(self, serve: Callable[..., None], body: bytes) -> None:
        """Queue a body part parsed while an earlier request is answered (reading pauses past PAUSE_AT)."""
        self._queue.append((serve, (body,), len(body)))
        self._queued += len(body)
        if self._queued > PAUSE_AT and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    # ---- serving -----------------------------------------------------------------------------

    def _serve_head(self, method: bytes, path: bytes, declared: int | None, expect: bool, keep_alive: bool, http10: bool) -> None:
        self._seq += 1
        self._declared = declared
        self._keep_alive = keep_alive
        self._http10 = http10
        try:
            taken = self._handler.begin(method, path, declared)
        except Exception as err:  # a handler bug must not take the connection with it
            log.exception("http_handler_failed", error=repr(err))
            taken = error(500, "internal error")
        if isinstance(taken, Reply):
            # Answered from the head: its body is never kept. A known length is skipped; an
            # unbounded one (chunked), or one the client waits to be asked for, cannot be.
            if declared is None or (expect and declared):
                taken.close = True
            self._state = _SKIP
            self._write(taken, linger=not (expect and declared))
            return
        self._exchange = taken
        self._parts = []
        self._got = 0
        self._state = _BODY
        if expect and declared != 0 and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _serve_body(self, body: bytes) -> None:
        if self._state != _BODY:
            return  # answered from its head: dropped
        self._parts.append(body)
        self._got += len(body)
        if self._declared is None and self._got > self._handler.max_body:
            self._abandon("too-large")

    def _serve_end(self) -> None:
        state = self._state
        if state == _SKIP:
            self._state = _IDLE
            return
        if state != _BODY:
            return
        exchange, self._exchange = self._exchange, None
        assert exchange is not None
        parts, self._parts = self._parts, []
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        self._cancel_read_timer()
        self._state = _ANSWERING
        seq = self._seq
        try:
            reply = exchange.received(body, lambda reply: self._late(seq, reply))
        except Exception as err:  # as in _serve_head
            log.exception("http_handler_failed", error=repr(err))
            reply = error(500, "internal error")
        if reply is not None:
            self._write(reply)

    def _late(self, seq: int, reply: Reply) -> None:
        if seq != self._seq or self._transport is None or self._state != _ANSWERING:
            return  # the connection went meanwhile
        self._write(reply)
        self._drain()

    def _drain(self) -> None:
        """Serve what was parsed while the answer just written was pending, up to the next one pending."""
        queue = self._queue
        while queue and self._state != _ANSWERING and self._state != _CLOSING:
            serve, args, size = queue.popleft()
            self._queued -= size
            serve(*args)
        if self._state == _BODY and self._read_timer is None and not self._broken:
            self._start_read_timer()
        if self._paused and self._queued <= PAUSE_AT and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    def _write(self, reply: Reply, *, linger: bool = True) -> None:
        """Send ``reply``. A closing answer to a request whose body is still coming drops what
        still comes of it for a while before the connection closes (``linger``)."""
        transport = self._transport
        if transport is None:
            return
        close = reply.close or not self._keep_alive
        if close:
            reply.close = True
        transport.write(encode(reply, keep_alive_header=self._http10 and not close))
        if not close:
            self._last_done = asyncio.get_running_loop().time()
            if self._state != _SKIP or self._parsed >= self._seq:
                self._state = _IDLE
            return
        self._state = _CLOSING
        self._queue.clear()
        self._queued = 0
        self._cancel_read_timer()
        if linger and not self._broken and self._declared != 0 and self._parsed < self._seq:
            if self._paused:
                self._paused = False
                transport.resume_reading()
            self._read_timer = asyncio.get_running_loop().call_later(
                LINGER_UNKNOWN_S if self._declared is None else LINGER_S, self.close
            )
            return
        transport.close()
        self._transport = None

    def _fail(self, status: int, message: str) -> None:
        """A request the connection cannot go on from: answer and close."""
        exchange, self._exchange = self._exchange, None
        if exchange is not None:  # a chunked body gone wrong: the handler's answer gives way to ours
            exchange.abandoned("closed")
        self._write(error(status, message, close=True), linger=False)

    def _abandon(self, why: str) -> None:
        exchange, self._exchange = self._exchange, None
        self._cancel_read_timer()
        self._parts = []
        reply = exchange.abandoned(why) if exchange is not None else None
        if reply is not None:
            reply.close = True  # the rest of the body is never read: the connection cannot be reused
            self._write(reply)
        else:
            self._state = _CLOSING
            self.close()

    # ---- timers ------------------------------------------------------------------------------

    def _start_read_timer(self) -> None:
        self._read_timer = asyncio.get_running_loop().call_later(self._handler.read_timeout_s, self._abandon, "timeout")

    def _cancel_read_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _check_idle(self) -> None:
        """Close a connection with no request under way for ``keepalive_s`` (one timer per
        connection, moved on when it fires, not at every request)."""
        if self._transport is None:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        busy = self._state == _ANSWERING or self._state == _BODY
        if busy or now - self._last_done < self._keepalive_s:
            start = now if busy else self._last_done
            self._idle_timer = loop.call_at(start + self._keepalive_s, self._check_idle)
            return
        self._idle_timer = None
        self._transport.close()


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.abort()  # nothing read: the client sees a reset


class Listener:
    """The listening socket: a ``Connection`` per accepted client, and none beyond
    ``max_connections`` (one more is closed as soon as it is accepted, before its TLS handshake)."""

    def __init__(
        self,
        handler: Handler,
        *,
        max_connections: int,
        keepalive_s: float,
        handshake_timeout_s: float,
        on_refused: Callable[[], None] = lambda: None,
    ) -> None:
        self._handler = handler
        self._max_connections = max_connections
        self._keepalive_s = keepalive_s
        self._handshake_timeout_s = handshake_timeout_s
        self._on_refused = on_refused
        self.connections: set[Connection] = set()
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int, *, ssl_context: ssl.SSLContext | None, backlog: int = 1024) -> int:
        """Listen; the port bound (``port`` 0: one the system chose)."""
        handler, connections, keepalive_s = self._handler, self.connections, self._keepalive_s
        limit, refused = self._max_connections, self._on_refused

        def open_connections() -> int:
            # asyncio's count includes connections still in their TLS handshake, which a burst is
            # mostly made of; ours (the fallback) only those past it.
            active = getattr(self._server, "_active_count", None)
            return active if isinstance(active, int) else len(connections)

        def factory() -> asyncio.Protocol:
            if open_connections() >= limit:
                refused()
                return _Refused()
            return Connection(handler, connections, keepalive_s=keepalive_s)

        self._server = await asyncio.get_running_loop().create_server(
            factory,
            host,
            port,
            ssl=ssl_context,
            backlog=backlog,
            reuse_address=True,
            ssl_handshake_timeout=self._handshake_timeout_s if ssl_context is not None else None,
        )
        sockets = self._server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Stop accepting and close every connection (answers already written are flushed first)."""
        self.stop_accepting()
        for connection in list(self.connections):
            connection.close()
        await asyncio.sleep(0)  # let the transports run their close callbacks
