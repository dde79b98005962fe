"""Publish pipelining: the events of reviews answered concurrently go out together.

Each review still waits for its own acknowledgement, but instead of one request/reply per event,
whatever has queued up while the previous batch was in flight is written in one burst and its
acks are read in bulk (``eventlog.jetstream.publish.Publisher``). Under load that amortises the
per-message cost of the NATS client; idle, a batch is a single event and costs one round trip.
"""

from __future__ import annotations

import asyncio

import structlog

from eventlog import codec
from eventlog.events import InputEvent
from eventlog.jetstream import JetStreamLog
from eventlog.jetstream.publish import Outgoing, Publisher
from eventlog.store import LogError, PublishTimeout

log = structlog.get_logger("webhook.batcher")

MAX_BATCH = 512

_Pending = tuple[Outgoing, "asyncio.Future[int]", float]


class BatchingInbox:
    """An ``Inbox`` (``publish(event, msg_id=, timeout_s=) -> inbox seq``) that pipelines."""

    def __init__(self, jlog: JetStreamLog, *, max_batch: int = MAX_BATCH) -> None:
        self._publisher = Publisher(jlog.nc)
        self._inbox = jlog.inbox
        self._stream = jlog.names.inbox_stream
        self._max_batch = max_batch
        self._queue: list[_Pending] = []
        self._task: asyncio.Task[None] | None = None

    async def publish(self, event: InputEvent, *, msg_id: str | None = None, timeout_s: float = 2.0) -> int:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        headers = {"Nats-Expected-Stream": self._stream}
        if msg_id:
            headers["Nats-Msg-Id"] = msg_id
        self._queue.append(((self._inbox.subject(event), codec.encode(event), headers), future, timeout_s))
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain(), name="inbox-batches")
        return await future

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
