"""The leader loop on a real nats-server: inbox -> log -> decide -> log, repair, policy, fencing."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

import msgspec
import pytest
import structlog

from eventlog import codec
from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from eventlog.jetstream.sequencer import JetStreamSequencer
from eventlog.store import InboxItem
from reconciler import core
from reconciler.history.rebuild import decode_snapshot, rebuild_state
from reconciler.history.replay import replay
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready
from tests.waiting import eventually

from .scenario import (
    POLICY,
    admit,
    decisions_of,
    publish_clusters,
    read_all,
    submission,
    wait_for,
)


async def _start(jlog: JetStreamLog, *, leader_id: str = "A", **settings: object) -> tuple[LeaderLoop, asyncio.Event, asyncio.Task[str]]:
    loop = LeaderLoop(jlog, LoopSettings(leader_id=leader_id, policy=POLICY, idle_wait_s=0.02, **settings))  # type: ignore[arg-type]
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    await wait_ready(loop, timeout_s=20)
    return loop, stop, term


async def test_loop_sequences_submissions_and_cluster_facts_into_decisions(jslog: JetStreamLog) -> None:
    loop, stop, term = await _start(jslog)
    await publish_clusters(jslog)
    await jslog.inbox.publish(submission(0, gpus=6), msg_id="s0")  # only east has 6 GPUs
    await jslog.inbox.publish(submission(1, region="west"), msg_id="s1")
    entries = await wait_for(jslog, lambda es: len(decisions_of(es, ev.Nominated)) >= 2)
    nominated = {e.event.job.key: e.event for e in decisions_of(entries, ev.Nominated)}  # type: ignore[attr-defined]
    assert nominated["team-a/job-0"].clusters == ["east"]
    assert nominated["team-a/job-1"].clusters == ["west"]
    await admit(jslog, nominated["team-a/job-0"], cluster="east")
    entries = await wait_for(jslog, lambda es: len(decisions_of(es, ev.Placed)) >= 1)
    stop.set()
    assert await term == "stopped"

    placed = decisions_of(entries, ev.Placed)[0].event
    assert isinstance(placed, ev.Placed) and (placed.job.key, placed.cluster) == ("team-a/job-0", "east")
    # The log's shape: the policy first, every input with its inbox seq, time never going back,
    # decisions in complete batches stamped with the time of the inputs before them.
    assert isinstance(entries[0].event, ev.PolicyLoaded) and entries[0].inbox_seq is None
    inbox_seqs = [e.inbox_seq for e in entries if not ev.is_decision(e.event) and e.inbox_seq is not None]
    assert inbox_seqs == sorted(inbox_seqs) and len(inbox_seqs) == len(set(inbox_seqs))
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert all(a.at_ms <= b.at_ms for a, b in itertools.pairwise(entries))
    for i, e in enumerate(entries):
        if e.batch is not None and e.batch[0] == 0:
            previous = entries[i - 1]
            assert not ev.is_decision(previous.event) and previous.at_ms == e.at_ms
    assert {e.leader for e in entries} == {"A"}
    # Replay reproduces every decision the loop made.
    result = await replay(jslog.reader, verify=True)
    assert result.mismatch is None
    assert result.verified_batches == sum(1 for e in entries if e.batch is not None and e.batch[0] == 0) >= 2
    assert codec.encode(core.summary(result.state)) == codec.encode(core.summary(loop.state))


async def test_policy_is_recorded_only_when_it_changes(jslog: JetStreamLog) -> None:
    _, stop, term = await _start(jslog)
    stop.set()
    await term
    _, stop, term = await _start(jslog, leader_id="B")
    stop.set()
    await term
    changed = msgspec.structs.replace(POLICY, claim_ttl_ms=5_000)
    loop = LeaderLoop(jslog, LoopSettings(leader_id="C", policy=changed, idle_wait_s=0.02))
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    await wait_ready(loop, timeout_s=20)
    stop.set()
    await term
    policies = [e for e in await read_all(jslog) if isinstance(e.event, ev.PolicyLoaded)]
    assert [(p.leader, p.event.claim_ttl_ms) for p in policies] == [("A", POLICY.claim_ttl_ms), ("C", 5_000)]  # type: ignore[attr-defined]


async def test_a_batch_cut_short_by_a_crash_is_completed_by_the_next_leader(jslog: JetStreamLog) -> None:
    # The previous leader appended the inputs and the first decision of a 2-decision batch, then died.
    dead = jslog.sequencer("dead")
    await dead.resume()
    await publish_clusters(jslog)
    await jslog.inbox.publish(submission(0), msg_id="s0")
    await jslog.inbox.publish(submission(1), msg_id="s1")
    items: list[InboxItem] = [InboxItem(inbox_seq=None, event=POLICY)]
    while len(items) < 7:
        items += await dead.pull(max_items=10, timeout_s=0.5)
    inputs = await dead.append_inputs(items, at_ms=1_000)
    state = core.new_state()
    for entry in inputs:
        state = core.fold(state, entry)
    decisions = core.decide(state)
    assert len(decisions) >= 2, decisions
    await dead.append_decisions(decisions[:1], at_ms=1_000, count=len(decisions))

    _, stop, term = await _start(jslog, leader_id="next")
    stop.set()
    assert await term == "stopped"
    entries = await read_all(jslog)
    batch = [e for e in entries if e.batch is not None and e.batch[1] == len(decisions)]
    assert [e.batch for e in batch] == [(i, len(decisions)) for i in range(len(decisions))]
    assert [e.leader for e in batch] == ["dead"] + ["next"] * (len(decisions) - 1)
    assert [codec.encode(e.event) for e in batch] == [codec.encode(d) for d in decisions]
    assert all(e.at_ms == 1_000 for e in batch)
    result = await replay(jslog.reader, verify=True)
    assert result.mismatch is None and result.incomplete_batches == []


async def test_a_deposed_leader_is_fenced_and_steps_down(jslog: JetStreamLog) -> None:
    _, stop, term = await _start(jslog, leader_id="old")
    usurper = jslog.sequencer("new")
    await usurper.resume()
    await usurper.append_inputs([InboxItem(inbox_seq=None, event=ev.Tick())], at_ms=2_000_000_000_000)
    await jslog.inbox.publish(submission(0), msg_id="s0")  # the old leader tries to sequence this
    assert await asyncio.wait_for(term, timeout=20) == "fenced"
    stop.set()
    entries = await read_all(jslog)
    assert entries[-1].leader == "new"  # nothing written by "old" after the usurper's append


async def test_snapshots_are_taken_and_a_new_term_starts_from_them(jslog: JetStreamLog) -> None:
    loop, stop, term = await _start(jslog, snapshot_every=3)
    await publish_clusters(jslog)
    for i in range(2, 6):
        await jslog.inbox.publish(submission(i), msg_id=f"s{i}")
    await wait_for(jslog, lambda es: len(decisions_of(es, ev.Nominated)) >= 4)
    stop.set()
    await term
    found = await jslog.snapshots.latest()
    assert found is not None
    seq, data = found
    snap = decode_snapshot(data)
    assert snap.seq == seq and snap.policy is not None
    # Rebuilding from that snapshot gives the state a full replay gives.
    folded = await rebuild_state(jslog.reader, jslog.snapshots)
    full = await replay(jslog.reader)
    assert folded.snapshot_seq == seq and folded.last_seq == full.last_seq and folded.policy is not None
    assert codec.encode(core.summary(folded.state)) == codec.encode(core.summary(full.state))
    assert codec.encode(core.summary(folded.state)) == codec.encode(core.summary(loop.state))
    # A new leader starts from that snapshot and decides on: its decisions are the ones a replay
    # from seq 1 recomputes (the snapshot lost nothing decide depends on: timers, assumed usage...).
    loop_b, stop, term = await _start(jslog, leader_id="B", snapshot_every=3)
    assert loop_b.snapshot_seq == seq
    for e in decisions_of(await read_all(jslog), ev.Nominated):
        assert isinstance(e.event, ev.Nominated)
        await admit(jslog, e.event, cluster=e.event.clusters[0])
    await wait_for(jslog, lambda es: len(decisions_of(es, ev.Placed)) >= 4)
    stop.set()
    await term
    entries = await read_all(jslog)
    assert any(e.leader == "B" and isinstance(e.event, ev.Placed) for e in entries)
    result = await replay(jslog.reader, verify=True)
    assert result.mismatch is None
    assert codec.encode(core.summary(result.state)) == codec.encode(core.summary(loop_b.state))


async def test_a_tick_is_appended_when_a_timer_is_due_and_not_before(jslog: JetStreamLog) -> None:
    # A 300 ms round timeout: the copy is never admitted, so the round must move on — which only a
    # Tick can make happen, since nothing else arrives in the inbox.
    policy = msgspec.structs.replace(
        POLICY, profiles=[msgspec.structs.replace(POLICY.profiles[0], round_timeout_ms=300)]
    )
    loop = LeaderLoop(jslog, LoopSettings(leader_id="A", policy=policy, idle_wait_s=0.02))
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    await wait_ready(loop, timeout_s=20)
    await publish_clusters(jslog)
    await jslog.inbox.publish(submission(0), msg_id="s0")
    entries = await wait_for(jslog, lambda es: len(decisions_of(es, ev.Nominated)) >= 2)
    stop.set()
    await term
    first, second = (e.event for e in decisions_of(entries, ev.Nominated)[:2])
    assert isinstance(first, ev.Nominated) and isinstance(second, ev.Nominated)
    assert first.deadline_ms is not None
    ticks = [e for e in entries if isinstance(e.event, ev.Tick)]
    # The first Tick is sequenced once the round's deadline has passed, never earlier, and it
    # came from the sequencer itself (no inbox entry).
    assert ticks and ticks[0].inbox_seq is None and ticks[0].at_ms >= first.deadline_ms
    assert all(t.at_ms >= first.deadline_ms for t in ticks)
    after_tick = entries[entries.index(ticks[0]) + 1 :]
    assert any(isinstance(e.event, ev.Withdrawn | ev.Nominated) for e in after_tick)
    assert second.round == first.round + 1 or second.attempt == first.attempt + 1
    result = await replay(jslog.reader, verify=True)
    assert result.mismatch is None


async def test_a_short_batch_that_decide_disagrees_with_is_left_short(jslog: JetStreamLog) -> None:
    # A batch written by another version of the policy code (here: a decision this core would not
    # make), cut short. Completing it with today's decisions would mix two versions in one batch.
    dead = jslog.sequencer("old-version")
    await dead.resume()
    await publish_clusters(jslog)
    await jslog.inbox.publish(submission(0), msg_id="s0")
    items: list[InboxItem] = [InboxItem(inbox_seq=None, event=POLICY)]
    while len(items) < 6:
        items += await dead.pull(max_items=10, timeout_s=0.5)
    await dead.append_inputs(items, at_ms=1_000)
    alien = ev.Nominated(job=submission(0).job, clusters=["east", "west"], attempt=7)
    await dead.append_decisions([alien], at_ms=1_000, count=3)

    _, stop, term = await _start(jslog, leader_id="new")
    stop.set()
    assert await term == "stopped"
    entries = await read_all(jslog)
    short = [e for e in entries if e.batch is not None and e.batch[1] == 3]
    assert [e.leader for e in short] == ["old-version"]  # nothing appended to it
    # What was written stands (the job is not nominated twice); verification points at the batch.
    assert [e.event for e in decisions_of(entries, ev.Nominated)] == [alien]
    result = await replay(jslog.reader, verify=True)
    assert result.mismatch is not None and result.mismatch.seq == short[0].seq


async def test_no_tick_passes_over_a_heartbeat_stored_before_it(
    jslog: JetStreamLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A starved event loop ends a pull's wait in the same turn as the deliveries it waited for
    become readable, so the pull comes back empty while the inbox holds a heartbeat. A Tick then
    would declare its cluster Lost (what made the lost-worker e2e test flaky under load). The
    leader ticks only once the inbox is read to its end."""
    real_pull = JetStreamSequencer.pull
    late = asyncio.Event()  # a heartbeat is stored while deliveries are held back
    released = asyncio.Event()
    lost_at: list[int] = []  # when the cluster is due to be Lost without the late heartbeat
    held_past_deadline: list[int] = []

    async def pull(
        self: JetStreamSequencer, *, max_items: int = 500, timeout_s: float = 0.05
    ) -> list[InboxItem]:
        if late.is_set() and not released.is_set():
            await asyncio.sleep(timeout_s)  # what the leader sees: nothing came in time
            if not lost_at:  # the batch with the first heartbeat is folded by now
                assert loop.state is not None
                lost_at.append(core.next_deadline(loop.state) or 0)
            if time.time_ns() // 1_000_000 >= lost_at[0]:
                held_past_deadline.append(lost_at[0])
            return []
        items = await real_pull(self, max_items=max_items, timeout_s=timeout_s)
        if any(isinstance(i.event, ev.ClusterHeartbeat) for i in items) and not late.is_set():
            await jslog.inbox.publish(ev.ClusterHeartbeat(cluster="east"), msg_id="hb/east/late")
            late.set()
        return items

    monkeypatch.setattr(JetStreamSequencer, "pull", pull)
    # Stored before the term starts: nothing between registration and first heartbeat can pass
    # the deadline (a Tick waits for the heartbeat, a batch with it folds it before deciding).
    await jslog.inbox.publish(ev.ClusterRegistered(cluster="east", capacity={"cpu": 1000}), msg_id="reg/east")
    await jslog.inbox.publish(ev.ClusterHeartbeat(cluster="east"), msg_id="hb/east/0")
    policy = msgspec.structs.replace(POLICY, worker_lost_timeout_ms=300)
    loop = LeaderLoop(jslog, LoopSettings(leader_id="A", policy=policy, idle_wait_s=0.02))
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    await eventually(
        lambda: len(held_past_deadline) >= 3, what="empty pulls after the cluster's lost deadline"
    )
    released.set()
    entries = await wait_for(jslog, lambda es: len(decisions_of(es, ev.ClusterHeartbeat)) >= 2)
    stop.set()
    await term
    late_heartbeat = decisions_of(entries, ev.ClusterHeartbeat)[1]
    before = entries[: entries.index(late_heartbeat)]
    assert not decisions_of(before, ev.ClusterLost), [type(e.event).__name__ for e in entries]



async def test_noteworthy_decisions_are_logged_unless_info_lines_are_filtered_out(jslog: JetStreamLog) -> None:
    captured = structlog.testing.LogCapture()
    structlog.configure(processors=[captured], wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        loop, stop, term = await _start(jslog)
        await publish_clusters(jslog)
        await jslog.inbox.publish(submission(0, gpus=100), msg_id="s0")  # no cluster has 100 GPUs
        first = decisions_of(await wait_for(jslog, lambda es: bool(decisions_of(es, ev.Unschedulable))), ev.Unschedulable)
        await eventually(lambda: loop.last_seq >= first[0].seq, what="the loop folded its decision")
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
        await jslog.inbox.publish(submission(1, gpus=100), msg_id="s1")
        both = decisions_of(await wait_for(jslog, lambda es: len(decisions_of(es, ev.Unschedulable)) >= 2), ev.Unschedulable)
        await eventually(lambda: loop.last_seq >= both[1].seq, what="the loop folded the second decision")
        stop.set()
        assert await term == "stopped"
    finally:
        structlog.reset_defaults()  # other tests in this process expect structlog as it was
    decided = [e for e in captured.entries if e["event"] == "decided"]
    assert [(e["decision"], e["job"], e["log_level"]) for e in decided] == [("Unschedulable", "team-a/job-0", "info")]
