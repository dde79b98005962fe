"""Reading a stream in order, fast: an ephemeral pull consumer (no acks) drained in bulk.

Why not nats-py's ``fetch``: it awaits each message with a timeout of its own, which costs more
than decoding it. Here one raw subscription (``eventlog.jetstream.rawsub``: no ``Msg`` built, no
header parsed) receives every delivery of the consumer, in stream order, and ``take`` empties
its queue without awaiting per message. Deliveries that arrive after
a caller stopped waiting stay queued for the next call: with no acks, a delivery dropped would be
a message lost.

If the consumer disappears (server restart, the node holding it stopped, idle too long), the
next call recreates it from the sequence after the last one delivered. Without acks, a delivery
sent while the connection was down is simply gone; the consumer sequence of each delivery
(consecutive for one consumer) shows it, and the consumer is then recreated from the last stream
sequence received, as nats-py's ordered consumer does. (A gap in *stream* sequences alone is not
a loss: messages may have been removed from the stream.)

Losing the server we are connected to: the client reconnects to another one at once, but a pull
request held by the dead server (or for a consumer that lived there) is never answered. So a
reconnect writes off every outstanding request: the next ``ensure`` checks the consumer and
requests again, instead of waiting for the old request to expire. While the cluster elects new
leaders (a few seconds; the meta leader creates consumers), the JetStream API may not answer, or
answer "stream/consumer is offline" while a stream's new leader takes over: the fetcher asks with short timeouts and, when ``patient``, keeps trying on later calls
(``ensure`` returns without a request outstanding) rather than failing its caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import structlog
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

from eventlog.jetstream.rawsub import Raw, RawSubscription, headers_of

log = structlog.get_logger("eventlog.fetch")

# A delivered message: (stream sequence, subject, payload).
Delivery = tuple[int, str, bytes]

_INACTIVE_S = 300.0
_GRACE_S = 2.0  # beyond its expiry, how long an unanswered request is waited for
_API_TIMEOUT_S = 2.0  # consumer info / create while recovering: an answer takes milliseconds
_RETRY_MAX_S = 2.0  # longest pause between recovery attempts while the API does not answer
_GIVE_UP_S = 30.0  # an impatient fetcher raises once recovery has failed this long

# What the JetStream API does while the cluster elects leaders: no answer, or "no responders".
_UNAVAILABLE = (NatsTimeout, TimeoutError, NoRespondersError, ServiceUnavailableError)
# ... or, while a stream's new leader takes over (a plain stop of the node that led it), 500 with
# "stream is offline" / "consumer is offline": transient too (issue 18: a term ended on it).
_OFFLINE = frozenset({10118, 10119})  # JSStreamOfflineErr, JSConsumerOfflineErr


def transient(err: BaseException) -> bool:
    """Whether the JetStream API may well answer the same request in a moment."""
    if isinstance(err, _UNAVAILABLE):
        return True
    return isinstance(err, APIError) and (
        err.err_code in _OFFLINE or (err.code == 500 and "offline" in (err.description or ""))
    )


class FetchUnavailable(Exception):
    """The stream could not be read for ``_GIVE_UP_S``: the consumer cannot be (re)created."""


def _delivery_meta(reply: bytes) -> tuple[bytes, int, int]:
    """(consumer, stream sequence, consumer sequence) from a delivery's ack subject:
    ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>…`` (v1) or the same after
    ``<domain>.<account hash>`` (v2)."""
    tokens = reply.split(b".")
    if len(tokens) == 9:
        return tokens[3], int(tokens[5]), int(tokens[6])
    return tokens[5], int(tokens[7]), int(tokens[8])


class StreamFetcher:
    """Deliveries of ``stream`` (subjects ``filter_subject``) from ``next_seq`` on, in order."""

    def __init__(
        self,
        *,
        nc: Client,
        js: JetStreamContext,
        stream: str,
        filter_subject: str,
        next_seq: int,
        patient: bool = False,
    ) -> None:
        self._nc = nc
        self._js = js
        self.patient = patient  # keep trying through outages (the sequencer) or give up (replay)
        self.stream = stream
        self.filter_subject = filter_subject
        self.next_seq = next_seq
        self._consumer: str | None = None
        self._consumer_b = b""  # the same, as delivery subjects spell it
        self._inbox = nc.new_inbox()
        self._sub: RawSubscription | None = None
        self._outstanding = 0  # messages requested and not yet delivered or cancelled by a status
        self._deadline = 0.0  # by then every outstanding request should have been answered
        self._stale = False  # the consumer may be gone: check before the next request
        self._dseq = 0  # consumer sequence of the last delivery taken
        self._lost = False  # a delivery was lost: recreate the consumer before the next request
        self._reconnects = self._reconnect_count()
        self._retry_at = 0.0  # recovery failed: not before then again
        self._retry_delay = 0.0
        self._failing_since: float | None = None

    def _reconnect_count(self) -> int:
        count: int = self._nc.stats["reconnects"]
        return count

    async def open(self) -> StreamFetcher:
        # Unbounded: what we request bounds what can arrive.
        self._sub = await RawSubscription(self._nc, self._inbox).open()
        self._stale = True  # no consumer yet
        while not await self._recovered() and not self.patient:
            await asyncio.sleep(self._retry_delay)  # a reader waits; the sequencer asks again on its next pull
        return self

    async def _create_consumer(self) -> None:
        if self._consumer is not None:
            await self._delete_consumer()
        config = ConsumerConfig(
            ack_policy=AckPolicy.NONE,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=max(1, self.next_seq),
            filter_subject=self.filter_subject,
            inactive_threshold=_INACTIVE_S,
            mem_storage=True,
            num_replicas=1,
            max_waiting=512,
        )
        info = await self._js.add_consumer(self.stream, config, timeout=_API_TIMEOUT_S)
        self._consumer = info.name
        self._consumer_b = info.name.encode()
        self._outstanding = 0
        self._stale = self._lost = False
        self._dseq = 0
        # Anything still queued from the old consumer is dropped by ``take`` (another name).

    async def _delete_consumer(self) -> None:
        """Ask the server to delete our consumer without waiting for the answer: during a
        fail-over nobody may answer for seconds, and an ephemeral consumer that survives goes
        away by itself when inactive."""
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        prefix = getattr(self._js, "_prefix", "$JS.API")
        with contextlib.suppress(Exception):  # not connected: the inactivity threshold cleans up
            await self._nc.publish(f"{prefix}.CONSUMER.DELETE.{self.stream}.{consumer}", b"")

    async def close(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):  # the connection is closing: the sub goes with it
                await self._sub.close()
            self._sub = None
        await self._delete_consumer()

    async def ensure(self, n: int, *, expires_s: float | None = None, reserve: int | None = None) -> None:
        """Keep at least ``reserve`` (default ``n``) requested: if fewer are outstanding, ask for ``n``
        more. With ``expires_s`` the server holds the request that long waiting for messages;
        without, it answers with what it has. A request that was never answered (consumer lost
        with its node, connection dropped) is written off once overdue."""
        loop = asyncio.get_running_loop()
        reconnects = self._reconnect_count()
        if reconnects != self._reconnects:
            # Requests held by the server we lost are never answered: ask again now.
            self._reconnects = reconnects
            if self._outstanding:
                log.info("pull_reissued_after_reconnect", stream=self.stream, next_seq=self.next_seq)
            self._outstanding = 0
            self._stale = True
        if self._outstanding > 0 and loop.time() > self._deadline:
            log.info(
                "pull_overdue", stream=self.stream, outstanding=self._outstanding, next_seq=self.next_seq
            )
            self._outstanding = 0
            self._stale = True
        wanted = n if reserve is None else reserve
        if self._outstanding >= wanted:
            return
        if (self._lost or self._stale) and (loop.time() < self._retry_at or not await self._recovered()):
            return
        body: dict[str, Any] = {"batch": n}
        if expires_s is None:
            body["no_wait"] = True
        else:
            body["expires"] = int(expires_s * 1e9)
        await self._nc.publish(
            f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self._consumer}",
            json.dumps(body).encode(),
            reply=self._inbox,
        )
        self._outstanding += n
        self._deadline = max(self._deadline, loop.time() + (expires_s or 0.0) + _GRACE_S)

    async def _recovered(self) -> bool:
        """Make the consumer usable again; False (retry later) if the API does not answer now."""
        loop = asyncio.get_running_loop()
        try:
            await self._recover()
        except Exception as err:
            if not transient(err):
                raise
            now = loop.time()
            if self._failing_since is None:
                self._failing_since = now
            if not self.patient and now - self._failing_since > _GIVE_UP_S:
                raise FetchUnavailable(
                    f"cannot read stream {self.stream}: the JetStream API has not answered for "
                    f"{_GIVE_UP_S:.0f}s ({type(err).__name__}); is a NATS server with JetStream reachable?"
                ) from err
            self._retry_delay = min(max(self._retry_delay * 2, 0.1), _RETRY_MAX_S)
            self._retry_at = now + self._retry_delay
            log.warning(
                "consumer_unavailable",
                stream=self.stream,
                next_seq=self.next_seq,
                error=str(err) or type(err).__name__,
                retry_in_s=self._retry_delay,
            )
            return False
        self._failing_since = None
        self._retry_delay = 0.0
        return True

    async def _recover(self) -> None:
        if self._lost:
            log.warning("delivery_lost", stream=self.stream, next_seq=self.next_seq)
            await self._create_consumer()
            return
        if self._consumer is not None:
            try:
                await self._js.consumer_info(self.stream, self._consumer, timeout=_API_TIMEOUT_S)
                self._stale = False
                return
            except NotFoundError:
                pass
            except Exception as err:
                if not transient(err):
                    raise
                # Its node may be the one that died: a consumer elsewhere serves as well.
            log.warning("consumer_recreated", stream=self.stream, next_seq=self.next_seq)
        await self._create_consumer()

    def _handle_status(self, raw_headers: bytes | dict[str, str] | None) -> None:
        headers = headers_of(raw_headers)
        status = headers.get("Status", "")
        if status in ("404", "408"):  # no messages / request expired: that request is over
            pending = headers.get("Nats-Pending-Messages")
            self._outstanding = max(0, self._outstanding - int(pending)) if pending else 0
        elif status == "409":  # consumer deleted, leadership change, max waiting exceeded…
            desc = headers.get("Description", "")
            log.info("pull_interrupted", stream=self.stream, status=status, description=desc)
            self._outstanding = 0
            if "Deleted" in desc or "Leadership" in desc:
                self._stale = True
        elif status != "100":  # 100 is an idle heartbeat
            log.warning(
                "pull_status", stream=self.stream, status=status, description=headers.get("Description")
            )
            self._outstanding = 0
            self._stale = True

    def take(self, limit: int) -> list[Delivery]:
        """Up to ``limit`` deliveries already received, in order, without waiting."""
        assert self._sub is not None
        items = self._sub.items
        out: list[Delivery] = []
        next_seq = self.next_seq
        msg: Raw
        while len(out) < limit and items:
            msg = items.popleft()
            subject, reply, data, raw_headers = msg
            if not reply:
                self._handle_status(raw_headers)
                continue
            consumer, seq, dseq = _delivery_meta(reply)
            if consumer != self._consumer_b or self._lost:  # a replaced consumer's, or after a loss
                continue
            self._outstanding = max(0, self._outstanding - 1)
            if dseq != self._dseq + 1:  # deliveries in between never arrived
                self._lost = True
                self._outstanding = 0
                continue
            self._dseq = dseq
            if seq < next_seq:
                continue
            out.append((seq, subject.decode(), data))
            next_seq = seq + 1
        self.next_seq = next_seq
        return out

    async def wait(self, timeout_s: float) -> bool:
        """Until something (a delivery or a status) is received; False on timeout."""
        assert self._sub is not None
        return await self._sub.wait(timeout_s)

    def restart(self) -> None:
        """Recreate the consumer at ``next_seq`` before the next request: one that answers but
        delivers nothing while the stream holds more (seen after a node restart) is not trusted."""
        self._lost = True
        self._outstanding = 0

    @property
    def outstanding(self) -> int:
        """Messages requested and not yet received (nor written off by a status)."""
        return self._outstanding
