"""Publish pipelining: the events of reviews answered concurrently go out together.

Each review still waits for its own acknowledgement, but instead of one request/reply per event,
whatever has queued up while the previous batch was in flight is written in one burst and its
acks are read in bulk (``eventlog.jetstream.publish.Publisher``). Under load that amortises the
per-message cost of the NATS client; idle, a batch is a single event and costs one round trip.

An event the inbox could not take for a moment (no ack, or "no responders" while the inbox
stream elects a leader after losing its node) is published again, with back-off, until its
waiter's bound: giving up at once let reviews be allowed unrecorded during every fail-over
(issue 18). The same ``Nats-Msg-Id`` makes a repeat harmless.
"""

from __future__ import annotations

import asyncio
from collections import deque

import msgspec
import structlog

from eventlog import codec
from eventlog.events import InputEvent
from eventlog.jetstream import JetStreamLog
from eventlog.jetstream.publish import Outgoing, Publisher, transient
from eventlog.store import LogError, PublishTimeout

log = structlog.get_logger("webhook.batcher")

MAX_BATCH = 512
RETRY_FIRST_S = 0.05  # a stream leader election takes ~1-5 s: start short, back off to
RETRY_MAX_S = 0.5

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
    """An ``Inbox`` (``submit(event, msg_id=, timeout_s=) -> future of the inbox seq``) that pipelines."""

    def __init__(self, jlog: JetStreamLog, *, max_batch: int = MAX_BATCH) -> None:
        self._nc = jlog.nc
        self._publisher = Publisher(jlog.nc)
        self._inbox = jlog.inbox
        self._stream = jlog.names.inbox_stream
        self._max_batch = max_batch
        self._queue: list[_Pending] = []
        self._task: asyncio.Task[None] | None = None
        # Every waiter's deadline, one queue per bound: a bound's deadlines come in arrival order,
        # so each queue is sorted as it grows (a heap cost a log-time push per review and a pop
        # per review when its timer fired). One timer walks them, instead of a timer per
        # publish: the bound holds even for events queued behind a batch still waiting for acks.
        self._deadlines: dict[float, deque[tuple[float, asyncio.Future[int], str]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self.retries = 0  # events published again (transient refusals); tests and logs read it
        self._last_refusal = ""  # what the inbox last said, for the timeout message

    async def publish(self, event: InputEvent, *, msg_id: str | None = None, timeout_s: float = 2.0) -> int:
        return await self.submit(event, msg_id=msg_id, timeout_s=timeout_s)

    def submit(self, event: InputEvent, *, msg_id: str | None = None, timeout_s: float = 2.0) -> asyncio.Future[int]:
        """Queue ``event``; the future resolves to its inbox sequence once acknowledged (the webhook
        answers a review from its callback, with no task per review)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        headers = {"Nats-Expected-Stream": self._stream}
        if msg_id:
            headers["Nats-Msg-Id"] = msg_id
        payload = _fitting(event, limit=self._nc.max_payload - 1024)  # headroom for the headers
        subject = self._inbox.subject(event)
        self._queue.append(((subject, payload, headers), future, timeout_s))
        deadline = loop.time() + timeout_s
        waiting = self._deadlines.get(timeout_s)
        if waiting is None:
            waiting = self._deadlines[timeout_s] = deque()
        waiting.append((deadline, future, subject))
        if self._timer is None or deadline < self._timer.when():
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(deadline, self._expire)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain(), name="inbox-batches")
        return future

    def _expire(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        earliest: float | None = None
        for bound, waiting in list(self._deadlines.items()):
            while waiting and (waiting[0][1].done() or waiting[0][0] <= now):
                _, future, subject = waiting.popleft()
                if not future.done():
                    why = f" (last answer: {self._last_refusal})" if self._last_refusal else ""
                    future.set_exception(PublishTimeout(f"inbox {self._stream} did not acknowledge {subject} in time{why}"))
            if not waiting:
                del self._deadlines[bound]
            elif earliest is None or waiting[0][0] < earliest:
                earliest = waiting[0][0]
        self._timer = loop.call_at(earliest, self._expire) if earliest is not None else None

    async def _drain(self) -> None:
        delay = RETRY_FIRST_S
        while self._queue:
            # Waiters whose bound passed (or that gave up) are not published again.
            queue = [pending for pending in self._queue if not pending[1].done()]
            batch, self._queue = queue[: self._max_batch], queue[self._max_batch :]
            if not batch:
                continue
            timeout_s = max(t for _, _, t in batch)
            again: list[_Pending] = []
            if self._nc.is_reconnecting:
                # Not written while away: the client would buffer a copy per attempt.
                self._last_refusal = "reconnecting to NATS"
                again = batch
            else:
                await self._publish_batch(batch, timeout_s, again)
            if not again:
                delay = RETRY_FIRST_S
                continue
            self.retries += len(again)
            log.info("inbox_publish_retry", events=len(again), reason=self._last_refusal, retry_in_s=delay)
            await asyncio.sleep(delay)  # the waiters' own bounds end this, through _expire
            delay = min(delay * 2, RETRY_MAX_S)
            self._queue = again + self._queue

    async def _publish_batch(self, batch: list[_Pending], timeout_s: float, again: list[_Pending]) -> None:
        """Publish; answer every waiter whose ack came, and put those to retry in ``again``."""
        try:
            acks = await self._publisher.publish([out for out, _, _ in batch], timeout_s=timeout_s)
        except Exception as err:  # connection closed or draining: every waiter hears about it
            for _, future, _ in batch:
                if not future.done():
                    future.set_exception(LogError(f"publishing to the inbox failed: {type(err).__name__}: {err}"))
            return
        for pending, ack in zip(batch, acks, strict=True):
            out, future, _ = pending
            if future.done():  # the review gave up waiting (its bound passed)
                continue
            if transient(ack):
                self._last_refusal = "no ack" if ack is None or ack.error is None else ack.error.description
                again.append(pending)
            elif ack is not None and ack.error is not None:
                future.set_exception(LogError(f"inbox {self._stream} refused {out[0]}: {ack.error.description}"))
            elif ack is not None:
                future.set_result(ack.seq)
