"""A warm standby: while a candidate waits for the lease, it keeps the state folded up to the log's end.

Rebuilding at take-over costs the snapshot's decoding plus the tail: at a million jobs that is
tens of seconds of a fail-over (docs/sizing.md). A standby that restores the latest snapshot when
it becomes a candidate and folds every new entry as it is appended has, when the lease comes,
only the entries of the last poll to fold. The state is the one a rebuild gives (the same fold of
the same entries, only earlier); a log that ends inside a decision batch still takes the rebuild
(``rebuild_for_leader``), which needs the state before the batch.

``stop()`` waits for the fold in progress rather than cancelling it: the fold changes the state in
place, so a half-folded chunk would leave a state that matches no log position.
"""

from __future__ import annotations

import asyncio
import contextlib

from reconciler.edge import gcpolicy
from reconciler.edge.logging import get_logger
from reconciler.edge.plugins import PluginSet
from reconciler.history.rebuild import Folded, LogHandle, rebuild_state
from reconciler.history.replay import replay

log = get_logger("reconciler.standby")

POLL_S = 0.2  # how often a standby looks for new entries: at most this much log is left to fold
RETRY_S = 2.0


class Standby:
    """Follows one log in the background (``start``) until ``stop``, which returns the state."""

    def __init__(self, log_: LogHandle, *, plugins: PluginSet, poll_s: float = POLL_S) -> None:
        self.log = log_
        self.plugins = plugins
        self.poll_s = poll_s
        self.folded: Folded | None = None
        # Set once warm, or once a first attempt failed: a candidate asks for the lease then. One
        # that is not warm would rebuild while holding it, and a long rebuild blocks the renewals.
        self.ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._since_settle = 0  # entries folded since the state was last frozen (``gcpolicy``)

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow(), name="standby-follow")

    async def stop(self) -> Folded | None:
        """Stop following; the state as of the last entry folded (None if not warm yet)."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        folded, self.folded = self.folded, None
        return folded

    def cancel(self) -> None:
        """Stop at once, the state dropped (shutting down: nobody will take it)."""
        self.folded = None
        if self._task is not None:
            self._task.cancel()

    async def _follow(self) -> None:
        reader = self.log.reader
        while not self._stop.is_set():
            try:
                if self.folded is None:
                    self.folded = await rebuild_state(reader, self.log.snapshots, label="standby", plugins=self.plugins)
                    gcpolicy.settle()
                    self._since_settle = 0
                    log.info("standby_warm", last_seq=self.folded.last_seq, snapshot_seq=self.folded.snapshot_seq)
                    self.ready.set()
                else:
                    await self._catch_up()
                wait_s = self.poll_s
            except Exception as err:  # NATS away: the take-over rebuilds if we are not warm by then
                log.warning("standby_follow_failed", error=str(err) or type(err).__name__, retry_in_s=RETRY_S)
                self.folded = None
                self.ready.set()  # the take-over rebuilds, as without a standby
                wait_s = RETRY_S
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=wait_s)

    async def _catch_up(self) -> None:
        folded = self.folded
        assert folded is not None
        last = await self.log.reader.last_seq()
        if last <= folded.last_seq:
            return
        self.folded = None  # until the fold below is complete, there is no consistent state
        result = await replay(
            self.log.reader, state=folded.state, from_seq=folded.last_seq + 1, until_seq=last, plugins=self.plugins
        )
        self.folded = Folded(
            state=result.state,
            last_seq=result.last_seq or folded.last_seq,
            last_at_ms=result.last_at_ms or folded.last_at_ms,
            policy=result.last_policy or folded.policy,
            snapshot_seq=folded.snapshot_seq,
            queues=result.last_queues or folded.queues,
        )
        self._since_settle += self.folded.last_seq - folded.last_seq
        if gcpolicy.due(self._since_settle, len(self.folded.state.jobs)):
            gcpolicy.settle()  # so that the term's first settle walks little (it holds the lease)
            self._since_settle = 0
