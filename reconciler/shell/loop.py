"""The sequencer loop of the leader: inbox -> log -> fold -> decide -> log -> fold.

One leader term (``LeaderLoop.run_term``), as Armada documents its cycle:

1. resume: the last log sequence and inbox sequence copied (the sequencer reads them);
2. rebuild: latest snapshot + the log after it, folded into a core ``State``;
3. repair: if the log ends inside a decision batch (the previous leader died mid-append),
   recompute ``decide`` on the state before that batch and append the missing tail;
4. record the configured policy (``PolicyLoaded``) if it differs from the last one in the log,
   and decide once (inputs the previous leader appended but did not decide on);
5. loop: pull inbox items (or a ``Tick`` when idle and a timer is due), append them stamped with
   the wall clock (never earlier than the last entry), fold, decide, append the decisions as one
   batch, fold them; snapshot every N entries at a batch boundary.

Any ``Fenced`` append ends the term: someone else wrote, so this replica's state is stale. The
caller (``reconciler.shell.leader``) goes back to being a candidate. Nothing here decides: the
core does; this module only moves entries and keeps time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from eventlog import codec
from eventlog import events as ev
from eventlog.store import Fenced, InboxItem, LogReader, NotLeader, Sequencer, SnapshotStore
from reconciler import core
from reconciler.shell.logging import event_context, get_logger
from reconciler.shell.metrics import ReconcilerMetrics
from reconciler.shell.policy import same_policy
from reconciler.shell.progress import Progress
from reconciler.shell.replay import replay

log = get_logger("reconciler.loop")

SNAPSHOT_VERSION = 1
LAG_CHECK_S = 2.0


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


_snap_encoder = msgspec.msgpack.Encoder()
_snap_decoder = msgspec.msgpack.Decoder(Snapshot)


def encode_snapshot(snap: Snapshot) -> bytes:
    return _snap_encoder.encode(snap)


def decode_snapshot(data: bytes) -> Snapshot:
    return _snap_decoder.decode(data)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


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


async def load_snapshot(
    snapshots: SnapshotStore | None, *, at_or_before: int
) -> tuple[core.State, int, int, ev.PolicyLoaded | None]:
    """(state, seq, at_ms, policy) from the latest usable snapshot, or a fresh state at seq 0."""
    if snapshots is not None and at_or_before > 0:
        found = await snapshots.latest(at_or_before=at_or_before)
        if found is not None:
            seq, data = found
            try:
                snap = decode_snapshot(data)
                return core.load_state(snap.state), snap.seq, snap.at_ms, snap.policy
            except Exception as err:  # a snapshot from another version is a cache miss, not a failure
                log.warning("snapshot_unusable", seq=seq, error=str(err))
    return core.new_state(), 0, 0, None


@dataclass
class Folded:
    state: core.State
    last_seq: int
    last_at_ms: int
    policy: ev.PolicyLoaded | None  # the last PolicyLoaded folded (or the snapshot's)
    snapshot_seq: int = 0  # the snapshot it started from (0: from the beginning)


async def rebuild_state(
    reader: LogReader,
    snapshots: SnapshotStore | None,
    *,
    until_seq: int | None = None,
    until_ms: int | None = None,
    label: str = "rebuild",
    logger: Any = None,
) -> Folded:
    """Fold the log up to the bounds, from the latest snapshot at or before them when possible."""
    last = until_seq if until_seq is not None else await reader.last_seq()
    snap_at = last if until_ms is None else 0  # a time bound says nothing about snapshot seqs
    state, seq, at_ms, policy = await load_snapshot(snapshots, at_or_before=snap_at)
    if seq >= last and until_ms is None:
        return Folded(state=state, last_seq=seq, last_at_ms=at_ms, policy=policy, snapshot_seq=seq)
    progress = Progress(total=max(last - seq, 0), label=label, logger=logger)
    result = await replay(
        reader, state=state, from_seq=seq + 1, until_seq=until_seq, until_ms=until_ms, progress=progress
    )
    return Folded(
        state=result.state,
        last_seq=result.last_seq or seq,
        last_at_ms=result.last_at_ms or at_ms,
        policy=result.last_policy or policy,
        snapshot_seq=seq,
    )


async def rebuild_for_leader(log_: LogHandle, *, last_seq: int) -> Rebuilt:
    """The leader's view of the log up to ``last_seq``, with the repair of a batch cut short."""
    reader = log_.reader
    last_entry: ev.LogEntry | None = None
    if last_seq > 0:
        async for chunk in reader.read(from_seq=last_seq, until_seq=last_seq):
            last_entry = chunk[-1] if chunk else last_entry
    cut = last_entry is not None and last_entry.batch is not None and last_entry.batch[0] < last_entry.batch[1] - 1
    if not cut or last_entry is None or last_entry.batch is None:
        f = await rebuild_state(reader, log_.snapshots, until_seq=last_seq, logger=log)
        return Rebuilt(
            state=f.state,
            last_seq=f.last_seq,
            last_at_ms=f.last_at_ms,
            policy=f.policy,
            repair=[],
            snapshot_seq=f.snapshot_seq,
        )
    index, count = last_entry.batch
    batch_start = last_entry.seq - index
    f = await rebuild_state(reader, log_.snapshots, until_seq=batch_start - 1, logger=log)
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


@dataclass
class LoopSettings:
    leader_id: str
    policy: ev.PolicyLoaded | None = None  # None: record nothing, run on what the log says
    snapshot_every: int = 5_000  # entries between snapshots
    pull_max: int = 500
    idle_wait_s: float = 0.1  # longest wait for inbox items before checking timers / stop
    clock: Callable[[], int] = wall_ms


class LeaderLoop:
    """Runs leader terms on one log; the state of the last term stays readable (``state``)."""

    def __init__(self, log_: LogHandle, settings: LoopSettings, *, metrics: ReconcilerMetrics | None = None):
        self.log = log_
        self.settings = settings
        self.metrics = metrics or ReconcilerMetrics()
        self.state: core.State | None = None
        self.last_seq = 0
        self.last_at_ms = 0
        self._since_snapshot = 0
        self._last_tick_deadline: int | None = None
        self._warned_deadline: int | None = None
        self._policy: ev.PolicyLoaded | None = None  # the policy in force (for snapshots)
        self._lag_checked = 0.0
        self._counters: dict[type, Any] = {}
        self.snapshot_seq = 0  # the snapshot the current term started from (0: none)
        self.ready = asyncio.Event()  # set once a term has rebuilt and repaired (tests, readiness)

    # -- one term -----------------------------------------------------------------------------

    async def run_term(self, *, stop: asyncio.Event, lease: Any = None) -> str:
        """Lead until ``stop`` is set, the lease is lost, or an append is fenced.

        ``lease`` (``eventlog``'s ``Lease``: ``lost`` event, ``valid()``) is handed to the
        sequencer, which refuses to append once it cannot vouch for it. Returns why the term
        ended: ``"stopped"``, ``"lease-lost"`` or ``"fenced"``.
        """
        lost: asyncio.Event | None = getattr(lease, "lost", None)
        seqr = (
            self.log.sequencer(self.settings.leader_id, lease=lease)
            if lease is not None
            else self.log.sequencer(self.settings.leader_id)
        )
        self.metrics.terms.inc()
        self.metrics.leader.set(1)
        bound = log.bind(leader=self.settings.leader_id)
        try:
            if not await _unless_lost(self._start(seqr, bound), lost):
                return "lease-lost"
            while True:
                if stop.is_set():
                    return "stopped"
                if lost is not None and lost.is_set():
                    return "lease-lost"
                if not await _unless_lost(self._step(seqr, bound), lost):
                    return "lease-lost"
        except Fenced as err:
            bound.warning("fenced_stepping_down", error=str(err), last_seq=self.last_seq)
            return "fenced"
        except NotLeader as err:
            bound.warning("lease_lost_stepping_down", error=str(err), last_seq=self.last_seq)
            return "lease-lost"
        finally:
            self.metrics.leader.set(0)
            self.ready.clear()
            close = getattr(seqr, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):  # the connection may be what failed
                    await close()

    async def _start(self, seqr: Sequencer, bound: Any) -> None:
        last_seq, last_inbox = await seqr.resume()
        rebuilt = await rebuild_for_leader(self.log, last_seq=last_seq)
        self.state = rebuilt.state
        self.last_seq = rebuilt.last_seq
        self.last_at_ms = rebuilt.last_at_ms
        self._policy = rebuilt.policy
        self._since_snapshot = 0
        self.metrics.log_seq.set(self.last_seq)
        self.snapshot_seq = rebuilt.snapshot_seq
        bound.info(
            "term_started",
            last_seq=last_seq,
            last_inbox_seq=last_inbox,
            from_snapshot=rebuilt.snapshot_seq or None,
            policy_in_log=rebuilt.policy is not None,
        )
        if rebuilt.repair:
            entries = await seqr.append_decisions(
                rebuilt.repair,
                at_ms=rebuilt.repair_at_ms,
                first_index=rebuilt.repair_first_index,
                count=rebuilt.repair_count,
            )
            self._fold_all(entries, decisions=True)
            bound.warning("batch_completed", appended=len(entries), count=rebuilt.repair_count)
        policy = self.settings.policy
        if policy is not None and not same_policy(policy, rebuilt.policy):
            await self._append_inputs(seqr, [InboxItem(inbox_seq=None, event=policy)])
            bound.info("policy_recorded", profiles=[p.name for p in policy.profiles])
        # Inputs the previous leader appended without deciding on (or a new policy) need a decision.
        await self._decide_and_append(seqr, at_ms=self.last_at_ms)
        self.ready.set()

    async def _step(self, seqr: Sequencer, bound: Any) -> None:
        assert self.state is not None
        await self._measure_lag(seqr)
        now = max(self.settings.clock(), self.last_at_ms)
        deadline = core.next_deadline(self.state)
        wait_s = self.settings.idle_wait_s
        if deadline is not None:
            wait_s = min(wait_s, max(deadline - now, 0) / 1000)
        started = time.perf_counter()
        items = await seqr.pull(max_items=self.settings.pull_max, timeout_s=max(wait_s, 0.001))
        if not items:
            now = max(self.settings.clock(), self.last_at_ms)
            if not self._tick_due(deadline, now, bound=bound):
                return
            items = [InboxItem(inbox_seq=None, event=ev.Tick())]
            self._last_tick_deadline = deadline
        at_ms = await self._append_inputs(seqr, items)
        await self._decide_and_append(seqr, at_ms=at_ms)
        elapsed = time.perf_counter() - started
        self.metrics.batches.inc()
        self.metrics.batch_seconds.observe(elapsed)
        self.metrics.lag_ms.set(round(elapsed * 1000, 3))
        if self._since_snapshot >= self.settings.snapshot_every:
            await self._snapshot(bound)

    async def _measure_lag(self, seqr: Sequencer) -> None:
        """Inbox messages not yet sequenced, every couple of seconds (JetStream logs only)."""
        now = time.monotonic()
        if now - self._lag_checked < LAG_CHECK_S:
            return
        self._lag_checked = now
        js, names = getattr(self.log, "js", None), getattr(self.log, "names", None)
        copied = getattr(seqr, "last_inbox_seq", None)
        if js is None or names is None or copied is None:
            return
        try:
            info = await js.stream_info(names.inbox_stream)
        except Exception:  # a metric is not worth failing a term for
            return
        self.metrics.inbox_lag.set(max(int(info.state.last_seq) - int(copied), 0))

    def _tick_due(self, deadline: int | None, now: int, *, bound: Any) -> bool:
        if deadline is None or now < deadline:
            return False
        if self._last_tick_deadline is not None and deadline <= self._last_tick_deadline:
            # A Tick already passed this deadline and the core still reports it: ticking again
            # would spin. Say so once; the next input or a later deadline moves things on.
            if self._warned_deadline != deadline:
                bound.warning("deadline_not_cleared_by_tick", deadline_ms=deadline, now_ms=now)
                self._warned_deadline = deadline
            return False
        return True

    # -- appends ------------------------------------------------------------------------------

    async def _append_inputs(self, seqr: Sequencer, items: Sequence[InboxItem]) -> int:
        at_ms = max(self.settings.clock(), self.last_at_ms)
        entries = await seqr.append_inputs(items, at_ms=at_ms)
        self._fold_all(entries, decisions=False)
        return at_ms

    async def _decide_and_append(self, seqr: Sequencer, *, at_ms: int) -> None:
        assert self.state is not None
        started = time.perf_counter()
        decisions = core.decide(self.state)
        self.metrics.decide_seconds.observe(time.perf_counter() - started)
        if not decisions:
            return
        entries = await seqr.append_decisions(decisions, at_ms=at_ms)
        self._fold_all(entries, decisions=True)

    def _fold_all(self, entries: Sequence[ev.LogEntry], *, decisions: bool) -> None:
        assert self.state is not None
        counters = self._counters
        for entry in entries:
            self.state = core.fold(self.state, entry)
            kind = type(entry.event)
            counter = counters.get(kind)
            if counter is None:  # one label lookup per event type, not per entry
                family = self.metrics.decisions if decisions else self.metrics.inputs
                counter = counters[kind] = family.labels(type=kind.__name__)
            counter.inc()
            if kind is ev.PolicyLoaded:
                self._policy = entry.event  # type: ignore[assignment]
            elif decisions and kind in _NOTEWORTHY:
                _log_decision(entry)
        if entries:
            self.last_seq = entries[-1].seq
            self.last_at_ms = max(self.last_at_ms, entries[-1].at_ms)
            self._since_snapshot += len(entries)
            self.metrics.log_seq.set(self.last_seq)

    async def _snapshot(self, bound: Any) -> None:
        assert self.state is not None
        snap = Snapshot(
            seq=self.last_seq,
            at_ms=self.last_at_ms,
            state=core.dump_state(self.state),
            policy=self._policy,
        )
        await self.log.snapshots.save(self.last_seq, encode_snapshot(snap))
        self._since_snapshot = 0
        self.metrics.snapshots.inc()
        bound.info("snapshot_saved", seq=self.last_seq, bytes=len(snap.state))

# Decisions an operator wants to see in the logs without asking; every decision is in the log
# itself (``kdispatch log``), so the routine ones are not repeated in the process's output.
_NOTEWORTHY: frozenset[type] = frozenset(
    {ev.Unschedulable, ev.Requeued, ev.ClusterLost, ev.ClusterRecovered, ev.PreemptionClaimed, ev.Evict, ev.ClaimExpired}
)


def _log_decision(entry: ev.LogEntry) -> None:
    event = entry.event
    ctx = event_context(event)
    kind = ctx.pop("event")
    detail = getattr(event, "message", "") or getattr(event, "reason", "")
    log.info("decided", decision=kind, seq=entry.seq, detail=detail or None, **ctx)


async def _unless_lost(work: Coroutine[Any, Any, None], lost: asyncio.Event | None) -> bool:
    """Run one step; abandon it (False) if the lease is lost meanwhile.

    A step blocked on an unreachable NATS would otherwise keep a deposed leader from noticing.
    Abandoning an append half-way is safe: the log is fenced, and the next leader repairs a
    decision batch cut short.
    """
    if lost is None:
        await work
        return True
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(lost.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    return False


async def wait_ready(loop: LeaderLoop, *, timeout_s: float) -> None:
    await asyncio.wait_for(loop.ready.wait(), timeout=timeout_s)
