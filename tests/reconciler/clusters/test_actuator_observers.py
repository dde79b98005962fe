"""The forecasts learn from what the actuator reads: the log is read and decoded once for both."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from reconciler.config import decode_config
from reconciler.service.clusters.actuator import Actuator
from reconciler.service.forecasts import Forecasts
from reconciler.service.loop import LoopSettings
from reconciler.service.wiring import Settings, build
from tests.reconciler.clusters.test_actuator import Leader, job, submitted
from tests.waiting import Unmet, eventually


class Unread:
    """A reader nobody may use: what is learned must come from the actuator."""

    def read(self, **kw: Any) -> AsyncIterator[list[ev.LogEntry]]:
        raise AssertionError(f"the forecasts read the log themselves ({kw})")


async def test_the_forecasts_learn_from_the_actuators_reads(jslog: JetStreamLog) -> None:
    leader = Leader(jslog)
    await leader.inputs(submitted(1), submitted(2))
    await leader.decide(ev.Nominated(job=job(1), clusters=["east"], attempt=1))
    await leader.inputs(ev.RemoteAdmitted(job=job(1), cluster="east", attempt=1))
    await leader.decide(ev.Placed(job=job(1), cluster="east", attempt=1))
    await leader.inputs(ev.RemoteFinished(job=job(1), cluster="east", attempt=1, succeeded=True))
    await leader.decide(ev.Finished(job=job(1), cluster="east", attempt=1))
    last = await jslog.reader.last_seq()

    reading = Forecasts(jslog.reader, lambda: None)
    await reading._learn(until_seq=last)  # the forecasts on their own, for comparison

    fed = Forecasts(Unread(), lambda: None)  # type: ignore[arg-type]
    act = Actuator(jslog.reader, {}, observers=(fed.observe,), poll_interval_s=0.01)
    stop = asyncio.Event()
    task = asyncio.create_task(act.run(stop))
    try:
        await eventually(lambda: fed.seq == last or Unmet(fed.seq), what=f"entries up to {last} observed")
        await fed._learn(until_seq=last)  # nothing left to read: Unread is not asked
        assert fed.learner.durations() == reading.learner.durations()
        assert fed.learner.durations().by_queue  # a run time was learned at all
        fed.observe([e async for batch in jslog.reader.read() for e in batch])  # again: skipped
        assert fed.learner.durations() == reading.learner.durations()
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_serve_wires_the_forecasts_to_the_actuator(jslog: JetStreamLog) -> None:
    config = decode_config({"clusters": [{"name": "east", "simulated": {"capacity": {"cpu": "8"}}}]})
    system = await build(jslog, config, Settings(loop=LoopSettings(leader_id="a")))
    assert system.clusters is not None and system.forecasts is not None
    assert system.clusters.actuator.observers == (system.forecasts.observe,)
    await system.clusters.configured.close()
