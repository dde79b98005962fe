"""The log on NATS JetStream: the only package of ours that talks to NATS.

``connect(url)`` opens (and creates if missing) the Inbox and Log streams of one log and gives a
``JetStreamLog`` with ``.inbox``, ``.reader``, ``.sequencer(leader_id)``, ``.snapshots`` and
``.lease(name, ttl_s)``. With ``url=None`` it starts the embedded nats-server (see
``eventlog.embedded``) with its store under ``data_dir`` and stops it on ``close()``.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
import weakref
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StoreCompression, StreamConfig
from nats.js.errors import BadRequestError, NotFoundError

from eventlog.embedded import EmbeddedNats
from eventlog.jetstream.connection import TlsFiles, open_client
from eventlog.jetstream.inbox import JetStreamInbox
from eventlog.jetstream.lease import Lease
from eventlog.jetstream.names import LogNames
from eventlog.jetstream.provision import (
    STREAM_NAME_IN_USE,
    NotLedYet,
    ProvisionError,
    created_info,
    require_leader,
    with_retries,
)
from eventlog.jetstream.reader import JetStreamReader
from eventlog.jetstream.recent import DEFAULT_ENTRIES as DEFAULT_RECENT_ENTRIES
from eventlog.jetstream.recent import RecentEntries
from eventlog.jetstream.sequencer import JetStreamSequencer
from eventlog.jetstream.snapshots import JetStreamSnapshots

log = structlog.get_logger("eventlog.jetstream")

__all__ = [
    "JetStreamInbox",
    "JetStreamLog",
    "JetStreamReader",
    "JetStreamSequencer",
    "JetStreamSnapshots",
    "Lease",
    "LogNames",
    "ProvisionError",
    "TlsFiles",
    "connect",
]

DUPLICATE_WINDOW_S = 120.0
# S2 block compression of the file store (nats-server >= 2.10): the log's JSON entries take 0.3x
# the bytes (bench/log_size.py, docs/sizing.md); the server decompresses on read, so every reader
# sees the bytes the sequencer wrote and replay is unchanged.
COMPRESSION = StoreCompression.S2
# The inbox is a transfer buffer (the log holds a copy of everything sequenced): a week covers any
# reasonable outage of the sequencer and keeps heartbeats and facts from piling up twice.
INBOX_MAX_AGE_S = 7 * 24 * 3600.0
# Fast-ingest batches (eventlog.jetstream.sequencer): one ack per append instead of one per entry.
BATCHES_SINCE = (2, 14)


class JetStreamLog:
    """One kdispatch log (inbox + log streams, lease bucket, snapshots) on one NATS connection."""

    def __init__(
        self,
        *,
        nc: Client,
        js: JetStreamContext,
        names: LogNames,
        replicas: int,
        embedded: EmbeddedNats | None = None,
        publish_timeout_s: float = 5.0,
        source: str | None = None,
    ) -> None:
        self.nc = nc
        self.js = js
        self.names = names
        self.replicas = replicas
        self.embedded = embedded
        self.publish_timeout_s = publish_timeout_s
        self.inbox = JetStreamInbox(js, names, nc=nc, source=source)
        self.reader = JetStreamReader(self)
        self.snapshots = JetStreamSnapshots(self)
        self._sequencers: weakref.WeakSet[JetStreamSequencer] = weakref.WeakSet()  # closed with the log
        self.recent: RecentEntries | None = None  # see keep_recent

    def keep_recent(self, entries: int = DEFAULT_RECENT_ENTRIES) -> RecentEntries:
        """Keep the last ``entries`` this log's sequencers append, for ``reader`` to take
        without a round trip (``jetstream.recent``): for a process that writes the log and
        follows it too (``kdispatch serve``)."""
        if self.recent is None:
            self.recent = RecentEntries(entries)
        return self.recent

    def sequencer(self, leader_id: str, *, lease: Lease | None = None) -> JetStreamSequencer:
        """The writer side for ``leader_id``. With ``lease``, every append first checks the lease
        is still valid (``NotLeader`` if not); fencing on the last sequence backs that up."""
        seq = JetStreamSequencer(self, leader_id, lease=lease)
        self._sequencers.add(seq)
        return seq

    def lease(self, name: str, ttl_s: float, *, holder: str | None = None) -> Lease:
        """Leader election on KV key ``name`` (bucket ``<ROOT>_LEASE``, TTL ``ttl_s``)."""
        return Lease(self, name=name, ttl_s=ttl_s, holder=holder)

    @property
    def url(self) -> str:
        return str(self.nc.connected_url.geturl()) if self.nc.connected_url else ""

    async def ensure_streams(self, *, budget_s: float = 60.0) -> None:
        """Create the inbox and log streams if missing (retried: see ``provision``)."""
        for config in self._stream_configs():
            assert config.name is not None
            await with_retries(
                functools.partial(_ensure_stream, config=config),
                nc=self.nc,
                what=f"stream {config.name}",
                budget_s=budget_s,
            )

    async def check_inbox(self, *, budget_s: float = 60.0) -> None:
        """For a producer that may not create streams (the webhook, a worker adapter): the inbox
        stream must exist already (the reconciler creates it); ``ProvisionError`` if it does not."""
        stream = self.names.inbox_stream

        async def look(js: JetStreamContext) -> None:
            try:
                await require_leader(js, stream)
            except NotFoundError:
                raise ProvisionError(
                    f"stream {stream} does not exist yet; the reconciler (`kdispatch serve`) creates it"
                ) from None

        await with_retries(look, nc=self.nc, what=f"stream {stream}", budget_s=budget_s)

    def _stream_configs(self) -> list[StreamConfig]:
        version = self.nc.connected_server_version
        # An older server would not know the field; the sequencer then publishes one by one.
        batches = True if (version.major, version.minor) >= BATCHES_SINCE else None
        return [
            StreamConfig(
                name=self.names.inbox_stream,
                description="kdispatch inbox: facts from every producer, de-duplicated by Nats-Msg-Id",
                subjects=[f"{self.names.inbox_prefix}.>"],
                retention=RetentionPolicy.LIMITS,
                discard=DiscardPolicy.OLD,
                storage=StorageType.FILE,
                num_replicas=self.replicas,
                duplicate_window=DUPLICATE_WINDOW_S,
                max_age=INBOX_MAX_AGE_S,
                allow_direct=True,
                compression=COMPRESSION,
            ),
            StreamConfig(
                name=self.names.log_stream,
                description="kdispatch log: inputs in applied order and the leader's decisions (one writer)",
                subjects=[f"{self.names.log_prefix}.>"],
                retention=RetentionPolicy.LIMITS,
                discard=DiscardPolicy.NEW,
                storage=StorageType.FILE,
                num_replicas=self.replicas,
                duplicate_window=DUPLICATE_WINDOW_S,
                allow_direct=True,
                deny_delete=True,
                compression=COMPRESSION,
                allow_batched=batches,
            ),
        ]

    async def close(self) -> None:
        for seq in list(self._sequencers):
            await seq.close()
        await self.reader.close()
        try:
            if not self.nc.is_closed:
                # flush + close, not drain: drain waits for every subscription queue to be
                # consumed, and ours are drained in bulk (acks of abandoned batches stay queued).
                with contextlib.suppress(Exception):
                    await self.nc.flush(timeout=2)
                await self.nc.close()
        finally:
            if self.embedded is not None:
                await self.embedded.stop_async()

    async def __aenter__(self) -> JetStreamLog:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    assert config.name is not None
    try:
        info = await js.stream_info(config.name)
    except NotFoundError:
        try:
            await js.add_stream(config)
            log.info("stream_created", stream=config.name, subjects=config.subjects, replicas=config.num_replicas)
            await require_leader(js, config.name)
            return
        except BadRequestError as err:
            if err.err_code != STREAM_NAME_IN_USE:
                raise
        info = await created_info(js, config.name)  # another client created it meanwhile
    if info.cluster is not None and not info.cluster.leader:
        raise NotLedYet(f"stream {config.name} has no leader yet")  # created a moment ago: retried
    existing = info.config
    changes: dict[str, Any] = {}
    if existing.subjects != config.subjects or existing.num_replicas != config.num_replicas:
        changes.update(subjects=config.subjects, num_replicas=config.num_replicas)
    if config.max_age and not existing.max_age:
        # A default limit introduced after the stream was created; a limit an operator chose
        # (any other max age, sizes…) is left alone.
        changes.update(max_age=config.max_age)
    if config.compression and existing.compression in (None, StoreCompression.NONE):
        # Compression came later too (new blocks are compressed, old ones stay as written).
        changes.update(compression=config.compression)
    if config.allow_batched and not existing.allow_batched:
        # Batches came later too; the sequencer reads the stream's setting when it resumes.
        changes.update(allow_batched=True)
    if not changes:
        return
    try:
        await js.update_stream(existing.evolve(**changes))
        log.info("stream_updated", stream=config.name, **changes)
    except BadRequestError as err:
        if changes.keys() == {"allow_batched"}:
            # Not needed to work: without batches the sequencer publishes entry by entry.
            log.warning("stream_batches_not_enabled", stream=config.name, error=err.description)
            return
        raise RuntimeError(
            f"stream {config.name} exists with a configuration that cannot be changed to "
            f"{changes}: {err.description}"
        ) from err


async def connect(
    url: str | None,
    *,
    data_dir: str | Path = ".kdispatch",
    replicas: int = 1,
    creds: str | Path | None = None,
    tls: TlsFiles | ssl.SSLContext | None = None,
    root: str = "kd",
    name: str = "kdispatch",
    publish_timeout_s: float = 5.0,
    connect_timeout_s: float = 10.0,
    setup_timeout_s: float = 60.0,
    nkey: str | Path | None = None,
    create_streams: bool = True,
    source: str | None = None,
    embedded: EmbeddedNats | None = None,
    inbox_prefix: str | None = None,
) -> JetStreamLog:
    """Open the log at ``url`` (or start the embedded server if ``None``) and create its streams.

    ``url`` may list several servers of a cluster, comma-separated. ``creds`` is a NATS
    credentials file; ``tls`` the CA / client cert / key files (or an ``ssl.SSLContext``).

    ``root`` selects which log on that server (default ``kd``: subjects ``kd.in.>``/``kd.log.>``);
    tests pass a unique root for isolation. ``replicas`` is 1, or 3 on a clustered NATS.
    Creating the streams is retried (timeouts, JetStream not ready) for up to ``setup_timeout_s``.

    ``nkey`` is a seed file (one user of ``eventlog.natsauth``). A producer whose user may not
    create streams passes ``create_streams=False`` (the inbox must exist) and its ``source``
    (``webhook``, ``worker``): its facts go to ``<root>.in.<source>.>``, the subjects its
    permissions allow, and the sequencer checks the types against that source. ``embedded``: a
    server the caller started (with an authorization file), stopped by ``close()``.
    ``inbox_prefix``: the reply subjects the user may subscribe to (``_INBOX_<component>``).
    """
    names = LogNames(root)
    if url is None and embedded is None:
        embedded = await EmbeddedNats(data_dir=data_dir).start_async()
    if url is None:
        assert embedded is not None
        url = embedded.url
    try:
        nc = await open_client(
            url, creds=creds, tls=tls, name=name, timeout_s=connect_timeout_s, nkey=nkey, inbox_prefix=inbox_prefix
        )
    except BaseException:
        if embedded is not None:
            await embedded.stop_async()
        raise
    jlog = JetStreamLog(
        nc=nc, js=nc.jetstream(timeout=10.0), names=names, replicas=replicas, embedded=embedded, source=source
    )
    try:
        if create_streams:
            await jlog.ensure_streams(budget_s=setup_timeout_s)
        else:
            await jlog.check_inbox(budget_s=setup_timeout_s)
    except BaseException:
        await jlog.close()
        raise
    log.info("log_connected", url=url, root=root, replicas=replicas, embedded=embedded is not None)
    return jlog
