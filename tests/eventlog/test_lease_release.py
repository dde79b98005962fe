"""A released lease stays released: no renewal may write after ``release``.

The 60-minute soak went leaderless because a renewal whose answer arrived as its task was
cancelled swallowed the cancel (asyncio.wait_for inside nats-py's request, Python 3.11) and
wrote its revision back: the renew loop then kept the key alive for a replica that had given
the lease up, and every candidate (that replica's next one too) waited for it for ever. The
swallow is a race; here the real KV's update is wrapped so that it always finishes what it
started, as a swallowed cancel does, on a real nats-server."""

from __future__ import annotations

import asyncio
from typing import Any

from eventlog.jetstream import JetStreamLog
from tests.waiting import Unmet, eventually


async def test_a_renewal_in_flight_at_release_does_not_keep_the_key(jslog: JetStreamLog) -> None:
    lease = jslog.lease("sequencer", 1.5, holder="old")
    await lease.acquire()
    kv = await lease._bucket()
    real_update = kv.update
    in_flight = asyncio.Event()

    async def answered_late(*args: Any, **kwargs: Any) -> int:
        revision: int = await real_update(*args, **kwargs)
        await asyncio.sleep(0.2)  # the answer is on its way when the cancel comes
        return revision

    async def update_ignoring_cancel(*args: Any, **kwargs: Any) -> int:
        in_flight.set()
        work = asyncio.ensure_future(answered_late(*args, **kwargs))
        while True:
            try:
                return await asyncio.shield(work)
            except asyncio.CancelledError:
                continue  # swallowed, as wait_for does when the inner future is done

    kv.update = update_ignoring_cancel  # type: ignore[method-assign]
    await asyncio.wait_for(in_flight.wait(), timeout=5)
    await lease.release()
    renewals = lease.renewals
    successor = jslog.lease("sequencer", 1.5, holder="new")

    async def free() -> object:
        return await successor.try_acquire() or Unmet(f"held by {await successor.current_holder()}")

    await eventually(free, timeout_s=10, what="the released lease to be free")
    await asyncio.sleep(1.0)  # past a renewal interval: the old holder wrote nothing more
    assert lease.renewals == renewals
    assert await successor.current_holder() == "new"
    assert successor.valid() and not successor.lost.is_set()  # its renewals found nobody else's write
    await successor.release()
