"""Leader candidacy: wait for the lease, lead one term, step down, become a candidate again.

The lease (a JetStream KV key with a TTL, ``eventlog``'s ``.lease``) says who *should* write;
fencing (every append expects the last sequence) guarantees a deposed leader *cannot*. A term
ends when the lease is lost, when an append is fenced, or on shutdown (the lease is then
released so a standby takes over without waiting for the TTL).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

from reconciler.edge.logging import get_logger
from reconciler.edge.plugins import installed
from reconciler.service.loop import LeaderLoop
from reconciler.service.standby import Standby

log = get_logger("reconciler.leader")

LEASE_NAME = "sequencer"


class Lease(Protocol):
    @property
    def lost(self) -> asyncio.Event: ...

    async def acquire(self) -> None:
        """Wait until this candidate holds the lease (renewed in the background from then on)."""
        ...

    async def release(self) -> None: ...


async def run_candidate(
    log_: Any,
    loop: LeaderLoop,
    *,
    stop: asyncio.Event,
    ttl_s: float = 5.0,
    name: str = LEASE_NAME,
    warm: bool = True,
) -> None:
    """Alternate between waiting for the lease and leading, until ``stop``.

    ``warm``: while waiting, keep the state folded up to the log's end (``service.standby``), so
    that a take-over folds only the last entries instead of restoring a snapshot."""
    holder = loop.settings.leader_id
    bound = log.bind(leader=holder, lease=name)
    while not stop.is_set():
        lease: Lease = log_.lease(name, ttl_s, holder=holder)
        standby: Standby | None = None
        if warm:
            standby = Standby(log_, plugins=loop.settings.plugins if loop.settings.plugins is not None else installed())
            standby.start()
        try:
            # Warm first, then ask for the lease: the term must not spend its lease rebuilding.
            # But not for ever: a rebuild stuck on a NATS node that went away (its requests time
            # out after 10 s) would keep every replica from leading. Past a TTL the lease is
            # asked for anyway and the term rebuilds, as a candidate without a standby does.
            warmed = standby is None or await _until_stop(_warm_within(standby, ttl_s, bound), stop)
            acquired = warmed and await _until_stop(lease.acquire(), stop)
        except (asyncio.CancelledError, KeyboardInterrupt):
            if standby is not None:
                standby.cancel()
            raise
        except Exception as err:
            if standby is not None:
                standby.cancel()
            # NATS unreachable or the lease bucket misconfigured: say so, and try again later.
            bound.error("lease_acquire_failed", error=str(err) or type(err).__name__, retry_in_s=ttl_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=ttl_s)
            continue
        if not acquired:
            if standby is not None:
                standby.cancel()
            await _release(lease)
            return
        if standby is not None and not standby.ready.is_set():
            standby.cancel()
            standby = None
        loop.warm = await standby.stop() if standby is not None else None
        bound.info("lease_acquired")
        reason = "error"
        try:
            reason = await loop.run_term(stop=stop, lease=lease)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as err:
            # NATS unreachable, a timeout…: this replica cannot lead right now. Let another one
            # (or this one, later) take over from the log, which is the only state that matters.
            bound.error("term_failed", error=repr(err), exc_info=err)
        finally:
            loop.metrics.step_downs.labels(reason=reason).inc()
            bound.info("stepped_down", reason=reason)
            # Always, even when the term ended for "lease-lost": that may be only this replica's
            # own view (a renewal came late), while its renewals carry on in the background and
            # keep the key alive; then no replica could ever lead again. Releasing stops them and
            # deletes the key if it is still ours.
            await _release(lease)
        if reason in ("fenced", "error"):
            # Someone else wrote while we held the lease (or thought we did), or we failed:
            # give the others a TTL before competing again.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=ttl_s)


async def _warm_within(standby: Standby, timeout_s: float, bound: Any) -> None:
    """Until the standby is warm, or ``timeout_s`` (then the term will rebuild: said in the log)."""
    try:
        await asyncio.wait_for(standby.ready.wait(), timeout=timeout_s)
    except TimeoutError:
        bound.warning("standby_not_warm_in_time", waited_s=timeout_s, consequence="the term rebuilds its state")


async def _until_stop(work: Any, stop: asyncio.Event) -> bool:
    """Run ``work``; False if ``stop`` came first (``work`` is cancelled)."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False


async def _release(lease: Lease) -> None:
    try:
        await lease.release()
    except Exception as err:  # the TTL frees it anyway; a failed release must not crash shutdown
        log.warning("lease_release_failed", error=str(err))
