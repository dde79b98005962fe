"""The entries this process appended last, for the readers in the same process.

The leader's replica follows the log it writes: its actuator (and through it the forecasts), the
status reporter. Each of them reading back from the server what the sequencer has just stored
cost a delivery per entry (a third of the NATS messages per job end to end) and a decode per
entry, for bytes the process already holds decoded. ``RecentEntries`` keeps the last appends,
as they were acknowledged, and ``JetStreamReader.read`` takes what it can from here before it
asks the server.

Only what is known to be the log's content is kept: entries the stream acknowledged (an
acknowledgement means stored, and a log sequence never changes once stored), in one gap-free
run. An append that does not follow on from the last one kept (a new term after another leader
wrote, a resume) starts the run again. The run is bounded, so a reader that falls further behind
reads the rest from the server as before; a replica that does not lead keeps nothing and reads
everything from the server. While an append of this process awaits its acknowledgements, a
reader that has taken everything before it does not fetch its entries from the server as they
are stored (under load, most of them were): its next read takes them from here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from eventlog.events import LogEntry

# About 0.3 s of appends at 5,000 jobs/s (five entries per job): a follower polls every 20 ms, and
# behind a backlog the leader appends a thousand entries or more a step. Costs the manifests of the
# JobSubmitted among them (some 1,600 of Kueue's sample Job: about 5 MB).
DEFAULT_ENTRIES = 8192


class RecentEntries:
    def __init__(self, capacity: int = DEFAULT_ENTRIES) -> None:
        self.capacity = max(1, capacity)
        self._entries: list[LogEntry] = []
        self._first = 0  # the sequence of _entries[0]
        self.served = 0  # entries handed to readers from here (not read from the server)
        self._appending: int | None = None  # the first sequence of an append awaiting its acks
        # Set at every append of decisions: a follower that acts on them (the actuator) clears it
        # before it reads and, having read everything, waits for it (or its poll interval)
        # instead of sleeping out the interval. Not at appends of inputs alone: they are read
        # with the next decisions, and waking for them too cost more CPU per job at a few
        # hundred jobs/s (smaller batches all along the pipeline) for no earlier copy.
        self.decided = asyncio.Event()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def last_seq(self) -> int:
        """The sequence of the last entry kept; 0 if none."""
        return self._first + len(self._entries) - 1 if self._entries else 0

    def appending(self, first_seq: int | None) -> None:
        """An append from ``first_seq`` on is on its way (None: it ended, stored or not)."""
        self._appending = first_seq

    def coming(self, from_seq: int) -> bool:
        """Whether entries from ``from_seq`` on are this process's append in flight: a reader
        waits for them here rather than fetch them from the server as they are stored."""
        return self._appending is not None and self._appending == from_seq

    def appended(self, entries: Sequence[LogEntry]) -> None:
        """Entries the log stream acknowledged, in order."""
        if not entries:
            return
        if not self._entries or entries[0].seq != self.last_seq + 1:
            self._entries, self._first = [], entries[0].seq
        self._entries.extend(entries)
        if entries[0].batch is not None:  # decisions carry their batch framing; inputs do not
            self.decided.set()
        excess = len(self._entries) - self.capacity
        if excess >= max(1, self.capacity // 4):
            # Trimmed by the quarter, not per append: one list shift per many appends.
            del self._entries[:excess]
            self._first += excess

    def take(self, from_seq: int, *, until_seq: int | None, limit: int) -> list[LogEntry]:
        """Up to ``limit`` entries from ``from_seq`` on (to ``until_seq`` inclusive), all kept
        here; empty if ``from_seq`` is not."""
        start = from_seq - self._first
        if start < 0 or start >= len(self._entries):
            return []
        end = (
            len(self._entries) if until_seq is None else min(len(self._entries), until_seq - self._first + 1)
        )
        got = self._entries[start : min(end, start + max(1, limit))]
        self.served += len(got)
        return got
