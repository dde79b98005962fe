"""``replay --verify`` spread over worker processes (``reconciler.history.parallel``) must say
exactly what the sequential replay says: the same counts and final state on a good log, the
same mismatch on a tampered one, and a cut whose snapshot is not the verified fold's state must
not be trusted."""

from __future__ import annotations

import asyncio
import gzip
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
import structlog

from eventlog import codec
from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from eventlog.jsonl import JsonlLog
from reconciler import core
from reconciler.history import parallel
from reconciler.history.replay import replay
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready

from .scenario import POLICY, decisions_of, publish_clusters, submission, wait_for

FIXTURE = Path(__file__).parents[2] / "fixtures" / "demo-4e2c1d6.jsonl.gz"


def fixture_entries() -> list[ev.LogEntry]:
    return codec.decode_entry_lines(gzip.decompress(FIXTURE.read_bytes()))


def write(path: Path, entries: list[ev.LogEntry]) -> JsonlLog:
    path.write_bytes(b"".join(codec.encode(e) + b"\n" for e in entries))
    return JsonlLog(path)


async def test_a_good_log_verifies_in_segments_as_it_does_in_one_piece() -> None:
    log = JsonlLog(FIXTURE)
    with structlog.testing.capture_logs() as logs:
        spread = await parallel.verify(log, workers=2, segments=5, min_entries=0)
    whole = await replay(log, verify=True)
    assert whole.mismatch is None and spread.mismatch is None
    assert [e["segments"] for e in logs if e["event"] == "verified_in_parallel"] == [5]
    assert (spread.entries, spread.inputs, spread.decisions, spread.batches) == (
        whole.entries,
        whole.inputs,
        whole.decisions,
        whole.batches,
    )
    assert (spread.verified_batches, spread.verified_quiet) == (whole.verified_batches, whole.verified_quiet)
    assert core.dump_state(spread.state) == core.dump_state(whole.state)


async def test_a_changed_decision_late_in_the_log_is_reported_as_the_sequential_replay_reports_it(
    tmp_path: Path,
) -> None:
    entries = fixture_entries()
    at = max(i for i, e in enumerate(entries) if isinstance(e.event, ev.Nominated))
    nominated = entries[at].event
    assert isinstance(nominated, ev.Nominated)
    entries[at] = msgspec.structs.replace(
        entries[at], event=msgspec.structs.replace(nominated, clusters=[*nominated.clusters, "elsewhere"])
    )
    log = write(tmp_path / "tampered.jsonl", entries)
    spread = await parallel.verify(log, workers=2, segments=4, min_entries=0)
    whole = await replay(log, verify=True)
    assert whole.mismatch is not None and spread.mismatch is not None
    assert (spread.mismatch.seq, spread.mismatch.reason) == (whole.mismatch.seq, whole.mismatch.reason)
    assert spread.mismatch.seq <= entries[at].seq


async def test_a_segment_whose_end_state_is_not_the_next_snapshot_is_not_trusted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The last segment's end is checked against the fold's final state; given another state
    there (as a next segment's snapshot would be if the fold and the workers disagreed), the
    parallel path must not vouch for the log."""
    submit = parallel._Cutter._submit

    def spoil_the_final_state(self: parallel._Cutter, end: bytes) -> None:
        if len(self.futures) == 2:  # the third and last segment of three
            state = core.load_state(end)
            state.now_ms += 1
            end = core.dump_state(state)
        submit(self, end)

    monkeypatch.setattr(parallel._Cutter, "_submit", spoil_the_final_state)
    with structlog.testing.capture_logs() as logs:
        result = await parallel.verify(JsonlLog(FIXTURE), workers=2, segments=3, min_entries=0)
    # The sequential replay that took over found the log itself sound.
    assert result.mismatch is None and result.verified_batches == 651
    [warning] = [e for e in logs if e["event"] == "parallel_verify_disagrees"]
    assert warning["segments"] == [
        (2, "the state at the segment's end differs from the snapshot the next one starts from")
    ]


def test_the_command_verifies_on_two_processes_with_the_same_report() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "reconciler.cli",
            "replay",
            "--verify",
            "--workers",
            "2",
            "--file",
            str(FIXTURE),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "651 decision batches recomputed, all identical" in proc.stdout, proc.stdout


def test_workers_without_verify_is_refused_with_what_to_do() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler.cli", "replay", "--workers", "2", "--file", str(FIXTURE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "--workers spreads --verify over processes" in proc.stderr


async def test_up_to_a_bound_it_verifies_what_the_sequential_replay_verifies() -> None:
    log = JsonlLog(FIXTURE)
    spread = await parallel.verify(log, workers=2, segments=3, min_entries=0, until_seq=2_000)
    whole = await replay(log, verify=True, until_seq=2_000)
    assert spread.mismatch is None and spread.last_seq == whole.last_seq == 2_000
    assert (spread.verified_batches, spread.verified_quiet, spread.incomplete_batches) == (
        whole.verified_batches,
        whole.verified_quiet,
        whole.incomplete_batches,
    )
    assert core.dump_state(spread.state) == core.dump_state(whole.state)


async def test_a_log_read_from_nats_verifies_in_segments_and_the_connection_survives_the_workers(
    jslog: JetStreamLog,
) -> None:
    """The workers are forked while this process holds a NATS connection mid-read: they must
    leave it alone (they never touch it), and it must still serve reads afterwards."""
    loop = LeaderLoop(jslog, LoopSettings(leader_id="A", policy=POLICY, idle_wait_s=0.02))
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    await wait_ready(loop, timeout_s=20)
    await publish_clusters(jslog)
    for j in range(4):
        await jslog.inbox.publish(submission(j), msg_id=f"s{j}")
    await wait_for(jslog, lambda es: len(decisions_of(es, ev.Nominated)) >= 4)
    stop.set()
    assert await term == "stopped"
    with structlog.testing.capture_logs() as logs:
        spread = await parallel.verify(jslog.reader, workers=2, segments=2, min_entries=0)
    assert [e["segments"] for e in logs if e["event"] == "verified_in_parallel"] == [2]
    whole = await replay(jslog.reader, verify=True)
    assert spread.mismatch is None and whole.mismatch is None
    assert (spread.entries, spread.verified_batches, spread.verified_quiet) == (
        whole.entries,
        whole.verified_batches,
        whole.verified_quiet,
    )


class SmallChunks:
    """The fixture's entries, read 50 at a time (as NATS hands them over in batches)."""

    def __init__(self, entries: list[ev.LogEntry]) -> None:
        self.entries = entries

    async def read(
        self, *, from_seq: int = 1, until_seq: int | None = None, until_ms: int | None = None, batch: int = 50
    ) -> AsyncIterator[list[ev.LogEntry]]:
        for i in range(0, len(self.entries), 50):
            yield self.entries[i : i + 50]

    async def last_seq(self) -> int:
        return self.entries[-1].seq


async def test_the_fold_waits_while_the_workers_have_segments_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each segment handed over holds a snapshot; the fold, many times faster than the workers,
    must not hand over the whole log at once."""
    submit = parallel._Cutter._submit
    waiting: list[int] = []

    def counting(self: parallel._Cutter, end: bytes) -> None:
        waiting.append(sum(not f.done() for f in self.futures))
        submit(self, end)

    monkeypatch.setattr(parallel._Cutter, "_submit", counting)
    result = await parallel.verify(SmallChunks(fixture_entries()), workers=2, segments=20, min_entries=0)
    assert result.mismatch is None and result.verified_batches == 651
    assert len(waiting) >= 15 and max(waiting) <= 2 * 2 + 1, waiting
