"""Start-time estimates for the leader's pending jobs (``reconciler.forecast``), kept fresh on a
bounded schedule for the API, the page and the status annotation.

The durations are learned by following the log (every replica could; only the leader's state is
forecast): from what the actuator reads (``observe``), which follows the whole log anyway, and
from the log itself only for what the actuator has not read yet when a forecast is due. A forecast is made when the leader's state has moved on by ``interval_ms`` of log time
since the last one (30 s by default: at most two a minute however busy the log is, none while it
is idle) and covers the first ``limit`` waiting jobs in dispatch order (100 by default) plus the
nominated ones. The state is copied between two awaits (one consistent state); the forward run
itself happens on a worker thread on that copy, so the event loop keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from eventlog.events import LogEntry
from eventlog.store import LogReader
from reconciler import core
from reconciler.edge.logging import get_logger
from reconciler.forecast import DEFAULT_LIMIT, DurationLearner, Durations, Estimate, Forecast, estimate_starts
from reconciler.forecast.durations import LEARNED

log = get_logger("reconciler.forecasts")

DEFAULT_INTERVAL_MS = 30_000


class Forecasts:
    def __init__(
        self,
        reader: LogReader,
        state: Callable[[], core.State | None],
        *,
        interval_ms: int = DEFAULT_INTERVAL_MS,
        limit: int = DEFAULT_LIMIT,
        poll_interval_s: float = 1.0,
        read_batch: int = 1000,
    ) -> None:
        self.reader = reader
        self.state = state
        self.interval_ms = interval_ms
        self.limit = limit
        self.poll_interval_s = poll_interval_s
        self.read_batch = read_batch
        self.learner = DurationLearner()
        self.seq = 0  # the last entry the learner saw
        # Replaced, never changed in place: a reader holding it sees one whole forecast.
        self.forecast: Forecast | None = None
        self.made_seq: int | None = None
        self.runs = 0

    def current(self) -> Forecast | None:
        return self.forecast

    def get(self, key: str) -> Estimate | None:
        return self.forecast.get(key) if self.forecast is not None else None

    def due(self, state: core.State) -> bool:
        if self.forecast is None or self.made_seq is None:
            return True
        return state.seq != self.made_seq and state.now_ms - self.forecast.at_ms >= self.interval_ms

    async def refresh(self) -> bool:
        """Learn what the log added up to the leader's state, then forecast if due; whether a
        forecast was made."""
        state = self.state()
        if state is None:  # not leading: what was forecast is nobody's to show
            self.forecast, self.made_seq = None, None
            return False
        await self._learn(until_seq=state.seq)
        state = self.state()  # the loop may have moved on (or stepped down) while we read
        if state is None:
            return False
        if not self.due(state):
            return False
        raw = bytearray()  # not dump_state's bytes: they are a second copy of it while made
        core.dump_state_into(state, raw)
        dump, plugins, now_ms, seq = [raw], state.plugins, state.now_ms, state.seq
        del raw
        durations = self.learner.durations()
        estimates = await asyncio.to_thread(_forecast, dump, plugins, now_ms, durations, self.limit)
        self.forecast, self.made_seq = Forecast(at_ms=now_ms, estimates=estimates), seq
        self.runs += 1
        log.debug("forecast_made", seq=seq, estimates=len(estimates))
        return True

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a failed forecast leaves the last one; dispatching goes on
                log.warning("forecast_failed", error=repr(err), seq=self.seq)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_interval_s)

    def observe(self, entries: Sequence[LogEntry]) -> None:
        """Entries someone else read from the log, in order; those already learned are skipped."""
        if not entries or entries[-1].seq <= self.seq:
            return
        observe = self.learner.observe
        for entry in entries:
            if entry.seq > self.seq and type(entry.event) in LEARNED:
                observe(entry)
        self.seq = entries[-1].seq

    async def _learn(self, *, until_seq: int) -> None:
        if until_seq <= self.seq:
            return
        async for batch in self.reader.read(from_seq=self.seq + 1, until_seq=until_seq, batch=self.read_batch):
            self.observe(batch)


def _forecast(
    dump: list[bytearray], plugins: core.Registry, now_ms: int, durations: Durations, limit: int
) -> dict[str, Estimate]:
    """Restore the state's dump (taken out of ``dump``, so it is freed once loaded) and run that
    copy forward itself: the one copy of the state a forecast makes (the dump and one restored
    copy at a time, not the dump, a copy, and the copy's own dump and copy)."""
    state = core.load_state(dump.pop(), plugins=plugins, consume=True)
    return estimate_starts(state, now_ms=now_ms, durations=durations, limit=limit, own=True)
