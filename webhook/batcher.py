"""Publish pipelining: the events of reviews answered concurrently go out together.

Each review still waits for its own acknowledgement, but instead of one request/reply per event,
whatever has queued up while the previous batch was in flight is written in one burst and its
acks are read in bulk (``eventlog.jetstream.publish.Publisher``). Under load that amortises the
per-message cost of the NATS client; idle, a batch is a single event and costs one round trip.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

import msgspec
import structlog

from eventlog import codec
from eventlog.events import InputEvent
from eventlog.jetstream import JetStreamLog
from eventlog.jetstream.publish import Outgoing, Publisher
from eventlog.store import LogError, PublishTimeout

log = structlog.get_logger("webhook.batcher")

MAX_BATCH = 512

_Pending = tuple[Outgoing, "asyncio.Future[int]", float]


def _fitting(event: InputEvent, *, limit: int) -> bytes:
    """The encoded event; one too large for a NATS message (an object near etcd's 1.5 MiB) goes
    without its manifest, which the actuator can then read from the manager cluster itself."""
    payload = codec.encode(event)
    if len(payload) > limit and getattr(event, "manifest", None) is not None:
        job = getattr(event, "job", None)
        log.warning("manifest_omitted", job=getattr(job, "key", ""), size=len(payload), max_payload=limit)
        payload = codec.encode(msgspec.structs.replace(event, manifest=None))
    return payload


class BatchingInbox:
    """An ``Inbox`` (``publish(event, msg_id=, timeout_s=) -> inbox seq``) that pipelines."""

    def __init__(self, jlog: JetStreamLog, *, max_batch: int = MAX_BATCH) -> None:
        self._nc = jlog.nc
        self._publisher = Publisher(jlog.nc)
        self._inbox = jlog.inbox
        self._stream = jlog.names.inbox_stream
        self._max_batch = max_batch
        self._queue: list[_Pending] = []
        self._task: asyncio.Task[None] | None = None
        # Every waiter's deadline, earliest first. One timer walks them, instead of a timer per
        # publish: the bound holds even for events queued behind a batch still waiting for acks.
        self._deadlines: list[tuple[float, int, asyncio.Future[int], str]] = []
        self._arrivals = itertools.count()
        self._timer: asyncio.TimerHandle | None = None

    async def publish(self, event: InputEvent, *, msg_id: str | None = None, timeout_s: float = 2.0) -> int:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        headers = {"Nats-Expected-Stream": self._stream}
        if msg_id:
            headers["Nats-Msg-Id"] = msg_id
        payload = _fitting(event, limit=self._nc.max_payload - 1024)  # headroom for the headers
        subject = self._inbox.subject(event)
        self._queue.append(((subject, payload, headers), future, timeout_s))
        deadline = loop.time() + timeout_s
        heapq.heappush(self._deadlines, (deadline, next(self._arrivals), future, subject))
        if self._timer is None or deadline < self._timer.when():
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(deadline, self._expire)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain(), name="inbox-batches")
        return await future

    def _expire(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._deadlines and (self._deadlines[0][2].done() or self._deadlines[0][0] <= now):
            _, _, future, subject = heapq.heappop(self._deadlines)
            if not future.done():
                future.set_exception(PublishTimeout(f"inbox {self._stream} did not acknowledge {subject} in time"))
        self._timer = loop.call_at(self._deadlines[0][0], self._expire) if self._deadlines else None

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
            timeout_s = max(t for _, _, t in batch)
            try:
                acks = await self._publisher.publish([out for out, _, _ in batch], timeout_s=timeout_s)
            except Exception as err:  # connection closed or draining: every waiter hears about it
                for _, future, _ in batch:
                    if not future.done():
                        future.set_exception(LogError(f"publishing to the inbox failed: {type(err).__name__}: {err}"))
                continue
            for (out, future, t), ack in zip(batch, acks, strict=True):
                if future.done():  # the review gave up waiting (its bound passed)
                    continue
                if ack is None:
                    future.set_exception(PublishTimeout(f"inbox {self._stream} did not acknowledge {out[0]} within {t}s"))
                elif ack.error is not None:
                    future.set_exception(LogError(f"inbox {self._stream} refused {out[0]}: {ack.error.description}"))
                else:
                    future.set_result(ack.seq)
