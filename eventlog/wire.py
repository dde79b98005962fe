"""From inbox bytes to what the sequencer copies into the log (shared by every backend).

Anything that is not a valid input fact becomes a ``Rejected`` input carrying the reason, the
subject and the first bytes, so a bad producer is visible in the log and never stops sequencing.
"""

from __future__ import annotations

from typing import cast

from eventlog import codec, subjects
from eventlog.events import DECISION_TYPES, INPUT_TYPES, AnyEvent, InputEvent, Rejected
from eventlog.store import InboxItem

RAW_KEPT = 256


def rejected_item(*, seq: int, subject: str, data: bytes, reason: str) -> InboxItem:
    raw = data[:RAW_KEPT].decode("utf-8", errors="replace")
    return InboxItem(seq, Rejected(inbox_seq=seq, subject=subject, reason=reason, raw=raw), subject)


def inbox_item(*, seq: int, subject: str, data: bytes) -> InboxItem:
    """Decode one inbox message; anything that is not a valid input fact becomes ``Rejected``."""
    try:
        event = codec.decode_event(data)
    except codec.DecodeError as err:
        return rejected_item(seq=seq, subject=subject, data=data, reason=f"{err.message} (at {err.path})")
    return _checked(seq=seq, subject=subject, data=data, event=event)


def inbox_items(deliveries: list[tuple[int, str, bytes]]) -> list[InboxItem]:
    """``inbox_item`` of each ``(seq, subject, data)``, the payloads decoded in one call unless one
    of them does not decode (then each on its own, so only that one is ``Rejected``)."""
    events = codec.decode_events([data for _, _, data in deliveries])
    if events is None:
        return [inbox_item(seq=seq, subject=subject, data=data) for seq, subject, data in deliveries]
    return [
        _checked(seq=seq, subject=subject, data=data, event=event)
        for (seq, subject, data), event in zip(deliveries, events, strict=True)
    ]


_NOT_INPUTS: tuple[type, ...] = (*DECISION_TYPES, Rejected)
# Runs per inbox message: the decoder makes exactly these classes, so a set lookup settles the
# common case before isinstance walks the dozen decision types.
_INPUTS: frozenset[type] = frozenset(INPUT_TYPES) - {Rejected}


def _checked(*, seq: int, subject: str, data: bytes, event: AnyEvent) -> InboxItem:
    if type(event) not in _INPUTS and isinstance(event, _NOT_INPUTS):
        reason = f"{type(event).__name__} is written by the leader only, not published to the inbox"
        return rejected_item(seq=seq, subject=subject, data=data, reason=reason)
    source = subjects.inbox_source(subject)
    if source is not None and type(event).__name__ not in subjects.SOURCE_TYPES[source]:
        allowed = ", ".join(sorted(subjects.SOURCE_TYPES[source]))
        reason = (
            f"{type(event).__name__} may not come from the {source} (subject {subject}); "
            f"the {source} sends only {allowed}"
        )
        return rejected_item(seq=seq, subject=subject, data=data, reason=reason)
    return InboxItem(seq, cast(InputEvent, event), subject)
