"""A transient stream-leader change as the JetStream API reports it: "consumer is offline" /
"stream is offline" (500, err_code 10119 / 10118) while the stream's new leader takes over. The
fault probe (issue 18) saw the leader end its term on it after a plain stop of the node leading
the log stream; it must be retried like any other unavailability (docs/eventlog.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from nats.js.errors import APIError

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from tests.waiting import eventually

OFFLINE = [
    {"code": 500, "err_code": 10119, "description": "consumer is offline"},
    {"code": 500, "err_code": 10118, "description": "stream is offline"},
]


def _failing(real: Callable[..., Any], errors: list[dict[str, Any]], calls: list[str]) -> Callable[..., Any]:
    """``real``, after raising each of ``errors`` once (as nats-py raises an API error)."""

    async def call(*args: Any, **kwargs: Any) -> Any:
        calls.append(real.__name__)
        if errors:
            APIError.from_error(errors.pop(0))
        return await real(*args, **kwargs)

    return call


@pytest.mark.parametrize("api_call", ["add_consumer", "consumer_info"])
async def test_the_sequencer_keeps_pulling_through_an_offline_consumer(
    jslog: JetStreamLog, monkeypatch: pytest.MonkeyPatch, api_call: str
) -> None:
    seqr = jslog.sequencer("leader")
    await seqr.resume()
    await jslog.inbox.publish(ev.ClusterHeartbeat(cluster="a"), msg_id="a")
    assert [i.inbox_seq for i in await seqr.pull(timeout_s=2)] == [1]
    calls: list[str] = []
    monkeypatch.setattr(jslog.js, api_call, _failing(getattr(jslog.js, api_call), list(OFFLINE), calls))
    monkeypatch.setattr(jslog.js, "add_consumer", _failing(jslog.js.add_consumer, list(OFFLINE) if api_call == "add_consumer" else [], calls))
    # The node holding the sequencer's consumer stopped: the consumer is gone (the server says so
    # to the waiting pull request), and while the stream's new leader takes over the API answers
    # "offline" for a moment.
    stream = jslog.names.inbox_stream
    for info in await jslog.js.consumers_info(stream):
        await jslog.js.delete_consumer(stream, info.name)
    await jslog.inbox.publish(ev.ClusterHeartbeat(cluster="b"), msg_id="b")

    async def pulled() -> list[int]:
        return [i.inbox_seq or 0 for i in await seqr.pull(timeout_s=0.2)]

    assert await eventually(pulled, timeout_s=30, what="the inbox item after the consumer came back") == [2]
    # add_consumer: refused twice, then served; consumer_info: refused, so the consumer was recreated.
    assert calls.count(api_call) >= (3 if api_call == "add_consumer" else 1) and "add_consumer" in calls


async def test_a_reader_waits_for_an_offline_stream(jslog: JetStreamLog, monkeypatch: pytest.MonkeyPatch) -> None:
    seqr = jslog.sequencer("leader")
    await seqr.resume()
    await seqr.append_inputs([], at_ms=1)
    await jslog.inbox.publish(ev.ClusterHeartbeat(cluster="a"), msg_id="a")
    items = await seqr.pull(timeout_s=2)
    await seqr.append_inputs(items, at_ms=1)
    calls: list[str] = []
    monkeypatch.setattr(jslog.js, "add_consumer", _failing(jslog.js.add_consumer, list(OFFLINE), calls))
    entries = [e async for batch in jslog.reader.read(from_seq=1) for e in batch]
    assert [type(e.event) for e in entries] == [ev.ClusterHeartbeat]
    assert calls.count("add_consumer") == 3
