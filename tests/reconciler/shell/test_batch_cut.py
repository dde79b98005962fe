"""A decision batch cut short inside the leader's pipelined publish (issue 18: kills never left
one half-written, so the repair path had not run against a real leader). The cut is injected
between two appends of one batch; the next leader must complete it, and ``kdispatch replay
--verify`` must find the log consistent."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import nats.errors
import pytest

from eventlog import codec
from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from eventlog.jetstream.publish import Outgoing, PubAck, Publisher
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready

from .scenario import POLICY, publish_clusters, read_all, submission

JOBS = 4


class CutPublisher(Publisher):
    """Publishes the first batch that holds a decision batch of several entries only up to
    ``keep`` of its decisions, then fails as a crash mid-write would (nothing more goes out)."""

    def __init__(self, inner: Publisher, *, keep: int) -> None:
        self._inner = inner
        self.keep = keep
        self.cut: tuple[int, int] | None = None  # (decisions written, batch size) once cut

    def _cut_at(self, batch: list[Outgoing]) -> int | None:
        if self.cut is not None:
            return None
        framed = [codec.decode_entry(payload).batch for _, payload, _ in batch]
        starts = [i for i, b in enumerate(framed) if b is not None and b[0] == 0 and b[1] > self.keep]
        if not starts:
            return None
        size = framed[starts[0]]
        assert size is not None
        self.cut = (self.keep, size[1])
        return starts[0] + self.keep

    async def publish(self, batch: list[Outgoing], *, timeout_s: float) -> list[PubAck | None]:
        end = self._cut_at(batch)
        if end is not None:
            await self._inner.publish(batch[:end], timeout_s=timeout_s)
            raise nats.errors.ConnectionClosedError
        return await self._inner.publish(batch, timeout_s=timeout_s)

    async def publish_fast(self, batch: list[Outgoing], *, timeout_s: float) -> PubAck | None:
        end = self._cut_at(batch)  # the same cut in an append published as one batch
        if end is not None:
            await self._inner.publish_fast(batch[:end], timeout_s=timeout_s)
            raise nats.errors.ConnectionClosedError
        return await self._inner.publish_fast(batch, timeout_s=timeout_s)


class CuttingLog:
    """The log as the leader loop sees it, with the cut publisher in its sequencer."""

    def __init__(self, jlog: JetStreamLog, cutter: CutPublisher) -> None:
        self._jlog = jlog
        self._cutter = cutter

    def sequencer(self, leader_id: str, **kwargs: Any) -> Any:
        seqr = self._jlog.sequencer(leader_id, **kwargs)
        self._cutter._inner = seqr._publisher  # as tests/eventlog/test_lost_acks.py wraps it
        seqr._publisher = self._cutter
        return seqr

    def __getattr__(self, name: str) -> Any:
        return getattr(self._jlog, name)


@pytest.mark.parametrize("keep", [1, JOBS - 1])
async def test_a_batch_cut_between_appends_is_completed_by_the_next_leader(jslog: JetStreamLog, keep: int) -> None:
    await publish_clusters(jslog)
    for i in range(JOBS):  # waiting when the leader starts: one pull, one decide, one batch of JOBS
        await jslog.inbox.publish(submission(i), msg_id=f"s{i}")
    cutter = CutPublisher(Publisher(jslog.nc), keep=keep)
    first = LeaderLoop(CuttingLog(jslog, cutter), LoopSettings(leader_id="cut", policy=POLICY, idle_wait_s=0.02))  # type: ignore[arg-type]
    stop = asyncio.Event()
    term = asyncio.create_task(first.run_term(stop=stop))
    with pytest.raises(nats.errors.ConnectionClosedError):
        await asyncio.wait_for(term, 30)  # the leader "crashed" mid-batch
    assert cutter.cut is not None
    written, size = cutter.cut
    entries = await read_all(jslog)
    assert [e.batch for e in entries if e.batch is not None and e.batch[1] == size][-written:] == [
        (i, size) for i in range(written)
    ]
    assert entries[-1].batch == (written - 1, size)  # the log ends inside the batch

    second = LeaderLoop(jslog, LoopSettings(leader_id="next", policy=POLICY, idle_wait_s=0.02))
    stop2 = asyncio.Event()
    term2 = asyncio.create_task(second.run_term(stop=stop2))
    await wait_ready(second, timeout_s=20)
    stop2.set()
    assert await term2 == "stopped"
    entries = await read_all(jslog)
    start = next(i for i, e in enumerate(entries) if e.batch == (0, size) and e.leader == "cut")
    batch = entries[start : start + size]
    assert [e.batch for e in batch] == [(i, size) for i in range(size)]
    assert [e.leader for e in batch] == ["cut"] * written + ["next"] * (size - written)
    assert len({e.at_ms for e in batch}) == 1  # completed at the batch's own time
    nominated = {e.event.job.name for e in entries if isinstance(e.event, ev.Nominated)}
    assert nominated == {submission(i).job.name for i in range(JOBS)}

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "reconciler.cli", "replay", "--verify", "--nats", jslog.url, "--root", jslog.names.root,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, out.decode()
