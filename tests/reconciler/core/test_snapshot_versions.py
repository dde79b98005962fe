"""Snapshots written by an older core still load. ``tests/fixtures/snapshot-v1-4112965.*`` were
written at commit 4112965 (snapshot version 1: every job with its own spec) by
``tests/fixtures/make_snapshot_v1.py``: the log of a small scenario and the snapshot of its state."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from eventlog import codec
from reconciler.core import decide, dump_state, load_state
from reconciler.core.snapshot import SNAPSHOT_VERSION, SnapshotError
from tests.reconciler.core.checks import fold_all

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def test_a_version_1_snapshot_loads_as_the_state_its_log_folds_to() -> None:
    raw = (FIXTURES / "snapshot-v1-4112965.msgpack").read_bytes()
    assert msgspec.msgpack.decode(raw)["version"] == 1
    log = codec.decode_entry_lines((FIXTURES / "snapshot-v1-4112965.log.jsonl").read_bytes())
    folded = fold_all(log)
    restored = load_state(raw)
    assert {j.phase for j in restored.jobs.values()} == {"Placed", "Unschedulable", "Nominated"}
    assert dump_state(restored) == dump_state(folded)
    assert decide(restored) == decide(folded)


def test_this_version_writes_each_spec_once() -> None:
    log = codec.decode_entry_lines((FIXTURES / "snapshot-v1-4112965.log.jsonl").read_bytes())
    state = fold_all(log)
    snap = msgspec.msgpack.decode(dump_state(state))
    assert snap["version"] == SNAPSHOT_VERSION == 2
    distinct = {codec.encode([j.placement, j.pod_sets]) for j in state.jobs.values()}
    assert len(snap["specs"]) == len(distinct) < len(state.jobs) == len(snap["job_specs"]) // 4
    assert all("pod_sets" not in job and "spec_key" not in job for job in snap["jobs"])


def test_an_unknown_version_is_refused_with_what_to_do() -> None:
    raw = msgspec.msgpack.encode({"version": 99, "seq": 1})
    with pytest.raises(SnapshotError, match="snapshot version 99, this core reads 1 and 2: replay from the log"):
        load_state(raw)
