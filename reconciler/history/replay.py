"""Replay engine: fold a log into a core ``State``, verifying or explaining decision batches.

The log interleaves inputs with the decision batches the leader computed right after them. A
decision batch (entries with ``batch=(i, n)``, contiguous, ``i`` from 0 to n-1) was computed
by ``decide`` on the state as it was just before the batch's first entry, so replay can:

- rebuild: fold everything (the state any leader or command starts from);
- verify: at each batch, call ``decide`` on the state before it and compare with what was
  recorded, byte for byte (``codec.encode``); the first difference stops the replay;
- look inside: hand the state before each decision to a callback (``explain`` uses it).

Each policy folded is checked against the plugins installed here (``reconciler.edge.plugins``):
a plugin it uses that is missing or another version than the log records is reported
(``plugin_problems``); ``verify`` stops there, since recomputing with other plugins could only
report a mismatch that says nothing about the core.

Batches are grouped here (``units``) so every consumer sees a batch as one unit, whatever the
reader's own batching is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from eventlog import codec
from eventlog import events as ev
from eventlog.store import LogReader
from reconciler import core
from reconciler.edge.plugins import PluginProblem, PluginSet, check, installed
from reconciler.edge.progress import Progress


@dataclass
class DecisionBatch:
    """Contiguous decision entries of one batch as found in the log (possibly cut short)."""

    entries: list[ev.LogEntry]
    count: int

    @property
    def first(self) -> ev.LogEntry:
        return self.entries[0]

    @property
    def starts_at_zero(self) -> bool:
        batch = self.first.batch
        return batch is None or batch[0] == 0

    @property
    def complete(self) -> bool:
        return self.starts_at_zero and len(self.entries) == self.count


Unit = ev.LogEntry | DecisionBatch


async def entries(
    reader: LogReader,
    *,
    from_seq: int = 1,
    until_seq: int | None = None,
    until_ms: int | None = None,
    progress: Progress | None = None,
) -> AsyncIterator[ev.LogEntry]:
    done = 0
    async for chunk in reader.read(from_seq=from_seq, until_seq=until_seq, until_ms=until_ms):
        for entry in chunk:
            yield entry
        done += len(chunk)
        if progress is not None:
            progress.update(done)


async def units(source: AsyncIterator[ev.LogEntry]) -> AsyncIterator[Unit]:
    """Inputs one by one; decision entries grouped into their batches."""
    pending: DecisionBatch | None = None
    async for entry in source:
        if not ev.is_decision(entry.event):
            if pending is not None:
                yield pending
                pending = None
            yield entry
            continue
        index, count = entry.batch if entry.batch is not None else (0, 1)
        if pending is not None and index == len(pending.entries) and count == pending.count and pending.starts_at_zero:
            pending.entries.append(entry)
        elif pending is not None and not pending.starts_at_zero and count == pending.count:
            # The tail of a batch whose head lies before ``from_seq`` (replay from a snapshot).
            pending.entries.append(entry)
        else:
            if pending is not None:
                yield pending
            pending = DecisionBatch(entries=[entry], count=count)
        if pending.starts_at_zero and len(pending.entries) == pending.count:
            yield pending
            pending = None
    if pending is not None:
        yield pending


@dataclass
class Mismatch:
    """Where replay's ``decide`` disagreed with the log."""

    seq: int  # first entry of the recorded batch
    at_ms: int
    recorded: list[ev.LogEntry]
    recomputed: list[ev.DecisionEvent]
    reason: str

    @property
    def first_difference(self) -> int:
        """Index of the first decision that differs (or the shorter length)."""
        for i, (entry, event) in enumerate(zip(self.recorded, self.recomputed, strict=False)):
            if codec.encode(entry.event) != codec.encode(event):
                return i
        return min(len(self.recorded), len(self.recomputed))


@dataclass
class ReplayResult:
    state: core.State
    last_seq: int = 0
    last_at_ms: int = 0
    entries: int = 0
    inputs: int = 0
    decisions: int = 0
    batches: int = 0
    verified_batches: int = 0
    verified_quiet: int = 0  # input batch boundaries where decide() rightly had nothing to say
    incomplete_batches: list[int] = field(default_factory=list)  # first seqs of batches cut short
    mismatch: Mismatch | None = None
    # The first run of sequence numbers missing between two entries (first, last): lines lost
    # from an export. ``verify`` stops there: what follows would differ for that reason alone.
    gap: tuple[int, int] | None = None
    last_policy: ev.PolicyLoaded | None = None
    last_queues: ev.QueuesConfigured | None = None
    # Plugins the log's policies use that are missing or different here, with the seq where that
    # policy was in force (its own, or the snapshot's the replay started from). Once per plugin.
    plugin_problems: list[tuple[int, PluginProblem]] = field(default_factory=list)

    def note_plugins(self, seq: int, policy: ev.PolicyLoaded | None, plugins: PluginSet) -> bool:
        """Record the problems of ``policy``; True when it has any."""
        problems = check(policy, plugins)
        seen = {(p.name, p.recorded, p.found) for _, p in self.plugin_problems}
        self.plugin_problems += [(seq, p) for p in problems if (p.name, p.recorded, p.found) not in seen]
        return bool(problems)


InputHook = Callable[[ev.LogEntry], None]
DecisionHook = Callable[["core.State", ev.LogEntry], None]


def compare(state: core.State, batch: DecisionBatch) -> Mismatch | None:
    """Recompute ``decide`` on the state before ``batch`` and compare with the recorded entries."""
    recomputed = core.decide(state)
    recorded = batch.entries
    first = batch.first
    if len(recomputed) != batch.count:
        return Mismatch(
            seq=first.seq,
            at_ms=first.at_ms,
            recorded=recorded,
            recomputed=recomputed,
            reason=f"the log records a batch of {batch.count} decisions, decide() now gives {len(recomputed)}",
        )
    for i, entry in enumerate(recorded):
        if codec.encode(entry.event) != codec.encode(recomputed[i]):
            return Mismatch(
                seq=first.seq,
                at_ms=first.at_ms,
                recorded=recorded,
                recomputed=recomputed,
                reason=f"decision {i} of the batch at seq {first.seq} differs (log seq {entry.seq})",
            )
    return None


async def replay(
    reader: LogReader,
    *,
    state: core.State | None = None,
    from_seq: int = 1,
    until_seq: int | None = None,
    until_ms: int | None = None,
    verify: bool = False,
    on_input: InputHook | None = None,
    on_decision: DecisionHook | None = None,
    progress: Progress | None = None,
    plugins: PluginSet | None = None,
) -> ReplayResult:
    """Fold the log (from ``from_seq``, onto ``state`` if given) up to the bounds.

    ``on_input`` sees each input before it is folded; ``on_decision`` the state before each
    decision entry (the batch's earlier decisions folded in: how ``decide`` saw the later jobs of
    one batch). With ``verify``, stops at the first batch whose recomputation differs
    (``result.mismatch``), and also where the log records no decisions after an input batch but
``decide`` now makes some (decisions missing from the log). A batch cut short at the very end of the log is normal after a leader
    crash (the next leader completes it); one cut short in the middle is reported in
    ``incomplete_batches``.

    ``plugins``: this environment's (default: ``installed()``); a fresh state is built on them,
    and every policy folded is checked against them (``result.plugin_problems``; with ``verify``
    the replay stops at the first policy with problems).
    """
    plugins = plugins if plugins is not None else installed()
    result = ReplayResult(state=state if state is not None else core.new_state(plugins=plugins.registry))
    start = result.state
    from_snapshot = start.policy_override is None and start.policy is not None
    if from_snapshot and result.note_plugins(start.seq, start.policy, plugins) and verify:
        return result
    cut_short_at_end = False
    previous: ev.LogEntry | None = None  # the last input folded, if nothing came after it yet
    source = entries(reader, from_seq=from_seq, until_seq=until_seq, until_ms=until_ms, progress=progress)
    try:
        async for unit in units(source):
            cut_short_at_end = False
            if result.gap is None and result.entries:
                result.gap = _gap(result.last_seq, unit)
                if result.gap is not None and verify:
                    return result
            if isinstance(unit, DecisionBatch):
                previous = None
                result.batches += 1
                if not unit.complete and unit.starts_at_zero:
                    result.incomplete_batches.append(unit.first.seq)
                    cut_short_at_end = True
                if verify and unit.starts_at_zero:
                    mismatch = compare(result.state, unit)
                    # A batch cut short by a crash still has to agree on the part that was written.
                    if mismatch is not None and not unit.complete and _prefix_agrees(mismatch, unit.count):
                        mismatch = None
                    if mismatch is not None:
                        result.mismatch = mismatch
                        return result
                    result.verified_batches += 1
                for entry in unit.entries:
                    if on_decision is not None:
                        on_decision(result.state, entry)
                    result.state = core.fold(result.state, entry)
                    _count(result, entry)
            else:
                if verify and previous is not None and _new_input_batch(previous, unit):
                    missed = _missed(result.state, previous)
                    if missed is not None:
                        result.mismatch = missed
                        return result
                    result.verified_quiet += 1
                previous = unit
                if on_input is not None:
                    on_input(unit)
                result.state = core.fold(result.state, unit)
                _count(result, unit)
                if isinstance(unit.event, ev.QueuesConfigured):
                    result.last_queues = unit.event
                elif isinstance(unit.event, ev.PolicyLoaded):
                    result.last_policy = unit.event
                    if result.state.policy_override is None:
                        stop = result.note_plugins(unit.seq, unit.event, plugins)
                        if stop and verify:
                            return result
    finally:
        if progress is not None:
            progress.close()
    # A batch cut short at the end (a crash the next leader will repair, or --until) is no anomaly.
    if cut_short_at_end:
        result.incomplete_batches.pop()
    return result


def _new_input_batch(previous: ev.LogEntry, entry: ev.LogEntry) -> bool:
    """``entry`` starts another input batch of the same leader term, right after ``previous``.

    The leader decides after every input batch; when it appended no decisions, ``decide`` gave
    nothing. Batches are told apart by their ``at_ms`` (all entries of one batch share it), so two
    batches stamped with the same millisecond are not checked. A change of leader is not checked
    either: the previous leader may have died before deciding (its successor decides first).
    """
    return entry.at_ms != previous.at_ms and entry.leader == previous.leader


def _missed(state: core.State, previous: ev.LogEntry) -> Mismatch | None:
    """Decisions ``decide`` makes where the log recorded none (after the batch ending at ``previous``)."""
    recomputed = core.decide(state)
    if not recomputed:
        return None
    return Mismatch(
        seq=previous.seq + 1,
        at_ms=previous.at_ms,
        recorded=[],
        recomputed=recomputed,
        reason=(
            f"the log records no decisions after the input batch ending at seq {previous.seq}; "
            f"decide() now gives {len(recomputed)}"
        ),
    )


def _gap(last_seq: int, unit: Unit) -> tuple[int, int] | None:
    """The seqs missing between ``last_seq`` and the entries of ``unit``, if any."""
    for entry in unit.entries if isinstance(unit, DecisionBatch) else [unit]:
        if entry.seq > last_seq + 1:
            return last_seq + 1, entry.seq - 1
        last_seq = entry.seq
    return None


def describe_gap(gap: tuple[int, int], where: str, *, export: bool) -> str:
    """``where``: the file (``export``) or the server the log was read from."""
    first, last = gap
    what = f"entry {first} is" if first == last else f"entries {first}\u2013{last} are"
    return f"{what} missing from {where}: the {'export' if export else 'log'} is incomplete"


def _prefix_agrees(mismatch: Mismatch, count: int) -> bool:
    if len(mismatch.recomputed) != count:
        return False
    return mismatch.first_difference >= len(mismatch.recorded)


def _count(result: ReplayResult, entry: ev.LogEntry) -> None:
    result.entries += 1
    result.last_seq = entry.seq
    result.last_at_ms = entry.at_ms
    if ev.is_decision(entry.event):
        result.decisions += 1
    else:
        result.inputs += 1
