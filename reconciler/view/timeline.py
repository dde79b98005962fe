"""A job's timeline: the log entries about it, one row each (what happened, when, and the facts
that matter), for the job page and ``/api/v1/jobs/NS/NAME``. ``kdispatch log`` has the full form."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Struct, field

from eventlog import events as ev

# Bulky or repeated on every row: the job itself is the page's subject, the manifest is large.
_HIDDEN = frozenset({"type", "v", "manifest", "job", "raw", "pod_sets"})


class TimelineRow(Struct, kw_only=True):
    seq: int
    at_ms: int
    type: str
    decision: bool  # decided by the core (else a fact reported to it)
    text: str  # the event's fields in one line, e.g. ``cluster=west clusters=[east, west]``
    fields: dict[str, Any] = field(default_factory=dict)


def concerns(event: ev.Event, key: str) -> bool:
    """Is the event about job ``key`` (``ns/name``): its job, its preemptor, or one of its victims?"""
    for attr in ("job", "preemptor"):
        ref = getattr(event, attr, None)
        if isinstance(ref, ev.JobRef) and ref.key == key:
            return True
    victims = getattr(event, "victims", None)
    return isinstance(victims, list) and any(getattr(v, "key", None) == key for v in victims)


def timeline_row(entry: ev.LogEntry) -> TimelineRow:
    raw = msgspec.to_builtins(entry.event)
    fields = {k: v for k, v in raw.items() if k not in _HIDDEN and v not in (None, {}, [])} if isinstance(raw, dict) else {}
    return TimelineRow(
        seq=entry.seq,
        at_ms=entry.at_ms,
        type=type(entry.event).__name__,
        decision=isinstance(entry.event, ev.DECISION_TYPES),
        text=" ".join(f"{k}={_short(v)}" for k, v in fields.items()),
        fields=fields,
    )


def _short(value: Any) -> str:
    if isinstance(value, dict):
        if {"namespace", "name"} <= value.keys():  # a JobRef
            return f"{value['namespace']}/{value['name']}"
        return "{" + ", ".join(f"{k}: {_short(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    return str(value)
