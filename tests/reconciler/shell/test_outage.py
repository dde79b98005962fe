"""A leader through a NATS outage: it steps down instead of crashing, and leads again after."""

from __future__ import annotations

import asyncio
from pathlib import Path

from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import connect
from reconciler.history.replay import replay
from reconciler.service.leader import run_candidate
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready
from tests.waiting import eventually

from .scenario import POLICY, decisions_of, publish_clusters, submission, wait_for


def _leading(loop: LeaderLoop) -> bool:
    return any(s.value == 1 for m in loop.metrics.leader.collect() for s in m.samples)


async def test_the_leader_steps_down_during_an_outage_and_leads_again_after(tmp_path: Path) -> None:
    store = tmp_path / "nats"
    server = EmbeddedNats(data_dir=store)
    await server.start_async()
    jlog = await connect(server.url, root="outage")
    loop = LeaderLoop(jlog, LoopSettings(leader_id="A", policy=POLICY, idle_wait_s=0.02))
    stop = asyncio.Event()
    candidate = asyncio.create_task(run_candidate(jlog, loop, stop=stop, ttl_s=1.0))
    restarted: EmbeddedNats | None = None
    try:
        await wait_ready(loop, timeout_s=20)
        await publish_clusters(jlog)
        await wait_for(jlog, lambda es: any(isinstance(e.event, ev.ClusterRegistered) for e in es))

        await server.stop_async()
        await eventually(lambda: not _leading(loop), timeout_s=20, what="step down while NATS is gone")
        assert not candidate.done()  # stepped down, did not crash

        restarted = EmbeddedNats(data_dir=store, port=server.port)
        await restarted.start_async()
        await eventually(  # the client reconnects on its own; publish once it has
            lambda: jlog.inbox.publish(submission(0), msg_id="after-outage", timeout_s=1.0),
            timeout_s=30,
            interval_s=0.2,
            ignoring=(Exception,),
            what="a publish after the restart",
        )
        entries = await wait_for(jlog, lambda es: len(decisions_of(es, ev.Nominated)) >= 1, timeout_s=60)
        assert _leading(loop)
        steps = {s.labels["reason"] for m in loop.metrics.step_downs.collect() for s in m.samples if s.value}
        assert steps & {"error", "lease-lost"}
        assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
        result = await replay(jlog.reader, verify=True)
        assert result.mismatch is None
    finally:
        stop.set()
        await asyncio.wait_for(candidate, timeout=30)
        await jlog.close()
        if restarted is not None:
            await restarted.stop_async()
