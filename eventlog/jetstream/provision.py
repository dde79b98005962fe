"""Creating streams and buckets on a NATS that may be busy, starting, or racing another client.

On a first install several clients (reconciler replicas, webhook replicas) create the same
3-replica streams at the same moment. The meta leader then answers one of the identical requests
and may leave another unanswered, so that client times out although the stream exists; right
after a server starts (or a node dies) the API may answer "no responders" or 503 for a few
seconds. Every creation is idempotent (look, create if missing, compare), so the remedy is to run
it again: with a short timeout first, growing, and back-off between attempts, within a budget.
A stream that exists with the configuration we want is success, whoever created it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import StreamInfo
from nats.js.errors import NotFoundError, ServiceUnavailableError

log = structlog.get_logger("eventlog.provision")

T = TypeVar("T")



class NotLedYet(Exception):
    """The stream exists but its replicas have not elected a leader: writes would find no one."""


# No answer, nobody answering yet, JetStream not ready (503: no meta leader yet, not enough
# servers up for the replicas asked), a new stream without a leader yet: all pass by themselves.
RETRYABLE = (NatsTimeout, TimeoutError, NoRespondersError, ServiceUnavailableError, NotLedYet)

# Another client created the stream between our look and our create, with a configuration that
# differs in something we do not set: look again.
STREAM_NAME_IN_USE = 10058

FIRST_TIMEOUT_S = 2.0
MAX_TIMEOUT_S = 10.0
MAX_PAUSE_S = 2.0


class ProvisionError(RuntimeError):
    """A stream or bucket could not be created or opened within the budget."""


async def created_info(js: JetStreamContext, stream: str) -> StreamInfo:
    """The info of a stream we (or another client, "name in use") have just created. Until the
    meta leader's assignment reaches the server that answers, it says "stream not found": that
    passes by itself like a missing leader, so it raises ``NotLedYet`` (retried)."""
    try:
        return await js.stream_info(stream)
    except NotFoundError:
        raise NotLedYet(f"stream {stream} is being created and not visible yet") from None


async def require_leader(js: JetStreamContext, stream: str) -> None:
    """Raise ``NotLedYet`` until a (clustered) stream has a leader: a stream just created has
    none for a moment, and a publish to it then finds no responders."""
    info = await created_info(js, stream)
    if info.cluster is not None and not info.cluster.leader:
        raise NotLedYet(f"stream {stream} has no leader yet")


async def with_retries(
    create: Callable[[JetStreamContext], Awaitable[T]],
    *,
    nc: Client,
    what: str,
    budget_s: float = 60.0,
) -> T:
    """Run ``create`` (idempotent) with a JetStream context of growing timeout until it succeeds,
    retrying what passes by itself, for up to ``budget_s``; then ``ProvisionError``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget_s
    timeout_s, pause_s = FIRST_TIMEOUT_S, 0.1
    attempt = 0
    while True:
        attempt += 1
        left = deadline - loop.time()
        before = nc.last_error
        try:
            return await create(nc.jetstream(timeout=max(0.5, min(timeout_s, left))))
        except RETRYABLE as err:
            reason = str(err) or type(err).__name__
            denied = nc.last_error
            if denied is not before and "permissions violation" in str(denied):
                # The server dropped the request and said why: asking again cannot help.
                raise ProvisionError(
                    f"could not create or open {what}: {str(denied).removeprefix('nats: ')}; this "
                    "connection's user (nats.nkey / nats.creds) may not (docs/security.md)"
                ) from err
            left = deadline - loop.time()
            if left <= 0:
                raise ProvisionError(
                    f"could not create {what} within {budget_s:.0f}s ({attempt} attempts, last: {reason}); "
                    "is JetStream up, with enough servers for the replicas asked (nats.replicas)?"
                ) from err
            log.warning(
                "provision_retry", what=what, attempt=attempt, error=reason, retry_in_s=round(pause_s, 2)
            )
        # Jitter: clients that collided once should not collide again in step.
        await asyncio.sleep(min(pause_s * (0.5 + random.random()), max(0.0, left)))
        pause_s = min(pause_s * 2, MAX_PAUSE_S)
        timeout_s = min(timeout_s * 2, MAX_TIMEOUT_S)
