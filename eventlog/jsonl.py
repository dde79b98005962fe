"""A log as a JSONL file (one ``LogEntry`` per line): attach it to a bug report, replay it offline.

``export(reader, path)`` writes any ``LogReader``'s entries (``.gz`` suffix: gzip-compressed);
``JsonlLog(path)`` reads such a file back with the ``LogReader`` interface, so ``replay`` and
``explain`` run the same on ``--file`` as on NATS. Lines are decoded many at a time.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO

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


def _chunks(path: Path) -> Iterator[bytes]:
    """The file in pieces of about ``_CHUNK_BYTES`` that end at a line end."""
    with _open(path, "r") as f:
        rest = b""
        while True:
            data = f.read(_CHUNK_BYTES)
            if not data:
                break
            cut = data.rfind(b"\n")
            if cut < 0:
                rest += data
                continue
            yield rest + data[: cut + 1]
            rest = data[cut + 1 :]
        if rest.strip():
            yield rest


class JsonlLog:
    """A ``LogReader`` over a JSONL export."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(
                f"log file {self.path} does not exist (make one with `kdispatch log --json > FILE`)"
            )

    async def last_seq(self) -> int:
        if self.path.suffix != ".gz":  # the tail is enough
            with open(self.path, "rb") as f:
                size = f.seek(0, 2)
                f.seek(max(0, size - 1024 * 1024))
                lines = [line for line in f.read().split(b"\n") if line.strip()]
            return codec.decode_entry(lines[-1]).seq if lines else 0
        last = 0
        for chunk in _chunks(self.path):
            lines = [line for line in chunk.split(b"\n") if line.strip()]
            if lines:
                last = codec.decode_entry(lines[-1]).seq
        return last

    async def read(
        self,
        *,
        from_seq: int = 1,
        until_seq: int | None = None,
        until_ms: int | None = None,
        batch: int = 1000,
    ) -> AsyncIterator[list[LogEntry]]:
        for chunk in _chunks(self.path):
            try:
                entries = codec.decode_entry_lines(chunk)
            except codec.DecodeError as err:
                raise codec.DecodeError(f"{self.path}: {err.message}", path=err.path, raw=err.raw) from None
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
            for i in range(0, len(entries), batch):
                yield entries[i : i + batch]
            if stop:
                return
            await asyncio.sleep(0)  # a big file should not starve the loop
