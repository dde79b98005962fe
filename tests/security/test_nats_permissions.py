"""Each component's NATS user against a real nats-server running the authorization that
``eventlog.natsauth`` generates (what ``kdispatch serve`` starts by default): the webhook cannot
write the log or take the lease, a second writer is fenced, a fact from the wrong sender is
rejected into the log with the reason."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import APIError, KeyNotFoundError

from eventlog import codec
from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import JetStreamLog, connect
from eventlog.jetstream.connection import permission_denied
from eventlog.jetstream.provision import ProvisionError
from eventlog.jetstream.sequencer import WRONG_LAST_SEQUENCE
from eventlog.natsauth import Credentials, inbox_prefix
from eventlog.store import Fenced, LogError, NotLeader
from tests.eventlog.samples import JOB
from tests.waiting import eventually

ROOT = "kd"
AT = 1_700_000_000_000


class Secured:
    def __init__(self, server: EmbeddedNats, creds: Credentials) -> None:
        self.server, self.creds = server, creds
        self.opened: list[JetStreamLog] = []

    async def log_as(self, component: str, **options: object) -> JetStreamLog:
        if component in ("webhook", "worker"):
            options = {"create_streams": False, "source": component, **options}
        jlog = await connect(
            self.server.url,
            root=ROOT,
            nkey=self.creds.seed_file(component),
            name=f"test-{component}",
            inbox_prefix=inbox_prefix(component),
            setup_timeout_s=10.0,
            **options,  # type: ignore[arg-type]
        )
        self.opened.append(jlog)
        return jlog


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[Secured]:
    creds = Credentials(tmp_path).ensure(root=ROOT)
    async with EmbeddedNats(data_dir=tmp_path, config_file=creds.server_conf) as server:
        env = Secured(server, creds)
        try:
            yield env
        finally:
            for jlog in env.opened:
                await jlog.close()


def submitted(name: str = "train") -> ev.JobSubmitted:
    return ev.JobSubmitted(job=ev.JobRef(namespace="team-a", name=name, uid=f"uid-{name}"), pod_sets=[])


def test_credentials_are_private_to_their_owner(tmp_path: Path) -> None:
    creds = Credentials(tmp_path).ensure()
    assert (creds.dir.stat().st_mode & 0o777) == 0o700
    for path in [creds.server_conf, *(creds.seed_file(c) for c in ("reconciler", "webhook", "worker", "reader"))]:
        assert (path.stat().st_mode & 0o777) == 0o600, path
    seed = creds.seed_file("webhook").read_text()
    assert seed not in creds.server_conf.read_text()  # the server holds public keys only
    assert Credentials(tmp_path).ensure().seed_file("webhook").read_text() == seed  # kept on restart


async def test_no_identity_no_connection(secured: Secured) -> None:
    with pytest.raises(ConnectionError):
        await connect(secured.server.url, root=ROOT, connect_timeout_s=2.0)


async def test_the_webhook_publishes_its_facts_and_nothing_else(secured: Secured) -> None:
    reconciler = await secured.log_as("reconciler")
    webhook = await secured.log_as("webhook")

    seq = await webhook.inbox.publish(submitted(), msg_id="submit/train")
    assert seq == 1
    # The log: a forged decision straight onto a log subject.
    entry = ev.LogEntry(seq=1, at_ms=AT, event=ev.Nominated(job=JOB, clusters=["east"], attempt=1), leader="webhook")
    with pytest.raises(LogError, match="permissions violation"):
        await webhook.inbox.publish_raw(
            f"{ROOT}.log.decision.nominated.team-a.train", codec.encode(entry), timeout_s=1.0
        )
    # The plain inbox layout (taken for the reconciler's own facts) and a worker's prefix.
    for subject in (f"{ROOT}.in.job.submitted.team-a.x", f"{ROOT}.in.worker.job.submitted.team-a.x"):
        with pytest.raises(LogError, match="permissions violation"):
            await webhook.inbox.publish_raw(subject, codec.encode(submitted("x")), timeout_s=1.0)
    # The log's stream: the webhook may not even look at it (the server drops the request).
    with pytest.raises(NatsTimeout):
        await webhook.nc.jetstream(timeout=1.0).stream_info(webhook.names.log_stream)
    assert permission_denied(webhook.nc, f"$JS.API.STREAM.INFO.{webhook.names.log_stream}")

    assert await reconciler.reader.last_seq() == 0  # nothing reached the log
    info = await reconciler.js.stream_info(reconciler.names.inbox_stream)
    assert info.state.messages == 1  # only its own fact reached the inbox


async def test_no_user_can_listen_to_another_users_replies(secured: Secured) -> None:
    """Log entries reach the reconciler as deliveries to its reply inbox: the webhook and the
    reader may not subscribe there (nor to the log's subjects, for the webhook)."""
    await secured.log_as("reconciler")
    for component, subject in (
        ("webhook", "_INBOX_reconciler.>"),
        ("webhook", "_INBOX.>"),
        ("webhook", f"{ROOT}.log.>"),
        ("reader", "_INBOX_reconciler.>"),
    ):
        jlog = await secured.log_as(component, **({"create_streams": False} if component == "reader" else {}))
        await jlog.nc.subscribe(subject)
        # The server refuses the SUB with an -ERR of its own, whenever it gets to it.
        refusal = await eventually(
            functools.partial(permission_denied, jlog.nc, subject),
            what=f"the server refusing {component} {subject}",
        )
        assert "subscription" in refusal


async def test_the_webhook_cannot_take_or_renew_the_lease(secured: Secured) -> None:
    reconciler = await secured.log_as("reconciler")
    lease = reconciler.lease("leader", ttl_s=5.0, holder="leader-1")
    assert await lease.try_acquire()
    webhook = await secured.log_as("webhook")

    with pytest.raises(ProvisionError, match="permissions violation"):
        await webhook.lease("leader", ttl_s=5.0, holder="webhook").try_acquire()
    # Writing the key directly (what a renewal sends) is dropped by the server as well.
    with pytest.raises(LogError, match="permissions violation"):
        await webhook.inbox.publish_raw(f"$KV.{webhook.names.lease_bucket}.leader", b"{}", timeout_s=1.0)

    assert await lease.current_holder() == "leader-1"
    await lease.renew()  # still ours, at the revision we wrote
    await lease.release()
    kv = await reconciler.js.key_value(reconciler.names.lease_bucket)
    with pytest.raises(KeyNotFoundError):
        await kv.get("leader")


async def test_a_second_reconciler_without_the_lease_is_fenced(secured: Secured) -> None:
    leader_log = await secured.log_as("reconciler")
    other_log = await secured.log_as("reconciler")
    lease = leader_log.lease("leader", ttl_s=5.0, holder="leader")
    assert await lease.try_acquire()
    leader = leader_log.sequencer("leader", lease=lease)
    await leader.append_decisions([ev.Nominated(job=JOB, clusters=["east"], attempt=1)], at_ms=AT)

    # With its own (unacquired) lease the sequencer refuses before it writes anything.
    other_lease = other_log.lease("leader", ttl_s=5.0, holder="standby")
    with pytest.raises(NotLeader):
        await other_log.sequencer("standby", lease=other_lease).append_decisions(
            [ev.Nominated(job=JOB, clusters=["west"], attempt=1)], at_ms=AT
        )
    # Without the lease check: it read the log at seq 1, the leader wrote on, its append is fenced.
    forger = other_log.sequencer("standby")
    assert await forger.resume() == (1, 0)
    await leader.append_decisions([ev.Placed(job=JOB, cluster="east", attempt=1)], at_ms=AT)
    with pytest.raises(Fenced, match="another leader wrote"):
        await forger.append_decisions([ev.Nominated(job=JOB, clusters=["west"], attempt=1)], at_ms=AT)

    # The same forgery by hand, with a Nats-Expected-Last-Sequence the log has passed.
    entry = ev.LogEntry(seq=2, at_ms=AT, event=ev.Nominated(job=JOB, clusters=["west"], attempt=1), leader="standby")
    with pytest.raises(APIError) as refused:
        await other_log.js.publish(
            f"{ROOT}.log.decision.nominated.team-a.train",
            codec.encode(entry),
            stream=other_log.names.log_stream,
            headers={"Nats-Expected-Last-Sequence": "1"},
        )
    assert refused.value.err_code == WRONG_LAST_SEQUENCE
    entries = [e async for batch in leader_log.reader.read() for e in batch]
    assert [type(e.event).__name__ for e in entries] == ["Nominated", "Placed"]
    assert {e.leader for e in entries} == {"leader"}


async def test_a_fact_from_the_wrong_sender_is_rejected_with_the_reason(secured: Secured) -> None:
    reconciler = await secured.log_as("reconciler")
    webhook = await secured.log_as("webhook")
    worker = await secured.log_as("worker")

    await webhook.inbox.publish(submitted(), msg_id="ok")  # its own kind of fact
    await webhook.inbox.publish_raw(  # a decision, on the only subjects it may publish to
        f"{ROOT}.in.webhook.decision.nominated.team-a.train",
        codec.encode(ev.Nominated(job=JOB, clusters=["east"], attempt=1)),
    )
    await webhook.inbox.publish(ev.ClusterHeartbeat(cluster="east"))  # a worker's fact
    await worker.inbox.publish(ev.ClusterHeartbeat(cluster="east"))  # the worker's own
    await worker.inbox.publish(submitted("sneaky"))  # a submission claimed by a worker

    sequencer = reconciler.sequencer("leader")
    items = await sequencer.pull(max_items=10, timeout_s=2.0)
    assert len(items) == 5
    entries = await sequencer.append_inputs(items, at_ms=AT)
    kinds = [type(e.event).__name__ for e in entries]
    assert kinds == ["JobSubmitted", "Rejected", "Rejected", "ClusterHeartbeat", "Rejected"]
    reasons = [e.event.reason for e in entries if isinstance(e.event, ev.Rejected)]
    assert "Nominated is written by the leader only" in reasons[0]
    assert "ClusterHeartbeat may not come from the webhook" in reasons[1]
    assert "JobDeleted, JobSubmitted, JobUpdated" in reasons[1]
    assert "JobSubmitted may not come from the worker" in reasons[2]
    rejected = [e.event for e in entries if isinstance(e.event, ev.Rejected)]
    assert rejected[1].subject == f"{ROOT}.in.webhook.cluster.heartbeat.east"
    stored = [e async for batch in reconciler.reader.read() for e in batch]
    assert [type(e.event).__name__ for e in stored] == kinds


async def test_the_reader_reads_and_writes_nothing(secured: Secured) -> None:
    reconciler = await secured.log_as("reconciler")
    await reconciler.sequencer("leader").append_decisions([ev.Nominated(job=JOB, clusters=["east"], attempt=1)], at_ms=AT)
    await reconciler.snapshots.save(1, b"state")
    reader = await secured.log_as("reader", create_streams=False)

    assert [type(e.event).__name__ async for batch in reader.reader.read() for e in batch] == ["Nominated"]
    assert await reader.snapshots.latest() == (1, b"state")
    with pytest.raises(LogError, match="permissions violation"):
        await reader.inbox.publish(submitted())
    with pytest.raises(LogError, match="permissions violation"):  # the batched path (the webhook's)
        await reader.inbox.publish_many([(submitted("a"), "a"), (submitted("b"), "b")], timeout_s=1.0)
    with pytest.raises(NatsTimeout):
        await reader.nc.jetstream(timeout=1.0).delete_stream(reader.names.log_stream)
    assert permission_denied(reader.nc, f"$JS.API.STREAM.DELETE.{reader.names.log_stream}")
    assert await reconciler.reader.last_seq() == 1


@pytest.mark.parametrize("component", ["reconciler", "reader"])
async def test_a_snapshot_large_enough_for_flow_control_is_read_back(secured: Secured, component: str) -> None:
    """Reading a snapshot is a push consumer with flow control: the server waits for the reader's
    answer on ``$JS.FC.<stream>.…`` once several MB are in flight. Without the right to publish
    it, a new leader (or ``replay``) waits on its first snapshot for ever (found by the soak)."""
    import asyncio
    import os

    writer = await secured.log_as("reconciler")
    data = os.urandom(12 << 20)  # incompressible, above the flow-control window
    await writer.snapshots.save(100, data)
    options = {"create_streams": False} if component == "reader" else {}
    reading = await secured.log_as(component, **options)
    got = await asyncio.wait_for(reading.snapshots.latest(), 60)  # a bound on the hang, not a timing
    assert got is not None and got[0] == 100 and got[1] == data
