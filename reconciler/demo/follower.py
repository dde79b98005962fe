"""Follows the log as it grows: feeds the recorder and reports the moments worth telling.

It reads exactly what ``kdispatch log`` would show; the demo's numbers come from the log, not
from the demo's own bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from eventlog import events as ev
from eventlog.store import LogReader
from reconciler.simulate.recorder import Recorder


def notable(entry: ev.LogEntry) -> str | None:
    """A one-line story for the decisions a person watching the demo cares about."""
    match entry.event:
        case ev.ClusterLost(cluster=cluster):
            return f"{cluster} declared Lost (no heartbeat within the worker-lost timeout); its jobs are requeued"
        case ev.ClusterRecovered(cluster=cluster):
            return f"{cluster} is back; copies superseded while it was away get withdrawn first"
        case ev.PreemptionClaimed(preemptor=p, cluster=cluster, victims=victims):
            names = ", ".join(v.name for v in victims)
            return f"preemption: {p.name} claims {cluster}, evicting {names}"
        case ev.ClaimExpired(preemptor=p, cluster=cluster):
            return f"claim of {p.name} on {cluster} expired"
    return None


class LogFollower:
    def __init__(self, reader: LogReader, recorder: Recorder, *, on_story: Callable[[ev.LogEntry, str], None]) -> None:
        self.reader = reader
        self.recorder = recorder
        self.on_story = on_story
        self.next_seq = 1
        self.last_at_ms = 0

    async def catch_up(self) -> bool:
        got = False
        async for batch in self.reader.read(from_seq=self.next_seq):
            for entry in batch:
                got = True
                self.next_seq = entry.seq + 1
                self.last_at_ms = entry.at_ms
                self.recorder.observe(entry)
                story = notable(entry)
                if story is not None:
                    self.on_story(entry, story)
        return got

    async def run(self, stop: asyncio.Event, *, poll_s: float = 0.1) -> None:
        while not stop.is_set():
            if not await self.catch_up():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), poll_s)
        await self.catch_up()
