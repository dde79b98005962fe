"""The log in process: same ``.inbox``, ``.reader``, ``.sequencer()``, ``.snapshots``, ``.lease()``
as ``eventlog.jetstream.JetStreamLog``, for ``simulate`` and unit tests.

It keeps the JetStream log's semantics, checked by the same contract tests: inbox messages are
stored as bytes and decoded by the sequencer (bad ones become ``Rejected``), ``msg_id``
de-duplicates, every append is fenced on the sequence its writer last saw, and a new sequencer
resumes from the last inbox sequence copied into the log. No I/O, no threads; the only waiting
is ``pull``'s, on the running event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType

from eventlog import codec, subjects
from eventlog.events import DecisionEvent, InputEvent, LogEntry
from eventlog.framing import decision_entries, input_entries
from eventlog.store import Fenced, InboxItem, LogError, NotLeader
from eventlog.wire import inbox_item


class MemoryInbox:
    def __init__(self) -> None:
        self.prefix = subjects.INBOX_PREFIX
        self.messages: list[tuple[str, bytes]] = []  # index i holds inbox seq i + 1
        self._msg_ids: dict[str, int] = {}
        self._arrived = asyncio.Event()

    async def publish(self, event: InputEvent, *, msg_id: str | None = None, timeout_s: float = 2.0) -> int:
        return self.publish_raw_nowait(
            subjects.subject_for(event, prefix=self.prefix), codec.encode(event), msg_id=msg_id
        )

    async def publish_raw(
        self, subject: str, data: bytes, *, msg_id: str | None = None, timeout_s: float = 2.0
    ) -> int:
        """Any bytes on any subject (for tests of what a faulty producer could send)."""
        return self.publish_raw_nowait(subject, data, msg_id=msg_id)

    def publish_raw_nowait(self, subject: str, data: bytes, *, msg_id: str | None = None) -> int:
        if not subject.startswith(self.prefix + "."):
            raise LogError(f"no stream answers on {subject} (the inbox takes {self.prefix}.>)")
        if msg_id is not None and msg_id in self._msg_ids:  # (kept forever; JetStream: 2 minutes)
            return self._msg_ids[msg_id]
        self.messages.append((subject, data))
        seq = len(self.messages)
        if msg_id is not None:
            self._msg_ids[msg_id] = seq
        self._arrived.set()
        return seq

    async def wait_for_more_than(self, seq: int, timeout_s: float) -> bool:
        if len(self.messages) > seq:
            return True
        self._arrived.clear()
        try:
            await asyncio.wait_for(self._arrived.wait(), timeout_s)
        except TimeoutError:
            return False
        return len(self.messages) > seq


class MemoryReader:
    def __init__(self, entries: list[LogEntry]) -> None:
        self._entries = entries  # index i holds seq i + 1

    async def last_seq(self) -> int:
        return len(self._entries)

    async def get(self, seq: int) -> LogEntry | None:
        return self._entries[seq - 1] if 1 <= seq <= len(self._entries) else None

    async def read(
        self,
        *,
        from_seq: int = 1,
        until_seq: int | None = None,
        until_ms: int | None = None,
        batch: int = 1000,
    ) -> AsyncIterator[list[LogEntry]]:
        end = len(self._entries) if until_seq is None else min(until_seq, len(self._entries))
        seq = max(1, from_seq)
        while seq <= end:
            chunk = self._entries[seq - 1 : min(end, seq - 1 + batch)]
            seq += len(chunk)
            if until_ms is not None and chunk[-1].at_ms > until_ms:
                kept = [e for e in chunk if e.at_ms <= until_ms]
                if kept:
                    yield kept
                return
            yield chunk


class MemorySequencer:
    def __init__(self, mlog: MemoryLog, leader_id: str, *, lease: MemoryLease | None = None) -> None:
        self._mlog = mlog
        self.leader_id = leader_id
        self.lease = lease
        self._last_seq: int | None = None
        self._last_inbox = 0
        self._pulled = 0
        self._fenced: str | None = None

    @property
    def last_seq(self) -> int:
        return self._last_seq or 0

    @property
    def last_inbox_seq(self) -> int:
        return self._last_inbox

    async def resume(self) -> tuple[int, int]:
        entries = self._mlog.entries
        last_inbox = next((e.inbox_seq for e in reversed(entries) if e.inbox_seq is not None), 0)
        self._last_seq, self._last_inbox, self._pulled, self._fenced = (
            len(entries),
            last_inbox,
            last_inbox,
            None,
        )
        return self._last_seq, last_inbox

    async def _ensure_resumed(self) -> int:
        if self._last_seq is None:
            await self.resume()
        assert self._last_seq is not None
        return self._last_seq

    async def pull(self, *, max_items: int = 500, timeout_s: float = 0.05) -> list[InboxItem]:
        await self._ensure_resumed()
        inbox = self._mlog.inbox
        if not await inbox.wait_for_more_than(self._pulled, timeout_s):
            return []
        start = self._pulled
        chunk = inbox.messages[start : start + max_items]
        self._pulled += len(chunk)
        return [
            inbox_item(seq=start + 1 + i, subject=subject, data=data)
            for i, (subject, data) in enumerate(chunk)
        ]

    async def drained(self) -> bool:
        return len(self._mlog.inbox.messages) <= self._pulled

    async def append_inputs(self, items: Sequence[InboxItem], *, at_ms: int) -> list[LogEntry]:
        seq = await self._ensure_resumed()
        entries, last_inbox = input_entries(
            items, last_seq=seq, last_inbox=self._last_inbox, at_ms=at_ms, leader=self.leader_id
        )
        self._append(entries)
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
        self._append(entries)
        return entries

    def _append(self, entries: list[LogEntry]) -> None:
        if self._fenced is not None:
            raise Fenced(self._fenced)
        if self.lease is not None and not self.lease.valid():
            raise NotLeader(f"{self.leader_id} no longer holds lease {self.lease.name}; not appending")
        if not entries:
            return
        log = self._mlog.entries
        if len(log) != entries[0].seq - 1:
            self._fenced = (
                f"log append {entries[0].seq} refused (wrong last sequence: {len(log)}): another leader "
                "wrote to the log; this one must step down"
            )
            raise Fenced(self._fenced)
        log.extend(entries)
        self._last_seq = entries[-1].seq

    async def close(self) -> None:
        return None


SNAPSHOT_PIECE = 128 * 1024  # the chunk size of nats-py's object store


class MemorySnapshots:
    def __init__(self) -> None:
        self._snaps: dict[int, bytes] = {}

    async def save(self, seq: int, data: bytes | bytearray) -> None:
        self._snaps[seq] = bytes(data)

    async def latest(self, *, at_or_before: int | None = None) -> tuple[int, bytes] | None:
        seqs = [s for s in self._snaps if at_or_before is None or s <= at_or_before]
        if not seqs:
            return None
        best = max(seqs)
        return best, self._snaps[best]

    async def latest_into(
        self, write: Callable[[bytes], object], *, at_or_before: int | None = None
    ) -> int | None:
        """As the JetStream store: pieces of ``SNAPSHOT_PIECE`` bytes, each written in a thread."""
        found = await self.latest(at_or_before=at_or_before)
        if found is None:
            return None
        seq, data = found
        for at in range(0, len(data), SNAPSHOT_PIECE):
            await asyncio.to_thread(write, data[at : at + SNAPSHOT_PIECE])
        return seq


class _LeaseKey:
    __slots__ = ("expires_at", "holder", "revision")

    def __init__(self, *, holder: str, revision: int, expires_at: float) -> None:
        self.holder, self.revision, self.expires_at = holder, revision, expires_at


class MemoryLease:
    """The JetStream lease's behaviour on the event loop's clock (see eventlog.jetstream.lease)."""

    def __init__(self, mlog: MemoryLog, *, name: str, ttl_s: float, holder: str | None = None) -> None:
        self._mlog = mlog
        self.name = name
        self.ttl_s = ttl_s
        self.holder = holder or f"memory-{id(self):x}"
        self.lost = asyncio.Event()
        self._revision: int | None = None
        self._valid_until = 0.0
        self._renewer: asyncio.Task[None] | None = None
        self.renewals = 0  # successful renewals (observable by tests)

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _key(self) -> _LeaseKey | None:
        key = self._mlog.leases.get(self.name)
        if key is not None and key.expires_at <= self._now():
            del self._mlog.leases[self.name]
            return None
        return key

    def valid(self) -> bool:
        return self._revision is not None and not self.lost.is_set() and self._now() < self._valid_until

    async def current_holder(self) -> str | None:
        key = self._key()
        return key.holder if key else None

    def _write(self) -> None:
        self._mlog.lease_revision += 1
        self._revision = self._mlog.lease_revision
        now = self._now()
        self._mlog.leases[self.name] = _LeaseKey(
            holder=self.holder, revision=self._revision, expires_at=now + self.ttl_s
        )
        self._valid_until = now + self.ttl_s * 0.8

    async def try_acquire(self) -> bool:
        if self._key() is not None:
            return False
        self._write()
        self.lost.clear()
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew_loop())
        return True

    async def acquire(self, *, timeout_s: float | None = None, poll_s: float | None = None) -> None:
        deadline = None if timeout_s is None else self._now() + timeout_s
        poll = poll_s if poll_s is not None else max(0.05, min(1.0, self.ttl_s / 4))
        while not await self.try_acquire():
            if deadline is not None and self._now() >= deadline:
                raise NotLeader(f"lease {self.name} is held by {await self.current_holder()}; gave up")
            await asyncio.sleep(poll)

    async def renew(self) -> None:
        key = self._key()
        if self._revision is None or key is None or key.revision != self._revision:
            self._revision = None
            self.lost.set()
            raise NotLeader(f"lease {self.name} was taken over or expired; {self.holder} steps down")
        self._write()
        self.renewals += 1

    async def _renew_loop(self) -> None:
        while self._revision is not None:
            await asyncio.sleep(self.ttl_s / 3)
            if self._revision is None:
                return
            try:
                await self.renew()
            except NotLeader:
                return

    def stop_renewing(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            self._renewer = None

    async def release(self) -> None:
        self.stop_renewing()
        key = self._key()
        if key is not None and key.revision == self._revision:
            del self._mlog.leases[self.name]
        self._revision = None
        self.lost.set()

    async def __aenter__(self) -> MemoryLease:
        await self.acquire()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.release()


class MemoryLog:
    """An in-process log. ``entries`` is the log itself (index i holds seq i + 1)."""

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self.inbox = MemoryInbox()
        self.reader = MemoryReader(self.entries)
        self.snapshots = MemorySnapshots()
        self.leases: dict[str, _LeaseKey] = {}
        self.lease_revision = 0

    def sequencer(self, leader_id: str, *, lease: MemoryLease | None = None) -> MemorySequencer:
        return MemorySequencer(self, leader_id, lease=lease)

    def lease(self, name: str, ttl_s: float, *, holder: str | None = None) -> MemoryLease:
        return MemoryLease(self, name=name, ttl_s=ttl_s, holder=holder)

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> MemoryLog:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
