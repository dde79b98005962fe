"""The simulated log as a JSONL file (``eventlog.jsonl``'s format, gzip for ``.gz``).

So a simulation can be looked into like a real run: ``kdispatch replay --verify --file`` checks
that every decision batch recomputes identically, ``kdispatch explain JOB --file`` shows why a
job went where it went under that profile.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import IO

from eventlog import codec
from eventlog.events import LogEntry


class JsonlWriter:
    """An observer that appends each entry as one line; ``close()`` when the run is over."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tmp = path.with_name(path.name + ".partial")
        # Held open across the run (an observer sees one entry at a time); closed by close().
        self._fh: IO[bytes] = (
            gzip.open(self._tmp, "wb") if path.suffix == ".gz" else self._tmp.open("wb")  # type: ignore[assignment]  # noqa: SIM115
        )
        self._buffer: list[bytes] = []

    def observe(self, entry: LogEntry) -> None:
        self._buffer.append(codec.encode(entry))
        if len(self._buffer) >= 5000:
            self._flush()

    def _flush(self) -> None:
        if self._buffer:
            self._fh.write(b"\n".join(self._buffer) + b"\n")
            self._buffer = []

    def close(self) -> None:
        self._flush()
        self._fh.close()
        self._tmp.replace(self.path)
