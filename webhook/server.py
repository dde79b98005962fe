"""The HTTP transport: aiohttp handlers around the pure ``admit`` functions. Nothing else.

Every answer to a well-formed review is HTTP 200 with an AdmissionReview echoing the request uid;
a body that is not one gets 400 with the reason, an oversized body 413, a body that does not arrive
in time 408, a review beyond the bound on work in flight 429 with ``Retry-After`` before its body
is read (``webhook.limits``: memory stays flat under overload, the apiserver retries or applies the
failurePolicy). Publishing is bounded: if the inbox does not acknowledge within ``publish_timeout_s``
the review is answered anyway (the job stays held; the manager watcher backfills it) and
``kdispatch_webhook_publish_failures`` counts it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog
from aiohttp import web

from eventlog import events as ev
from eventlog.store import PublishTimeout
from webhook import admit
from webhook.limits import DEFAULT_MAX_BYTES_IN_FLIGHT, DEFAULT_MAX_IN_FLIGHT, RETRY_AFTER_S
from webhook.metrics import Metrics
from webhook.review import AdmissionRequest, ReviewError, decode_review, encode_response

log = structlog.get_logger("webhook")

DEFAULT_MAX_BODY = 6 * 1024 * 1024  # object + oldObject of the largest object etcd stores (1.5 MiB each)
DEFAULT_READ_TIMEOUT_S = 10.0  # the apiserver's own limit (timeoutSeconds ≤ 30, default 10)

Decide = Callable[[AdmissionRequest, admit.Settings], admit.Outcome]


class Inbox(Protocol):
    async def publish(self, event: ev.InputEvent, *, msg_id: str | None = None, timeout_s: float = 2.0) -> int: ...


class WebhookServer:
    """Holds what the handlers share; ``inbox`` returns None while NATS is not connected."""

    def __init__(
        self,
        *,
        settings: admit.Settings,
        inbox: Callable[[], Inbox | None],
        nats_ready: Callable[[], Awaitable[bool]],
        publish_timeout_s: float = 1.0,
        max_body: int = DEFAULT_MAX_BODY,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_bytes_in_flight: int = DEFAULT_MAX_BYTES_IN_FLIGHT,
    ) -> None:
        self.settings = settings
        self.inbox = inbox
        self.nats_ready = nats_ready
        self.publish_timeout_s = publish_timeout_s
        self.max_body = max_body
        self.read_timeout_s = read_timeout_s
        self.max_in_flight = max_in_flight
        self.max_bytes_in_flight = max(max_bytes_in_flight, max_body)  # one largest review always fits
        self.bytes_in_flight = 0
        self.metrics = Metrics()
        self._published_by_type: dict[str, Any] = {}
        self.in_flight = 0
        # Read when scraped, not kept up to date per review (two locked updates per request).
        self.metrics.in_flight.set_function(lambda: self.in_flight)
        self._idle = asyncio.Event()
        self._idle.set()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body)  # bodies are read by _read_body, bounded too
        app.router.add_post("/mutate", self._review_handler("mutate", admit.mutate))
        app.router.add_post("/validate", self._review_handler("validate", admit.validate))
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def wait_idle(self) -> None:
        """Until no review is being answered (graceful shutdown)."""
        await self._idle.wait()

    def _review_handler(self, endpoint: str, decide: Decide) -> Callable[[web.Request], Awaitable[web.Response]]:
        latency = self.metrics.latency.labels(endpoint)
        allowed = self.metrics.requests.labels(endpoint, "allowed")
        denied = self.metrics.requests.labels(endpoint, "denied")
        bad = self.metrics.requests.labels(endpoint, "bad_request")
        shed = self.metrics.requests.labels(endpoint, "shed")

        async def handle(request: web.Request) -> web.Response:
            started = time.perf_counter()
            declared = request.content_length  # parsed from the header at each access
            if declared is not None and declared > self.max_body:
                # Refused from its header, unread: reading it only to refuse it left the heap
                # fragmented at each burst (the soak: +20-60 MiB per burst of 8 MiB bodies, kept).
                bad.inc()
                return self._too_large(declared)
            # What the body will take, known from its header before it is read (chunked: the most).
            size = self.max_body if declared is None else declared
            if self.in_flight >= self.max_in_flight or self.bytes_in_flight + size > self.max_bytes_in_flight:
                shed.inc()
                return self._overloaded(size)
            self.in_flight += 1
            self.bytes_in_flight += size
            self._idle.clear()
            try:
                try:
                    if request.content.is_eof():  # the whole body is already here: no timer, no iterator
                        body = self._buffered_body(request)
                    else:
                        async with asyncio.timeout(self.read_timeout_s):  # no task per request, unlike wait_for
                            body = await self._read_body(request)
                except _TooLarge:  # chunked, no length: found while reading
                    bad.inc()
                    return self._too_large(None)
                except TimeoutError:
                    bad.inc()
                    return _error(408, f"the request body did not arrive within {self.read_timeout_s}s")
                try:
                    api_version, review = decode_review(body)
                except ReviewError as err:
                    bad.inc()
                    log.info("review_rejected", endpoint=endpoint, error=str(err))
                    return _error(400, f"not an AdmissionReview: {err}")
                outcome = decide(review, self.settings)
                if outcome.records:
                    await self._publish(outcome.records)
                if outcome.allowed:
                    allowed.inc()
                else:
                    denied.inc()
                    self.metrics.denials.labels(endpoint, outcome.reason).inc()
                    log.info(
                        "review_denied",
                        endpoint=endpoint,
                        reason=outcome.reason,
                        job=f"{review.namespace}/{review.name}",
                        kind=review.kind.kind,
                        uid=review.uid,
                        message=outcome.response.status.message if outcome.response.status else "",
                    )
                body_out = encode_response(outcome.response, api_version=api_version)
                return web.Response(body=body_out, content_type="application/json")
            finally:
                self.in_flight -= 1
                self.bytes_in_flight -= size
                if self.in_flight == 0:
                    self._idle.set()
                latency.observe(time.perf_counter() - started)

        return handle

    def _buffered_body(self, request: web.Request) -> bytes:
        """The body when it has all arrived (the common case: a review fits in one TLS record or
        two), taken from the stream's buffer at once, not kept on the request (see ``_read_body``)."""
        body = request.content.read_nowait()
        if len(body) > self.max_body:  # chunked, no length
            raise _TooLarge
        return body

    async def _read_body(self, request: web.Request) -> bytes:
        """The body, not kept on the request: ``request.read()`` caches it there, and aiohttp holds
        a keep-alive connection's last request until the next arrives, so each idle connection
        kept its last body (6 MiB ones: +6.6 MiB of RSS per connection, tests/webhook/test_faults.py)."""
        chunks: list[bytes] = []
        total = 0
        async for chunk in request.content.iter_any():
            total += len(chunk)
            if total > self.max_body:
                raise _TooLarge
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, declared: int | None) -> web.Response:
        what = f"{declared} bytes" if declared is not None else "a chunked body that went past it"
        response = _error(413, f"request body too large: {what}; the limit is {self.max_body} bytes (--max-body-bytes)")
        response.force_close()  # the rest of the body is never read: the connection cannot be reused
        return response

    def _overloaded(self, size: int) -> web.Response:
        """429 at once: cheaper than queueing, and the apiserver (client-go) honours Retry-After
        within the webhook's timeoutSeconds before its failurePolicy applies."""
        message = (
            f"overloaded: {self.in_flight} reviews ({self.bytes_in_flight} bytes) in flight, the bound is "
            f"{self.max_in_flight} reviews / {self.max_bytes_in_flight} bytes and this one declares {size}; "
            f"retry after {RETRY_AFTER_S}s"
        )
        return web.json_response({"error": message}, status=429, headers={"Retry-After": str(RETRY_AFTER_S)})

    async def _publish(self, records: list[admit.Record]) -> None:
        inbox = self.inbox()
        for record in records:
            event = record.event
            if inbox is None:
                self.metrics.publish_failures.labels("unavailable").inc()
                log.warning("publish_skipped", reason="NATS not connected; the manager watcher will backfill", **_fields(record))
                continue
            try:  # the inbox honours the bound itself (one timer for all waiters in the batching inbox)
                seq = await inbox.publish(event, msg_id=record.msg_id, timeout_s=self.publish_timeout_s)
            except (TimeoutError, PublishTimeout):
                self.metrics.publish_failures.labels("timeout").inc()
                log.warning("publish_timeout", bound_s=self.publish_timeout_s, **_fields(record))
            except Exception as err:  # any NATS failure: the review is answered regardless
                self.metrics.publish_failures.labels("error").inc()
                log.warning("publish_failed", error=f"{type(err).__name__}: {err}", **_fields(record))
            else:
                self._published(type(event).__name__).inc()
                log.debug("published", inbox_seq=seq, msg_id=record.msg_id)  # the inbox itself is the record

    def _published(self, name: str) -> Any:
        counter = self._published_by_type.get(name)
        if counter is None:
            counter = self._published_by_type[name] = self.metrics.published.labels(name)
        return counter

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        if await self.nats_ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="NATS is not answering\n")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def _fields(record: admit.Record) -> dict[str, str]:
    """Log context of a record: the job and what was recorded about it."""
    job = getattr(record.event, "job", None)
    return {"job": job.key if isinstance(job, ev.JobRef) else "", "type": type(record.event).__name__, "msg_id": record.msg_id}


class _TooLarge(Exception):
    """A body without Content-Length went past ``max_body`` while being read."""


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)
