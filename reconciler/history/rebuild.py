"""Rebuilding the core's state from the log: snapshots, the fold up to a bound, and the repair
of a decision batch a crashed leader left short.

A snapshot is the core's ``dump_state`` plus the policy and queue configuration in force (the last
``PolicyLoaded`` and ``QueuesConfigured`` may lie before it), taken by the leader at a batch boundary. Rebuilding starts from the latest snapshot at
or before the bound and folds the log after it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from eventlog import codec
from eventlog import events as ev
from eventlog.store import LogReader, Sequencer, SnapshotStore
from reconciler import core
from reconciler.edge import gcpolicy
from reconciler.edge.logging import get_logger
from reconciler.edge.plugins import PluginSet, installed
from reconciler.edge.progress import Progress
from reconciler.history.replay import replay

log = get_logger("reconciler.rebuild")

SNAPSHOT_VERSION = 2  # the stored object: 2 framed, streamed into the state; 1 (one msgpack map) still read
# 0xc1 is no msgpack value: a reader of version 1 refuses the object at once ("snapshot_unusable")
# and replays from the log.
OBJECT_MAGIC = b"\xc1KDO"
_LENGTH = 4


class LogHandle(Protocol):
    """What the loop needs of a log backend (``JetStreamLog`` or ``MemoryLog``)."""

    @property
    def reader(self) -> LogReader: ...

    @property
    def snapshots(self) -> SnapshotStore: ...

    def sequencer(self, leader_id: str, *, lease: Any = None) -> Sequencer: ...


class Snapshot(msgspec.Struct, kw_only=True):
    """What the leader stores as a snapshot: the core's state and the policy in force.

    The policy rides along because the last ``PolicyLoaded`` may lie before the snapshot, and the
    leader must know it to decide whether to record the configured one again.

    Stored (version 2) as ``OBJECT_MAGIC``, the length of the head (4 bytes, big-endian), the head
    (``_SnapshotHead``, msgpack), then the core's dump to the end: a reader can take the head and
    hand the rest to ``core.StateLoader`` piece by piece as it arrives. Version 1 was this
    struct as one msgpack map.
    """

    v: int = SNAPSHOT_VERSION
    seq: int
    at_ms: int
    state: bytes
    policy: ev.PolicyLoaded | None = None
    queues: ev.QueuesConfigured | None = None  # the last QueuesConfigured, for the same reason


class _SnapshotHead(msgspec.Struct, kw_only=True):
    """``Snapshot`` without ``state``, which follows it in the stored object."""

    v: int = SNAPSHOT_VERSION
    seq: int
    at_ms: int
    policy: ev.PolicyLoaded | None = None
    queues: ev.QueuesConfigured | None = None


_snap_encoder = msgspec.msgpack.Encoder()
_v1_decoder = msgspec.msgpack.Decoder(Snapshot)
_head_decoder = msgspec.msgpack.Decoder(_SnapshotHead)


def _begin_object(seq: int, at_ms: int, policy: ev.PolicyLoaded | None, queues: ev.QueuesConfigured | None) -> bytearray:
    head = _snap_encoder.encode(_SnapshotHead(seq=seq, at_ms=at_ms, policy=policy, queues=queues))
    return bytearray(OBJECT_MAGIC + len(head).to_bytes(_LENGTH, "big") + head)


def encode_snapshot(snap: Snapshot) -> bytes:
    """The stored object of a dump already made (``encode_state_snapshot`` makes it from the state)."""
    out = _begin_object(snap.seq, snap.at_ms, snap.policy, snap.queues)
    out += snap.state
    return bytes(out)


def encode_state_snapshot(
    state: core.State,
    *,
    seq: int,
    at_ms: int,
    policy: ev.PolicyLoaded | None = None,
    queues: ev.QueuesConfigured | None = None,
) -> bytearray:
    """``encode_snapshot(Snapshot(state=core.dump_state(state), ...))``, written in one buffer:
    the core's dump goes straight into the stored object, so a leader uploading a snapshot holds
    it once, not the dump and the object copying it (at a million jobs, about 0.36 GB each)."""
    out = _begin_object(seq, at_ms, policy, queues)
    core.dump_state_into(state, out)
    return out


def decode_snapshot(data: bytes | bytearray | memoryview) -> Snapshot:
    """The stored object, its dump copied out whole (a restore streams it: ``SnapshotReader``)."""
    view = memoryview(data)
    if bytes(view[: len(OBJECT_MAGIC)]) != OBJECT_MAGIC:
        return _v1_decoder.decode(view)
    end = len(OBJECT_MAGIC) + _LENGTH
    end += int.from_bytes(view[len(OBJECT_MAGIC) : end], "big")
    head = _head_decoder.decode(view[len(OBJECT_MAGIC) + _LENGTH : end])
    return Snapshot(
        v=head.v, seq=head.seq, at_ms=head.at_ms, state=bytes(view[end:]), policy=head.policy, queues=head.queues
    )


class SnapshotReader:
    """A stored snapshot read as its pieces arrive (``write``, as ``SnapshotStore.latest_into``
    hands them over), then ``close`` for its head and state. The core's dump goes piece by piece
    into a ``core.StateLoader``: what is held besides the state being built is a piece and a
    frame, not the object (at a million jobs it was the object, a copy of it, the dump copied out
    of it and its decoded tree: 2.1 GB at the peak for a 1 GB state). A version 1 object is kept
    whole and read by ``close``.

    ``write`` never raises: the store is reading from NATS, and a subscription left half read
    would keep receiving. The first error is kept (what follows is dropped) and ``close`` raises it."""

    def __init__(self, *, plugins: core.Registry) -> None:
        self._plugins = plugins
        self._start = bytearray()  # the magic and the head, until complete
        self._whole: bytearray | None = None  # a version 1 object
        self._head: _SnapshotHead | None = None
        self._loader: core.StateLoader | None = None
        self._error: Exception | None = None

    def write(self, piece: bytes | memoryview) -> int:
        if self._error is None:
            try:
                self._feed(memoryview(piece))
            except Exception as err:
                self._error, self._loader, self._whole = err, None, None  # the half-built state is dropped
        return len(piece)

    def _feed(self, piece: memoryview) -> None:
        if self._loader is not None:
            self._loader.feed(piece)
            return
        if self._whole is not None:
            self._whole += piece
            return
        start = self._start
        start += piece
        if len(start) < len(OBJECT_MAGIC):
            return
        if start[: len(OBJECT_MAGIC)] != OBJECT_MAGIC:
            self._whole, self._start = start, bytearray()
            return
        at = len(OBJECT_MAGIC) + _LENGTH
        if len(start) < at or len(start) < (end := at + int.from_bytes(start[len(OBJECT_MAGIC) : at], "big")):
            return  # the head is short (a few hundred bytes): it never spans more than a piece or two
        try:
            self._head = _head_decoder.decode(memoryview(start)[at:end])
        except (msgspec.DecodeError, ValueError) as err:  # ValueError: a string that is not UTF-8
            raise core.SnapshotError(f"not a kdispatch snapshot object: {err} (in its head)") from None
        self._loader = core.StateLoader(plugins=self._plugins)
        self._loader.feed(memoryview(start)[end:])
        self._start = bytearray()

    def close(self) -> tuple[Snapshot, core.State]:
        """The head (``state`` left empty) and the state; the error of a piece if one failed."""
        if self._error is not None:
            raise self._error
        if self._whole is not None:
            whole, self._whole = self._whole, None
            snap = _v1_decoder.decode(whole)
            del whole
            return snap, restore(snap.state, plugins=self._plugins)
        head, loader = self._head, self._loader
        if head is None or loader is None:
            raise core.SnapshotError("not a kdispatch snapshot object: it ends inside its head")
        self._loader = None
        state = loader.close()
        meta = Snapshot(v=head.v, seq=head.seq, at_ms=head.at_ms, state=b"", policy=head.policy, queues=head.queues)
        return meta, state


@dataclass
class Rebuilt:
    state: core.State
    last_seq: int
    last_at_ms: int
    policy: ev.PolicyLoaded | None
    repair: list[ev.DecisionEvent]  # the missing tail of a batch cut short, to append
    repair_at_ms: int = 0
    repair_first_index: int = 0
    repair_count: int = 0
    snapshot_seq: int = 0
    queues: ev.QueuesConfigured | None = None  # the last QueuesConfigured folded (or the snapshot's)


async def load_snapshot(
    snapshots: SnapshotStore | None, *, at_or_before: int, plugins: PluginSet | None = None
) -> tuple[core.State, int, int, ev.PolicyLoaded | None]:
    """(state, seq, at_ms, policy) from the latest usable snapshot, or a fresh state at seq 0,
    its profiles compiled against ``plugins`` (default: ``installed()``)."""
    state, seq, at_ms, policy, _ = await _load_snapshot(snapshots, at_or_before=at_or_before, plugins=plugins)
    return state, seq, at_ms, policy


def restore(raw: bytes, *, plugins: core.Registry) -> core.State:
    """``core.load_state`` with the garbage collector paused. Decoding a snapshot builds a tree
    of objects per job, all alive afterwards; the collector would scan the growing heap again
    and again while it does (at 18,000 jobs the restore took 4-8 times as long with it on)."""
    with codec.gc_paused():
        return core.load_state(raw, plugins=plugins)


async def _load_snapshot(
    snapshots: SnapshotStore | None, *, at_or_before: int, plugins: PluginSet | None
) -> tuple[core.State, int, int, ev.PolicyLoaded | None, ev.QueuesConfigured | None]:
    registry = (plugins if plugins is not None else installed()).registry
    if snapshots is not None and at_or_before > 0:
        reader = SnapshotReader(plugins=registry)
        with codec.gc_paused():  # as in ``restore``
            # The store hands each piece to ``reader.write`` in a worker thread, and the last
            # step (indexes, quota usage) runs in one too: a restore of a million jobs is seconds
            # of CPU, and a term that restores while it holds the lease must keep renewing it
            # meanwhile (the event loop gets the interpreter between the thread's slices). It
            # lost the lease every time, at a million jobs, when the restore ran on the loop.
            seq = await snapshots.latest_into(reader.write, at_or_before=at_or_before)
            if seq is not None:
                try:
                    snap, state = await asyncio.to_thread(reader.close)
                    gcpolicy.restored()  # out of later collections' walks, without one now
                    return state, snap.seq, snap.at_ms, snap.policy, snap.queues
                except Exception as err:  # a snapshot from another version is a cache miss, not a failure
                    log.warning("snapshot_unusable", seq=seq, error=str(err))
    return core.new_state(plugins=registry), 0, 0, None, None


@dataclass
class Folded:
    state: core.State
    last_seq: int
    last_at_ms: int
    policy: ev.PolicyLoaded | None  # the last PolicyLoaded folded (or the snapshot's)
    snapshot_seq: int = 0  # the snapshot it started from (0: from the beginning)
    queues: ev.QueuesConfigured | None = None  # the last QueuesConfigured folded (or the snapshot's)


async def rebuild_state(
    reader: LogReader,
    snapshots: SnapshotStore | None,
    *,
    until_seq: int | None = None,
    until_ms: int | None = None,
    label: str = "rebuild",
    logger: Any = None,
    plugins: PluginSet | None = None,
    warm: Folded | None = None,
) -> Folded:
    """Fold the log up to the bounds, from the latest snapshot at or before them when possible.

    ``warm``: a state already folded up to some entry (a standby's, ``reconciler.service.standby``),
    used instead of the snapshot when it is not past the bound; it is folded further in place."""
    plugins = plugins if plugins is not None else installed()
    last = until_seq if until_seq is not None else await reader.last_seq()
    if warm is not None and until_ms is None and warm.last_seq <= last:
        state, seq, at_ms, policy, queues = warm.state, warm.last_seq, warm.last_at_ms, warm.policy, warm.queues
        snapshot_seq = warm.snapshot_seq
    else:
        snap_at = last if until_ms is None else 0  # a time bound says nothing about snapshot seqs
        state, seq, at_ms, policy, queues = await _load_snapshot(snapshots, at_or_before=snap_at, plugins=plugins)
        snapshot_seq = seq
    if seq >= last and until_ms is None:
        return Folded(
            state=state, last_seq=seq, last_at_ms=at_ms, policy=policy, snapshot_seq=snapshot_seq, queues=queues
        )
    progress = Progress(total=max(last - seq, 0), label=label, logger=logger)
    result = await replay(
        reader,
        state=state,
        from_seq=seq + 1,
        until_seq=until_seq,
        until_ms=until_ms,
        progress=progress,
        plugins=plugins,
    )
    return Folded(
        state=result.state,
        last_seq=result.last_seq or seq,
        last_at_ms=result.last_at_ms or at_ms,
        policy=result.last_policy or policy,
        snapshot_seq=snapshot_seq,
        queues=result.last_queues or queues,
    )


async def rebuild_for_leader(
    log_: LogHandle, *, last_seq: int, plugins: PluginSet | None = None, warm: Folded | None = None
) -> Rebuilt:
    """The leader's view of the log up to ``last_seq``, with the repair of a batch cut short.

    ``warm`` (a standby's state, see ``rebuild_state``) is used unless the log ends inside a
    decision batch: the repair needs the state before that batch, which only a rebuild gives."""
    reader = log_.reader
    last_entry: ev.LogEntry | None = None
    if last_seq > 0:
        async for chunk in reader.read(from_seq=last_seq, until_seq=last_seq):
            last_entry = chunk[-1] if chunk else last_entry
    cut = last_entry is not None and last_entry.batch is not None and last_entry.batch[0] < last_entry.batch[1] - 1
    if not cut or last_entry is None or last_entry.batch is None:
        f = await rebuild_state(reader, log_.snapshots, until_seq=last_seq, logger=log, plugins=plugins, warm=warm)
        return Rebuilt(
            state=f.state,
            last_seq=f.last_seq,
            last_at_ms=f.last_at_ms,
            policy=f.policy,
            repair=[],
            snapshot_seq=f.snapshot_seq,
            queues=f.queues,
        )
    index, count = last_entry.batch
    batch_start = last_entry.seq - index
    f = await rebuild_state(reader, log_.snapshots, until_seq=batch_start - 1, logger=log, plugins=plugins)
    state = f.state
    recomputed = core.decide(state)
    recorded: list[ev.LogEntry] = []
    async for chunk in reader.read(from_seq=batch_start, until_seq=last_seq):
        recorded.extend(chunk)
    agrees = len(recomputed) == count and all(
        codec.encode(e.event) == codec.encode(recomputed[i]) for i, e in enumerate(recorded)
    )
    for entry in recorded:
        state = core.fold(state, entry)
    rebuilt = Rebuilt(
        state=state,
        last_seq=last_seq,
        last_at_ms=last_entry.at_ms,
        policy=f.policy,
        repair=[],
        snapshot_seq=f.snapshot_seq,
        queues=f.queues,
    )
    if agrees:
        rebuilt.repair = list(recomputed[index + 1 :])
        rebuilt.repair_at_ms = last_entry.at_ms
        rebuilt.repair_first_index = index + 1
        rebuilt.repair_count = count
    else:
        # Another code version wrote this batch; appending our guess would mix two policies in one
        # batch. Leave it short (replay --verify reports it) and decide afresh from here.
        log.error(
            "batch_repair_disagrees",
            batch_seq=batch_start,
            recorded=[codec.to_builtins(e.event) for e in recorded],
            recomputed=[codec.to_builtins(d) for d in recomputed],
        )
    return rebuilt
