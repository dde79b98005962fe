"""``history.rebuild.restore``: a snapshot restored with the garbage collector paused is the same
state, and the collector is running again afterwards, also when the snapshot is unreadable."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from eventlog.jsonl import JsonlLog
from reconciler import core
from reconciler.core.snapshot import SnapshotError
from reconciler.history.rebuild import restore
from reconciler.history.replay import replay

FIXTURE = Path(__file__).parents[2] / "fixtures" / "demo-4e2c1d6.jsonl.gz"


async def test_a_restored_snapshot_is_the_state_it_was_taken_from() -> None:
    folded = await replay(JsonlLog(FIXTURE))
    raw = core.dump_state(folded.state)
    assert core.dump_state(restore(raw, plugins=core.BUILTINS)) == raw
    assert gc.isenabled()


def test_the_collector_runs_again_after_an_unreadable_snapshot() -> None:
    with pytest.raises(SnapshotError):
        restore(b"not a snapshot", plugins=core.BUILTINS)
    assert gc.isenabled()
