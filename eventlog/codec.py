"""JSON encoding of events and log entries, built once and reused (msgspec's advice).

Decoding never raises anything but ``DecodeError``, which names what was wrong and where, so a
consumer loop can move a bad message aside and go on.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

import msgspec

from eventlog.events import AnyEvent, Event, LogEntry


class DecodeError(ValueError):
    """A payload that is not a valid event: ``path`` is the JSON path of the problem, if known."""

    def __init__(self, message: str, *, path: str = "$", raw: bytes = b"") -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.raw = raw[:512]


_encoder = msgspec.json.Encoder(order="deterministic")
_event_decoder: msgspec.json.Decoder[AnyEvent] = msgspec.json.Decoder(AnyEvent)
_entry_decoder = msgspec.json.Decoder(LogEntry)
_any_decoder = msgspec.json.Decoder()


def encode(obj: Event | LogEntry | Any) -> bytes:
    """Canonical JSON: deterministic key order, so identical decisions encode byte for byte."""
    return _encoder.encode(obj)


def _path_of(err: msgspec.ValidationError) -> str:
    text = str(err)
    marker = " - at `"
    if marker in text:
        return text.rsplit(marker, 1)[1].rstrip("`")
    return "$"


def _decode(decoder: msgspec.json.Decoder[Any], raw: bytes) -> Any:
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as err:
        raise DecodeError(str(err), path=_path_of(err), raw=raw) from None
    except msgspec.DecodeError as err:
        raise DecodeError(f"not JSON: {err}", raw=raw) from None
    except UnicodeDecodeError as err:  # msgspec checks UTF-8 only where it makes a str
        raise DecodeError(f"not UTF-8 text ({err.reason}; byte 0x{err.object[err.start]:02x})", raw=raw) from None


def decode_event(raw: bytes) -> AnyEvent:
    ev: AnyEvent = _decode(_event_decoder, raw)
    return ev


def decode_entry(raw: bytes) -> LogEntry:
    entry: LogEntry = _decode(_entry_decoder, raw)
    return entry


def to_builtins(obj: Any) -> Any:
    return msgspec.to_builtins(obj, order="deterministic")


def decode_json(raw: bytes) -> Any:
    return _decode(_any_decoder, raw)


_entries_decoder = msgspec.json.Decoder(list[LogEntry])
_events_decoder: msgspec.json.Decoder[list[AnyEvent]] = msgspec.json.Decoder(list[AnyEvent])


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The collector off for the block, on again after unless it was off before.

    Decoding thousands of entries allocates thousands of dicts and lists the collector would
    scan again and again (it halved replay speed); they are plain trees, freed by refcount."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def decode_entries(raws: list[bytes]) -> list[LogEntry]:
    """Many log entries in one decoder call (replay's hot path): several times faster than one
    call each. A bad one is reported by its position, through the slow path."""
    if not raws:
        return []
    try:
        with gc_paused():
            entries: list[LogEntry] = _entries_decoder.decode(b"[" + b",".join(raws) + b"]")
        return entries
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
        pass
    return _decode_one_by_one(raws)


def decode_events(raws: list[bytes]) -> list[AnyEvent] | None:
    """Many events in one decoder call (the sequencer's inbox batches); None if any of them is
    not a valid event: the caller then decodes them one by one to say which and why."""
    if not raws:
        return []
    try:
        with gc_paused():
            events: list[AnyEvent] = _events_decoder.decode(b"[" + b",".join(raws) + b"]")
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
        return None
    return events if len(events) == len(raws) else None


def decode_entry_lines(data: bytes) -> list[LogEntry]:
    """Newline-delimited log entries (JSONL), blank lines ignored."""
    try:
        with gc_paused():
            entries: list[LogEntry] = _entry_decoder.decode_lines(data)
        return entries
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
        pass
    return _decode_one_by_one([line for line in data.split(b"\n") if line.strip()])


def _decode_one_by_one(raws: list[bytes]) -> list[LogEntry]:
    out: list[LogEntry] = []
    for i, raw in enumerate(raws):
        try:
            out.append(decode_entry(raw))
        except DecodeError as err:
            raise DecodeError(f"log entry #{i} of the batch: {err.message}", path=err.path, raw=raw) from None
    return out
