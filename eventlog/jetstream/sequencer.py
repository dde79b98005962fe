"""The leader's side of the log: copy inbox facts in, interleave decisions, every append fenced.

Each append to the Log stream carries
- ``Nats-Expected-Last-Sequence: seq - 1``: the server refuses it (error 10071) if anything else
  was written since, which is how a deposed leader finds out (``Fenced``);
- on the entries published one by one (below), ``Nats-Msg-Id: log-<seq>-<token>``, the token
  drawn per sequencer (so another leader's entry of the same sequence has another id), and on
  each entry after the first of one call ``Nats-Expected-Last-Msg-Id`` naming the entry before it
  (see "Appends of one call");
- ``Kd-Inbox-Last`` (on entries that were not copied from the inbox: decisions, ticks): the last
  inbox sequence copied into the log before this entry. With the ``inbox_seq`` of copied entries,
  ``resume`` reads one message (the last) to know where to continue, whatever its kind.

Appends of one call are pipelined (published back to back, acks awaited together). The expected
last sequence alone does not fence them: when another leader appended fewer entries than the call
holds since this one last looked, the first entry is refused but a later one expects exactly the
other leader's last sequence and would be stored behind it. So each entry after the first also
expects the stream's last message id to be its predecessor's (``Nats-Expected-Last-Msg-Id``, which
JetStream compares with the id of the last message stored): once one entry is refused, every later
one is, whatever sequence it expects. A retry of an entry that was stored but whose ack was lost
comes back as a duplicate (a clustered stream checks ``Nats-Msg-Id`` first) or as "wrong last
sequence" (a one-server stream checks that first); either way the sequencer compares the stored
bytes with its own, carries on if they are the same and steps down if not.

On a Log stream with ``allow_batched`` (nats-server >= 2.14; ``connect`` sets it), the entries of
one call go out as one *fast-ingest batch* instead (``publish.Publisher.publish_fast``): the same
messages, one ack for all of them instead of one each (most of what an append cost this process).
Each entry still carries its expected last sequence, checked as for a plain publish, and the batch
stops at the first entry refused; the ack names the last entry stored. After a refusal or a lost
ack the log is read from the first entry not confirmed: entries with this leader's bytes were
stored by an earlier attempt (carry on), another leader's entry fences, and from the first
sequence the log does not hold yet the rest is published again as a batch. These entries carry
no message ids and need none: nothing after a refused entry of a batch is stored, and a retry
reads the log before it publishes (inside a batch the server would check ``Nats-Msg-Id`` *before*
the expected sequence and skip a duplicate silently). Not JetStream's *atomic* batches
(``allow_atomic``): on a one-replica file stream each of those is staged in a store of its own,
created and removed per batch (docs/scaling.md has the figures).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog
from nats.js.errors import NotFoundError

from eventlog import codec, subjects
from eventlog.events import DecisionEvent, LogEntry
from eventlog.framing import decision_entries, input_entries
from eventlog.jetstream.fetch import StreamFetcher, transient
from eventlog.jetstream.publish import ApiError, Outgoing, PubAck, Publisher
from eventlog.store import Fenced, InboxItem, LogError, NotLeader, PublishTimeout
from eventlog.wire import inbox_items

if TYPE_CHECKING:
    from eventlog.jetstream import JetStreamLog
    from eventlog.jetstream.lease import Lease

log = structlog.get_logger("eventlog.sequencer")

INBOX_LAST_HEADER = "Kd-Inbox-Last"
_INBOX_LAST = INBOX_LAST_HEADER.encode()
WRONG_LAST_SEQUENCE = 10071
WRONG_LAST_MSG_ID = 10070
_REFUSED = frozenset({WRONG_LAST_SEQUENCE, WRONG_LAST_MSG_ID})  # what the log holds is not what was expected
BATCH_PUBLISH_DISABLED = 10205  # the stream does not (or no longer) allow fast-ingest batches
# A batch refused as a whole for a reason that passes: the batch was dropped (unknown id: its
# inactivity limit), too many in flight on the stream (abandoned ones linger for seconds).
_BATCH_AGAIN = frozenset({10206, 10207, 10208, 10211})


def _batch_retryable(error: ApiError) -> bool:
    return error.code == 503 or error.err_code == WRONG_LAST_SEQUENCE or error.err_code in _BATCH_AGAIN


DRAINED_TIMEOUT_S = 2.0  # the stream's state takes milliseconds to answer; longer is an outage


class JetStreamSequencer:
    """Implements ``eventlog.store.Sequencer`` on a ``JetStreamLog``."""

    def __init__(
        self, jlog: JetStreamLog, leader_id: str, *, lease: Lease | None = None, retry_s: float = 30.0
    ) -> None:
        self._jlog = jlog
        self.leader_id = leader_id
        self.lease = lease
        self._retry_s = retry_s
        self._last_seq: int | None = None
        self._last_inbox = 0
        self._fetcher: StreamFetcher | None = None
        self._pulled_to = 0  # the last inbox sequence pulled
        self._fenced: str | None = None
        self._broken: str | None = None  # an append failed half-way: resume() before the next
        self._publisher = Publisher(jlog.nc)
        # In the message ids of entries published one by one: another sequencer's entry of the same
        # sequence must have another id, or Nats-Expected-Last-Msg-Id could not tell them apart.
        self._token = secrets.token_hex(8).encode()
        self._fast = False  # the Log stream takes fast-ingest batches (read by resume())
        self._log = log.bind(leader=leader_id, stream=jlog.names.log_stream)

    @property
    def last_seq(self) -> int:
        return self._last_seq or 0

    @property
    def last_inbox_seq(self) -> int:
        return self._last_inbox

    async def resume(self) -> tuple[int, int]:
        js, names = self._jlog.js, self._jlog.names
        info = await js.stream_info(names.log_stream)
        last_seq = info.state.last_seq
        last_inbox = 0
        if last_seq:
            last_inbox = await self._inbox_last_at(last_seq)
        self._last_seq, self._last_inbox, self._fenced, self._broken = last_seq, last_inbox, None, None
        self._fast = bool(info.config.allow_batched)
        if self._fetcher is not None:
            await self._fetcher.close()
            self._fetcher = None
        self._log.info("sequencer_resumed", last_seq=last_seq, last_inbox_seq=last_inbox)
        return last_seq, last_inbox

    async def _inbox_last_at(self, seq: int) -> int:
        js, names = self._jlog.js, self._jlog.names
        msg = await js.get_msg(names.log_stream, seq)
        # A copied input says it in its payload, anything else in its header; an entry written by
        # something else (neither): walk back to the last copied input.
        while seq >= 1:
            try:
                entry = codec.decode_entry(msg.data or b"")
            except codec.DecodeError:
                entry = None
            if entry is not None and entry.inbox_seq is not None:
                return entry.inbox_seq
            header = (msg.headers or {}).get(INBOX_LAST_HEADER)
            if header is not None:
                return int(header)
            seq -= 1
            if seq >= 1:
                try:
                    msg = await js.get_msg(names.log_stream, seq)
                except NotFoundError:
                    return 0
        return 0

    async def _ensure_resumed(self) -> int:
        if self._last_seq is None:
            await self.resume()
        assert self._last_seq is not None
        return self._last_seq

    # ---- pulling from the inbox --------------------------------------------------------------

    async def pull(self, *, max_items: int = 500, timeout_s: float = 0.05) -> list[InboxItem]:
        """The next inbox items after the last one copied (or pulled), in inbox order."""
        await self._ensure_resumed()
        if self._fetcher is None:
            self._pulled_to = self._last_inbox
            self._fetcher = await StreamFetcher(
                nc=self._jlog.nc,
                js=self._jlog.js,
                stream=self._jlog.names.inbox_stream,
                filter_subject=f"{self._jlog.names.inbox_prefix}.>",
                next_seq=self._last_inbox + 1,
                patient=True,  # through a fail-over the leader keeps its term and asks again
            ).open()
        fetcher = self._fetcher
        # Keep a lingering request open: messages are pushed as they arrive, no polling.
        await fetcher.ensure(2 * max_items, expires_s=max(1.0, timeout_s), reserve=max_items)
        got = fetcher.take(max_items)
        if not got and await fetcher.wait(timeout_s):
            got = fetcher.take(max_items)
        if got:
            if got[0][0] > self._pulled_to + 1:
                # Only the inbox's age limit removes inbox messages: these were never sequenced.
                self._log.error(
                    "inbox_entries_expired",
                    first_missing=self._pulled_to + 1,
                    last_missing=got[0][0] - 1,
                    hint="the sequencer was down longer than the inbox's max age; these facts are lost",
                )
            self._pulled_to = got[-1][0]
        return inbox_items(got)

    async def drained(self) -> bool:
        # Asked of the server: its last inbox sequence against the last one pulled. An empty pull
        # says nothing after a stalled event loop, whose wait times out in the same turn as the
        # socket that holds the deliveries becomes readable.
        try:
            info = await asyncio.wait_for(
                self._jlog.js.stream_info(self._jlog.names.inbox_stream), DRAINED_TIMEOUT_S
            )
        except Exception as err:
            if not transient(err):
                raise
            return False  # the server does not answer now: no Tick until it does
        return int(info.state.last_seq) <= self._pulled_to

    # ---- appending to the log ----------------------------------------------------------------

    async def append_inputs(self, items: Sequence[InboxItem], *, at_ms: int) -> list[LogEntry]:
        seq = await self._ensure_resumed()
        entries, last_inbox = input_entries(
            items, last_seq=seq, last_inbox=self._last_inbox, at_ms=at_ms, leader=self.leader_id
        )
        # Entries that carry no inbox_seq (ticks) record the last one copied in a header instead.
        marks: list[int | None] = []
        running = self._last_inbox
        for item in items:
            running = item.inbox_seq if item.inbox_seq is not None else running
            marks.append(None if item.inbox_seq is not None else running)
        await self._append(entries, marks)
        self._last_inbox = last_inbox
        return entries

    async def append_decisions(
        self,
        decisions: Sequence[DecisionEvent],
        *,
        at_ms: int,
        first_index: int = 0,
        count: int | None = None,
    ) -> list[LogEntry]:
        seq = await self._ensure_resumed()
        entries = decision_entries(
            decisions, last_seq=seq, at_ms=at_ms, leader=self.leader_id, first_index=first_index, count=count
        )
        await self._append(entries, [self._last_inbox] * len(entries))
        return entries

    async def _append(self, entries: list[LogEntry], marks: list[int | None]) -> None:
        if self._fenced is not None:
            raise Fenced(self._fenced)
        if self._broken is not None:
            raise LogError(f"an earlier append failed ({self._broken}); call resume() before appending again")
        if self.lease is not None and not self.lease.valid():
            raise NotLeader(f"{self.leader_id} no longer holds lease {self.lease.name}; not appending")
        if not entries:
            return
        recent = self._jlog.recent  # this process's readers take these from memory (jetstream.recent)
        if recent is not None:
            recent.appending(entries[0].seq)
        try:
            await self._publish_fenced(entries, marks)
        except Fenced:
            await self.close()  # done for good: stop reading the inbox
            raise
        except BaseException as err:
            # Some entries of the batch may be stored and some not: only the log knows now.
            self._broken = f"{type(err).__name__}: {err}"
            raise
        finally:
            if recent is not None:
                recent.appending(None)
        self._last_seq = entries[-1].seq
        if recent is not None:
            recent.appended(entries)

    async def _publish_fenced(self, entries: list[LogEntry], marks: list[int | None]) -> None:
        if self._fast and len(entries) > 1:
            done = await self._publish_batches(entries, marks)
            entries, marks = entries[done:], marks[done:]
            if not entries:
                return
        await self._publish_pipelined(entries, marks)

    async def _publish_batches(self, entries: list[LogEntry], marks: list[int | None]) -> int:
        """Publish as fast-ingest batches until every entry is stored: how many were (all, or
        none if the stream refuses batches, for the pipelined path to publish instead)."""
        prefix = self._jlog.names.log_prefix
        batch: list[Outgoing] = [
            (subjects.subject_for(e.event, prefix=prefix), codec.encode(e), self._fast_headers(e.seq, mark))
            for e, mark in zip(entries, marks, strict=True)
        ]
        base, last = entries[0].seq, entries[-1].seq
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        delay = 0.1
        done = 0  # entries known to be stored, from the front
        while True:
            ack = await self._publisher.publish_fast(batch[done:], timeout_s=self._jlog.publish_timeout_s)
            if ack is not None and ack.error is None:
                # Each entry is stored at the sequence it expects or not at all, and a batch stops
                # at the first one refused: those up to the ack's are ours.
                if not base + done <= ack.seq <= last or ack.duplicate:
                    self._fence(base + done, f"a batch of {base + done}..{last} acknowledged as {ack.seq}")
                done = ack.seq - base + 1
                if done == len(entries):
                    return done
            elif ack is not None and ack.error is not None and ack.error.err_code == BATCH_PUBLISH_DISABLED:
                # Every message of this batch was refused: the rest goes the pipelined way.
                self._log.warning("log_batches_refused", hint="the Log stream no longer allows batches")
                self._fast = False
                return done
            elif ack is not None and ack.error is not None and not _batch_retryable(ack.error):
                raise LogError(
                    f"appending log entries {base + done}..{last} to {self._jlog.names.log_stream} failed: "
                    f"{ack.error.description} (code {ack.error.code}/{ack.error.err_code})"
                )
            # Stopped short: refused (another leader's entry, or ours from an attempt whose ack
            # was lost), or no answer. The log tells: never publish past an entry that is not ours.
            while done < len(entries):
                stored = await self._stored_at(base + done)
                if stored is None:
                    break
                if stored != batch[done][1]:
                    why = (
                        "the batch stopped there"
                        if ack is None or ack.error is None
                        else ack.error.description
                    )
                    self._fence(base + done, why)
                done += 1
            if done == len(entries):
                return done
            now = loop.time()
            deadline = deadline if deadline is not None else now + self._retry_s
            if now >= deadline:
                raise PublishTimeout(
                    f"log entries {base + done}..{last} not acknowledged within {self._retry_s}s; is JetStream "
                    f"up (stream {self._jlog.names.log_stream}, url {self._jlog.url})?"
                )
            self._log.warning("append_retry", seq=base + done, last=last)
            if ack is not None:  # an answer, not a lost one: give the server a moment
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _fast_headers(self, seq: int, mark: int | None) -> bytes:
        if mark is None:
            return b"NATS/1.0\r\nNats-Expected-Last-Sequence: %d\r\n\r\n" % (seq - 1)
        return b"NATS/1.0\r\nNats-Expected-Last-Sequence: %d\r\n%s: %d\r\n\r\n" % (seq - 1, _INBOX_LAST, mark)

    async def _publish_pipelined(self, entries: list[LogEntry], marks: list[int | None]) -> None:
        prefix = self._jlog.names.log_prefix
        batch: list[Outgoing] = [
            (
                subjects.subject_for(e.event, prefix=prefix),
                codec.encode(e),
                self._headers(e.seq, mark, chained=i > 0),
            )
            for i, (e, mark) in enumerate(zip(entries, marks, strict=True))
        ]
        acks = await self._publisher.publish(batch, timeout_s=self._jlog.publish_timeout_s)
        recovering = False
        for entry, out, ack in zip(entries, batch, acks, strict=True):
            # No ack (timeout, fail-over), or no stream leader to take it (503, an election in
            # progress): publish again. Once one entry of the batch needed that, the later ones
            # may have been refused only because it was missing: again too.
            refused = ack is not None and ack.error is not None and ack.error.err_code in _REFUSED
            unavailable = ack is not None and ack.error is not None and ack.error.code == 503
            if ack is None or unavailable or (recovering and refused):
                recovering = True
                ack = await self._retry(out, entry.seq)
            assert ack is not None
            await self._check_ack(seq=entry.seq, ack=ack, payload=out[1])

    def _headers(self, seq: int, mark: int | None, *, chained: bool) -> bytes:
        """The header block itself (``Outgoing`` takes one): a dict per entry, formatted again by
        the publisher, cost more than the rest of the entry's framing. ``chained``: an entry after
        the first of a call, stored only right behind its predecessor (the module's docstring)."""
        token = self._token
        block = b"NATS/1.0\r\nNats-Expected-Last-Sequence: %d\r\nNats-Msg-Id: log-%d-%s\r\n" % (
            seq - 1,
            seq,
            token,
        )
        if chained:
            block += b"Nats-Expected-Last-Msg-Id: log-%d-%s\r\n" % (seq - 1, token)
        if mark is not None:
            block += b"%s: %d\r\n" % (_INBOX_LAST, mark)
        return block + b"\r\n"

    async def _retry(self, out: Outgoing, seq: int) -> PubAck:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._retry_s
        delay = 0.1
        while loop.time() < deadline:
            self._log.warning("append_retry", seq=seq)
            ack = (await self._publisher.publish([out], timeout_s=2.0))[0]
            if ack is not None and (ack.error is None or ack.error.code != 503):  # 503: no quorum yet
                return ack
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise PublishTimeout(
            f"log entry {seq} not acknowledged within {self._retry_s}s; is JetStream up "
            f"(stream {self._jlog.names.log_stream}, url {self._jlog.url})?"
        )

    async def _check_ack(self, *, seq: int, ack: PubAck, payload: bytes) -> None:
        if ack.error is not None:
            if ack.error.err_code in _REFUSED:
                # The log does not end where this entry expects. A one-server stream checks the
                # expected sequence before Nats-Msg-Id, so a retry of an entry that was stored (its
                # ack lost) lands here too: the stored bytes tell.
                if await self._stored_is(seq, payload):
                    return
                self._fence(seq, ack.error.description)
            raise LogError(
                f"appending log entry {seq} to {self._jlog.names.log_stream} failed: "
                f"{ack.error.description} (code {ack.error.code}/{ack.error.err_code})"
            )
        if ack.duplicate:
            if not await self._stored_is(ack.seq, payload):
                self._fence(seq, f"log entry {seq} was written by another leader")
        elif ack.seq != seq:
            self._fence(seq, f"stored as {ack.seq}, expected {seq}")

    async def _stored_is(self, seq: int, payload: bytes) -> bool:
        """Whether log entry ``seq`` is exactly this one (ours, appended before)."""
        return await self._stored_at(seq) == payload

    async def _stored_at(self, seq: int) -> bytes | None:
        """The payload of log entry ``seq``, ``None`` if there is none. Asked right after a
        fail-over, so an answer the stream cannot give yet (no leader, "offline") is asked again
        within the retry bound rather than ending the term."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._retry_s
        delay = 0.1
        while True:
            try:
                stored = await self._jlog.js.get_msg(self._jlog.names.log_stream, seq)
            except NotFoundError:
                return None
            except Exception as err:
                if not transient(err) or loop.time() + delay > deadline:
                    raise
                self._log.warning("stored_entry_unavailable", seq=seq, error=str(err) or type(err).__name__)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            return stored.data or b""

    def _fence(self, seq: int, why: object) -> None:
        self._fenced = (
            f"log append {seq} refused ({why}): another leader wrote to {self._jlog.names.log_stream}; "
            "this one must step down"
        )
        self._log.warning("sequencer_fenced", seq=seq, reason=str(why))
        raise Fenced(self._fenced)

    async def close(self) -> None:
        if self._fetcher is not None:
            await self._fetcher.close()
            self._fetcher = None
