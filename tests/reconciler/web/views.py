"""Serving the views in tests: a log folded to a state (the recorded demo fixture, or a leader
loop on an in-memory log), behind the reconciler's own HTTP server (``/metrics`` + API + page)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec

from eventlog import events as ev
from eventlog.jsonl import JsonlLog
from eventlog.memory import MemoryLog
from reconciler import core
from reconciler.history.replay import replay
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready
from reconciler.service.metrics import ReconcilerMetrics, start_metrics_server
from reconciler.service.web import KubeAccess, ViewSource, add_routes

from ..shell.scenario import CLUSTERS, POLICY, submission

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "demo-4e2c1d6.jsonl.gz"
# At this point of the recorded demo east-a100 is Lost, 47 jobs wait and 22 are admitted.
MIDWAY = 1500
HOSTILE = '<script>alert("x")</script>'  # a name a user chose; the page must show it as text


async def fixture_source(until_seq: int = MIDWAY) -> ViewSource:
    reader = JsonlLog(str(FIXTURE))
    result = await replay(reader, until_seq=until_seq)
    state = result.state
    return ViewSource(state=lambda: state, reader=reader)


@asynccontextmanager
async def http(source: ViewSource, *, access: KubeAccess | None = None) -> AsyncIterator[str]:
    """The reconciler's HTTP server on a free port, with the API and the page: its base URL."""
    runner = await start_metrics_server(
        ReconcilerMetrics(), host="127.0.0.1", port=0, routes=lambda app: add_routes(app, source, access)
    )
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def hostile_leader() -> AsyncIterator[ViewSource]:
    """A leader loop (in memory) that has sequenced a job named like markup, on a real cluster
    table: the API and the page read its live state, as in ``serve``."""
    log = MemoryLog()
    loop = LeaderLoop(log, LoopSettings(leader_id="t", policy=POLICY, idle_wait_s=0.01))
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    try:
        await wait_ready(loop, timeout_s=20)
        for cluster in CLUSTERS:
            await log.inbox.publish(cluster)
        base = submission(0, gpus=99)  # fits nowhere: it waits, with a reason and an explanation
        ref = ev.JobRef(namespace="team-<b>", name=HOSTILE, uid="uid-hostile")
        await log.inbox.publish(msgspec.structs.replace(base, job=ref))
        for _ in range(2000):  # a bound, not a timing: until the leader has decided on it
            state = loop.state
            if state is not None and state.jobs.get(ref.key) and state.jobs[ref.key].phase == "Unschedulable":
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the leader never decided on the hostile job")
        yield ViewSource(state=lambda: loop.state if loop.ready.is_set() else None, reader=log.reader)
    finally:
        stop.set()
        await term


def job_key(state: core.State, phase: str) -> str:
    return next(k for k in sorted(state.jobs) if state.jobs[k].phase == phase)
