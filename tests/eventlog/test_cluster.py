"""A 3-node JetStream cluster on loopback, R3 streams: stop a node (the log stream's leader)
while producers publish and the sequencer sequences; nothing acknowledged is lost."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import JetStreamLog, connect
from eventlog.store import LogError
from tests.eventlog.cluster import three_nodes
from tests.waiting import Unmet, eventually

N = 600


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[EmbeddedNats]]:
    with three_nodes(tmp_path) as nodes:
        yield nodes


async def publish_all(jlog: JetStreamLog, acked: dict[int, int]) -> None:
    """Publish N facts; a publish that times out is retried with the same msg_id (at most once
    stored). ``acked`` maps i -> inbox seq for every acknowledged one."""
    for i in range(N):
        while True:
            try:
                acked[i] = await jlog.inbox.publish(
                    ev.ClusterHeartbeat(cluster=f"c{i}"), msg_id=f"hb-{i}", timeout_s=1.0
                )
                break
            except LogError:  # PublishTimeout or no quorum during the fail-over
                await asyncio.sleep(0.1)
        await asyncio.sleep(0.002)


async def sequence_until(
    jlog: JetStreamLog, *, done: asyncio.Event, appended: list[int], groups: list[list[int]] | None = None
) -> None:
    """A leader loop as the shell runs it: on any log error, resume from the log and go on."""
    seq = jlog.sequencer("leader")
    while True:
        try:
            await seq.resume()
            while not (done.is_set() and seq.last_inbox_seq >= N):
                items = await seq.pull(max_items=100, timeout_s=0.1)
                if len(items) == 1 and not done.is_set():
                    # A slow producer (a loaded machine) would make every append one entry long,
                    # and appends of several entries are what the chained ids are for.
                    items += await seq.pull(max_items=99, timeout_s=0.2)
                if items:
                    entries = await seq.append_inputs(items, at_ms=1)
                    appended.extend(e.seq for e in entries)
                    if groups is not None:
                        groups.append([e.seq for e in entries])
            return
        except Exception as err:  # LogError, timeouts, API errors while leaders move
            print("sequencer retry:", type(err).__name__, err)  # shown by pytest if the test fails
            await asyncio.sleep(0.2)


@pytest.mark.parametrize("batches", [True, False], ids=["batches", "one by one"])
async def test_stop_the_leader_node_while_publishing_and_sequencing(
    cluster: list[EmbeddedNats], batches: bool
) -> None:
    setup = await connect(",".join(node.url for node in cluster), replicas=3, root="kd")
    info = await setup.js.stream_info(setup.names.log_stream)
    await setup.close()
    assert info.config.num_replicas == 3
    assert info.cluster is not None and info.cluster.leader
    leader_node = next(n for n in cluster if n.server_name == info.cluster.leader)
    # Connected to the node that will stop: the clients must fail over to the others (which they
    # learn from the server), and the log stream must elect a new leader.
    jlog = await connect(leader_node.url, replicas=3, root="kd", publish_timeout_s=2.0)
    producer_log = await connect(leader_node.url, replicas=3, root="kd")
    if not batches:  # a log of an older server: appends one by one, chained by message ids
        await jlog.js.update_stream(info.config.evolve(allow_batched=False))
    try:
        acked: dict[int, int] = {}
        appended: list[int] = []
        done = asyncio.Event()
        producer = asyncio.create_task(publish_all(producer_log, acked))
        groups: list[list[int]] = []
        sequencer = asyncio.create_task(sequence_until(jlog, done=done, appended=appended, groups=groups))
        await eventually(lambda: len(appended) >= N // 3 or Unmet(len(appended)), timeout_s=60, what=f"{N // 3} appended")
        appended_before_stop = list(appended)
        await asyncio.to_thread(leader_node.stop)  # SIGTERM the log stream's leader mid-stream
        await asyncio.wait_for(producer, 60)
        done.set()
        await asyncio.wait_for(sequencer, 60)

        entries = [e async for batch in jlog.reader.read() for e in batch]
        if not batches:  # appends of several entries went one by one, chained
            headers = {e.seq: (await jlog.js.get_msg(jlog.names.log_stream, e.seq)).headers or {} for e in entries}
            chained = [g for g in groups if len(g) > 1]
            assert chained, f"no append of several entries in {len(groups)} appends"
            for group in chained:  # each entry after an append's first names the one before it
                for before, after in itertools.pairwise(group):
                    assert headers[after].get("Nats-Expected-Last-Msg-Id") == headers[before]["Nats-Msg-Id"]
    finally:
        for client in (jlog, producer_log):
            with contextlib.suppress(Exception):
                await client.close()

    # Every acknowledged inbox publish is in the inbox, once, and copied into the log once, in order.
    assert sorted(acked) == list(range(N))
    assert len(set(acked.values())) == N
    copied = [e.inbox_seq for e in entries]
    assert copied == sorted(acked.values())
    assert [e.event for e in entries] == [
        ev.ClusterHeartbeat(cluster=f"c{i}") for i in sorted(acked, key=acked.__getitem__)
    ]
    # Every acknowledged append (before and after the stop) is still there, with no gaps.
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert set(appended_before_stop) <= set(appended) <= {e.seq for e in entries}


async def test_clients_creating_the_same_r3_streams_at_once_all_connect(cluster: list[EmbeddedNats]) -> None:
    """A first install: replicas start together and each creates the streams and buckets. The
    meta leader may leave one of identical concurrent requests unanswered; every client must
    still connect (in a few seconds, not after a 10 s timeout and a restart)."""
    urls = ",".join(node.url for node in cluster)

    async def first_start(root: str, who: int) -> tuple[str, int]:
        jlog = await connect(urls, replicas=3, root=root, setup_timeout_s=60)
        try:
            await jlog.lease("sequencer", 5.0, holder=f"r{who}").current_holder()  # creates the bucket
            await jlog.snapshots.save(who + 1, b"state")  # creates the snapshot bucket
            info = await jlog.js.stream_info(jlog.names.log_stream)
            return info.config.name or "", info.config.num_replicas or 0
        finally:
            await jlog.close()

    # Several first installs (one root each): the collision does not happen every time.
    for install in range(3):
        root = f"install{install}"
        results = await asyncio.wait_for(asyncio.gather(*(first_start(root, i) for i in range(3))), 60)
        assert results == [(f"INSTALL{install}_LOG", 3)] * 3
        probe = await connect(urls, replicas=3, root=root)
        try:
            snapshot = await probe.snapshots.latest()
            assert snapshot is not None and snapshot[1] == b"state"
            kv = await probe.js.stream_info(f"KV_{probe.names.lease_bucket}")
            assert kv.config.num_replicas == 3
        finally:
            await probe.close()
