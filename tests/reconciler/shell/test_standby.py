"""The warm standby: a candidate follows the log while it waits, and its term starts from that state."""

from __future__ import annotations

import asyncio

from eventlog import codec
from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from reconciler import core
from reconciler.edge.plugins import installed
from reconciler.history.replay import replay
from reconciler.service.leader import run_candidate
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready
from reconciler.service.standby import Standby
from tests.waiting import Unmet, eventually

from .scenario import POLICY, admit, decisions_of, publish_clusters, read_all, submission, wait_for


def _summary(state: core.State | None) -> bytes:
    assert state is not None
    return codec.encode(core.summary(state))


async def _warm(standby: Standby, jlog: JetStreamLog) -> None:
    async def check() -> object:
        last = await jlog.reader.last_seq()
        folded = standby.folded
        return (folded is not None and folded.last_seq == last) or Unmet(f"standby not at {last} yet")

    await eventually(check, timeout_s=20, what="the standby to reach the log's end")


async def test_a_standby_follows_the_log_and_the_next_term_starts_from_its_state(jslog: JetStreamLog) -> None:
    loop_a = LeaderLoop(jslog, LoopSettings(leader_id="A", policy=POLICY, idle_wait_s=0.02, snapshot_every=3))
    stop_a = asyncio.Event()
    term_a = asyncio.create_task(loop_a.run_term(stop=stop_a))
    await wait_ready(loop_a, timeout_s=20)
    await publish_clusters(jslog)
    await jslog.inbox.publish(submission(0), msg_id="s0")
    await wait_for(jslog, lambda es: len(decisions_of(es, ev.Nominated)) >= 1)

    standby = Standby(jslog, plugins=installed(), poll_s=0.02)
    standby.start()
    await _warm(standby, jslog)
    # Entries appended after it warmed up (from the snapshot) are folded as they come.
    for i in range(1, 4):
        await jslog.inbox.publish(submission(i), msg_id=f"s{i}")
    await wait_for(jslog, lambda es: len(decisions_of(es, ev.Nominated)) >= 4)
    await _warm(standby, jslog)
    stop_a.set()
    assert await term_a == "stopped"
    folded = await standby.stop()
    assert folded is not None and folded.snapshot_seq > 0  # it started from the leader's snapshot
    full = await replay(jslog.reader, until_seq=folded.last_seq)
    assert _summary(folded.state) == _summary(full.state)

    # The next term takes that state (the very object) and folds on from it; its decisions are
    # the ones a replay from seq 1 recomputes.
    loop_b = LeaderLoop(jslog, LoopSettings(leader_id="B", policy=POLICY, idle_wait_s=0.02))
    loop_b.warm = folded
    stop_b = asyncio.Event()
    term_b = asyncio.create_task(loop_b.run_term(stop=stop_b))
    await wait_ready(loop_b, timeout_s=20)
    assert loop_b.state is folded.state and loop_b.snapshot_seq == folded.snapshot_seq
    for e in decisions_of(await read_all(jslog), ev.Nominated):
        assert isinstance(e.event, ev.Nominated)
        await admit(jslog, e.event, cluster=e.event.clusters[0])
    await wait_for(jslog, lambda es: any(e.leader == "B" and isinstance(e.event, ev.Placed) for e in es))
    stop_b.set()
    assert await term_b == "stopped"
    result = await replay(jslog.reader, verify=True)
    assert result.mismatch is None
    assert _summary(result.state) == _summary(loop_b.state)


async def test_a_warm_candidate_takes_over_when_the_leader_steps_down(jslog: JetStreamLog) -> None:
    loop_a = LeaderLoop(jslog, LoopSettings(leader_id="A", policy=POLICY, idle_wait_s=0.02, snapshot_every=3))
    loop_b = LeaderLoop(jslog, LoopSettings(leader_id="B", policy=POLICY, idle_wait_s=0.02))
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    cand_a = asyncio.create_task(run_candidate(jslog, loop_a, stop=stop_a, ttl_s=2.0))
    await wait_ready(loop_a, timeout_s=20)
    cand_b = asyncio.create_task(run_candidate(jslog, loop_b, stop=stop_b, ttl_s=2.0, warm=True))
    await publish_clusters(jslog)
    for i in range(3):
        await jslog.inbox.publish(submission(i), msg_id=f"s{i}")
    await wait_for(jslog, lambda es: len(decisions_of(es, ev.Nominated)) >= 3)
    stop_a.set()  # A steps down and releases the lease: B leads
    await cand_a
    await wait_ready(loop_b, timeout_s=20)
    await jslog.inbox.publish(submission(9), msg_id="s9")
    await wait_for(jslog, lambda es: any(e.leader == "B" and isinstance(e.event, ev.Nominated) for e in es))
    stop_b.set()
    await cand_b
    result = await replay(jslog.reader, verify=True)
    assert result.mismatch is None


async def test_a_term_ended_by_a_late_renewal_gives_the_lease_back(jslog: JetStreamLog) -> None:
    """A leader whose renewal came late (a starved process: its own view says the lease may have
    expired) ends its term. Its renewals must stop with it: in the soak, a term that ended so
    kept renewing the key in the background, and no replica could lead again."""
    leases = []
    make = jslog.lease

    def recording(*args: object, **kwargs: object) -> object:
        lease = make(*args, **kwargs)  # type: ignore[arg-type]
        leases.append(lease)
        return lease

    jslog.lease = recording  # type: ignore[method-assign]
    loop_a = LeaderLoop(jslog, LoopSettings(leader_id="A", policy=POLICY, idle_wait_s=0.02))
    loop_b = LeaderLoop(jslog, LoopSettings(leader_id="B", policy=POLICY, idle_wait_s=0.02))
    stop = asyncio.Event()
    cand_a = asyncio.create_task(run_candidate(jslog, loop_a, stop=stop, ttl_s=2.0, warm=False))
    await wait_ready(loop_a, timeout_s=20)
    cand_b = asyncio.create_task(run_candidate(jslog, loop_b, stop=stop, ttl_s=2.0, warm=False))
    await publish_clusters(jslog)
    await jslog.inbox.publish(submission(0), msg_id="s0")
    await wait_for(jslog, lambda es: len(decisions_of(es, ev.Nominated)) >= 1)
    [lease_a] = [lease for lease in leases if lease.holder == "A"]
    lease_a._valid_until = 0.0  # the renewal came late: A's sequencer no longer vouches for it
    await jslog.inbox.publish(submission(1), msg_id="s1")
    await wait_for(jslog, lambda es: len(decisions_of(es, ev.Nominated)) >= 2, timeout_s=30)
    await eventually(
        lambda: lease_a._renewer is None or lease_a._renewer.done() or Unmet("A still renews the lease it gave up"),
        what="A's renewals to stop",
    )
    stop.set()
    await asyncio.gather(cand_a, cand_b)
    result = await replay(jslog.reader, verify=True)
    assert result.mismatch is None
