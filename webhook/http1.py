"""The webhook's HTTP/1.1 server: one asyncio protocol per connection, no web framework.

Why not aiohttp: for a review, aiohttp's machinery (the request and response objects, routing,
the payload stream, its writer) cost more CPU than everything the webhook does besides: over TLS
the bench's bare aiohttp handler took 95-113 us of server CPU per request where the same decode
and answer on a protocol like this one took 32-45 us (same machine, same minutes; docs/sizing.md).
The webhook has five fixed routes and one client, the API server, so what it needs of HTTP is
small: a request head, a body framed by ``Content-Length`` or chunked, keep-alive, and answers in
order. Everything else a peer may send is refused with a status and a reason, and the connection
closed:

- a head over ``MAX_HEAD`` bytes (431), a malformed request line or header, both
  ``Content-Length`` and ``Transfer-Encoding`` (request smuggling), an unreadable length or chunk
  size (400), a transfer coding other than chunked (501);
- a body that does not arrive within ``read_timeout_s`` of its head (408, from ``Handler``);
- a connection idle (no request under way) for ``keepalive_s`` is closed.

What a request means is the ``Handler``'s business (``webhook.server``): it sees the head first
(``begin``: method, path, declared length) and may answer at once, before any of the body is read
(413, 429); otherwise it gets the body (``Exchange.received``) and answers at once or later
through ``respond``. Requests on one connection are answered in order: the next one is not parsed
before the answer to the current one is written.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import re
import ssl
import time
from collections.abc import Callable
from typing import Protocol

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


# Field lines (RFC 9110 5.1: a token, a colon, a value without CR, LF or NUL), each with its CRLF.
_FIELDS = re.compile(rb"(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\r\n\x00]*\r\n)*")


def _values(scan: bytes, key: bytes) -> list[bytes]:
    """The values of every field line ``key`` starts (``scan``: the lowered field lines, each after a CRLF)."""
    out = []
    at = scan.find(key)
    while at >= 0:
        start = at + len(key)
        out.append(scan[start : scan.find(_CRLF, start)].strip())
        at = scan.find(key, start)
    return out


# Where a connection is in its current request.
_HEAD, _BODY, _CHUNK_SIZE, _CHUNK_DATA, _TRAILER, _ANSWERING, _DISCARD = range(7)


class Connection(asyncio.Protocol):
    """One client connection (after its TLS handshake)."""

    def __init__(self, handler: Handler, connections: set[Connection], *, keepalive_s: float) -> None:
        self._handler = handler
        self._connections = connections
        self._keepalive_s = keepalive_s
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._state = _HEAD
        self._exchange: Exchange | None = None
        self._need = 0  # body bytes still to come (Content-Length), or of the current chunk
        self._parts: list[bytes] = []  # a body that came in pieces
        self._got = 0  # its bytes so far
        self._keep_alive = True
        self._http10 = False
        self._read_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_done = 0.0
        self._paused = False
        self._lingering = False
        self._seq = 0  # requests begun; a late answer to a request of a closed connection is dropped

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
        self._cancel_read_timer()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        exchange, self._exchange = self._exchange, None
        if exchange is not None:  # its body was still coming
            exchange.abandoned("closed")
        self._buf = bytearray()
        self._parts = []

    def data_received(self, data: bytes) -> None:
        state = self._state
        if state == _BODY:
            self._body_data(data)
        elif state == _DISCARD:
            if self._lingering:
                if self._need >= 0:  # a known length: closed once it is all in
                    self._need -= len(data)
                    if self._need <= 0 and self._transport is not None:
                        self._transport.close()
                return
            if len(data) <= self._need:
                self._need -= len(data)
                if not self._need:
                    self._state = _HEAD
                return
            data = data[self._need :]
            self._need = 0
            self._state = _HEAD
            self._buf += data
            self._process()
        else:
            self._buf += data
            if state == _ANSWERING:
                if len(self._buf) > PAUSE_AT and not self._paused and self._transport is not None:
                    self._paused = True
                    self._transport.pause_reading()
                return
            self._process()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def eof_received(self) -> bool | None:
        return None  # close (a half-closed client gets no more answers)

    # ---- parsing -----------------------------------------------------------------------------

    def _process(self) -> None:
        """Parse from the buffer for as long as requests are complete and answered at once."""
        while self._transport is not None:
            state = self._state
            if state == _HEAD:
                if not self._head():
                    return
            elif state in (_CHUNK_SIZE, _CHUNK_DATA, _TRAILER):
                if not self._chunked():
                    return
            elif state == _BODY:  # a body left in the buffer (pipelined behind an answered request)
                data, self._buf = bytes(self._buf), bytearray()
                self._body_data(data)
                return
            else:
                return

    def _head(self) -> bool:
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                self._fail(431, f"the request head is over {MAX_HEAD} bytes")
            elif buf[:2] == _CRLF:  # blank lines between requests are allowed (RFC 9112 2.2)
                del buf[:2]
                return bool(buf)
            return False
        if end > MAX_HEAD:
            self._fail(431, f"the request head is over {MAX_HEAD} bytes")
            return False
        head = bytes(buf[:end])
        del buf[: end + 4]
        while head[:2] == _CRLF:  # blank lines before a request line are allowed (RFC 9112 2.2)
            head = head[2:]
        if not head:
            return True
        first = head.find(_CRLF)
        request_text, fields = (head, b"") if first < 0 else (head[:first], head[first + 2 :] + _CRLF)
        request_line = request_text.split(b" ")
        if len(request_line) != 3 or request_line[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
            self._fail(400, f"not an HTTP/1.1 request line: {request_text[:100]!r}")
            return False
        method, target, version = request_line
        http10 = version == b"HTTP/1.0"
        # Every field line checked at once; then only the four fields the server reads are looked up.
        if _FIELDS.fullmatch(fields) is None:
            bad = next((line for line in fields.split(_CRLF) if _FIELDS.fullmatch(line + _CRLF) is None), b"")
            self._fail(400, f"malformed header line: {bad[:100]!r}")
            return False
        scan = _CRLF + fields.lower()
        length: bytes | None = None
        chunked = False
        connection = b""
        expect = False
        if b"\r\ncontent-length:" in scan:
            values = set(_values(scan, b"\r\ncontent-length:"))
            length = values.pop()
            if values or not length.isdigit():
                self._fail(400, f"unreadable Content-Length: {b','.join([length, *values])[:40]!r}")
                return False
        if b"\r\ntransfer-encoding:" in scan:
            coding = b",".join(_values(scan, b"\r\ntransfer-encoding:"))
            if coding != b"chunked":
                self._fail(501, f"transfer coding {coding[:40].decode(errors='replace')!r} is not supported (only chunked)")
                return False
            chunked = True
        if b"\r\nconnection:" in scan:
            connection = b",".join(_values(scan, b"\r\nconnection:"))
        if b"\r\nexpect:" in scan:
            expect = b"100-continue" in _values(scan, b"\r\nexpect:")
        if chunked and length is not None:
            self._fail(400, "both Content-Length and Transfer-Encoding: a request must have one")
            return False
        self._http10 = http10
        self._keep_alive = (b"keep-alive" in connection) if http10 else (b"close" not in connection)
        declared = int(length) if length is not None else (None if chunked else 0)
        self._seq += 1
        try:
            taken = self._handler.begin(method, target.partition(b"?")[0], declared)
        except Exception as err:  # a handler bug must not take the connection's parser with it
            log.exception("http_handler_failed", error=repr(err))
            taken = error(500, "internal error")
        if isinstance(taken, Reply):
            # Answered from the head: its body is never read. A known length can be skipped;
            # an unbounded one (chunked), or one the client waits to be asked for, cannot.
            if chunked or (expect and declared):
                taken.close = True
            self._state = _ANSWERING
            unread = -1 if chunked else (0 if expect else max(0, (declared or 0) - len(buf)))
            if taken.close:
                self._buf = bytearray()
            self._write(taken, unread=unread)
            if self._transport is not None and not taken.close and declared:
                self._discard(declared)
            return self._state == _HEAD
        self._exchange = taken
        self._parts = []
        self._got = 0
        if expect and self._transport is not None and (chunked or declared):
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if chunked:
            self._state = _CHUNK_SIZE
            self._start_read_timer()
            return True
        assert declared is not None
        if len(buf) >= declared:  # the common case: the whole body came with its head
            body = bytes(buf[:declared])
            del buf[:declared]
            self._deliver(body)
            return self._state == _HEAD
        self._need = declared
        self._state = _BODY
        self._start_read_timer()
        data, self._buf = bytes(buf), bytearray()
        self._body_data(data)
        return False

    def _body_data(self, data: bytes) -> None:
        """Bytes of a body framed by Content-Length (``_need`` more to come)."""
        need = self._need
        if len(data) < need:
            if data:
                self._parts.append(data)
                self._need = need - len(data)
            return
        self._parts.append(data[:need] if len(data) > need else data)
        rest = data[need:] if len(data) > need else b""
        body = b"".join(self._parts)
        self._parts = []
        self._need = 0
        self._cancel_read_timer()
        self._buf += rest
        self._deliver(body)
        if self._state == _HEAD and self._buf:
            self._process()

    def _chunked(self) -> bool:
        """Progress through a chunked body; False when more bytes are needed."""
        buf = self._buf
        state = self._state
        if state == _CHUNK_SIZE:
            end = buf.find(_CRLF)
            if end < 0:
                if len(buf) > 1024:
                    self._fail(400, "unreadable chunk size line")
                return False
            size_text = bytes(buf[:end]).partition(b";")[0].strip()
            del buf[: end + 2]
            try:
                size = int(size_text, 16)
            except ValueError:
                size = -1
            if size < 0 or not size_text or size_text.startswith((b"+", b"-", b"0x", b"0X")):
                self._fail(400, f"unreadable chunk size: {size_text[:20]!r}")
                return False
            if size == 0:
                self._state = _TRAILER
                return True
            if self._got + size > self._handler.max_body:
                self._abandon("too-large")
                return False
            self._need = size
            self._state = _CHUNK_DATA
            return True
        if state == _CHUNK_DATA:
            need = self._need
            if len(buf) < need + 2:
                return False
            if buf[need : need + 2] != _CRLF:
                self._fail(400, "a chunk does not end with CRLF")
                return False
            self._parts.append(bytes(buf[:need]))
            self._got += need
            del buf[: need + 2]
            self._state = _CHUNK_SIZE
            return True
        # trailer section: lines until a blank one (ignored)
        end = buf.find(_CRLF)
        if end < 0:
            if len(buf) > MAX_HEAD:
                self._fail(431, "the trailer section is too large")
            return False
        del buf[: end + 2]
        if end:
            return True
        body = b"".join(self._parts)
        self._parts = []
        self._cancel_read_timer()
        self._deliver(body)
        return self._state == _HEAD

    def _discard(self, count: int) -> None:
        """Skip the body of a request answered from its head (kept out of memory)."""
        buf = self._buf
        if len(buf) >= count:
            del buf[:count]
            return
        self._need = count - len(buf)
        self._buf = bytearray()
        self._state = _DISCARD

    # ---- answering ---------------------------------------------------------------------------

    def _deliver(self, body: bytes) -> None:
        exchange, self._exchange = self._exchange, None
        assert exchange is not None
        self._state = _ANSWERING
        seq = self._seq
        try:
            reply = exchange.received(body, lambda reply: self._late(seq, reply))
        except Exception as err:  # as in _head
            log.exception("http_handler_failed", error=repr(err))
            reply = error(500, "internal error")
        if reply is not None:
            self._write(reply)

    def _late(self, seq: int, reply: Reply) -> None:
        if seq != self._seq or self._transport is None or self._state != _ANSWERING:
            return  # the connection went meanwhile
        self._write(reply)
        if self._state == _HEAD and self._buf:
            self._process()

    def _write(self, reply: Reply, *, unread: int = 0) -> None:
        """Send ``reply``; ``unread``: bytes of the request's body still to come (-1: unknown),
        dropped as they arrive before a closing answer closes the connection."""
        transport = self._transport
        if transport is None:
            return
        close = reply.close or not self._keep_alive
        if close:
            reply.close = True
        transport.write(encode(reply, keep_alive_header=self._http10 and not close))
        if close:
            if unread:
                self._linger(unread)
                return
            transport.close()
            self._transport = None
            return
        self._state = _HEAD
        self._last_done = asyncio.get_running_loop().time()
        if self._paused:
            self._paused = False
            transport.resume_reading()

    def _fail(self, status: int, message: str) -> None:
        """A request the connection cannot go on from: answer and close."""
        exchange, self._exchange = self._exchange, None
        if exchange is not None:  # a chunked body gone wrong: the handler's answer gives way to ours
            exchange.abandoned("closed")
        self._cancel_read_timer()
        self._state = _ANSWERING
        self._write(error(status, message, close=True))

    def _abandon(self, why: str) -> None:
        unread = self._need if self._state == _BODY else -1
        exchange, self._exchange = self._exchange, None
        self._cancel_read_timer()
        self._parts = []
        self._buf = bytearray()
        self._state = _ANSWERING
        reply = exchange.abandoned(why) if exchange is not None else None
        if reply is not None:
            reply.close = True  # the rest of the body is never read: the connection cannot be reused
            self._write(reply, unread=unread)
        elif self._transport is not None:
            self._transport.close()

    def _linger(self, unread: int) -> None:
        """After a closing answer: drop what still comes of the body, then close."""
        self._state = _DISCARD
        self._lingering = True
        self._need = unread
        self._read_timer = asyncio.get_running_loop().call_later(
            LINGER_S if unread > 0 else LINGER_UNKNOWN_S, self.close
        )

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
        busy = self._state in (_ANSWERING, _BODY, _CHUNK_DATA, _CHUNK_SIZE, _TRAILER)
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
