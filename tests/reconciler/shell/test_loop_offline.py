"""The leader keeps its term through a transient stream-leader change (issue 18: it ended its
term on "consumer is offline" after a plain stop of the node leading the log stream). Injected
at the fetch layer: the sequencer's inbox consumer disappears, and for a while the JetStream API
answers "consumer is offline" / "stream is offline" to every attempt to create it again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.js.errors import APIError

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready

from .scenario import POLICY, decisions_of, publish_clusters, submission, wait_for

REFUSALS = 5


async def test_a_term_survives_an_offline_consumer(jslog: JetStreamLog, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = LeaderLoop(jslog, LoopSettings(leader_id="A", policy=POLICY, idle_wait_s=0.02))
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    await wait_ready(loop, timeout_s=20)
    await publish_clusters(jslog)
    await jslog.inbox.publish(submission(0), msg_id="s0")
    await wait_for(jslog, lambda es: len(decisions_of(es, ev.Nominated)) >= 1)

    refused: list[int] = []
    real = jslog.js.add_consumer

    async def offline_for_a_while(*args: Any, **kwargs: Any) -> Any:
        if len(refused) < REFUSALS:
            refused.append(1)
            APIError.from_error({"code": 500, "err_code": 10119 - len(refused) % 2, "description": "consumer is offline"})
        return await real(*args, **kwargs)

    monkeypatch.setattr(jslog.js, "add_consumer", offline_for_a_while)
    stream = jslog.names.inbox_stream
    for info in await jslog.js.consumers_info(stream):  # the node holding it stopped
        await jslog.js.delete_consumer(stream, info.name)
    await jslog.inbox.publish(submission(1), msg_id="s1")
    entries = await wait_for(jslog, lambda es: len(decisions_of(es, ev.Nominated)) >= 2, timeout_s=60)
    assert len(refused) == REFUSALS
    assert not term.done(), term.result()  # the same term: no step-down
    assert {e.leader for e in entries} == {"A"}
    stop.set()
    assert await term == "stopped"
