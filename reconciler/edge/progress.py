"""Progress of long work, shown one way by every command (replay, explain, simulate, the demo).

Always on stderr, never on stdout: a command prints the same output with or without a terminal.
How it is shown is chosen once, from where it goes:
- a terminal: a ``rich`` progress bar, redrawn in place (``paused`` while something else is
  written to the same terminal);
- anything else (CI logs, captured output): a plain line at every tenth of the way, and, for
  work that stops advancing for a while (the demo waiting for its last jobs), another when its
  status has changed and ``heartbeat_s`` have passed since the last line;
- given a structlog ``logger`` (``serve``, whose stderr is JSON lines): a ``progress`` event at
  every tenth instead.
Work shorter than ``threshold`` steps, or ``enabled=False`` (``--quiet``), shows nothing.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TextIO

from rich import progress as rp
from rich.console import Console
from rich.table import Column

BAR_WIDTH = 30
REFRESH_S = 0.1  # a terminal redraw at most this often: a replay reports every chunk it reads


class Progress:
    def __init__(
        self,
        *,
        total: int,
        label: str = "replay",
        unit: str = "entries",
        threshold: int = 20_000,
        enabled: bool = True,
        stream: TextIO | None = None,
        logger: Any = None,
        heartbeat_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = max(total, 0)
        self.label = label
        self.unit = unit
        self.stream = stream or sys.stderr
        self.logger = logger
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self.enabled = enabled and self.total >= threshold
        self._tty = logger is None and bool(getattr(self.stream, "isatty", lambda: False)())
        self._shown = -1  # the last tenth shown as a line or a log event
        self._status = ""
        self._last_at = -float("inf")  # when the last line was written, or the bar redrawn
        self._bar: rp.Progress | None = None
        self._task = rp.TaskID(0)
        self._closed = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def update(self, done: int, *, status: str | None = None) -> None:
        """``done`` steps of ``total`` are done; ``status``: a short line of what else is going on."""
        if not self.enabled or self._closed:
            return
        done = min(max(done, 0), self.total)
        changed = status is not None and status != self._status
        if status is not None:
            self._status = status
        if self._tty:
            self._draw(done, force=changed or done == self.total)
            return
        tenth = done * 10 // self.total if self.total else 10
        due = self.heartbeat_s is not None and changed and self.clock() - self._last_at >= self.heartbeat_s
        if tenth == self._shown and not due:
            return
        self._shown = tenth
        self._last_at = self.clock()
        pct = done * 100 // self.total if self.total else 100
        if self.logger is not None:
            self.logger.info("progress", task=self.label, percent=pct, done=done, total=self.total)
            return
        extra = f"  {self._status}" if self._status else ""
        self._write(f"{self.label}: {pct}% ({done}/{self.total} {self.unit}){extra}\n")

    def _draw(self, done: int, *, force: bool) -> None:
        if self._bar is None:
            self._bar = rp.Progress(
                rp.TextColumn("{task.description}", markup=False),
                rp.BarColumn(bar_width=BAR_WIDTH),
                rp.TaskProgressColumn(),
                rp.MofNCompleteColumn(),
                rp.TextColumn(self.unit, markup=False),
                rp.TimeElapsedColumn(),
                rp.TextColumn("{task.fields[status]}", markup=False, table_column=Column(no_wrap=True)),
                console=Console(file=self.stream, force_terminal=True, highlight=False),
                auto_refresh=False,  # redrawn from update(): no thread writing to the terminal behind our back
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._task = self._bar.add_task(self.label, total=self.total or None, status="")
            self._bar.start()
        self._bar.update(self._task, completed=done, status=self._status_that_fits())
        now = self.clock()
        if force or now - self._last_at >= REFRESH_S:
            self._last_at = now
            self._bar.refresh()

    def _status_that_fits(self) -> str:
        """The status, cut to the width the other columns leave: one line on the terminal, always
        (a wrapped bar could not be redrawn in place), and the counts are never the part cut."""
        assert self._bar is not None
        n = len(str(self.total))
        others = len(self.label) + BAR_WIDTH + len("100%") + 2 * n + 1 + len(self.unit) + len("0:00:00") + 7
        room = self._bar.console.width - others
        if len(self._status) <= room:
            return self._status
        return self._status[: max(room - 1, 0)] + "…" if room > 0 else ""

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Take the bar off the terminal while the caller writes something else there (the demo's
        story on stdout, when stdout is that terminal too), and draw it again below."""
        bar = self._bar if not self._closed else None
        if bar is None:
            yield
            return
        bar.stop()
        try:
            yield
        finally:
            bar.start()

    def close(self, message: str | None = None) -> None:
        """The work is over: take the bar away, and leave ``message`` (``label: message``) if given."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.stop()
        if message is not None and self.enabled and self.logger is None:
            self._write(f"{self.label}: {message}\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
