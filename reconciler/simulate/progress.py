"""A progress bar on stderr: one redrawn line on a terminal, a line per 10 % otherwise."""

from __future__ import annotations

import sys
from typing import TextIO


class JobProgress:
    def __init__(self, *, total: int, label: str, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = max(total, 1)
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._shown = -1

    def __call__(self, done: int) -> None:
        if not self.enabled:
            return
        steps = 100 if self._tty else 10
        step = min(done, self.total) * steps // self.total
        if step == self._shown:
            return
        self._shown = step
        pct = min(done, self.total) * 100 // self.total
        if self._tty:
            bar = "#" * (min(done, self.total) * 30 // self.total)
            self.stream.write(f"\r{self.label:<16} [{bar:<30}] {pct:3d}% {done}/{self.total} jobs submitted")
        else:
            self.stream.write(f"{self.label}: {pct}% ({done}/{self.total} jobs submitted)\n")
        self.stream.flush()

    def done(self, message: str) -> None:
        if not self.enabled:
            return
        if self._tty:
            self.stream.write("\r\033[K")
        self.stream.write(f"{self.label}: {message}\n")
        self.stream.flush()
