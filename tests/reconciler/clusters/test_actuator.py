"""The actuator on a real JetStream log, with hand-written decisions (as a leader would append them).

Simulated clusters check what gets applied where; an emulated Kubernetes worker checks that two
actuators over the same log never create a copy twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, MutableMapping
from typing import Any

import pytest
from prometheus_client import generate_latest

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from eventlog.kube.names import DRAINING_TAINT
from eventlog.store import InboxItem
from reconciler.service.clusters.actuator import Actuator
from reconciler.service.clusters.base import Worker
from reconciler.service.clusters.kube import KubeWorker
from reconciler.service.clusters.reporter import InboxReporter
from reconciler.service.clusters.simulated import SimCluster
from reconciler.simworker import CopyState, SimWorker
from tests.reconciler.clusters.conftest import ApiServer, batch_job, logged
from tests.waiting import eventually

GPU = "nvidia.com/gpu"


def job(n: int) -> ev.JobRef:
    return ev.JobRef(namespace="team-a", name=f"job-{n}", uid=f"uid-{n}")


def submitted(n: int) -> ev.JobSubmitted:
    return ev.JobSubmitted(
        job=job(n),
        pod_sets=[ev.PodSet(name="main", count=1, requests={GPU: 1})],
        runtime_ms=600_000,
        manifest=batch_job(f"job-{n}", uid=f"uid-{n}"),
    )


class Leader:
    """Appends inputs and decision batches the way the sequencer loop does."""

    def __init__(self, jlog: JetStreamLog) -> None:
        self.seq = jlog.sequencer("test-leader")

    async def inputs(self, *events: ev.InputEvent) -> None:
        await self.seq.resume()
        await self.seq.append_inputs([InboxItem(inbox_seq=None, event=e) for e in events], at_ms=_now())

    async def decide(self, *decisions: ev.DecisionEvent) -> None:
        await self.seq.resume()
        await self.seq.append_decisions(list(decisions), at_ms=_now())


def _now() -> int:
    return time.time_ns() // 1_000_000


def sim(name: str) -> SimCluster:
    return SimCluster(SimWorker(name, {GPU: 8}), heartbeat_interval_s=0.2)


@pytest.fixture
async def actuators(jslog: JetStreamLog) -> AsyncIterator[Callable[..., Any]]:
    running: list[tuple[asyncio.Event, list[asyncio.Task[None]]]] = []

    async def start(workers: dict[str, Worker], **kw: Any) -> Actuator:
        act = Actuator(jslog.reader, workers, poll_interval_s=0.01, **kw)
        stop = asyncio.Event()
        reporter = InboxReporter(jslog.inbox)
        tasks = [asyncio.create_task(act.run(stop))]
        tasks += [asyncio.create_task(w.run(reporter, stop)) for w in workers.values()]
        running.append((stop, tasks))
        await asyncio.wait_for(act.caught_up.wait(), 10)
        return act

    yield start
    for stop, tasks in running:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)


def count(act: Actuator, metric: str, **labels: str) -> float:
    return act.metrics.registry.get_sample_value(metric, labels) or 0.0


def states(cluster: SimCluster) -> dict[tuple[str, int], CopyState]:
    return {(c.job.name, c.attempt): c.state for c in cluster.model.copies()}


async def test_nominated_creates_withdrawn_deletes_evict_evicts(
    jslog: JetStreamLog, actuators: Callable[..., Any]
) -> None:
    east, west = sim("east"), sim("west")
    act = await actuators({"east": east, "west": west})
    leader = Leader(jslog)
    await leader.inputs(submitted(1), submitted(2))
    await leader.decide(ev.Nominated(job=job(1), clusters=["east", "west"], attempt=1))
    await eventually(
        lambda: ("job-1", 1) in states(east) and ("job-1", 1) in states(west), what="copies on both"
    )
    await leader.decide(
        ev.Placed(job=job(1), cluster="east", attempt=1),
        ev.Withdrawn(job=job(1), cluster="west", attempt=1, reason="LostRace"),
    )
    await eventually(lambda: not states(west), what="west copy withdrawn")
    assert states(east) == {("job-1", 1): CopyState.ADMITTED}
    await leader.decide(ev.Nominated(job=job(2), clusters=["west"], attempt=1))
    await eventually(
        lambda: states(west).get(("job-2", 1)) is CopyState.ADMITTED, what="job-2 admitted on west"
    )
    await leader.decide(ev.Evict(job=job(2), cluster="west", attempt=1, reason="Preempted"))
    await eventually(lambda: states(west).get(("job-2", 1)) is CopyState.EVICTED, what="job-2 evicted")
    await leader.decide(ev.CleanUp(job=job(2), cluster="west", attempt=1))
    await eventually(lambda: not states(west), what="job-2 cleaned up")
    await eventually(act.settled, what="actuator settled")
    exposed = generate_latest(act.metrics.registry).decode()
    assert 'kdispatch_actuator_applied_total{cluster="west",intent="evict"} 1.0' in exposed
    assert 'kdispatch_actuator_applied_total{cluster="west",intent="gone"} 2.0' in exposed


async def test_requests_to_a_silent_cluster_are_retried_until_it_answers(
    jslog: JetStreamLog, actuators: Callable[..., Any]
) -> None:
    east = sim("east")
    east.silence(None)
    act = await actuators({"east": east})
    leader = Leader(jslog)
    await leader.inputs(submitted(1))
    await leader.decide(ev.Nominated(job=job(1), clusters=["east"], attempt=1))
    await eventually(
        lambda: count(act, "kdispatch_actuator_retries_total", cluster="east", why="unreachable"),
        what="the create sent to the silent cluster, and to be retried",
    )
    assert states(east) == {}  # the request was lost: nothing there yet
    east.recover()
    await eventually(
        lambda: states(east).get(("job-1", 1)) is CopyState.ADMITTED,
        timeout_s=15,
        what="created after recovery",
    )


async def test_a_restarted_actuator_reapplies_what_is_missing_and_collects_garbage(
    jslog: JetStreamLog, actuators: Callable[..., Any]
) -> None:
    east = sim("east")
    leader = Leader(jslog)
    await leader.inputs(submitted(1), submitted(2), submitted(3))
    await leader.decide(
        ev.Nominated(job=job(1), clusters=["east"], attempt=1),
        ev.Nominated(job=job(2), clusters=["east"], attempt=2),
    )
    await leader.decide(ev.Withdrawn(job=job(2), cluster="east", attempt=2))
    # what an earlier life left on the cluster: a copy withdrawn since, and an older attempt
    now = _now()
    east.model.create(job(2), 2, [], 0, None, now - 120_000)
    east.model.create(job(3), 1, [], 0, None, now - 120_000)
    await leader.decide(ev.Nominated(job=job(3), clusters=["east"], attempt=2))
    act = await actuators({"east": east}, gc_interval_s=3600, gc_grace_s=60)
    await eventually(lambda: ("job-1", 1) in states(east) and ("job-3", 2) in states(east), what="re-applied")
    removed = await act.collect_garbage()
    assert removed == 2
    assert set(states(east)) == {("job-1", 1), ("job-3", 2)}


async def test_two_actuators_on_one_log_create_each_kubernetes_copy_once(
    jslog: JetStreamLog, actuators: Callable[..., Any], api_servers: Callable[..., Any]
) -> None:
    server: ApiServer = await api_servers("w1")

    def worker() -> KubeWorker:
        return KubeWorker("w1", server.api(role="worker", cluster="w1"), manager_id="mgr", kueue=True)

    leader = Leader(jslog)
    n = 12
    await leader.inputs(*(submitted(i) for i in range(n)))
    both = [await actuators({"w1": worker()}), await actuators({"w1": worker()})]
    await leader.decide(*(ev.Nominated(job=job(i), clusters=["w1"], attempt=1) for i in range(n)))
    emu = server.emulator
    await eventually(
        lambda: (
            [count(a, "kdispatch_actuator_applied_total", cluster="w1", intent="run") for a in both] == [n, n]
        ),
        what=f"both actuators to have applied all {n} creates",
    )
    assert len(emu.objects("batch", "v1", "jobs")) == n
    assert len(emu.created("batch", "v1", "jobs")) == n  # each copy created once, though applied twice
    await leader.decide(*(ev.Withdrawn(job=job(i), cluster="w1", attempt=1) for i in range(n)))
    await eventually(lambda: not emu.objects("batch", "v1", "jobs"), what="all copies withdrawn")


async def test_a_copy_gets_the_latest_manifest_read_back_from_the_log_long_after_submission(
    jslog: JetStreamLog, actuators: Callable[..., Any], api_servers: Callable[..., Any]
) -> None:
    """The projection keeps no manifest: a copy's spec is read back from the entries that carried
    it, here one the actuator's cache let go long ago and a later JobUpdated's."""
    server: ApiServer = await api_servers("w1")
    leader = Leader(jslog)
    grown = batch_job("job-1", uid="uid-1", parallelism=3)
    grown["metadata"]["labels"]["grown"] = "yes"
    pod_sets = [ev.PodSet(name="main", count=3, requests={GPU: 1})]
    await leader.inputs(
        submitted(1),
        ev.JobUpdated(job=job(1), pod_sets=pod_sets, priority=7, manifest=grown),
        ev.JobUpdated(job=job(1), pod_sets=pod_sets),  # no manifest: the one above stands
        *(submitted(i) for i in range(2, 6)),
    )
    worker = KubeWorker("w1", server.api(role="worker", cluster="w1"), manager_id="mgr", kueue=True)
    act = await actuators({"w1": worker}, spec_cache=2)
    await leader.decide(ev.Nominated(job=job(1), clusters=["w1"], attempt=1))
    emu = server.emulator
    await eventually(lambda: emu.objects("batch", "v1", "jobs"), what="job-1 created")
    [copy] = emu.objects("batch", "v1", "jobs")
    assert copy["spec"]["parallelism"] == 3 and copy["metadata"]["labels"]["grown"] == "yes"
    assert act.specs.gets == 3  # its JobSubmitted and both JobUpdated (the last has its pod sets)
    await leader.inputs(submitted(6))
    await leader.decide(ev.Nominated(job=job(6), clusters=["w1"], attempt=1))
    await eventually(lambda: len(emu.objects("batch", "v1", "jobs")) == 2, what="job-6 created")
    assert act.specs.gets == 3  # just folded: from the cache


async def test_the_actuator_and_observers_ride_out_a_nats_restart(
    tmp_path: Any, logs: list[MutableMapping[str, Any]]
) -> None:
    """Its own nats-server (the session's is shared): stopped under a running actuator and a
    simulated cluster, then started again on the same port and store. Nothing crashes; the
    decision appended after the restart is applied, the facts held meanwhile arrive."""
    from eventlog.embedded import EmbeddedNats
    from eventlog.jetstream import connect

    server = EmbeddedNats(data_dir=tmp_path / "nats")
    server.start()
    jlog = await connect(server.url, root="outage")
    east = sim("east")
    act = Actuator(jlog.reader, {"east": east}, poll_interval_s=0.01)
    stop = asyncio.Event()
    reporter = InboxReporter(jlog.inbox, timeout_s=0.5)
    tasks = [asyncio.create_task(act.run(stop)), asyncio.create_task(east.run(reporter, stop))]
    try:
        leader = Leader(jlog)
        await leader.inputs(submitted(1), submitted(2))
        await leader.decide(ev.Nominated(job=job(1), clusters=["east"], attempt=1))
        await eventually(lambda: ("job-1", 1) in states(east), what="job-1 created")
        server.stop()
        # The client sees the server go; the heartbeat publish fails, and is tried again and fails
        # again: the observer keeps trying past a failure. (The actuator's reads just find nothing.)
        await eventually(
            lambda: logged(logs, "nats_disconnected"), what="the NATS client to see the server go"
        )
        await eventually(
            lambda: len(logged(logs, "fact_publish_failed")) >= 2, what="a heartbeat publish to fail twice"
        )
        assert not any(t.done() for t in tasks)
        server.start()
        leader = Leader(jlog)  # the leader resumes from the log after the restart

        async def decide() -> bool:
            await leader.decide(ev.Nominated(job=job(2), clusters=["east"], attempt=1))
            return True

        # the client is still reconnecting meanwhile
        await eventually(
            decide, timeout_s=30, interval_s=0.2, ignoring=(Exception,), what="a decision appended"
        )
        await eventually(
            lambda: ("job-2", 1) in states(east), timeout_s=30, what="job-2 created after restart"
        )
        assert not any(t.done() for t in tasks)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        await jlog.close()
        server.stop()


async def test_a_worker_added_while_running_gets_what_the_log_wants_and_drains(
    jslog: JetStreamLog, actuators: Callable[..., Any]
) -> None:
    """WorkerCluster objects (clusters/declared.py): a cluster joins a running actuator, is first
    given what the log already wants there, and is drained only once the drain taint is read back
    and no copy is left there."""
    act = await actuators({})
    leader = Leader(jslog)
    await leader.inputs(submitted(1), ev.ClusterRegistered(cluster="late"))
    await leader.decide(ev.Nominated(job=job(1), clusters=["late"], attempt=1))
    await eventually(lambda: act.desired.seq >= 3, what="decision read")
    late = sim("late")
    act.add_worker("late", late)
    await eventually(lambda: ("job-1", 1) in states(late), what="copy created on the late cluster")
    assert not act.drained("late"), "not draining: never drained"
    taint = ev.Taint(key=DRAINING_TAINT, effect="NoSchedule")
    await leader.inputs(ev.ClusterUpdated(cluster="late", taints=[taint]))
    await eventually(lambda: "late" in act.desired.draining, what="drain taint read")
    assert not act.drained("late"), "a copy is still wanted there"
    await leader.decide(ev.CleanUp(job=job(1), cluster="late", attempt=1))
    await eventually(lambda: act.drained("late"), what="drained once the copy is deleted")
    assert states(late) == {}
    await act.remove_worker("late")
    assert "late" not in act.workers


async def test_an_append_of_its_own_process_wakes_the_actuator_between_polls(jslog: JetStreamLog) -> None:
    recent = jslog.keep_recent()  # as kdispatch serve does (wiring.build)
    east = sim("east")
    act = Actuator(jslog.reader, {"east": east}, poll_interval_s=3600)  # no poll within the test
    act.wake = recent.decided
    stop = asyncio.Event()
    task = asyncio.create_task(act.run(stop))
    try:
        await asyncio.wait_for(act.caught_up.wait(), 10)
        leader = Leader(jslog)
        await leader.inputs(submitted(1))
        await leader.decide(ev.Nominated(job=job(1), clusters=["east"], attempt=1))
        await eventually(lambda: ("job-1", 1) in states(east), what="the copy created")
        assert recent.served >= 2  # the JobSubmitted and the Nominated, from memory
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
