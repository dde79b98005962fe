"""The sequencer loop of the leader: inbox -> log -> fold -> decide -> log -> fold.

One leader term (``LeaderLoop.run_term``), as Armada documents its cycle:

1. resume: the last log sequence and inbox sequence copied (the sequencer reads them);
2. rebuild: latest snapshot + the log after it, folded into a core ``State``;
3. repair: if the log ends inside a decision batch (the previous leader died mid-append),
   recompute ``decide`` on the state before that batch and append the missing tail;
4. record the configured policy (``PolicyLoaded``, with the provenance of the plugins it uses)
   and queue configuration (``QueuesConfigured``, from ``--queues``) if they differ from the last
   ones in the log, and decide once (inputs the previous leader
   appended but did not decide on);
5. loop: pull inbox items (or a ``Tick`` when idle, a timer is due and the inbox is read to its
   end: an empty pull is no proof of that), append them stamped with
   the wall clock (never earlier than the last entry), fold, decide, append the decisions as one
   batch, fold them; snapshot every N entries at a batch boundary.

Any ``Fenced`` append ends the term: someone else wrote, so this replica's state is stale. The
caller (``reconciler.service.leader``) goes back to being a candidate. Nothing here decides: the
core does; this module only moves entries and keeps time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from eventlog import events as ev
from eventlog.store import Fenced, InboxItem, NotLeader, Sequencer
from reconciler import core
from reconciler.edge import gcpolicy
from reconciler.edge.logging import event_context, get_logger
from reconciler.edge.plugins import PluginSet, check, installed
from reconciler.history.rebuild import Folded, LogHandle, encode_state_snapshot, rebuild_for_leader
from reconciler.policy import same_policy, same_queues
from reconciler.service.metrics import OBSERVED, ReconcilerMetrics

log = get_logger("reconciler.loop")

LAG_CHECK_S = 2.0
SAVE_GRACE_S = 5.0


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class LoopSettings:
    leader_id: str
    policy: ev.PolicyLoaded | None = None  # None: record nothing, run on what the log says
    queues: ev.QueuesConfigured | None = None  # the same for the queue configuration (--queues)
    snapshot_every: int = 5_000  # entries between snapshots
    pull_max: int = 500
    idle_wait_s: float = 0.1  # longest wait for inbox items before checking timers / stop
    clock: Callable[[], int] = wall_ms
    plugins: PluginSet | None = None  # this process's plugins (default: ``installed()``)


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
        self._undrained = False  # a Tick waits for inbox messages the last pull did not bring
        self._warned_deadline: int | None = None
        self._policy: ev.PolicyLoaded | None = None  # the policy in force (for snapshots)
        self._queues: ev.QueuesConfigured | None = None  # the queue configuration in force (idem)
        self._lag_checked = 0.0
        self._lag_task: asyncio.Task[None] | None = None
        self._counters: dict[type, Any] = {}
        self.snapshot_seq = 0  # the snapshot the current term started from (0: none)
        self.warm: Folded | None = None  # a standby's state for the next term to start from (once)
        self._saving: asyncio.Task[None] | None = None  # a snapshot on its way to the store
        self.ready = asyncio.Event()  # set once a term has rebuilt and repaired (tests, readiness)
        self.metrics.fleet.follow(self._leading_state)

    def _leading_state(self) -> core.State | None:
        """The state fleet gauges are computed from: only while leading a term (a standby's is stale)."""
        return self.state if self.ready.is_set() else None

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
            if self._saving is not None and not self._saving.done():
                # A snapshot taken is valid whoever leads next: let it finish, within a bound (NATS
                # may be what ended the term).
                await asyncio.wait({self._saving}, timeout=SAVE_GRACE_S)
                self._saving.cancel()
            if self._lag_task is not None:
                self._lag_task.cancel()
            close = getattr(seqr, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):  # the connection may be what failed
                    await close()

    async def _start(self, seqr: Sequencer, bound: Any) -> None:
        last_seq, last_inbox = await seqr.resume()
        plugins = self.settings.plugins if self.settings.plugins is not None else installed()
        warm, self.warm = self.warm, None
        rebuilt = await rebuild_for_leader(self.log, last_seq=last_seq, plugins=plugins, warm=warm)
        self.state = rebuilt.state
        self.last_seq = rebuilt.last_seq
        self.last_at_ms = rebuilt.last_at_ms
        self._policy = rebuilt.policy
        self._queues = rebuilt.queues
        self._since_snapshot = 0
        self.metrics.log_seq.set(self.last_seq)
        self.snapshot_seq = rebuilt.snapshot_seq
        gcpolicy.settle()  # the state lives as long as the term: kept out of the collector's walks
        bound.info(
            "term_started",
            last_seq=last_seq,
            last_inbox_seq=last_inbox,
            from_snapshot=rebuilt.snapshot_seq or None,
            warm=warm is not None,
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
        policy = plugins.stamp(self.settings.policy) if self.settings.policy is not None else None
        if policy is not None and not same_policy(policy, rebuilt.policy):
            await self._append_inputs(seqr, [InboxItem(inbox_seq=None, event=policy)])
            bound.info(
                "policy_recorded",
                profiles=[p.name for p in policy.profiles],
                third_party_plugins=[
                    f"{r.name}={r.distribution}=={r.version}" for r in policy.plugins or [] if not r.builtin
                ],
            )
        elif policy is None:
            # Running on the log's policy: its decisions from here on use this process's plugins.
            for problem in check(rebuilt.policy, plugins):
                bound.warning("policy_plugin_differs", problem=problem.describe(), remedy=problem.remedy())
        queues = self.settings.queues
        if queues is not None and not same_queues(queues, rebuilt.queues):
            await self._append_inputs(seqr, [InboxItem(inbox_seq=None, event=queues)])
            bound.info(
                "queues_recorded",
                source=queues.source,
                cluster_queues=[q.name for q in queues.cluster_queues],
                replaces=None if rebuilt.queues is None else rebuilt.queues.source,
            )
        # Inputs the previous leader appended without deciding on (or a new policy) need a decision.
        await self._decide_and_append(seqr, at_ms=self.last_at_ms)
        self.ready.set()

    async def _step(self, seqr: Sequencer, bound: Any) -> None:
        assert self.state is not None
        await self._measure_lag(seqr)
        now = max(self.settings.clock(), self.last_at_ms)
        deadline = core.next_deadline(self.state)
        wait_s = self.settings.idle_wait_s
        if deadline is not None and not self._undrained:
            wait_s = min(wait_s, max(deadline - now, 0) / 1000)
        started = time.perf_counter()
        items = await seqr.pull(max_items=self.settings.pull_max, timeout_s=max(wait_s, 0.001))
        tick_at: int | None = None
        if not items:
            now = max(self.settings.clock(), self.last_at_ms)
            if not self._tick_due(deadline, now, bound=bound):
                return
            # Time passes in the log only once the inbox is read to its end: what it holds may be
            # the heartbeat that keeps a cluster from being declared Lost by this very Tick.
            self._undrained = not await seqr.drained()
            if self._undrained:
                return
            items = [InboxItem(inbox_seq=None, event=ev.Tick())]
            tick_at = now  # not later: what arrived after the inbox was found drained comes after
            self._last_tick_deadline = deadline
        self._undrained = False
        at_ms = await self._append_inputs(seqr, items, at_ms=tick_at)
        await self._decide_and_append(seqr, at_ms=at_ms)
        elapsed = time.perf_counter() - started
        self.metrics.batches.inc()
        self.metrics.batch_seconds.observe(elapsed)
        self.metrics.sequencing_lag.set(elapsed)
        # Never more often than once per live job either: a snapshot encodes every job, so at a
        # million jobs one every 5,000 entries would cost more than the entries (docs/sizing.md).
        if self._since_snapshot >= max(self.settings.snapshot_every, len(self.state.jobs)):
            await self._snapshot(bound)

    async def _measure_lag(self, seqr: Sequencer) -> None:
        """Inbox messages not yet sequenced, every couple of seconds (JetStream logs only).

        Asked in the background: during a NATS fail-over the answer can take seconds, and a
        metric must never hold up sequencing."""
        now = time.monotonic()
        if now - self._lag_checked < LAG_CHECK_S or (self._lag_task is not None and not self._lag_task.done()):
            return
        self._lag_checked = now
        js, names = getattr(self.log, "js", None), getattr(self.log, "names", None)
        if js is None or names is None or getattr(seqr, "last_inbox_seq", None) is None:
            return
        self._lag_task = asyncio.create_task(self._lag_from(js, names.inbox_stream, seqr), name="inbox-lag")

    async def _lag_from(self, js: Any, stream: str, seqr: Sequencer) -> None:
        try:
            info = await js.stream_info(stream)
        except Exception:  # a metric is not worth failing a term for
            return
        copied = int(getattr(seqr, "last_inbox_seq", 0))
        self.metrics.inbox_lag.set(max(int(info.state.last_seq) - copied, 0))

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

    async def _append_inputs(
        self, seqr: Sequencer, items: Sequence[InboxItem], *, at_ms: int | None = None
    ) -> int:
        at_ms = max(self.settings.clock() if at_ms is None else at_ms, self.last_at_ms)
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
        counted: dict[type, int] = {}  # counters moved once per event type and batch, not per entry
        say: Any = None  # the logger for noteworthy decisions, resolved at the batch's first one
        for entry in entries:
            self.state = core.fold(self.state, entry)
            kind = type(entry.event)
            counted[kind] = counted.get(kind, 0) + 1
            if decisions and kind in OBSERVED:  # placements (wait time), evictions, requeues
                self.metrics.decided(entry, self.state)
            if kind is ev.PolicyLoaded:
                self._policy = entry.event  # type: ignore[assignment]
            elif kind is ev.QueuesConfigured:
                self._queues = entry.event  # type: ignore[assignment]
            elif decisions and kind in _NOTEWORTHY:
                if say is None:
                    say = _decision_logger()
                if say is not False:
                    _log_decision(entry, say)
        counters = self._counters
        for kind, n in counted.items():
            counter = counters.get(kind)
            if counter is None:  # one label lookup per event type, not per batch
                family = self.metrics.decisions if decisions else self.metrics.inputs
                counter = counters[kind] = family.labels(type=kind.__name__)
            counter.inc(n)
        if entries:
            self.last_seq = entries[-1].seq
            self.last_at_ms = max(self.last_at_ms, entries[-1].at_ms)
            self._since_snapshot += len(entries)
            self.metrics.log_seq.set(self.last_seq)

    async def _snapshot(self, bound: Any) -> None:
        """Encode the state now (a batch boundary) and store it in the background: at fleet size
        the upload takes seconds, which the loop spends sequencing. One upload at a time; the
        next is taken once it is done."""
        assert self.state is not None
        if self._saving is not None and not self._saving.done():
            return
        seq = self.last_seq
        data = encode_state_snapshot(
            self.state, seq=seq, at_ms=self.last_at_ms, policy=self._policy, queues=self._queues
        )
        self._since_snapshot = 0
        gcpolicy.settle()  # what joined the state since the last one (the same rhythm: a bounded walk)
        self._saving = asyncio.create_task(self._save(seq, data, bound), name="snapshot-save")

    async def snapshot_stored(self) -> None:
        """Wait for the snapshot being uploaded, if any (tests, shutdown)."""
        if self._saving is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._saving

    async def _save(self, seq: int, data: bytearray, bound: Any) -> None:
        try:
            await self.log.snapshots.save(seq, data)
        except Exception as err:  # only an optimisation: the next one may succeed
            bound.warning("snapshot_failed", seq=seq, error=str(err) or type(err).__name__)
            return
        self.metrics.snapshots.inc()
        bound.info("snapshot_saved", seq=seq, bytes=len(data))

# Decisions an operator wants to see in the logs without asking; every decision is in the log
# itself (``kdispatch log``), so the routine ones are not repeated in the process's output.
_NOTEWORTHY: frozenset[type] = frozenset(
    {ev.Unschedulable, ev.Requeued, ev.ClusterLost, ev.ClusterRecovered, ev.PreemptionClaimed, ev.Evict, ev.ClaimExpired}
)


def _decision_logger() -> Any:
    """A logger bound once for a batch's noteworthy decisions, or False if info lines are filtered
    out: the module's lazy logger binds afresh at every call, and behind a backlog of jobs that
    do not fit that, with each line's context, cost more per job than appending the decision."""
    bound = log.bind()
    enabled = getattr(bound, "is_enabled_for", None)  # structlog's filtering loggers have it
    return False if enabled is not None and not enabled(logging.INFO) else bound


def _log_decision(entry: ev.LogEntry, say: Any = log) -> None:
    event = entry.event
    ctx = event_context(event)
    kind = ctx.pop("event")
    detail = getattr(event, "message", "") or getattr(event, "reason", "")
    say.info("decided", decision=kind, seq=entry.seq, detail=detail or None, **ctx)


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
