"""The spec of a copy about to be created, read back from the log.

``Desired`` keeps only where each job's spec is in the log (``JobSources``), not its manifest:
with a million pending jobs the decoded manifests alone would be gigabytes. When a copy is to be
created, ``SpecReader`` gets the entries those sources name: from a bounded cache of the
spec-carrying entries the actuator has just folded (a job is usually nominated soon after it is
submitted), else one direct get per entry (a job that waited in the queue), which is then cached
too, so the copies of one nomination on several clusters read it once.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from eventlog import events as ev
from eventlog.store import SeekableReader
from reconciler.service.clusters.base import RemoteSpec
from reconciler.service.clusters.desired import CopyKey, Desired, SpecEvent, SpecUnreadable, remote_spec

# Entries kept: about 5 MB with Kueue's sample Job as every manifest. At 5,000 jobs/s this covers
# the last 0.4 s of submissions; a job nominated later costs one direct get.
CACHE_ENTRIES = 2048


class SpecReader:
    def __init__(
        self, reader: SeekableReader, desired: Desired, *, cache_entries: int = CACHE_ENTRIES
    ) -> None:
        self.reader = reader
        self.desired = desired
        self.cache_entries = cache_entries
        self._cache: OrderedDict[int, SpecEvent] = OrderedDict()  # seq -> event, least recent first
        self._getting: dict[int, asyncio.Future[SpecEvent]] = {}
        self.hits = 0
        self.gets = 0  # entries read from the log one by one

    def saw(self, entry: ev.LogEntry) -> None:
        """An entry the actuator folded: kept if it may be a part of a spec."""
        if isinstance(entry.event, ev.JobSubmitted | ev.JobUpdated):
            self._keep(entry.seq, entry.event)

    async def spec(self, key: CopyKey) -> RemoteSpec | None:
        """The spec of copy ``key``; None if the log has no JobSubmitted for its job (or the job
        ended). ``SpecUnreadable`` if an entry its sources name is not in the log."""
        sources = self.desired.sources(key[0])
        if sources is None:
            return None
        events = {seq: await self._event(seq) for seq in sorted(sources.seqs())}
        return remote_spec(key, sources, events)

    async def _event(self, seq: int) -> SpecEvent:
        cached = self._cache.get(seq)
        if cached is not None:
            self._cache.move_to_end(seq)
            self.hits += 1
            return cached
        getting = self._getting.get(seq)
        if getting is None:
            getting = self._getting[seq] = asyncio.ensure_future(self._get(seq))
            getting.add_done_callback(lambda done: self._got(seq, done))
        # Shielded: a waiter cancelled (its executor stopping) leaves the get to the others.
        return await asyncio.shield(getting)

    async def _get(self, seq: int) -> SpecEvent:
        self.gets += 1
        entry = await self.reader.get(seq)
        if entry is None or not isinstance(entry.event, ev.JobSubmitted | ev.JobUpdated):
            what = "missing" if entry is None else f"a {type(entry.event).__name__}"
            raise SpecUnreadable(f"log entry {seq} should hold a job's spec but is {what}")
        return entry.event

    def _got(self, seq: int, done: asyncio.Future[SpecEvent]) -> None:
        self._getting.pop(seq, None)
        if not done.cancelled() and done.exception() is None:
            self._keep(seq, done.result())

    def _keep(self, seq: int, event: SpecEvent) -> None:
        self._cache[seq] = event
        self._cache.move_to_end(seq)
        while len(self._cache) > self.cache_entries:
            self._cache.popitem(last=False)
