"""Pipelined JetStream publishing: many messages out, then all their acks in; or many messages
out as one fast-ingest batch, and one ack in.

nats-py's ``publish_async`` turns an error ack into an exception raised inside its reply
callback (lost to the error callback) and never resolves the future, so a refused append would
look like a timeout. Here acks are read from one raw reply subscription
(``eventlog.jetstream.rawsub``) in bulk, decoded with msgspec, and returned in publish order: a ``PubAck`` per message (with ``error`` set if the
server refused it) or ``None`` if no ack came in time.

A *fast-ingest batch* (nats-server >= 2.14, a stream with ``allow_batched``) is told by each
message's reply subject, ``<inbox>.<batch id>.<flow>.fail.<n>.<op>.$FI`` (op 0 for the first
message, 1 for the next, 2 for the last, the commit). The server stores each message as it comes,
with every check a plain publish gets (``Nats-Expected-Last-Sequence`` included), and answers
the commit with one ack for the last message stored: ``seq`` and ``count``. In ``fail`` mode a
message refused ends the batch there: the ack then names the last one stored before it (or, for
the first message, is the refusal itself). In between it sends flow-control replies
(``{"type": "ack"|"gap"|"err", ...}``), which only a publisher that waits for them before sending
more needs; ``publish_fast`` sends the whole batch at once and reads only the final ack.
"""

from __future__ import annotations

import asyncio
import itertools

import msgspec
import nats.errors
from nats.aio.client import Client

from eventlog.jetstream.rawsub import Raw, RawSubscription, headers_of


class ApiError(msgspec.Struct, frozen=True):
    code: int = 0
    err_code: int = 0
    description: str = ""


class PubAck(msgspec.Struct, frozen=True):
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: ApiError | None = None
    count: int = 0  # a batch's commit: how many of its messages were stored


class _FastReply(msgspec.Struct, frozen=True):
    type: str = ""  # a flow-control reply; empty in the final ack
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: ApiError | None = None
    count: int = 0


_ack_decoder = msgspec.json.Decoder(PubAck)
_fast_decoder = msgspec.json.Decoder(_FastReply)
_NO_STREAM = PubAck(error=ApiError(code=503, description="no stream answers on this subject (no responders)"))

def transient(ack: PubAck | None) -> bool:
    """Whether publishing the same message again may well succeed: no ack came (the connection
    failed over, or the stream leader did not answer in time), or no stream leader took it (503:
    "no responders" while the stream elects one). With the same ``Nats-Msg-Id`` it is safe."""
    return ack is None or (ack.error is not None and ack.error.code == 503)


FAST_FLOW = 500  # flow-control replies every this many messages (the server's own ceiling)

_POLL_S = 0.25  # how often a wait for acks looks at the connection
_AFTER_RECONNECT_S = 0.5  # acks still awaited after a reconnect

# One outgoing message: (subject, payload, headers), the headers as names and values or as the
# header block itself (``NATS/1.0\r\n``, ``Name: value\r\n`` lines, a blank line).
Outgoing = tuple[str, bytes, dict[str, str] | bytes | None]


def _decode_ack(data: bytes, raw_headers: bytes | dict[str, str] | None) -> PubAck:
    if raw_headers and headers_of(raw_headers).get("Status") == "503":
        return _NO_STREAM
    try:
        return _ack_decoder.decode(data)
    except msgspec.DecodeError:
        return PubAck(error=ApiError(description=f"unreadable ack: {data[:200]!r}"))


_NEWLINES = str.maketrans({"\r": " ", "\n": " "})


def _commands(batch: list[Outgoing], *, reply_prefix: str, base: int, max_payload: int) -> bytes:
    """PUB/HPUB protocol lines for every message of ``batch``, replies numbered from ``base``.

    Subjects are ours (``eventlog.subjects`` escapes every character a subject may not hold);
    header values lose CR/LF as nats-py's own encoder does."""
    parts: list[bytes] = []
    add = parts.append
    for i, (subject, payload, headers) in enumerate(batch, base):
        size = len(payload)
        if size > max_payload:  # the server would close the connection on it
            raise nats.errors.MaxPayloadError(f"{subject}: {size} bytes, the server takes {max_payload}")
        if isinstance(headers, bytes):
            add(f"HPUB {subject} {reply_prefix}{i} {len(headers)} {len(headers) + size}\r\n".encode())
            add(headers)
        elif headers:
            raw = ("NATS/1.0\r\n" + "".join([f"{k}: {v}\r\n" for k, v in headers.items()]) + "\r\n").encode()
            lines = len(headers) + 2
            if raw.count(b"\r") != lines or raw.count(b"\n") != lines:  # a CR or LF inside a value
                raw = _header_block(headers)
            add(f"HPUB {subject} {reply_prefix}{i} {len(raw)} {len(raw) + size}\r\n".encode())
            add(raw)
        else:
            add(f"PUB {subject} {reply_prefix}{i} {size}\r\n".encode())
        add(payload)
        add(b"\r\n")
    return b"".join(parts)


def _fast_commands(batch: list[Outgoing], *, reply_prefix: str, max_payload: int) -> bytes:
    """HPUB lines of a fast-ingest batch: each message's reply subject says where it stands in
    the batch (``reply_prefix`` is ``<inbox>.<batch id>.<flow>.fail.``). Headers as bytes."""
    parts: list[bytes] = []
    add = parts.append
    last = len(batch)
    prefix = reply_prefix.encode()
    for n, (subject, payload, headers) in enumerate(batch, 1):
        size = len(payload)
        if size > max_payload:
            raise nats.errors.MaxPayloadError(f"{subject}: {size} bytes, the server takes {max_payload}")
        if not isinstance(headers, bytes):
            headers = _header_block(headers) if headers else b"NATS/1.0\r\n\r\n"
        op = 2 if n == last else 0 if n == 1 else 1
        hsize = len(headers)
        add(b"HPUB %s %s%d.%d.$FI %d %d\r\n" % (subject.encode(), prefix, n, op, hsize, hsize + size))
        add(headers)
        add(payload)
        add(b"\r\n")
    return b"".join(parts)


def _header_block(headers: dict[str, str]) -> bytes:
    lines = "".join(f"{k}: {str(v).translate(_NEWLINES)}\r\n" for k, v in headers.items())
    return f"NATS/1.0\r\n{lines}\r\n".encode()


class Publisher:
    """Publishes batches on one connection and collects their acks in order."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._prefix = nc.new_inbox()
        self._ids = itertools.count()
        self._sub: RawSubscription | None = None
        self._fast_prefix = nc.new_inbox()
        self._fast_sub: RawSubscription | None = None
        # Batch ids are the stream's, not the connection's: this inbox's NUID, unique to this publisher.
        self._batch_token = self._fast_prefix.rpartition(".")[2]
        self._lock = asyncio.Lock()

    async def _ensure(self) -> RawSubscription:
        if self._sub is None:
            self._sub = await RawSubscription(self._nc, f"{self._prefix}.*").open()
        return self._sub

    async def publish(self, batch: list[Outgoing], *, timeout_s: float) -> list[PubAck | None]:
        """Publish all, then wait up to ``timeout_s`` for their acks; ``None`` where none came."""
        if not batch:
            return []
        async with self._lock:  # acks of one batch are matched by id; batches do not interleave
            sub = await self._ensure()
            base = next(self._ids) * 1_000_000  # ids of late acks from earlier batches fall outside
            nc = self._nc
            if nc.is_closed:
                raise nats.errors.ConnectionClosedError
            # The whole batch as one write: nats-py's publish() costs more per message (checks,
            # header regexes, an await) than the server takes to store it.
            await nc._send_command(_commands(batch, reply_prefix=f"{self._prefix}.", base=base, max_payload=nc.max_payload))
            await nc._flush_pending()
            return await self._collect(sub, base=base, count=len(batch), timeout_s=timeout_s)

    async def _collect(
        self, sub: RawSubscription, *, base: int, count: int, timeout_s: float
    ) -> list[PubAck | None]:
        results: list[PubAck | None] = [None] * count
        remaining = count
        replies = _Replies(self._nc, sub, timeout_s=timeout_s)
        while remaining:
            msg = await replies.next()
            if msg is None:
                break
            idx = int(msg[0].rpartition(b".")[2]) - base
            if 0 <= idx < count and results[idx] is None:
                results[idx] = _decode_ack(msg[2], msg[3])
                remaining -= 1
        return results

    async def publish_fast(self, batch: list[Outgoing], *, timeout_s: float) -> PubAck | None:
        """Publish ``batch`` as one fast-ingest batch (see the module's docstring) and wait up to
        ``timeout_s`` for its final ack; ``None`` if none came. The stream must allow batches."""
        if not batch:
            raise ValueError("an empty batch has no commit")
        async with self._lock:
            if self._fast_sub is None:
                self._fast_sub = await RawSubscription(self._nc, f"{self._fast_prefix}.>").open()
            sub = self._fast_sub
            # A new id per batch (and per attempt): replies of an abandoned one are told apart.
            batch_id = f"{self._batch_token}{next(self._ids)}"
            nc = self._nc
            if nc.is_closed:
                raise nats.errors.ConnectionClosedError
            reply_prefix = f"{self._fast_prefix}.{batch_id}.{FAST_FLOW}.fail."
            await nc._send_command(_fast_commands(batch, reply_prefix=reply_prefix, max_payload=nc.max_payload))
            await nc._flush_pending()
            ours = f"{self._fast_prefix}.{batch_id}.".encode()
            return await self._collect_fast(sub, ours=ours, timeout_s=timeout_s)

    async def _collect_fast(self, sub: RawSubscription, *, ours: bytes, timeout_s: float) -> PubAck | None:
        replies = _Replies(self._nc, sub, timeout_s=timeout_s)
        while True:
            msg = await replies.next()
            if msg is None:
                return None
            subject, _, data, raw_headers = msg
            if not subject.startswith(ours):
                continue  # an earlier batch's late reply
            if raw_headers and headers_of(raw_headers).get("Status") == "503":
                return _NO_STREAM
            try:
                reply = _fast_decoder.decode(data)
            except msgspec.DecodeError:
                return PubAck(error=ApiError(description=f"unreadable ack: {data[:200]!r}"))
            if reply.type:
                continue  # flow control: the final ack still comes
            return PubAck(reply.stream, reply.seq, reply.duplicate, reply.error, reply.count)


class _Replies:
    """Replies read off ``sub`` until ``timeout_s`` has passed. A reconnect shortens the wait: the
    connection a batch went out on is gone and acks routed through it never come, so the others
    get a moment and then the caller publishes again."""

    def __init__(self, nc: Client, sub: RawSubscription, *, timeout_s: float) -> None:
        self._nc, self._sub = nc, sub
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + timeout_s
        self._reconnects = nc.stats["reconnects"]

    async def next(self) -> Raw | None:
        """The next reply, or ``None`` once the time is up."""
        items = self._sub.items
        while not items:
            if self._nc.stats["reconnects"] != self._reconnects:
                self._reconnects = self._nc.stats["reconnects"]
                self._deadline = min(self._deadline, self._loop.time() + _AFTER_RECONNECT_S)
            left = self._deadline - self._loop.time()
            if left <= 0:
                return None
            await self._sub.wait(min(left, _POLL_S))
        return items.popleft()
