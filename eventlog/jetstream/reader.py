"""Reading the Log stream: in order, in decoded batches, between bounds; or one entry by its sequence.

Followers (the actuator every 20 ms, the forecasts, the status reporter) read again and again
from where their last read ended. Each read used to create an ephemeral consumer, ask the
stream's full info for its last sequence and delete the consumer: more than the entries cost at
a few hundred per read. A read that reaches its end now parks its fetcher (consumer and all),
and the next read starting where it stopped takes it up again; the last sequence is read from
the stream info's ``state`` alone (``stream_last_seq``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import msgspec
from nats.errors import NoRespondersError
from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

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
# Parked fetchers: at most this many (one per follower), reused within this long (well inside the
# consumer's inactivity threshold, after which the server deletes it).
_PARKED_MAX = 4
_PARKED_S = 60.0


class _StreamState(msgspec.Struct):
    last_seq: int = 0


class _StreamInfo(msgspec.Struct):
    state: _StreamState | None = None
    error: dict[str, object] | None = None


_info_decoder = msgspec.json.Decoder(_StreamInfo)


async def stream_last_seq(js: JetStreamContext, stream: str) -> int:
    """``js.stream_info(stream).state.last_seq``, same errors, decoding only the state: nats-py
    builds the whole info (config, cluster, sources) into objects on every call."""
    nc, prefix, timeout = js._nc, js._prefix, js._timeout
    try:
        msg = await nc.request(f"{prefix}.STREAM.INFO.{stream}", b"", timeout=timeout)
    except NoRespondersError:
        raise ServiceUnavailableError from None
    try:
        info = _info_decoder.decode(msg.data)
    except msgspec.DecodeError:
        info = _StreamInfo(error=json.loads(msg.data).get("error"))
    if info.error is not None:
        raise APIError.from_error(info.error)
    return info.state.last_seq if info.state is not None else 0


class JetStreamReader:
    """Implements ``eventlog.store.LogReader`` on a ``JetStreamLog``."""

    def __init__(self, jlog: JetStreamLog, *, stall_s: float = _STALL_S) -> None:
        self._jlog = jlog
        self.stall_s = stall_s
        self._parked: dict[int, tuple[StreamFetcher, float]] = {}  # next_seq -> (fetcher, parked at)

    async def last_seq(self) -> int:
        return await stream_last_seq(self._jlog.js, self._jlog.names.log_stream)

    async def _fetcher_at(self, from_seq: int) -> StreamFetcher:
        now = asyncio.get_running_loop().time()
        for seq, (fetcher, at) in list(self._parked.items()):
            if now - at > _PARKED_S:
                del self._parked[seq]
                await fetcher.close()
        parked = self._parked.pop(from_seq, None)
        if parked is not None:
            return parked[0]
        names = self._jlog.names
        return await StreamFetcher(
            nc=self._jlog.nc,
            js=self._jlog.js,
            stream=names.log_stream,
            filter_subject=f"{names.log_prefix}.>",
            next_seq=from_seq,
        ).open()

    async def _park(self, fetcher: StreamFetcher) -> None:
        loop = asyncio.get_running_loop()
        if fetcher.next_seq in self._parked or self._jlog.nc.is_closed:
            await fetcher.close()
            return
        self._parked[fetcher.next_seq] = (fetcher, loop.time())
        while len(self._parked) > _PARKED_MAX:
            oldest = min(self._parked, key=lambda seq: self._parked[seq][1])
            await self._parked.pop(oldest)[0].close()

    async def close(self) -> None:
        """Close the parked fetchers (their consumers are deleted)."""
        parked, self._parked = self._parked, {}
        for fetcher, _ in parked.values():
            with contextlib.suppress(Exception):
                await fetcher.close()

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
        recent = self._jlog.recent
        if recent is not None:
            # What this process appended itself, without a round trip. A read without an upper
            # bound that ends there does not ask the server for more: only a writer that fenced
            # ours off could have added any, and the next read, past the entries kept, asks.
            while mine := recent.take(from_seq, until_seq=until_seq, limit=batch):
                if until_ms is not None and mine[-1].at_ms > until_ms:
                    kept = [e for e in mine if e.at_ms <= until_ms]
                    if kept:
                        yield kept
                    return
                yield mine
                from_seq = mine[-1].seq + 1
                if until_seq is not None and from_seq > until_seq:
                    return
                if until_seq is None and from_seq > recent.last_seq:
                    return
            if until_seq is None and recent.coming(from_seq):
                return  # the next read takes them from memory once acknowledged
        end = await self.last_seq()
        if until_seq is not None:
            end = min(end, until_seq)
        if from_seq > end:
            return
        names = self._jlog.names
        fetcher = await self._fetcher_at(max(1, from_seq))
        loop = asyncio.get_running_loop()
        progress_at, restarted = loop.time(), False
        finished = False
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
            finished = True
        finally:
            if finished:  # at a known place, nothing requested beyond it: the next read may go on
                await self._park(fetcher)
            else:
                await fetcher.close()
