"""The Log protocol: what producers, the sequencer, and readers need from a log backend.

Two implementations satisfy it and run the same contract tests: ``jetstream`` (NATS JetStream,
the real thing) and ``memory`` (in-process, for ``simulate`` and unit tests).

Producers publish *facts* to the inbox (many writers, de-duplicated by ``msg_id``). Only the
leader's sequencer writes the log: inputs copied from the inbox, interleaved with the decisions
it computed, every append fenced on the expected last sequence.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

from msgspec import Struct

from eventlog.events import AnyEvent, DecisionEvent, InputEvent, LogEntry


class LogError(RuntimeError):
    """Base of the errors a log backend raises."""


class Fenced(LogError):
    """An append was refused because the log moved on: another leader wrote. Step down."""


class NotLeader(LogError):
    """The leader lease is held by someone else (or was lost)."""


class PublishTimeout(LogError):
    """The inbox did not acknowledge a publish in time."""


class InboxItem(Struct, frozen=True):
    """One inbox message as the sequencer sees it; undecodable payloads arrive as ``Rejected``."""

    inbox_seq: int | None  # None for entries the sequencer makes itself (Tick, PolicyLoaded)
    event: InputEvent
    subject: str = ""


class Inbox(Protocol):
    async def publish(self, event: InputEvent, *, msg_id: str | None = None, timeout_s: float = 2.0) -> int:
        """Publish a fact; returns its inbox sequence (the original one for a duplicate msg_id)."""
        ...


class LogReader(Protocol):
    def read(
        self,
        *,
        from_seq: int = 1,
        until_seq: int | None = None,
        until_ms: int | None = None,
        batch: int = 1000,
    ) -> AsyncIterator[list[LogEntry]]:
        """Entries in order, in batches, from ``from_seq`` up to the bounds (inclusive) or the end."""
        ...

    async def last_seq(self) -> int: ...


class SeekableReader(LogReader, Protocol):
    """A reader that can also fetch one entry by its sequence, cheaply (JetStream: a direct get),
    so a follower need not keep what it can read back (the actuator's manifests)."""

    async def get(self, seq: int) -> LogEntry | None:
        """Entry ``seq``, or None if the log has no such entry (not written yet, or removed)."""
        ...


class Sequencer(Protocol):
    """The leader's side. Appends raise ``Fenced`` if anything else wrote to the log. After any
    other error from an append (timeout, NATS down), part of the batch may be stored: call
    ``resume()`` (which reads the log) before appending again."""

    async def resume(self) -> tuple[int, int]:
        """(last log sequence, last inbox sequence copied into the log)."""
        ...

    async def pull(self, *, max_items: int = 500, timeout_s: float = 0.05) -> list[InboxItem]:
        """The next inbox items after the last one copied (or pulled), in inbox order."""
        ...

    async def drained(self) -> bool:
        """Whether every inbox message stored so far has been pulled. The leader appends a Tick
        only then: a pull that came back empty is no proof, since a delivery can be on its way
        (or received and not yet taken) when the pull's wait ends. False when it cannot tell now."""
        ...

    async def append_inputs(self, items: Sequence[InboxItem], *, at_ms: int) -> list[LogEntry]: ...

    async def append_decisions(
        self,
        decisions: Sequence[DecisionEvent],
        *,
        at_ms: int,
        first_index: int = 0,
        count: int | None = None,
    ) -> list[LogEntry]:
        """Append one decision batch; entries carry ``batch=(first_index + i, count)``.
        ``first_index``/``count`` let a new leader complete a batch its predecessor cut short."""
        ...


class SnapshotStore(Protocol):
    # A bytearray is stored as it is, not copied to bytes first: a leader's snapshot at fleet
    # size is hundreds of MB, and a copy doubles what it holds while it uploads.
    async def save(self, seq: int, data: bytes | bytearray) -> None: ...

    async def latest(self, *, at_or_before: int | None = None) -> tuple[int, bytes] | None: ...

    async def latest_into(
        self, write: Callable[[bytes], object], *, at_or_before: int | None = None
    ) -> int | None:
        """The latest snapshot's sequence (None: there is none), its bytes handed to ``write`` in
        pieces as they arrive, each call in a worker thread (``write`` may decode them while the
        event loop runs on): a snapshot of hundreds of MB is never held whole."""
        ...


def event_of(entry: LogEntry) -> AnyEvent:
    return entry.event
