"""The garbage collector's policy in a process that holds the core's state (a leader, a standby,
and the benches that measure them): the state is frozen out of the collector's scans.

A million pending jobs are millions of containers the collector tracks (the pending index's
lanes and their lists, the queues' dicts; ``JobRecord`` itself is untracked), alive for the whole
term. A full collection walks every tracked object, about 0.5 µs each: 0.1 s at 30,000 jobs,
seconds at a million, with the event loop stopped, and CPython runs one whenever the objects
promoted since the last one reach a quarter of those it kept. ``gc.freeze`` moves every object
alive now to a generation no collection walks; later collections walk only what came since.

When (``settle``: collect what is not frozen, then freeze what survives):

- at start-up (``at_start``, with fewer young collections, as the webhook does);
- when a term starts, after its rebuild (the warm standby's state or the cold restore and fold);
- when a standby is warm, and again each time it has folded about as many entries as there
  are live jobs (``due``), so that a term's first ``settle`` walks little;
- after each snapshot the leader takes (it takes one on the same rhythm).

A restored snapshot is frozen as soon as it is built (``restored``), without a collection: the
restore runs with the collector paused and makes no cycles (a test checks), and a collection
then would walk the whole state while a cold term holds its lease.

What freezing costs: a frozen object freed by reference counting is freed as any other, but a
frozen cycle that becomes garbage is only found after ``gc.unfreeze``. The state makes none
when jobs leave it (``JobRecord`` is untracked; a lane and its sleep class drop their references
to each other before either goes; a test runs removals after a freeze and finds no leaked
cycle), so nothing is unfrozen: an unfreeze and collection at each snapshot would walk the whole
state again, the pause the freeze avoids. What else was alive at a freeze (the event loop's and
the NATS client's objects) leaks only if it was already garbage in a cycle that had not been
collected, and ``settle`` collects first.
"""

from __future__ import annotations

import gc

# Young collections every 20,000 net allocations instead of 700: a decide pass allocates tens of
# thousands of short-lived objects, almost none in cycles.
THRESHOLDS = (20_000, 20, 20)
EVERY = 5_000  # the fewest entries between two settles of a standby (the leader's --snapshot-every)
NAME = f"freeze the state (at start-up, a term's start, a standby's catch-up, each snapshot); thresholds {THRESHOLDS}"


def at_start() -> None:
    """A process's start: what imports and start-up built is frozen; young collections less often."""
    settle()
    gc.set_threshold(*THRESHOLDS)


def settle() -> None:
    """The long-lived state was just built or grew: collect what is not frozen yet (the objects
    since the last ``settle``) and freeze what survives."""
    gc.collect()
    gc.freeze()


def restored() -> None:
    """A snapshot was just restored with the collector paused: freeze it, without a collection."""
    gc.freeze()


def due(entries_since: int, live_jobs: int) -> bool:
    """Whether a state that folded ``entries_since`` entries since its last ``settle`` should settle
    again: once it has taken in about as many entries as it holds jobs (the snapshot rhythm)."""
    return entries_since >= max(EVERY, live_jobs)
