"""Snapshots written by an older core still load. ``tests/fixtures/snapshot-v1-4112965.*`` were
written at commit 4112965 (snapshot version 1: every job with its own spec) by
``tests/fixtures/make_snapshot_v1.py``: the log of a small scenario and the snapshot of its state;
``snapshot-v2-ede240e.msgpack`` (version 2: each spec once, one msgpack map) at commit ede240e by
``make_snapshot_v2.py``, of the state the same log folds to. Version 3 (frames) loads in pieces."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from eventlog import codec
from eventlog import events as ev
from reconciler.core import decide, dump_state, load_state
from reconciler.core.snapshot import (
    JOBS_PER_FRAME,
    MAGIC,
    SNAPSHOT_VERSION,
    Frame,
    Head,
    Jobs,
    SnapshotError,
    StateLoader,
)
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


def test_a_version_2_snapshot_loads_as_the_state_its_log_folds_to() -> None:
    raw = (FIXTURES / "snapshot-v2-ede240e.msgpack").read_bytes()
    assert msgspec.msgpack.decode(raw)["version"] == 2
    folded = fold_all(codec.decode_entry_lines((FIXTURES / "snapshot-v1-4112965.log.jsonl").read_bytes()))
    restored = load_state(raw)
    assert dump_state(restored) == dump_state(folded)
    assert decide(restored) == decide(folded)


def frames(raw: bytes) -> list[Frame]:
    """The frames of a version 3 dump, in order."""
    assert raw[: len(MAGIC)] == MAGIC
    out, at = [], len(MAGIC)
    while at < len(raw):
        end = at + 4 + int.from_bytes(raw[at : at + 4], "big")
        out.append(msgspec.msgpack.decode(raw[at + 4 : end], type=Frame))
        at = end
    assert at == len(raw)
    return out


def test_this_version_writes_each_spec_once_and_the_jobs_in_slices() -> None:
    log = codec.decode_entry_lines((FIXTURES / "snapshot-v1-4112965.log.jsonl").read_bytes())
    state = fold_all(log)
    head, *rest = frames(dump_state(state))
    assert isinstance(head, Head) and head.version == SNAPSHOT_VERSION == 3 and head.jobs == len(state.jobs)
    jobs = [f for f in rest if isinstance(f, Jobs)]
    distinct = {codec.encode([j.placement, j.pod_sets]) for j in state.jobs.values()}
    assert sum(len(f.specs) for f in jobs) == len(distinct) < len(state.jobs) == sum(len(f.jobs) for f in jobs)
    assert all(j.pod_sets == [] and j.spec_key == b"" for f in jobs for j in f.jobs)
    # Many jobs: one frame per slice, then the keyed lists in slices too, each loaded in turn.
    many = fold_all(many_jobs(JOBS_PER_FRAME * 2 + 5))
    raw = dump_state(many)
    kinds = [type(f).__name__ for f in frames(raw)]
    assert kinds[:4] == ["Head", "Jobs", "Jobs", "Jobs"] and "Jobs" not in kinds[4:]
    assert max(len(f.jobs) for f in frames(raw) if isinstance(f, Jobs)) == JOBS_PER_FRAME
    assert dump_state(load_state(raw)) == raw


def many_jobs(n: int) -> list[ev.LogEntry]:
    from tests.reconciler.core.harness import Harness

    h = Harness()
    h.inputs(ev.ClusterRegistered(cluster="small", capacity={"cpu": 4000}, labels={}))
    h.inputs(
        *(
            ev.JobSubmitted(
                job=ev.JobRef(namespace="ns", name=f"j{i}", uid=f"u{i}"),
                pod_sets=[ev.PodSet(name="main", count=1, requests={"cpu": 1000 * (1 + i % 3)})],
                queue="q",
            )
            for i in range(n)
        )
    )
    h.step()
    return list(h.log)


@pytest.mark.parametrize("piece", [1, 5, 64, 4096, 1 << 30])
@pytest.mark.parametrize("name", ["snapshot-v1-4112965.msgpack", "snapshot-v2-ede240e.msgpack", "this version"])
def test_a_snapshot_fed_in_pieces_loads_as_it_does_whole(name: str, piece: int) -> None:
    folded = fold_all(codec.decode_entry_lines((FIXTURES / "snapshot-v1-4112965.log.jsonl").read_bytes()))
    raw = dump_state(folded) if name == "this version" else (FIXTURES / name).read_bytes()
    loader = StateLoader()
    for at in range(0, len(raw), piece):
        loader.feed(raw[at : at + piece])
    restored = loader.close()
    assert dump_state(restored) == dump_state(load_state(raw)) == dump_state(folded)
    assert decide(restored) == decide(folded)


def test_a_dump_loaded_with_consume_is_emptied_and_gives_the_same_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """A forecast hands its dump over (``consume``): it is given back as the copy grows."""
    from reconciler.core import snapshot

    folded = fold_all(many_jobs(JOBS_PER_FRAME * 3))
    raw = dump_state(folded)
    dump = bytearray(raw)
    monkeypatch.setattr(snapshot, "_CONSUMED_PIECE", 10_000)  # frames split between pieces
    assert len(raw) > 20 * snapshot._CONSUMED_PIECE
    restored = load_state(dump, consume=True)
    assert dump == bytearray() and dump_state(restored) == raw
    assert decide(restored) == decide(folded)


def test_a_snapshot_cut_short_or_damaged_is_refused_with_where() -> None:
    raw = dump_state(fold_all(many_jobs(JOBS_PER_FRAME + 5)))
    ends = [len(MAGIC)]  # where each frame ends
    while ends[-1] < len(raw):
        ends.append(ends[-1] + 4 + int.from_bytes(raw[ends[-1] : ends[-1] + 4], "big"))
    with pytest.raises(SnapshotError, match=f"it ends inside frame {len(ends) - 2}$"):
        load_state(raw[:-1])
    with pytest.raises(SnapshotError, match=r"1024 jobs where its head counts 1029: is it cut short\?"):
        load_state(raw[: ends[2]])
    with pytest.raises(SnapshotError, match=r"frame 1 \(waiting\) comes after 0 of its 1029 jobs"):
        load_state(raw[: ends[1]] + raw[ends[3] :])
    with pytest.raises(SnapshotError, match=r"frame 0 is 'jobs', not the head"):
        load_state(raw[:4] + raw[ends[1] :])
    with pytest.raises(SnapshotError, match=r"not a kdispatch core snapshot: .* \(in frame 1\)"):
        load_state(raw[: ends[1]] + b"\x00\x00\x00\x02\xff\xff" + raw[ends[2] :])
    with pytest.raises(SnapshotError, match="it ends before its head"):
        load_state(MAGIC)
    loader = StateLoader()  # a string that is not UTF-8, in a frame split between pieces
    with pytest.raises(SnapshotError, match=f"codec can't decode .* \\(in frame {len(ends) - 2}\\)"):
        damaged = raw[:-3] + b"\xff\xff\xff"
        for at in range(0, len(damaged), 7):
            loader.feed(damaged[at : at + 7])


def test_an_unknown_version_is_refused_with_what_to_do() -> None:
    raw = msgspec.msgpack.encode({"version": 99, "seq": 1})
    with pytest.raises(SnapshotError, match="snapshot version 99, this core reads 1, 2 and 3: replay from the log"):
        load_state(raw)
