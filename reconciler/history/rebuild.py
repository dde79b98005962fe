"""Rebuilding the core's state from the log: snapshots, the fold up to a bound, and the repair
of a decision batch a crashed leader left short.

A snapshot is the core's ``dump_state`` plus the policy and queue configuration in force (the last
``PolicyLoaded`` and ``QueuesConfigured`` may lie before it), taken by the leader at a batch boundary. Rebuilding starts from the latest snapshot at
or before the bound and folds the log after it.
"""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from eventlog import codec
from eventlog import events as ev
from eventlog.store import LogReader, Sequencer, SnapshotStore
from reconciler import core
from reconciler.edge.logging import get_logger
from reconciler.edge.plugins import PluginSet, installed
from reconciler.edge.progress import Progress
from reconciler.history.replay import replay

log = get_logger("reconciler.rebuild")

SNAPSHOT_VERSION = 1


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
    """

    v: int = SNAPSHOT_VERSION
    seq: int
    at_ms: int
    state: bytes
    policy: ev.PolicyLoaded | None = None
    queues: ev.QueuesConfigured | None = None  # the last QueuesConfigured, for the same reason


_snap_encoder = msgspec.msgpack.Encoder()
_snap_decoder = msgspec.msgpack.Decoder(Snapshot)


def encode_snapshot(snap: Snapshot) -> bytes:
    return _snap_encoder.encode(snap)


class _SnapshotHead(msgspec.Struct, kw_only=True):
    """``Snapshot`` without ``state``: ``encode_state_snapshot`` appends that field after them."""

    v: int = SNAPSHOT_VERSION
    seq: int
    at_ms: int
    policy: ev.PolicyLoaded | None = None
    queues: ev.QueuesConfigured | None = None


def encode_state_snapshot(
    state: core.State,
    *,
    seq: int,
    at_ms: int,
    policy: ev.PolicyLoaded | None = None,
    queues: ev.QueuesConfigured | None = None,
) -> bytearray:
    """What ``encode_snapshot(Snapshot(state=core.dump_state(state), ...))`` decodes to, written in
    one buffer: the core's dump goes straight into the stored object, so a leader uploading a
    snapshot holds it once, not the dump and the object copying it (at a million jobs, about
    0.36 GB each). The fields are in another order (a map's keys are matched by name) and the
    dump's length is a 4-byte bin header patched once it is written."""
    head = _snap_encoder.encode(_SnapshotHead(seq=seq, at_ms=at_ms, policy=policy, queues=queues))
    assert head[0] == 0x85, "a fixmap of _SnapshotHead's five fields"
    out = bytearray(head)
    out[0] = 0x86  # one more field: state
    out += _snap_encoder.encode("state")
    out += b"\xc6\x00\x00\x00\x00"  # bin 32, its length written below
    start = len(out)
    core.dump_state_into(state, out)
    out[start - 4 : start] = (len(out) - start).to_bytes(4, "big")
    return out


def decode_snapshot(data: bytes) -> Snapshot:
    return _snap_decoder.decode(data)


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
    if not gc.isenabled():
        return core.load_state(raw, plugins=plugins)
    gc.disable()
    try:
        return core.load_state(raw, plugins=plugins)
    finally:
        gc.enable()


def _decode_and_restore(data: bytes, registry: core.Registry) -> tuple[Snapshot, core.State]:
    snap = decode_snapshot(data)
    return snap, restore(snap.state, plugins=registry)


async def _load_snapshot(
    snapshots: SnapshotStore | None, *, at_or_before: int, plugins: PluginSet | None
) -> tuple[core.State, int, int, ev.PolicyLoaded | None, ev.QueuesConfigured | None]:
    registry = (plugins if plugins is not None else installed()).registry
    if snapshots is not None and at_or_before > 0:
        found = await snapshots.latest(at_or_before=at_or_before)
        if found is not None:
            seq, data = found
            try:
                # In a thread: a restore of a million jobs is seconds of CPU, and a term that
                # restores while it holds the lease must keep renewing it meanwhile (the event
                # loop gets the interpreter between the thread's slices). It lost the lease
                # every time, at a million jobs, when the restore ran on the loop.
                snap, state = await asyncio.to_thread(_decode_and_restore, data, registry)
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
