"""Publish pipelining: the events of reviews answered concurrently go out together.

Each review still waits for its own acknowledgement, but whatever has queued up during two turns
of the event loop is written to the NATS connection in one burst (the write, ~20-30 us of CPU, and
the read of its acks cost per batch, not per event: waiting one more turn about doubles a batch
under load and adds a turn of latency, microseconds when idle), and the acks are matched to
their waiters as the connection's parser reads them (``eventlog.jetstream.rawsub``: a raw
subscription whose messages are handed over synchronously), each waiter told from there through
its callback (``send``; no future, no turn of the loop per review). No task, lock or wait per
batch: a batch of one costs one write and one read, which is what the webhook mostly sees at the
API server's rates (a drain task waiting for each batch's acks cost ~130 us of CPU per batch).

An event the inbox could not take for a moment (no ack after a reconnect, or "no responders"
while the inbox stream elects a leader after losing its node) is published again, with back-off,
until its waiter's bound: giving up at once let reviews be allowed unrecorded during every
fail-over (issue 18). The same ``Nats-Msg-Id`` makes a repeat harmless.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec
import nats.errors
import structlog

from eventlog import codec
from eventlog.events import InputEvent
from eventlog.jetstream import JetStreamLog
from eventlog.jetstream.publish import ApiError, PubAck, transient
from eventlog.jetstream.rawsub import RawSubscription, headers_of
from eventlog.store import LogError, PublishTimeout

log = structlog.get_logger("webhook.batcher")

MAX_BATCH = 512
RETRY_FIRST_S = 0.05  # a stream leader election takes ~1-5 s: start short, back off to
RETRY_MAX_S = 0.5
SWEEP_S = 0.25  # while events await acks: drop those given up on, resend those a reconnect lost

_ack_decoder = msgspec.json.Decoder(PubAck)
_NO_STREAM = PubAck(error=ApiError(code=503, description="no stream answers on this subject (no responders)"))
_NEWLINES = str.maketrans({"\r": " ", "\n": " "})


def _fitting(event: InputEvent, *, limit: int) -> bytes:
    """The encoded event; one too large for a NATS message (an object near etcd's 1.5 MiB) goes
    without its manifest, which the actuator can then read from the manager cluster itself."""
    payload = codec.encode(event)
    if len(payload) > limit and getattr(event, "manifest", None) is not None:
        job = getattr(event, "job", None)
        log.warning("manifest_omitted", job=getattr(job, "key", ""), size=len(payload), max_payload=limit)
        payload = codec.encode(msgspec.structs.replace(event, manifest=None))
    return payload


Then = Callable[[int | BaseException], None]
"""Told once: the event's inbox sequence, or why it was not acknowledged."""


class _Pending:
    """One event on its way: what is written, and who waits for its ack (told once, from the
    callback that settles it: no future, no extra turn of the loop per review)."""

    __slots__ = ("deadline", "done", "head", "payload", "reconnects", "subject", "then")

    def __init__(self, subject: bytes, head: bytes, payload: bytes, then: Then, deadline: float) -> None:
        self.subject = subject
        self.head = head  # the header block (NATS/1.0, Nats-Expected-Stream, Nats-Msg-Id)
        self.payload = payload
        self.then = then
        self.deadline = deadline
        self.done = False
        self.reconnects = -1  # the connection's reconnect count when last written

    def forget(self, _: object = None) -> None:
        """Its waiter no longer waits (a cancelled future): not written, not told."""
        self.done = True
        self.then = _told
        self.payload = b""

    def settle(self, outcome: int | BaseException) -> None:
        if self.done:
            return
        then = self.then
        # Kept in the deadline queue until its bound passes: let go of the review (the waiter's
        # closure) and the payload now, or each settled review's objects stay for publish_timeout_s.
        self.forget()
        try:
            then(outcome)
        except Exception as err:  # a waiter's bug must not break the NATS parser or the timer
            log.exception("inbox_waiter_failed", error=repr(err))


def _told(_: int | BaseException) -> None:
    pass


def _ack_of(data: bytes, headers: Any) -> PubAck:
    if headers and headers_of(headers).get("Status") == "503":
        return _NO_STREAM
    try:
        return _ack_decoder.decode(data)
    except msgspec.DecodeError:
        return PubAck(error=ApiError(description=f"unreadable ack: {data[:200]!r}"))


class _Acks(RawSubscription):
    """The reply subscription, each ack handed to ``on_ack`` as it is read."""

    def __init__(self, nc: Any, subject: str, on_ack: Any) -> None:
        super().__init__(nc, subject)
        self._on_ack = on_ack

    def _deliver(self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        self._on_ack(subject, data, hdr)

    async def _deliver_msg(self, msg: Any) -> None:  # a client without the raw parser
        self._on_ack(msg.subject.encode(), msg.data, dict(msg.headers) if msg.headers else None)

    async def open(self) -> _Acks:
        await super().open()
        while self.items:  # what came before the sink was in place
            subject, _, data, hdr = self.items.popleft()
            self._on_ack(subject, data, hdr)
        return self


class BatchingInbox:
    """An ``Inbox`` (``send(event, msg_id=, timeout_s=, then=)``: ``then`` told the inbox seq or
    the error) that pipelines; ``submit``/``publish`` give a future / await it instead."""

    def __init__(self, jlog: JetStreamLog, *, max_batch: int = MAX_BATCH) -> None:
        self._nc = jlog.nc
        self._inbox = jlog.inbox
        self._stream = jlog.names.inbox_stream
        self._stream_header = b"NATS/1.0\r\nNats-Expected-Stream: " + self._stream.encode() + b"\r\n"
        self._max_batch = max_batch
        self._prefix = self._nc.new_inbox() + "."
        self._prefix_b = self._prefix.encode()
        self._ids = itertools.count()
        self._acks: _Acks | None = None
        self._queue: list[_Pending] = []
        self._in_flight: dict[int, _Pending] = {}  # by reply id
        self._flush_at: asyncio.Handle | None = None
        self._sweep_at: asyncio.TimerHandle | None = None
        self._delay = RETRY_FIRST_S
        # Every waiter's deadline, one queue per bound: a bound's deadlines come in arrival order,
        # so each queue is sorted as it grows (a heap cost a log-time push per review and a pop
        # per review when its timer fired). One timer walks them, instead of a timer per
        # publish: the bound holds even for events queued behind a batch still waiting for acks.
        self._deadlines: dict[float, deque[_Pending]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self.retries = 0  # events published again (transient refusals); tests and logs read it
        self._last_refusal = ""  # what the inbox last said, for the timeout message

    @property
    def unacknowledged(self) -> int:
        """Events written and not acknowledged yet."""
        return len(self._in_flight)

    async def open(self) -> BatchingInbox:
        """Subscribe to the acks (before the first ``submit``)."""
        if self._acks is None:
            self._acks = await _Acks(self._nc, self._prefix + "*", self._on_ack).open()
        return self

    async def publish(self, event: InputEvent, *, msg_id: str | None = None, timeout_s: float = 2.0) -> int:
        await self.open()
        return await self.submit(event, msg_id=msg_id, timeout_s=timeout_s)

    def submit(self, event: InputEvent, *, msg_id: str | None = None, timeout_s: float = 2.0) -> asyncio.Future[int]:
        """Queue ``event``; the future resolves to its inbox sequence once acknowledged. ``open`` first."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def then(outcome: int | BaseException) -> None:
            if future.done():  # cancelled by its waiter
                return
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

        future.add_done_callback(self.send(event, msg_id=msg_id, timeout_s=timeout_s, then=then).forget)
        return future

    def send(self, event: InputEvent, *, msg_id: str | None, timeout_s: float, then: Then) -> _Pending:
        """Queue ``event``; ``then`` is called once, with its inbox sequence when acknowledged or
        the error (``PublishTimeout`` past ``timeout_s``, ``LogError``), straight from the ack's
        parse (the webhook answers a review from it, with no task or future per review)."""
        loop = asyncio.get_running_loop()
        head = self._stream_header
        if msg_id:
            if "\r" in msg_id or "\n" in msg_id:
                msg_id = msg_id.translate(_NEWLINES)
            head += b"Nats-Msg-Id: " + msg_id.encode() + b"\r\n"
        payload = _fitting(event, limit=self._nc.max_payload - 1024)  # headroom for the headers
        deadline = loop.time() + timeout_s
        pending = _Pending(self._inbox.subject(event).encode(), head + b"\r\n", payload, then, deadline)
        self._queue.append(pending)
        waiting = self._deadlines.get(timeout_s)
        if waiting is None:
            waiting = self._deadlines[timeout_s] = deque()
        waiting.append(pending)
        timer = self._timer
        if timer is None or deadline < timer.when():
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(deadline, self._expire)
        if self._flush_at is None:
            self._flush_at = loop.call_soon(self._flush_next)
        return pending

    def _flush_next(self) -> None:
        """One more turn of the loop before writing: the reviews read in it join the batch."""
        self._flush_at = asyncio.get_running_loop().call_soon(self._flush)

    def _expire(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        earliest: float | None = None
        expired: list[_Pending] = []
        for bound, waiting in list(self._deadlines.items()):
            while waiting and (waiting[0].done or waiting[0].deadline <= now):
                pending = waiting.popleft()
                if not pending.done:
                    expired.append(pending)
            if not waiting:
                del self._deadlines[bound]
            elif earliest is None or waiting[0].deadline < earliest:
                earliest = waiting[0].deadline
        self._timer = loop.call_at(earliest, self._expire) if earliest is not None else None
        why = f" (last answer: {self._last_refusal})" if self._last_refusal else ""
        for pending in expired:  # told last: a waiter may queue more meanwhile
            subject = pending.subject.decode(errors="replace")
            pending.settle(PublishTimeout(f"inbox {self._stream} did not acknowledge {subject} in time{why}"))

    def _flush(self) -> None:
        """Write what is queued (waiters that gave up are not written again)."""
        self._flush_at = None
        queue = [pending for pending in self._queue if not pending.done]
        if not queue:
            self._queue = []
            return
        nc = self._nc
        if nc.is_closed or self._acks is None:
            self._queue = []
            err = LogError("publishing to the inbox failed: the NATS connection is closed")
            for pending in queue:
                pending.settle(err)
            return
        if nc.is_reconnecting or not nc.is_connected:
            # Not written while away: the client would buffer a copy per attempt.
            self._queue = queue
            self._last_refusal = "reconnecting to NATS"
            self._retry_later(len(queue))
            return
        batch, self._queue = queue[: self._max_batch], queue[self._max_batch :]
        reconnects = nc.stats["reconnects"]
        max_payload = nc.max_payload
        parts: list[bytes] = []
        add = parts.append
        prefix = self._prefix_b
        in_flight = self._in_flight
        too_large: list[tuple[_Pending, int]] = []
        for pending in batch:
            i = next(self._ids)
            head, payload = pending.head, pending.payload
            if len(payload) > max_payload:  # the server would close the connection on it
                too_large.append((pending, len(payload)))
                continue
            add(b"HPUB %s %s%d %d %d\r\n" % (pending.subject, prefix, i, len(head), len(head) + len(payload)))
            add(head)
            add(payload)
            add(b"\r\n")
            pending.reconnects = reconnects
            in_flight[i] = pending
        if parts:
            self._write(b"".join(parts))
        if self._queue:
            self._flush_at = asyncio.get_running_loop().call_soon(self._flush)
        if in_flight and self._sweep_at is None:
            self._sweep_at = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)
        for pending, size in too_large:
            refused = nats.errors.MaxPayloadError(f"{size} bytes, the server takes {max_payload}")
            pending.settle(LogError(f"publishing to the inbox failed: {refused}"))

    def _write(self, data: bytes) -> None:
        """Onto the connection now, behind whatever the client has pending (its flusher task would
        take another turn of the loop per batch)."""
        nc: Any = self._nc
        nc._pending.append(data)
        nc._pending_data_size += len(data)
        transport = nc._transport
        if transport is None:
            return  # written by the client when it is connected again
        try:
            transport.writelines(nc._pending)
        except Exception as err:  # the connection broke: the client reconnects; the sweep resends
            log.info("inbox_write_failed", error=f"{type(err).__name__}: {err}")
            return
        nc._pending = []
        nc._pending_data_size = 0

    def _on_ack(self, subject: bytes, data: bytes, headers: Any) -> None:
        try:
            pending = self._in_flight.pop(int(subject[len(self._prefix_b) :]), None)
        except ValueError:
            return
        if pending is None or pending.done:  # late (resent meanwhile), or given up on
            return
        ack = _ack_of(data, headers)
        if transient(ack):
            self._last_refusal = "no ack" if ack.error is None else ack.error.description
            self._queue.append(pending)
            self._retry_later(1)
        elif ack.error is not None:
            subject_text = pending.subject.decode(errors="replace")
            pending.settle(LogError(f"inbox {self._stream} refused {subject_text}: {ack.error.description}"))
        else:
            self._delay = RETRY_FIRST_S
            pending.settle(ack.seq)

    def _retry_later(self, count: int) -> None:
        """Publish the queue again after a back-off (the waiters' own bounds end this, through _expire)."""
        self.retries += count
        if self._flush_at is not None and not isinstance(self._flush_at, asyncio.TimerHandle):
            self._flush_at.cancel()  # a flush due now would only meet the same refusal
        elif self._flush_at is not None:
            return  # one already waits
        log.info("inbox_publish_retry", events=count, reason=self._last_refusal, retry_in_s=self._delay)
        self._flush_at = asyncio.get_running_loop().call_later(self._delay, self._flush)
        self._delay = min(self._delay * 2, RETRY_MAX_S)

    def _sweep(self) -> None:
        """Forget events whose waiters gave up; publish again those written on a connection that
        has since been replaced (their acks went to it and never come)."""
        self._sweep_at = None
        reconnects = self._nc.stats["reconnects"]
        lost: list[_Pending] = []
        for i, pending in list(self._in_flight.items()):
            if pending.done:
                del self._in_flight[i]
            elif pending.reconnects != reconnects:
                del self._in_flight[i]
                lost.append(pending)
        if lost:
            self._last_refusal = "no ack (reconnected)"
            self._queue = lost + self._queue
            self._retry_later(len(lost))
        if self._in_flight:
            self._sweep_at = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)
