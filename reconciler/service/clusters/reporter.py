"""Publishes facts to the inbox with their stable message ids, retrying through NATS outages."""

from __future__ import annotations

import asyncio

from eventlog.events import InputEvent
from eventlog.store import Inbox
from reconciler.edge.logging import get_logger
from reconciler.service.clusters.backoff import Backoff
from reconciler.service.clusters.base import log_context

log = get_logger("reconciler.clusters.reporter")


class InboxReporter:
    """``report`` returns once the inbox acknowledged the fact; it retries with back-off."""

    def __init__(self, inbox: Inbox, *, timeout_s: float = 2.0, max_tries: int | None = None) -> None:
        self.inbox = inbox
        self.timeout_s = timeout_s
        self.max_tries = max_tries
        self.published = 0

    async def report_many(self, facts: list[tuple[InputEvent, str]]) -> None:
        """Several facts in one burst when the inbox can (``publish_many``): one round of acks
        instead of one request per fact. Retried whole: the message ids make that idempotent."""
        publish_many = getattr(self.inbox, "publish_many", None)
        if publish_many is None or len(facts) < 2:
            await asyncio.gather(*(self.report(event, msg_id=msg_id) for event, msg_id in facts))
            return
        backoff = Backoff(base_s=0.1, cap_s=5.0)
        tries = 0
        while True:
            tries += 1
            try:
                await publish_many(facts, timeout_s=max(self.timeout_s, 0.002 * len(facts)))
                self.published += len(facts)
                return
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a NATS outage must not kill an observer: retry
                if self.max_tries is not None and tries >= self.max_tries:
                    raise
                delay = backoff.next_delay()
                log.warning("facts_publish_failed", facts=len(facts), error=str(err), retry_in_s=round(delay, 3))
                await asyncio.sleep(delay)

    async def report(self, event: InputEvent, *, msg_id: str) -> None:
        backoff = Backoff(base_s=0.1, cap_s=5.0)
        tries = 0
        while True:
            tries += 1
            try:
                await self.inbox.publish(event, msg_id=msg_id, timeout_s=self.timeout_s)
                self.published += 1
                return
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a NATS outage must not kill an observer: retry
                if self.max_tries is not None and tries >= self.max_tries:
                    raise
                delay = backoff.next_delay()
                log.warning(
                    "fact_publish_failed",
                    msg_id=msg_id,
                    error=str(err),
                    retry_in_s=round(delay, 3),
                    **log_context(event),
                )
                await asyncio.sleep(delay)
