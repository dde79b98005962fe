"""The webhook's routes around the pure ``admit`` functions, served by ``webhook.http1``.

Every answer to a well-formed review is HTTP 200 with an AdmissionReview echoing the request uid;
a body that is not one gets 400 with the reason, an oversized body 413, a body that does not arrive
in time 408, a review beyond the bound on work in flight 429 with ``Retry-After`` before its body
is read (``webhook.limits``: memory stays flat under overload, the apiserver retries or applies the
failurePolicy). Publishing is bounded: if the inbox does not acknowledge within ``publish_timeout_s``
the review is answered anyway (the job stays held; the manager watcher backfills it) and
``kdispatch_webhook_publish_failures`` counts it.

A review is answered without a task of its own: decided as soon as its body is in, and, when it
records something, answered from the inbox acknowledgement's callback (``Inbox.send``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog

from eventlog import events as ev
from eventlog.store import PublishTimeout
from webhook import admit
from webhook.http1 import Exchange, Reply, Respond, error
from webhook.limits import DEFAULT_MAX_BYTES_IN_FLIGHT, DEFAULT_MAX_IN_FLIGHT, RETRY_AFTER_S
from webhook.metrics import Metrics
from webhook.review import AdmissionRequest, ReviewError, decode_review, encode_response

log = structlog.get_logger("webhook")

DEFAULT_MAX_BODY = 6 * 1024 * 1024  # object + oldObject of the largest object etcd stores (1.5 MiB each)
DEFAULT_READ_TIMEOUT_S = 10.0  # the apiserver's own limit (timeoutSeconds ≤ 30, default 10)

Decide = Callable[[AdmissionRequest, admit.Settings], admit.Outcome]
_TEXT = b"text/plain; charset=utf-8"
_METRICS = b"text/plain; version=0.0.4; charset=utf-8"
_OK = b"ok\n"


class Inbox(Protocol):
    def send(self, event: ev.InputEvent, *, msg_id: str | None, timeout_s: float, then: Callable[[int | BaseException], None]) -> object:
        """The event queued for the inbox: ``then`` is called once with its inbox sequence when
        acknowledged, or the error (``PublishTimeout`` past ``timeout_s``, ``LogError``)."""
        ...


class WebhookServer:
    """The ``webhook.http1.Handler``: routes, bounds on work in flight, metrics.
    ``inbox`` returns None while NATS is not connected."""

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
        self._debug: Callable[..., Any] | None = None  # the configured logger's debug, bound at first use
        self.in_flight = 0
        # Read when scraped, not kept up to date per review (two locked updates per request).
        self.metrics.in_flight.set_function(lambda: self.in_flight)
        self._idle = asyncio.Event()
        self._idle.set()
        self._routes: dict[bytes, tuple[bytes, Callable[[int | None], Reply | Exchange]]] = {
            b"/mutate": (b"POST", _ReviewRoute(self, "mutate", admit.mutate).begin),
            b"/validate": (b"POST", _ReviewRoute(self, "validate", admit.validate).begin),
            b"/healthz": (b"GET", lambda _: Reply(200, _OK, content_type=_TEXT)),
            b"/readyz": (b"GET", lambda _: _Readyz(self)),
            b"/metrics": (b"GET", lambda _: Reply(200, self.metrics.render(), content_type=_METRICS)),
        }

    def begin(self, method: bytes, path: bytes, declared: int | None) -> Reply | Exchange:
        route = self._routes.get(path)
        if route is None:
            paths = ", ".join(p.decode() for p in self._routes)
            return error(404, f"no such path: {path[:100].decode(errors='replace')}; served: {paths}")
        wanted, begin = route
        if method != wanted:
            return error(405, f"{path.decode()} takes {wanted.decode()}, not {method[:20].decode(errors='replace')}", headers=b"Allow: " + wanted + b"\r\n")
        return begin(declared)

    async def wait_idle(self) -> None:
        """Until no review is being answered (graceful shutdown)."""
        await self._idle.wait()

    def too_large(self, declared: int | None) -> Reply:
        what = f"{declared} bytes" if declared is not None else "a chunked body that went past it"
        # The rest of the body is never read: the connection cannot be reused.
        return error(413, f"request body too large: {what}; the limit is {self.max_body} bytes (--max-body-bytes)", close=True)

    def overloaded(self, size: int) -> Reply:
        """429 at once: cheaper than queueing, and the apiserver (client-go) honours Retry-After
        within the webhook's timeoutSeconds before its failurePolicy applies."""
        message = (
            f"overloaded: {self.in_flight} reviews ({self.bytes_in_flight} bytes) in flight, the bound is "
            f"{self.max_in_flight} reviews / {self.max_bytes_in_flight} bytes and this one declares {size}; "
            f"retry after {RETRY_AFTER_S}s"
        )
        return error(429, message, headers=b"Retry-After: %d\r\n" % RETRY_AFTER_S)

    def record(self, records: list[admit.Record], then: Callable[[], None]) -> None:
        """Publish ``records`` one after the other, then call ``then`` (whatever the inbox said:
        failures are counted and logged, the review is answered regardless)."""
        if not records:
            then()
            return
        record, rest = records[0], records[1:]
        inbox = self.inbox()
        if inbox is None:
            self.metrics.publish_failures.labels("unavailable").inc()
            log.warning("publish_skipped", reason="NATS not connected; the manager watcher will backfill", **_fields(record))
            self.record(rest, then)
            return
        def acknowledged(outcome: int | BaseException) -> None:
            if isinstance(outcome, BaseException):
                self._failed(record, outcome)
            else:
                self._published(type(record.event).__name__).inc()
                debug = self._debug
                if debug is None:  # through the lazy proxy each call looked the logger up again (~1 us a review)
                    debug = self._debug = log.bind().debug
                debug("published", inbox_seq=outcome, msg_id=record.msg_id)  # the inbox itself is the record
            if rest:
                self.record(rest, then)
            else:
                then()

        try:  # the inbox honours the bound itself (one timer for all waiters in the batching inbox)
            inbox.send(record.event, msg_id=record.msg_id, timeout_s=self.publish_timeout_s, then=acknowledged)
        except Exception as err:  # e.g. an event that cannot be encoded: answered regardless
            self._failed(record, err)
            self.record(rest, then)

    def _failed(self, record: admit.Record, err: BaseException) -> None:
        if isinstance(err, (TimeoutError, PublishTimeout)):
            self.metrics.publish_failures.labels("timeout").inc()
            log.warning("publish_timeout", bound_s=self.publish_timeout_s, **_fields(record))
        else:  # any NATS failure: the review is answered regardless
            self.metrics.publish_failures.labels("error").inc()
            log.warning("publish_failed", error=f"{type(err).__name__}: {err}", **_fields(record))

    def _published(self, name: str) -> Any:
        counter = self._published_by_type.get(name)
        if counter is None:
            counter = self._published_by_type[name] = self.metrics.published.labels(name)
        return counter


class _ReviewRoute:
    """``/mutate`` or ``/validate``: the bounds checked from the head, then one ``_Review`` per request."""

    def __init__(self, server: WebhookServer, endpoint: str, decide: Decide) -> None:
        self.server = server
        self.endpoint = endpoint
        self.decide = decide
        metrics = server.metrics
        self.latency = metrics.latency.labels(endpoint)
        self.allowed = metrics.requests.labels(endpoint, "allowed")
        self.denied = metrics.requests.labels(endpoint, "denied")
        self.bad = metrics.requests.labels(endpoint, "bad_request")
        self.shed = metrics.requests.labels(endpoint, "shed")

    def begin(self, declared: int | None) -> Reply | Exchange:
        server = self.server
        if declared is not None and declared > server.max_body:
            # Refused from its header, unread: reading it only to refuse it left the heap
            # fragmented at each burst (the soak: +20-60 MiB per burst of 8 MiB bodies, kept).
            self.bad.inc()
            self.latency.observe(0.0)
            return server.too_large(declared)
        # What the body will take, known from its header before it is read (chunked: the most).
        size = server.max_body if declared is None else declared
        if server.in_flight >= server.max_in_flight or server.bytes_in_flight + size > server.max_bytes_in_flight:
            self.shed.inc()
            self.latency.observe(0.0)
            return server.overloaded(size)
        server.in_flight += 1
        server.bytes_in_flight += size
        server._idle.clear()
        return _Review(self, size)


class _Review:
    """One review whose head was taken on: in flight (counted) until answered or abandoned."""

    __slots__ = ("route", "size", "started")

    def __init__(self, route: _ReviewRoute, size: int) -> None:
        self.route = route
        self.size = size
        self.started = time.perf_counter()

    def _release(self) -> None:
        route = self.route
        server = route.server
        server.in_flight -= 1
        server.bytes_in_flight -= self.size
        if server.in_flight == 0:
            server._idle.set()
        route.latency.observe(time.perf_counter() - self.started)

    def abandoned(self, why: str) -> Reply | None:
        route = self.route
        self._release()
        if why == "closed":
            return None
        route.bad.inc()
        if why == "too-large":  # chunked, no length: found while reading
            return route.server.too_large(None)
        return error(408, f"the request body did not arrive within {route.server.read_timeout_s}s")

    def received(self, body: bytes, respond: Respond) -> Reply | None:
        route = self.route
        try:
            try:
                api_version, review = decode_review(body)
            except ReviewError as err:
                route.bad.inc()
                log.info("review_rejected", endpoint=route.endpoint, error=str(err))
                self._release()
                return error(400, f"not an AdmissionReview: {err}")
            outcome = route.decide(review, route.server.settings)
        except BaseException:
            self._release()
            raise
        if not outcome.records:
            return self._answer(review, outcome, api_version)

        def recorded() -> None:
            try:
                reply = self._answer(review, outcome, api_version)
            except Exception as err:  # never leave the review unanswered
                log.exception("answer_failed", endpoint=route.endpoint, error=repr(err))
                reply = error(500, "internal error")
            respond(reply)

        try:
            route.server.record(outcome.records, recorded)
        except BaseException:
            self._release()
            raise
        return None

    def _answer(self, review: AdmissionRequest, outcome: admit.Outcome, api_version: str) -> Reply:
        route = self.route
        try:
            if outcome.allowed:
                route.allowed.inc()
            else:
                route.denied.inc()
                route.server.metrics.denials.labels(route.endpoint, outcome.reason).inc()
                log.info(
                    "review_denied",
                    endpoint=route.endpoint,
                    reason=outcome.reason,
                    job=f"{review.namespace}/{review.name}",
                    kind=review.kind.kind,
                    uid=review.uid,
                    message=outcome.response.status.message if outcome.response.status else "",
                )
            return Reply(200, encode_response(outcome.response, api_version=api_version))
        finally:
            self._release()


class _Readyz:
    """``/readyz``: 200 only while NATS answers a ping (a task: the ping awaits)."""

    __slots__ = ("server",)

    def __init__(self, server: WebhookServer) -> None:
        self.server = server

    def received(self, body: bytes, respond: Respond) -> Reply | None:
        task = asyncio.get_running_loop().create_task(self._check(respond))
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)
        return None

    async def _check(self, respond: Respond) -> None:
        try:
            ready = await self.server.nats_ready()
        except Exception:  # a ping that failed: not ready
            ready = False
        if ready:
            respond(Reply(200, _OK, content_type=_TEXT))
        else:
            respond(Reply(503, b"NATS is not answering\n", content_type=_TEXT))

    def abandoned(self, why: str) -> Reply | None:
        return None


_tasks: set[asyncio.Task[None]] = set()  # readiness checks under way (the loop keeps only weak references)


def _fields(record: admit.Record) -> dict[str, str]:
    """Log context of a record: the job and what was recorded about it."""
    job = getattr(record.event, "job", None)
    return {"job": job.key if isinstance(job, ev.JobRef) else "", "type": type(record.event).__name__, "msg_id": record.msg_id}
