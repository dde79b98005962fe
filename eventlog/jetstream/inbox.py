"""The inbox: many writers publish facts, de-duplicated by ``Nats-Msg-Id``."""

from __future__ import annotations

from collections.abc import Sequence

import nats.errors
import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext

from eventlog import codec, subjects
from eventlog.events import InputEvent
from eventlog.jetstream.connection import denied_message, permission_denied
from eventlog.jetstream.names import LogNames
from eventlog.jetstream.publish import Outgoing, Publisher
from eventlog.store import LogError, PublishTimeout

log = structlog.get_logger("eventlog.inbox")


class JetStreamInbox:
    def __init__(
        self, js: JetStreamContext, names: LogNames, *, nc: Client | None = None, source: str | None = None
    ) -> None:
        self._js = js
        self._names = names
        # ``<root>.in.<source>``: the subjects a producer's NATS user may publish to (natsauth)
        self._prefix = f"{names.inbox_prefix}.{source}" if source else names.inbox_prefix
        self._nc = nc
        self._publisher: Publisher | None = None

    @property
    def prefix(self) -> str:
        return self._prefix

    def subject(self, event: InputEvent) -> str:
        return subjects.subject_for(event, prefix=self._prefix)

    async def publish(self, event: InputEvent, *, msg_id: str | None = None, timeout_s: float = 2.0) -> int:
        """Publish a fact; returns its inbox sequence (the original one for a duplicate msg_id)."""
        return await self.publish_raw(
            self.subject(event), codec.encode(event), msg_id=msg_id, timeout_s=timeout_s
        )

    async def publish_many(
        self, facts: Sequence[tuple[InputEvent, str | None]], *, timeout_s: float = 2.0
    ) -> list[int]:
        """Publish ``(event, msg_id)`` pairs in one burst and wait for all their acks: what a
        producer with many facts at once (a worker reporting a batch) pays once instead of per
        fact. All or nothing for the caller: any fact not acknowledged raises, and publishing the
        same batch again is safe (the msg ids de-duplicate what was stored)."""
        if not facts:
            return []
        if self._nc is None:
            return [await self.publish(event, msg_id=msg_id, timeout_s=timeout_s) for event, msg_id in facts]
        if self._publisher is None:
            self._publisher = Publisher(self._nc)
        stream = self._names.inbox_stream
        batch: list[Outgoing] = [
            (
                self.subject(event),
                codec.encode(event),
                {"Nats-Msg-Id": msg_id, "Nats-Expected-Stream": stream}
                if msg_id
                else {"Nats-Expected-Stream": stream},
            )
            for event, msg_id in facts
        ]
        acks = await self._publisher.publish(batch, timeout_s=timeout_s)
        seqs: list[int] = []
        for (subject, _, _), ack in zip(batch, acks, strict=True):
            if ack is None:
                violation = permission_denied(self._nc, subject)
                if violation is not None:
                    raise LogError(denied_message(subject, violation))
                raise PublishTimeout(
                    f"inbox {stream} did not acknowledge {subject} within {timeout_s}s; "
                    "is the NATS server (and its JetStream quorum) up?"
                )
            if ack.error is not None:
                if ack.error.code == 503:
                    raise PublishTimeout(f"inbox {stream} unavailable for {subject}: {ack.error.description}")
                raise LogError(
                    f"inbox {stream} refused {subject}: {ack.error.description} "
                    f"(code {ack.error.code}/{ack.error.err_code})"
                )
            seqs.append(ack.seq)
        return seqs

    async def publish_raw(
        self, subject: str, data: bytes, *, msg_id: str | None = None, timeout_s: float = 2.0
    ) -> int:
        """Any bytes on a subject under ``prefix`` (what a faulty producer could send)."""
        headers = {"Nats-Msg-Id": msg_id} if msg_id else None
        try:
            ack = await self._js.publish(
                subject,
                data,
                timeout=timeout_s,
                stream=self._names.inbox_stream,
                headers=headers,
            )
        except (TimeoutError, nats.errors.TimeoutError) as err:
            violation = permission_denied(self._nc, subject) if self._nc is not None else None
            if violation is not None:
                raise LogError(denied_message(subject, violation)) from err
            raise PublishTimeout(
                f"inbox {self._names.inbox_stream} did not acknowledge {subject} within {timeout_s}s; "
                "is the NATS server (and its JetStream quorum) up?"
            ) from err
        except nats.js.errors.NoStreamResponseError as err:
            raise LogError(
                f"no stream answers on {subject} (the inbox stream {self._names.inbox_stream} takes "
                f"{self._names.inbox_prefix}.>; connect() creates it if it is missing)"
            ) from err
        except nats.js.errors.APIError as err:
            if err.code == 503:  # JetStream up but without quorum (fail-over): try again later
                raise PublishTimeout(
                    f"inbox {self._names.inbox_stream} unavailable for {subject}: {err.description}"
                ) from err
            raise LogError(
                f"inbox {self._names.inbox_stream} refused {subject}: {err.description} "
                f"(code {err.code}/{err.err_code})"
            ) from err
        except (nats.errors.ConnectionClosedError, nats.errors.OutboundBufferLimitError) as err:
            raise PublishTimeout(f"not connected to NATS, {subject} not published: {err}") from err
        if ack.duplicate:
            log.debug("inbox_duplicate", subject=subject, msg_id=msg_id, seq=ack.seq)
        seq: int = ack.seq
        return seq
