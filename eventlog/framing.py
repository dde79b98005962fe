"""How a batch becomes log entries: one definition for every backend, so JetStream and the
in-memory log cannot drift apart on sequence numbers, inbox bookkeeping or batch framing."""

from __future__ import annotations

from collections.abc import Sequence

from eventlog.events import DecisionEvent, LogEntry
from eventlog.store import InboxItem, LogError


def input_entries(
    items: Sequence[InboxItem], *, last_seq: int, last_inbox: int, at_ms: int, leader: str
) -> tuple[list[LogEntry], int]:
    """Entries for copied inputs, numbered after ``last_seq``; returns them and the new last
    inbox sequence. An inbox entry at or below ``last_inbox`` is already in the log: refusing it
    is what keeps a resumed sequencer from copying anything twice."""
    entries: list[LogEntry] = []
    seq = last_seq
    for item in items:
        seq += 1
        if item.inbox_seq is not None:
            if item.inbox_seq <= last_inbox:
                raise LogError(
                    f"inbox entry {item.inbox_seq} is already in the log (last copied: {last_inbox}); "
                    "pull() gives each inbox entry once"
                )
            last_inbox = item.inbox_seq
        entries.append(LogEntry(seq=seq, at_ms=at_ms, event=item.event, inbox_seq=item.inbox_seq, leader=leader))
    return entries, last_inbox


def decision_entries(
    decisions: Sequence[DecisionEvent],
    *,
    last_seq: int,
    at_ms: int,
    leader: str,
    first_index: int = 0,
    count: int | None = None,
) -> list[LogEntry]:
    """One decision batch, each entry framed ``batch=(index, count)`` so a batch cut short by a
    crash is recognisable (and completable with ``first_index``/``count``)."""
    total = first_index + len(decisions) if count is None else count
    return [
        LogEntry(seq=last_seq + 1 + i, at_ms=at_ms, event=d, batch=(first_index + i, total), leader=leader)
        for i, d in enumerate(decisions)
    ]
