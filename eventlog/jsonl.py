"""A log as a JSONL file (one ``LogEntry`` per line): attach it to a bug report, replay it offline.

``export(reader, path)`` writes any ``LogReader``'s entries (``.gz`` suffix: gzip-compressed);
``JsonlLog(path)`` reads such a file back with the ``LogReader`` interface, so ``replay`` and
``explain`` run the same on ``--file`` as on NATS. Lines are decoded many at a time; only when
a chunk fails are its lines decoded one by one, to name the bad one (``file:line``).
"""

from __future__ import annotations

import asyncio
import gzip
import sys
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import IO, NamedTuple

import msgspec

from eventlog import codec
from eventlog.events import LogEntry
from eventlog.store import LogReader

_CHUNK_BYTES = 4 * 1024 * 1024


def _open(path: Path, mode: str, *, gz: bool | None = None) -> IO[bytes]:
    if path.suffix == ".gz" if gz is None else gz:
        return gzip.open(path, mode + "b")  # type: ignore[return-value]
    return open(path, mode + "b")


async def export(
    reader: LogReader,
    path: str | Path,
    *,
    from_seq: int = 1,
    until_seq: int | None = None,
    until_ms: int | None = None,
) -> int:
    """Write entries to ``path`` (replacing it); returns how many. Written to a temp file first,
    so an interrupted export never leaves a truncated file under the final name."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    count = 0
    with _open(tmp, "w", gz=path.suffix == ".gz") as out:
        async for batch in reader.read(from_seq=from_seq, until_seq=until_seq, until_ms=until_ms, batch=5000):
            out.write(b"\n".join(codec.encode(e) for e in batch) + b"\n")
            count += len(batch)
    tmp.replace(path)
    return count


def _warn_on_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


class _Chunk(NamedTuple):
    line: int  # the file's line number of the chunk's first line (1-based)
    data: bytes  # whole lines; only the file's last chunk may end without a newline


class JsonlLog:
    """A ``LogReader`` over a JSONL export.

    A file handed over is often damaged; what can be read is read, and said:
    - a last line cut short (no newline after it, not JSON: a copy cut short) is dropped with a
      warning, so everything before it still replays;
    - a gap in the entries' ``seq`` (lines missing in the middle) is a warning here; ``replay
      --verify`` fails on it (``reconciler.history.replay``);
    - any other bad line is a ``DecodeError`` naming ``file:line`` and what is wrong with it.
    Warnings go to ``warn`` (default: stderr), once each, since the ``LogReader`` interface has no
    other way out for them.
    """

    def __init__(self, path: str | Path, *, warn: Callable[[str], None] = _warn_on_stderr) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(
                f"log file {self.path} does not exist (make one with `kdispatch log --json > FILE`)"
            )
        self._warn = warn
        self._warned: set[str] = set()

    def warn(self, message: str) -> None:
        if message not in self._warned:  # `log --follow` reads the file again and again
            self._warned.add(message)
            self._warn(message)

    async def last_seq(self) -> int:
        try:
            return self._last_seq()
        except _Damaged:
            last = 0
            async for entries in self.read():  # the slow way, to name the damaged line
                last = entries[-1].seq
            return last

    def _last_seq(self) -> int:
        if self.path.suffix != ".gz":  # the tail is enough
            with open(self.path, "rb") as f:
                size = f.seek(0, 2)
                start = max(0, size - 1024 * 1024)
                f.seek(start)
                tail = f.read()
            if start > 0:
                tail = tail[tail.find(b"\n") + 1 :]  # the first line is likely a piece of one
            last = _last_entry(tail)
            if last is not None or start == 0:
                return last.seq if last is not None else 0
        last_seq = 0
        for chunk in self._chunks():
            entry = _last_entry(chunk.data)
            if entry is not None:
                last_seq = entry.seq
        return last_seq

    async def read(
        self,
        *,
        from_seq: int = 1,
        until_seq: int | None = None,
        until_ms: int | None = None,
        batch: int = 1000,
    ) -> AsyncIterator[list[LogEntry]]:
        previous: int | None = None  # the seq before this chunk's first entry, for gaps
        blank, found = True, False
        for chunk in self._chunks():
            blank = blank and not chunk.data.strip()
            try:
                entries = codec.decode_entry_lines(chunk.data)
            except codec.DecodeError:
                entries = self._decode_carefully(chunk)
            found = found or bool(entries)
            if not entries or entries[-1].seq < from_seq:
                continue
            if entries[0].seq < from_seq:
                entries = [e for e in entries if e.seq >= from_seq]
            stop = False
            if until_seq is not None and entries and entries[-1].seq > until_seq:
                entries = [e for e in entries if e.seq <= until_seq]
                stop = True
            if until_ms is not None and entries and entries[-1].at_ms > until_ms:
                entries = [e for e in entries if e.at_ms <= until_ms]
                stop = True
            if entries:
                first, last = entries[0].seq, entries[-1].seq
                if (previous is not None and first != previous + 1) or last - first != len(entries) - 1:
                    self._report_gaps(previous, entries)
                previous = last
            for i in range(0, len(entries), batch):
                yield entries[i : i + batch]
            if stop:
                return
            await asyncio.sleep(0)  # a big file should not starve the loop
        if not found:
            what = "the file is empty" if blank else "the file holds no complete log entry"
            raise codec.DecodeError(f"{self.path}: {what}; a log export holds one JSON log entry per line")

    def _decode_carefully(self, chunk: _Chunk) -> list[LogEntry]:
        """The slow path, for a chunk that did not decode at once: find the line and say what is
        wrong with it, or drop a last line cut short."""
        lines = chunk.data.split(b"\n")
        entries: list[LogEntry] = []
        for i, raw in enumerate(lines):
            if not raw.strip():
                continue
            try:
                entries.append(codec.decode_entry(raw))
            except codec.DecodeError as err:
                number = chunk.line + i
                if i == len(lines) - 1 and _cut_short(raw):
                    self.warn(
                        f"{self.path}: dropped line {number} ({len(raw)} bytes): the file ends mid-entry: "
                        "probably a copy cut short; everything before it is read"
                    )
                    break
                what = err.message.split(" - at `")[0]  # the path comes first instead
                at = "" if err.path == "$" else f"{err.path}: "
                raise codec.DecodeError(
                    f"{self.path}:{number}: {at}{what} (each line of a log export is one JSON log entry)",
                    path=err.path,
                    raw=raw,
                ) from None
        return entries

    def _report_gaps(self, previous: int | None, entries: list[LogEntry]) -> None:
        for entry in entries:
            if previous is not None and entry.seq > previous + 1:
                first, last = previous + 1, entry.seq - 1
                what = f"entry {first} is" if first == last else f"entries {first}\u2013{last} are"
                self.warn(f"{what} missing from {self.path}: the export is incomplete")
            elif previous is not None and entry.seq <= previous:
                self.warn(
                    f"{self.path}: entry {entry.seq} comes after entry {previous}: entries are out of "
                    "order (two exports joined?)"
                )
            previous = entry.seq

    def _chunks(self) -> Iterator[_Chunk]:
        """The file in pieces of about ``_CHUNK_BYTES`` that end at a line end."""
        line = 1
        rest = b""
        for data in self._blocks():
            cut = data.rfind(b"\n")
            if cut < 0:
                rest += data
                continue
            piece = rest + data[: cut + 1]
            yield _Chunk(line, piece)
            line += piece.count(b"\n")
            rest = data[cut + 1 :]
        if rest.strip():
            yield _Chunk(line, rest)

    def _blocks(self) -> Iterator[bytes]:
        """The file's bytes, uncompressed. A ``.gz`` cut short gives what it holds, and a warning."""
        with open(self.path, "rb") as f:
            if self.path.suffix != ".gz":
                while data := f.read(_CHUNK_BYTES):
                    yield data
                return
            inflate = zlib.decompressobj(wbits=31)
            started = False
            while data := f.read(_CHUNK_BYTES // 8):  # JSON shrinks about tenfold
                started = True
                while data:
                    if inflate.eof:  # another gzip member follows
                        inflate = zlib.decompressobj(wbits=31)
                    try:
                        out = inflate.decompress(data)
                    except zlib.error as err:
                        raise codec.DecodeError(f"{self.path}: not gzip data, though the name ends in .gz ({err})") from None
                    if out:
                        yield out
                    data = inflate.unused_data if inflate.eof else b""
            if started and not inflate.eof:
                yield inflate.flush()
                self.warn(f"{self.path}: the compressed file ends early: probably a copy cut short")


class _Damaged(Exception):
    pass


def _last_entry(data: bytes) -> LogEntry | None:
    """The last entry of ``data`` (whole lines, but for a last one cut short, which is skipped)."""
    lines = data.split(b"\n")
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip():
            try:
                return codec.decode_entry(lines[i])
            except codec.DecodeError:
                if i != len(lines) - 1 or not _cut_short(lines[i]):
                    raise _Damaged from None
    return None


def _cut_short(raw: bytes) -> bool:
    """A last line that is not even JSON: the file stops in the middle of it."""
    try:
        msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return True
    return False
