"""The collector's policy (``reconciler.edge.gcpolicy``): a term freezes the state it rebuilt and,
at each snapshot, what joined it since; a restored snapshot is frozen as it is built; and freezing
leaks nothing, because the state makes no cycles when jobs leave it or when it is restored."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from eventlog import events as ev
from eventlog.memory import MemoryLog
from reconciler import core
from reconciler.core import phases
from reconciler.edge import gcpolicy
from reconciler.history.rebuild import rebuild_state
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready
from tests.reconciler.core.harness import Harness
from tests.reconciler.core.tenancy import TEAMS, gpu_cluster, team_job, three_teams
from tests.waiting import Unmet, eventually

from .scenario import CLUSTERS, POLICY, submission


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    """Each test starts with nothing frozen and leaves nothing frozen (its objects may go)."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def frozen(*objects: object) -> bool:
    """Tracked by the collector and in none of its generations: in the permanent one."""
    walked = {id(o) for o in gc.get_objects()}
    return all(gc.is_tracked(o) and id(o) not in walked for o in objects)


def lanes(state: core.State | None) -> list[object]:
    assert state is not None
    return [state.index, *state.index.lanes.values()]


async def start(loop: LeaderLoop) -> tuple[asyncio.Task[str], asyncio.Event]:
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    await wait_ready(loop, timeout_s=10)
    return term, stop


async def decided(loop: LeaderLoop, log: MemoryLog, events: list[ev.InputEvent]) -> None:
    """Publish ``events`` and wait until the term has decided on every job among them."""
    for i, e in enumerate(events):
        await log.inbox.publish(e, msg_id=f"{loop.settings.leader_id}/{len(log.entries)}/{i}")
    keys = [f"{e.job.namespace}/{e.job.name}" for e in events if isinstance(e, ev.JobSubmitted)]

    async def check() -> object:
        jobs = loop.state.jobs if loop.state is not None else {}
        pending = [k for k in keys if k not in jobs or jobs[k].phase == phases.QUEUED]
        return not pending or Unmet(f"not decided yet: {pending}")

    await eventually(check, timeout_s=10, what="the term to decide on the jobs")


async def test_a_term_freezes_the_state_it_rebuilt_and_at_each_snapshot_what_joined_it() -> None:
    log = MemoryLog()
    first = LeaderLoop(
        log, LoopSettings(leader_id="A", policy=POLICY, idle_wait_s=0.01, snapshot_every=10**9)
    )
    term, stop = await start(first)
    await decided(first, log, [*CLUSTERS, *(submission(i, gpus=3) for i in range(12))])
    stop.set()
    assert await term == "stopped"

    # The next term rebuilds (no snapshot: the log from its start) and freezes what it rebuilt.
    before = gc.get_freeze_count()
    loop = LeaderLoop(log, LoopSettings(leader_id="B", idle_wait_s=0.01, snapshot_every=10))
    term, stop = await start(loop)
    assert gc.get_freeze_count() > before
    rebuilt = lanes(loop.state)
    assert len(rebuilt) > 1 and frozen(*rebuilt)

    # Jobs that join later wait in new lanes; the snapshot the term takes freezes them.
    await decided(loop, log, [submission(i, gpus=3, region="east") for i in range(12, 24)])
    await loop.snapshot_stored()
    assert (await log.snapshots.latest()) is not None
    assert frozen(*lanes(loop.state))
    stop.set()
    assert await term == "stopped"

    # A standby's or a cold term's restore freezes the snapshot's state as it is built.
    gc.unfreeze()
    folded = await rebuild_state(log.reader, log.snapshots)
    assert folded.snapshot_seq > 0
    assert frozen(*lanes(folded.state))


def test_the_state_leaves_no_frozen_cycle_behind_when_jobs_leave_it_or_when_restored() -> None:
    """What justifies freezing without ever unfreezing: a frozen cycle that became garbage would
    only be found by an unfreeze and a collection of the whole state."""
    h = Harness(policy=POLICY)
    h.feed(three_teams(), gpu_cluster("east", gpu=4), gpu_cluster("west", gpu=4))
    for n in range(30):
        h.feed(*(team_job(t, f"j{n}", gpu=1 + n % 3, priority=n % 2) for t in TEAMS))
    gcpolicy.settle()

    for i, (_, job) in enumerate(sorted(h.state.jobs.items())):  # half of the waiting jobs are deleted
        if job.phase in phases.WAITING and i % 2:
            h.inputs(ev.JobDeleted(job=job.ref))
    h.step()
    while running := [
        j for j in h.state.jobs.values() if j.phase in phases.CHARGED and j.cluster is not None
    ]:
        for job in running:  # the rest run and finish, a few at a time, as quota frees
            assert job.cluster is not None
            h.inputs(ev.RemoteFinished(job=job.ref, cluster=job.cluster, attempt=job.attempt, succeeded=True))
        h.step()
    h.feed(*(ev.JobDeleted(job=h.state.jobs[key].ref) for key in list(h.state.waiting)))
    assert not h.state.waiting and not h.state.index.lanes and len(h.state.jobs) == 90
    gc.collect()
    gc.unfreeze()
    assert gc.collect() == 0

    h = Harness(policy=POLICY)
    h.feed(three_teams(), gpu_cluster("east", gpu=2))
    h.feed(*(team_job(t, f"j{n}", gpu=1 + n % 2) for t in TEAMS for n in range(20)))
    raw = core.dump_state(h.state)
    gc.collect()
    gc.disable()  # as the restore runs (``gcpolicy.restored`` freezes without collecting)
    try:
        restored = core.load_state(raw, plugins=core.BUILTINS)
    finally:
        gc.enable()
    assert gc.collect() == 0
    assert len(restored.waiting) == len(h.state.waiting) > 0
