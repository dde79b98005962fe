"""``history.rebuild.restore``: a snapshot restored with the garbage collector paused is the same
state, and the collector is running again afterwards, also when the snapshot is unreadable."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from eventlog import events as ev
from eventlog.jsonl import JsonlLog
from reconciler import core
from reconciler.core.snapshot import SnapshotError
from reconciler.history import rebuild
from reconciler.history.rebuild import (
    Snapshot,
    decode_snapshot,
    encode_snapshot,
    encode_state_snapshot,
    restore,
)
from reconciler.history.replay import replay

FIXTURE = Path(__file__).parents[2] / "fixtures" / "demo-4e2c1d6.jsonl.gz"


async def test_a_restored_snapshot_is_the_state_it_was_taken_from() -> None:
    folded = await replay(JsonlLog(FIXTURE))
    raw = core.dump_state(folded.state)
    assert core.dump_state(restore(raw, plugins=core.BUILTINS)) == raw
    assert gc.isenabled()


async def test_a_snapshot_encoded_in_one_buffer_is_the_snapshot_of_the_state() -> None:
    """The leader writes the core's dump straight into the stored object; it decodes to what the
    dump wrapped in a ``Snapshot`` does, and a standby restores the same state from it."""
    folded = await replay(JsonlLog(FIXTURE))
    policy_in_force = ev.PolicyLoaded(profiles=[], priority_classes={"high": 10})
    queues = ev.QueuesConfigured()
    for policy, with_queues in ((None, None), (policy_in_force, queues)):
        data = encode_state_snapshot(
            folded.state, seq=folded.last_seq, at_ms=folded.last_at_ms, policy=policy, queues=with_queues
        )
        assert isinstance(data, bytearray)
        wrapped = Snapshot(
            seq=folded.last_seq,
            at_ms=folded.last_at_ms,
            state=core.dump_state(folded.state),
            policy=policy,
            queues=with_queues,
        )
        assert decode_snapshot(bytes(data)) == decode_snapshot(encode_snapshot(wrapped)) == wrapped
    assert (
        core.dump_state(restore(decode_snapshot(bytes(data)).state, plugins=core.BUILTINS)) == wrapped.state
    )


def test_the_collector_runs_again_after_an_unreadable_snapshot() -> None:
    with pytest.raises(SnapshotError):
        restore(b"not a snapshot", plugins=core.BUILTINS)
    assert gc.isenabled()


async def test_a_rebuild_restores_its_snapshot_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A term that restores while holding the lease must keep renewing it: at a million jobs the
    restore is seconds of CPU, and run on the loop it cost the lease every time (bench/fleet.py).
    The snapshot is folded in as its pieces arrive, each in a worker thread."""
    import threading

    from eventlog import memory
    from eventlog.memory import MemoryLog
    from reconciler.core.snapshot import StateLoader

    folded = await replay(JsonlLog(FIXTURE))
    log = MemoryLog()
    await log.snapshots.save(folded.last_seq, encode_state_snapshot(folded.state, seq=folded.last_seq, at_ms=0))
    threads: list[threading.Thread] = []
    real = StateLoader.feed

    def recording(self: StateLoader, data: bytes | bytearray | memoryview) -> None:
        threads.append(threading.current_thread())
        real(self, data)

    monkeypatch.setattr(StateLoader, "feed", recording)
    monkeypatch.setattr(memory, "SNAPSHOT_PIECE", 4096)  # many pieces, frames split between them
    state, seq, *_ = await rebuild._load_snapshot(log.snapshots, at_or_before=folded.last_seq, plugins=None)
    assert seq == folded.last_seq and core.dump_state(state) == core.dump_state(folded.state)
    assert len(threads) > 10 and threading.main_thread() not in threads
    assert gc.isenabled()


async def test_a_snapshot_stored_by_the_code_before_still_restores() -> None:
    """``snapshot-stored-v1-ede240e.msgpack``: the object a leader stored before snapshots were
    framed (one msgpack map holding a version 2 dump), written by ``make_snapshot_v2.py``."""
    from eventlog import codec
    from eventlog.memory import MemoryLog
    from tests.reconciler.core.checks import fold_all

    fixtures = FIXTURE.parent
    data = (fixtures / "snapshot-stored-v1-ede240e.msgpack").read_bytes()
    entries = codec.decode_entry_lines((fixtures / "snapshot-v1-4112965.log.jsonl").read_bytes())
    log = MemoryLog()
    await log.snapshots.save(entries[-1].seq, data)
    state, seq, at_ms, policy, queues = await rebuild._load_snapshot(
        log.snapshots, at_or_before=entries[-1].seq, plugins=None
    )
    assert (seq, at_ms) == (entries[-1].seq, entries[-1].at_ms)
    assert policy == ev.PolicyLoaded(profiles=[], priority_classes={"high": 10})
    assert queues == ev.QueuesConfigured()
    assert core.dump_state(state) == core.dump_state(fold_all(entries))
    assert decode_snapshot(data).seq == seq


@pytest.mark.parametrize("damage", ["cut", "garbage", "head"])
async def test_an_unusable_snapshot_is_a_miss_and_the_rebuild_starts_from_the_beginning(damage: str) -> None:
    from eventlog.memory import MemoryLog

    folded = await replay(JsonlLog(FIXTURE))
    data = encode_state_snapshot(folded.state, seq=folded.last_seq, at_ms=0)
    if damage == "cut":  # the last frames missing: the state would lack jobs
        data = data[: len(data) // 2]
    elif damage == "garbage":
        data[len(data) // 2 :] = b"\xff" * (len(data) - len(data) // 2)
    else:
        data = data[:10]
    log = MemoryLog()
    await log.snapshots.save(folded.last_seq, bytes(data))
    state, seq, *_ = await rebuild._load_snapshot(log.snapshots, at_or_before=folded.last_seq, plugins=None)
    assert seq == 0 and not state.jobs
    assert gc.isenabled()
