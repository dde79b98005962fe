"""Reading the Log stream: in order, in decoded batches, between bounds; or one entry by its sequence."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from nats.js.errors import NotFoundError

from eventlog import codec
from eventlog.events import LogEntry
from eventlog.jetstream.fetch import StreamFetcher
from eventlog.store import LogError

if TYPE_CHECKING:
    from eventlog.jetstream import JetStreamLog

# Messages requested ahead of decoding, so the server streams while Python decodes.
_READ_AHEAD = 8192
# A read that gets nothing this long while the stream holds more recreates its consumer; four
# times as long, it fails (the caller, a standby or a term starting, retries or hands the lease
# on) rather than wait for ever: a term that starts must never hold the lease without deciding.
# Generous: on a starved machine (the 60-minute soak's replay --verify beside a CI run) a read
# went 37 s without a delivery and then failed at the first bound tried (15 s, failing at 30 s).
_STALL_S = 30.0


class JetStreamReader:
    """Implements ``eventlog.store.LogReader`` on a ``JetStreamLog``."""

    def __init__(self, jlog: JetStreamLog, *, stall_s: float = _STALL_S) -> None:
        self._jlog = jlog
        self.stall_s = stall_s

    async def last_seq(self) -> int:
        info = await self._jlog.js.stream_info(self._jlog.names.log_stream)
        seq: int = info.state.last_seq
        return seq

    async def get(self, seq: int) -> LogEntry | None:
        """One entry by a direct get, which any replica may answer; one that has not stored it
        yet answers "not found", so that answer is asked of the stream leader before it is
        believed."""
        js, stream = self._jlog.js, self._jlog.names.log_stream
        if seq < 1:
            return None
        try:
            msg = await js.get_msg(stream, seq, direct=True)
        except NotFoundError:
            try:
                msg = await js.get_msg(stream, seq)
            except NotFoundError:
                return None
        return codec.decode_entry(msg.data or b"")

    async def read(
        self,
        *,
        from_seq: int = 1,
        until_seq: int | None = None,
        until_ms: int | None = None,
        batch: int = 1000,
    ) -> AsyncIterator[list[LogEntry]]:
        """Entries ``from_seq``..``until_seq`` (inclusive; default: the last one when called) with
        ``at_ms <= until_ms``, in batches of at most ``batch``."""
        end = await self.last_seq()
        if until_seq is not None:
            end = min(end, until_seq)
        if from_seq > end:
            return
        names = self._jlog.names
        fetcher = await StreamFetcher(
            nc=self._jlog.nc,
            js=self._jlog.js,
            stream=names.log_stream,
            filter_subject=f"{names.log_prefix}.>",
            next_seq=max(1, from_seq),
        ).open()
        loop = asyncio.get_running_loop()
        progress_at, restarted = loop.time(), False
        try:
            while fetcher.next_seq <= end:
                unrequested = end - (fetcher.next_seq - 1) - fetcher.outstanding
                if unrequested > 0:
                    await fetcher.ensure(min(_READ_AHEAD, unrequested), reserve=_READ_AHEAD // 2)
                got = fetcher.take(min(batch, end - fetcher.next_seq + 1))
                if not got:
                    stalled = loop.time() - progress_at
                    if stalled > 4 * self.stall_s:
                        raise LogError(
                            f"reading {names.log_stream}: nothing after entry {fetcher.next_seq - 1} for "
                            f"{stalled:.0f} s although the stream ends at {end}; the consumer was recreated "
                            "once. Is every NATS node of the stream up?"
                        )
                    if stalled > self.stall_s and not restarted:
                        fetcher.restart()
                        restarted = True
                    await fetcher.wait(1.0)
                    continue
                progress_at, restarted = loop.time(), False
                entries = codec.decode_entries([data for _, _, data in got])
                if until_ms is not None and entries[-1].at_ms > until_ms:
                    kept = [e for e in entries if e.at_ms <= until_ms]
                    if kept:
                        yield kept
                    return
                yield entries
        finally:
            await fetcher.close()
