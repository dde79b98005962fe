"""``replay --verify`` on several processes: the log cut into segments, each verified by a worker
from the state at its start.

Verifying is ~15-40 times slower than folding (a ``decide`` pass for every decision batch and
every input-batch boundary), so one pass here folds the whole log, fold only, and at each cut
takes the state as a snapshot (``core.dump_state``). Worker *i* restores the snapshot at its
segment's start, verifies the segment exactly as a sequential ``replay(verify=True)`` does, and
dumps its own state at the segment's end: that dump must equal, byte for byte, the snapshot the
next segment starts from (for the last segment, the fold's final state). Segment 0 starts from
the empty state, so by induction every start a worker trusted is the state a verified fold
reached: nothing is taken on trust that a sequential replay would have checked.

Cuts fall just before a decision batch (its first entry). There a sequential replay has no
quiet-boundary check pending (it checks those only before an input), so the segments together
recompute exactly the batches and boundaries one replay recomputes.

The parallel path only ever answers "all identical". Anything else a segment reports (a
mismatch, a gap, a plugin problem, an end state that differs from the next snapshot) is handed
to the sequential replay, whose report stands: it stops at the first problem, with the same
``Mismatch`` as always. Workers are forked (Linux); where fork is not available, or the log is
short, this is the sequential replay.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import hashlib
import multiprocessing
import os
import time
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import msgspec

from eventlog import events as ev
from eventlog.store import LogReader
from reconciler import core
from reconciler.edge.logging import get_logger
from reconciler.edge.plugins import PluginSet, installed
from reconciler.edge.progress import Progress
from reconciler.history.rebuild import restore
from reconciler.history.replay import ReplayResult, replay

log = get_logger("reconciler.verify")

# Segments shrink as the log goes on (each a 1/(GUIDE x workers) share of what is left, "guided"
# scheduling): later entries cost more to verify (more jobs in the state, more waiting), and the
# last segment to start bounds the end, so it must be short. Each costs a snapshot and its restore.
GUIDE = 2
MIN_SEGMENT = 5_000  # entries: shorter segments cost more in snapshots than they save
MIN_ENTRIES = 40_000  # below this a sequential replay is done before the workers are up
PACE_S = 0.02  # how often the fold, held back, looks whether a worker took the next segment

_entries_encoder = msgspec.msgpack.Encoder()
_entries_decoder = msgspec.msgpack.Decoder(list[ev.LogEntry])


@dataclass(frozen=True)
class Segment:
    """One worker's share: the entries from one cut to the next, with the states around them."""

    index: int
    start: bytes | None  # the snapshot at its first entry (None: the empty state, segment 0)
    entries: bytes  # msgpack of list[LogEntry]
    end_digest: bytes  # sha256 of the snapshot the next segment starts from (or the final state)


@dataclass(frozen=True)
class Outcome:
    index: int
    entries: int
    verified_batches: int
    verified_quiet: int
    problem: str | None  # why this segment does not vouch for its entries; None: all identical
    worker: int = 0  # the worker's process id
    cpu_s: float = 0.0  # the worker's CPU time for the segment, restore and decoding included


def digest(snapshot: bytes) -> bytes:
    return hashlib.sha256(snapshot).digest()


async def verify(
    reader: LogReader,
    *,
    workers: int,
    until_seq: int | None = None,
    until_ms: int | None = None,
    progress: Progress | None = None,
    plugins: PluginSet | None = None,
    segments: int | None = None,
    min_entries: int = MIN_ENTRIES,
) -> ReplayResult:
    """``replay(reader, verify=True)`` with the recomputation spread over ``workers`` processes;
    the same result (counts, state, and on any problem the sequential replay's own report).

    ``segments``: cut the log into this many equal pieces (default: shrinking ones, ``GUIDE``)."""
    plugins = plugins if plugins is not None else installed()

    async def sequential() -> ReplayResult:
        return await replay(
            reader, until_seq=until_seq, until_ms=until_ms, verify=True, progress=progress, plugins=plugins
        )

    last = await reader.last_seq()
    total = min(last, until_seq) if until_seq is not None else last
    if workers <= 1 or total < min_entries or "fork" not in multiprocessing.get_all_start_methods():
        return await sequential()
    fixed = -(-total // segments) if segments is not None else None
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_install,
        initargs=(plugins,),
    )
    cutter = _Cutter(pool, total=total, workers=workers, fixed=fixed)
    try:
        folded = await replay(
            _Paced(reader, cutter, ahead=2 * workers),
            until_seq=until_seq,
            until_ms=until_ms,
            on_input=cutter.on_input,
            on_decision=cutter.on_decision,
            plugins=plugins,
        )
        if folded.gap is None and not folded.plugin_problems:
            cutter.finish(folded.state)
            outcomes = await _collect(cutter.futures, progress)
    except BaseException:
        _stop(pool)
        raise
    if folded.gap is not None or folded.plugin_problems:
        _stop(pool)
        return await sequential()  # it stops there, with the report the user expects
    problems = [o for o in outcomes if o.problem is not None]
    if problems or sum(o.entries for o in outcomes) != folded.entries:
        _stop(pool)
        result = await sequential()
        if result.mismatch is None and result.gap is None and not result.plugin_problems:
            # Only a snapshot that restores to a state deciding otherwise can get here: a core bug.
            log.warning(
                "parallel_verify_disagrees",
                segments=[(o.index, o.problem) for o in problems],
                sequential="all identical",
            )
        return result
    pool.shutdown()
    if progress is not None:
        progress.close()
    folded.verified_batches = sum(o.verified_batches for o in outcomes)
    folded.verified_quiet = sum(o.verified_quiet for o in outcomes)
    busy: dict[int, float] = {}
    for o in outcomes:
        busy[o.worker] = busy.get(o.worker, 0.0) + o.cpu_s
    log.info(
        "verified_in_parallel",
        workers=workers,
        segments=len(outcomes),
        entries=folded.entries,
        worker_cpu_s=sorted(round(v, 2) for v in busy.values()),  # how even the split was
    )
    return folded


class _Cutter:
    """Fed every entry by the folding replay; cuts a segment just before a decision batch once
    it holds its share of the log, and hands it to the pool."""

    def __init__(self, pool: ProcessPoolExecutor, *, total: int, workers: int, fixed: int | None) -> None:
        self.pool = pool
        self.total = total
        self.workers = workers
        self.fixed = fixed
        self.futures: list[Future[Outcome]] = []
        self.start: bytes | None = None
        self.buffer: list[ev.LogEntry] = []
        self.before = 0  # entries in the segments handed over so far
        self.per_segment = self._share()

    def _share(self) -> int:
        if self.fixed is not None:
            return max(self.fixed, 1)
        left = max(self.total - self.before, 0)
        return max(-(-left // (GUIDE * self.workers)), MIN_SEGMENT)

    def on_input(self, entry: ev.LogEntry) -> None:
        self.buffer.append(entry)

    def on_decision(self, state: core.State, entry: ev.LogEntry) -> None:
        first_of_batch = entry.batch is None or entry.batch[0] == 0
        if first_of_batch and len(self.buffer) >= self.per_segment:
            self._submit(core.dump_state(state))
        self.buffer.append(entry)

    def finish(self, state: core.State) -> None:
        if self.buffer:
            self._submit(core.dump_state(state))

    def _submit(self, end: bytes) -> None:
        segment = Segment(
            index=len(self.futures),
            start=self.start,
            entries=_entries_encoder.encode(self.buffer),
            end_digest=digest(end),
        )
        self.futures.append(self.pool.submit(_verify_segment, segment))
        self.before += len(self.buffer)
        self.start, self.buffer = end, []
        self.per_segment = self._share()


class _Paced:
    """The reader, held back while ``ahead`` segments are handed over and not verified yet: each
    holds a snapshot of the state (up to a gigabyte at a million jobs), and the fold outruns the
    workers many times over. Waits in the event loop, so a NATS connection keeps answering."""

    def __init__(self, reader: LogReader, cutter: _Cutter, *, ahead: int) -> None:
        self.reader = reader
        self.cutter = cutter
        self.ahead = ahead

    async def read(
        self,
        *,
        from_seq: int = 1,
        until_seq: int | None = None,
        until_ms: int | None = None,
        batch: int = 1000,
    ) -> AsyncIterator[list[ev.LogEntry]]:
        chunks = self.reader.read(from_seq=from_seq, until_seq=until_seq, until_ms=until_ms, batch=batch)
        async for chunk in chunks:
            while sum(not f.done() for f in self.cutter.futures) > self.ahead:
                await asyncio.sleep(PACE_S)
            yield chunk

    async def last_seq(self) -> int:
        return await self.reader.last_seq()


async def _collect(futures: Sequence[Future[Outcome]], progress: Progress | None) -> list[Outcome]:
    """The segments' outcomes, until the first that cannot vouch for its entries (then the
    sequential replay takes over and the others' verdicts are moot)."""
    waiting = [asyncio.wrap_future(f) for f in futures]
    outcomes: list[Outcome] = []
    done = 0
    try:
        for next_done in asyncio.as_completed(waiting):
            try:
                outcome = await next_done
            except Exception as err:  # a worker that died is a segment not verified
                outcome = Outcome(
                    index=-1, entries=0, verified_batches=0, verified_quiet=0, problem=repr(err)
                )
            outcomes.append(outcome)
            if outcome.problem is not None:
                break
            done += outcome.entries
            if progress is not None:
                progress.update(done)
    finally:
        for w in waiting:  # so a late result does not call back into a loop that may be closed
            w.cancel()
    return sorted(outcomes, key=lambda o: o.index)


def _stop(pool: ProcessPoolExecutor) -> None:
    """No more use for the workers: segments still running are stopped, not waited for."""
    processes: dict[int, Any] = getattr(pool, "_processes", None) or {}  # no public way to stop them
    for process in list(processes.values()):
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


# -- in the worker ----------------------------------------------------------------------------

_plugins: PluginSet | None = None


def _install(plugins: PluginSet) -> None:
    """Pool initializer: forked, so the caller's plugins arrive as they are (not pickled)."""
    global _plugins
    _plugins = plugins


class _Entries:
    """A ``LogReader`` over the entries of one segment."""

    def __init__(self, entries: list[ev.LogEntry]) -> None:
        self.entries = entries

    async def read(
        self,
        *,
        from_seq: int = 1,
        until_seq: int | None = None,
        until_ms: int | None = None,
        batch: int = 1000,
    ) -> AsyncIterator[list[ev.LogEntry]]:
        yield self.entries

    async def last_seq(self) -> int:
        return self.entries[-1].seq if self.entries else 0


def _verify_segment(segment: Segment) -> Outcome:
    started = time.process_time()
    outcome = asyncio.run(_verify(segment))
    return dataclasses.replace(outcome, worker=os.getpid(), cpu_s=time.process_time() - started)


async def _verify(segment: Segment) -> Outcome:
    plugins = _plugins if _plugins is not None else installed()
    gc.unfreeze()  # what an earlier segment in this worker left behind may go now
    gc.collect()
    gc.disable()  # decoding builds trees of objects, all alive afterwards (see ``restore``)
    try:
        entries = _entries_decoder.decode(segment.entries)
        state = (
            core.new_state(plugins=plugins.registry)
            if segment.start is None
            else restore(segment.start, plugins=plugins.registry)
        )
    finally:
        gc.enable()
    # The entries and the restored state are most of this process's heap and live as long as the
    # segment: kept out of the collector's scans (a worker process ends with the verification).
    gc.freeze()
    result = await replay(_Entries(entries), state=state, verify=True, plugins=plugins)
    problem: str | None = None
    if result.mismatch is not None:
        problem = result.mismatch.reason
    elif result.gap is not None:
        problem = f"entries {result.gap[0]}-{result.gap[1]} missing"
    elif result.plugin_problems:
        problem = "plugins missing or different"
    elif result.entries != len(entries):
        problem = f"verified {result.entries} of {len(entries)} entries"
    elif digest(core.dump_state(result.state)) != segment.end_digest:
        problem = "the state at the segment's end differs from the snapshot the next one starts from"
    return Outcome(
        index=segment.index,
        entries=result.entries,
        verified_batches=result.verified_batches,
        verified_quiet=result.verified_quiet,
        problem=problem,
    )
