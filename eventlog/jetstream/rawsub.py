"""Subscriptions whose messages arrive as plain tuples, parsed without nats-py's per-message path.

nats-py turns every incoming message into a ``Msg`` after two awaited calls (``_process_msg``,
``_process_headers``, which parses every header line) and a regex match of its control line.
On the leader that path was the largest cost outside the core: every inbox delivery, every
publish ack and every log entry the actuator and the forecasts read went through it (about
twenty messages per job end to end). ``FastParser`` (installed by ``KdClient``) reads ``MSG``
and ``HMSG`` lines by splitting them, and hands the messages of a *raw* subscription straight to
its sink: ``(subject, reply, payload, headers)``, subject and reply as bytes, headers as the raw
header block (or ``None``), parsed only by whoever needs them (``headers_of``: status messages).
Every other message takes nats-py's own path; every other operation (``PING``, ``INFO``, …) is
read as nats-py's parser reads it.

``RawSubscription`` works on any nats-py client: on one without ``FastParser`` (a plain
``nats.connect``), its messages come through an ordinary callback subscription instead.
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import Callable
from typing import Any

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import ProtocolError
from nats.protocol.parser import (
    AWAITING_CONTROL_LINE,
    AWAITING_MSG_PAYLOAD,
    ERR_RE,
    INFO_RE,
    MAX_CONTROL_LINE_SIZE,
    OK_RE,
    PING_RE,
    PONG_RE,
    Parser,
)

log = structlog.get_logger("eventlog.rawsub")

# (subject, reply, payload, headers): headers as the raw block, or as nats-py parsed them (a
# message that took nats-py's path: the moment before a sink was registered, or a plain client).
Raw = tuple[bytes, bytes, bytes, bytes | dict[str, str] | None]
Sink = Callable[[bytes, bytes, bytes, bytes | None], None]

_CRLF = b"\r\n"


class FastParser(Parser):
    """nats-py's parser, with ``MSG``/``HMSG`` read by splitting the control line and the
    messages of raw subscriptions (``nc.raw_sinks``: sid -> sink) delivered synchronously.

    Partial messages are kept in the stock parser's fields (``state``, ``msg_arg``, ``needed``,
    ``header_needed``), so either parser can resume what the other left."""

    async def parse(self, data: bytes = b"") -> None:
        buf = self.buf
        buf.extend(data)
        nc: Any = self.nc
        sinks: dict[int, Sink] = nc.raw_sinks
        stats = nc.stats
        if self.state == AWAITING_MSG_PAYLOAD and len(buf) < self.needed + 2:
            return  # a large message still arriving: not copied once per read
        # Messages are sliced from an immutable copy of the buffer: a slice of it is the bytes a
        # sink keeps, where a slice of the bytearray had to be copied again (payload, subject and
        # reply of every message). Taken again whenever ``buf`` changes under it.
        view = bytes(buf)
        pos, size = 0, len(view)
        count = nbytes = 0
        try:
            while pos < size:
                if self.state == AWAITING_MSG_PAYLOAD:
                    needed = self.needed
                    if size - pos < needed + 2:
                        break
                    arg = self.msg_arg
                    subject, sid, reply = arg["subject"], arg["sid"], arg["reply"]
                    hsize = self.header_needed
                    self.header_needed = 0
                    self.state = AWAITING_CONTROL_LINE
                else:
                    if view.startswith(b"MSG ", pos):
                        headers = False
                    elif view.startswith(b"HMSG ", pos):
                        headers = True
                    else:  # PING, PONG, +OK, -ERR, INFO (rare): one, as nats-py reads it
                        del buf[:pos]
                        pos = 0
                        if not await self._control(buf) or self.buf is not buf:
                            return
                        view = bytes(buf)
                        size = len(view)
                        continue
                    end = view.find(_CRLF, pos)
                    if end < 0:
                        break
                    parts = view[pos:end].split()
                    try:
                        subject, sid = parts[1], int(parts[2])
                        if headers:
                            reply = parts[3] if len(parts) == 6 else b""
                            hsize, needed = int(parts[-2]), int(parts[-1])
                        else:
                            reply = parts[3] if len(parts) == 5 else b""
                            hsize, needed = 0, int(parts[-1])
                    except (IndexError, ValueError):
                        raise ProtocolError("nats: malformed MSG") from None  # as nats-py says it
                    pos = end + 2
                    if size - pos < needed + 2:
                        self.msg_arg = {"subject": subject, "sid": sid, "reply": reply}
                        self.needed, self.header_needed = needed, hsize
                        self.state = AWAITING_MSG_PAYLOAD
                        break
                if hsize:
                    hdr: bytes | None = view[pos : pos + hsize]
                    payload = view[pos + hsize : pos + needed]
                else:
                    hdr = None
                    payload = view[pos : pos + needed]
                pos += needed + 2
                sink = sinks.get(sid)
                if sink is None:
                    await nc._process_msg(sid, subject, reply, payload, hdr)
                    if self.buf is not buf:  # reset meanwhile (reconnecting): nothing left to read
                        return
                    continue
                count += 1
                nbytes += len(payload)
                try:
                    sink(subject, reply, payload, hdr)
                except Exception as err:  # never out of the read loop: it would stop reading
                    log.error("raw_sink_failed", sid=sid, error=repr(err))
        finally:
            stats["in_msgs"] += count
            stats["in_bytes"] += nbytes
            if pos and self.buf is buf:
                del buf[:pos]

    async def _control(self, buf: bytearray) -> bool:
        """Read one operation other than a message from the start of ``buf``, as nats-py's
        parser does; False if it is not all there yet."""
        nc: Any = self.nc
        if m := OK_RE.match(buf):
            del buf[: m.end()]
        elif m := ERR_RE.match(buf):
            await nc._process_err((m.group(1) or b"").decode().lower())
            del buf[: m.end()]
        elif m := PING_RE.match(buf):
            del buf[: m.end()]
            await nc._process_ping()
        elif m := PONG_RE.match(buf):
            del buf[: m.end()]
            await nc._process_pong()
        elif m := INFO_RE.match(buf):
            await nc._process_info(json.loads(m.group(1).decode()))
            del buf[: m.end()]
        elif len(buf) < MAX_CONTROL_LINE_SIZE and _CRLF in buf:
            raise ProtocolError("nats: unknown protocol")
        else:
            return False
        return True


def headers_of(raw: bytes | dict[str, str] | None) -> dict[str, str]:
    """Header names to values, with an inline status (``NATS/1.0 404 No Messages``) as
    ``Status`` and ``Description``, as nats-py reports them."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    first, _, rest = raw.partition(_CRLF)
    out: dict[str, str] = {}
    status = first[len(b"NATS/1.0") :].strip()
    if status:
        code, _, desc = status.partition(b" ")
        if code.isdigit():
            out["Status"] = code.decode()
        if desc.strip():
            out["Description"] = desc.strip().decode("utf-8", "replace")
    for line in rest.split(_CRLF):
        name, sep, value = line.partition(b":")
        if sep and name.strip() and b" " not in name.strip():
            out[name.strip().decode("ascii", "replace")] = value.strip().decode("utf-8", "replace")
    return out


def _raw_of(msg: Msg) -> Raw:
    return (
        msg.subject.encode(),
        (msg.reply or "").encode(),
        msg.data,
        dict(msg.headers) if msg.headers else None,
    )


class RawSubscription:
    """A subscription queueing its messages as ``Raw`` tuples in ``items``, in arrival order."""

    def __init__(self, nc: Client, subject: str) -> None:
        self._nc = nc
        self.subject = subject
        self.items: collections.deque[Raw] = collections.deque()
        self._arrived = asyncio.Event()
        self._sub: Any = None

    def _deliver(self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        self.items.append((subject, reply, data, hdr))
        if not self._arrived.is_set():
            self._arrived.set()

    async def _deliver_msg(self, msg: Msg) -> None:
        self.items.append(_raw_of(msg))
        self._arrived.set()

    async def open(self) -> RawSubscription:
        nc: Any = self._nc
        sinks: dict[int, Sink] | None = getattr(nc, "raw_sinks", None)
        if sinks is None or not isinstance(getattr(nc, "_ps", None), FastParser):
            self._sub = await nc.subscribe(
                self.subject, cb=self._deliver_msg, pending_msgs_limit=0, pending_bytes_limit=0
            )
            return self
        self._sub = await nc.subscribe(self.subject, pending_msgs_limit=0, pending_bytes_limit=0)
        sinks[self._sub._id] = self._deliver
        # What arrived while subscribing went the ordinary way: it comes first.
        queue: asyncio.Queue[Msg] = self._sub._pending_queue
        early = [_raw_of(queue.get_nowait()) for _ in range(queue.qsize())]
        if early:
            self.items.extendleft(reversed(early))
            self._arrived.set()
        return self

    async def wait(self, timeout_s: float) -> bool:
        """Until a message is queued; False on timeout."""
        if self.items:
            return True
        self._arrived.clear()
        try:
            await asyncio.wait_for(self._arrived.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is None:
            return
        sinks = getattr(self._nc, "raw_sinks", None)
        if sinks is not None:
            sinks.pop(sub._id, None)
        await sub.unsubscribe()
