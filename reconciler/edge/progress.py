"""A progress bar on stderr for long replays, without a dependency.

Shown only when the work is long (``threshold`` entries or more). On a terminal it redraws one
line; otherwise (CI logs, captured output) it prints a line every tenth of the way — or, given a
structlog ``logger`` (``serve``, whose stderr is JSON lines), logs an event every tenth instead.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO


class Progress:
    def __init__(
        self,
        *,
        total: int,
        label: str = "replay",
        threshold: int = 20_000,
        stream: TextIO | None = None,
        logger: Any = None,
    ):
        self.total = max(total, 0)
        self.label = label
        self.stream = stream or sys.stderr
        self.logger = logger
        self.enabled = self.total >= threshold
        self._tty = logger is None and bool(getattr(self.stream, "isatty", lambda: False)())
        self._shown = -1
        self._done = 0

    def update(self, done: int) -> None:
        if not self.enabled or self.total == 0:
            return
        self._done = min(done, self.total)
        steps = 50 if self._tty else 10
        step = self._done * steps // self.total
        if step == self._shown:
            return
        self._shown = step
        pct = self._done * 100 // self.total
        if self.logger is not None:
            self.logger.info("progress", task=self.label, percent=pct, done=self._done, total=self.total)
            return
        if self._tty:
            bar = "#" * (self._done * 30 // self.total)
            self.stream.write(f"\r{self.label} [{bar:<30}] {pct:3d}% {self._done}/{self.total}")
        else:
            self.stream.write(f"{self.label}: {pct}% ({self._done}/{self.total} entries)\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._tty:
            self.stream.write("\n")
            self.stream.flush()
