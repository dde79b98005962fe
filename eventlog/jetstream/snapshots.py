"""Snapshots of the caller's state, keyed by log sequence, in a JetStream Object Store.

Objects are named ``seq-<20 digits>`` so names sort by sequence. A snapshot is only an
optimisation: replay from it plus the entries after it gives the same state as replay from 1.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType, StoreCompression
from nats.js.errors import BadRequestError, BucketNotFoundError, NotFoundError
from nats.js.object_store import ObjectStore

from eventlog.jetstream.provision import STREAM_NAME_IN_USE, created_info, require_leader, with_retries

if TYPE_CHECKING:
    from eventlog.jetstream import JetStreamLog

log = structlog.get_logger("eventlog.snapshots")

_NAME = re.compile(r"^seq-(\d{20})$")


def object_name(seq: int) -> str:
    return f"seq-{seq:020d}"


class JetStreamSnapshots:
    """Implements ``eventlog.store.SnapshotStore``; keeps the newest ``keep`` snapshots."""

    def __init__(self, jlog: JetStreamLog, *, keep: int = 5) -> None:
        self._jlog = jlog
        self.keep = keep
        self._store: ObjectStore | None = None

    async def _bucket(self, *, create: bool) -> ObjectStore | None:
        if self._store is None:
            js, nc, bucket = self._jlog.js, self._jlog.nc, self._jlog.names.snapshot_bucket

            async def opened(_: JetStreamContext) -> ObjectStore | None:
                # On the log's own context (the store keeps it for its reads and writes), retried:
                # while replicas create buckets at once the meta leader may leave a lookup
                # unanswered (tests/eventlog/test_cluster.py saw the timeout escape).
                try:
                    return await js.object_store(bucket)
                except BucketNotFoundError:
                    return None

            what = f"snapshot bucket {bucket}"
            store = await with_retries(opened, nc=nc, what=what)
            if store is None:
                if not create:
                    return None
                await with_retries(self._provision, nc=nc, what=what)
                store = await with_retries(opened, nc=nc, what=what)
                assert store is not None, "provisioned, so found"
            self._store = store
        return self._store

    async def _provision(self, js: JetStreamContext) -> None:
        bucket = self._jlog.names.snapshot_bucket
        try:
            await js.object_store(bucket)
        except BucketNotFoundError:
            await self._create(js, bucket)
        await require_leader(js, f"OBJ_{bucket}")
        await _compress(js, f"OBJ_{bucket}")

    async def _create(self, js: JetStreamContext, bucket: str) -> None:
        try:
            await js.create_object_store(
                bucket,
                config=ObjectStoreConfig(
                    bucket=bucket,
                    description="kdispatch state snapshots, named seq-<log sequence>",
                    storage=StorageType.FILE,
                    replicas=self._jlog.replicas,
                ),
            )
        except BadRequestError as err:
            if err.err_code != STREAM_NAME_IN_USE:  # not "created by another replica just now"
                raise

    async def _seqs(self, store: ObjectStore) -> list[int]:
        try:
            infos = await store.list(ignore_deletes=True)
        except NotFoundError:  # empty bucket
            return []
        return sorted(int(m.group(1)) for info in infos if info.name and (m := _NAME.match(info.name)))

    async def save(self, seq: int, data: bytes | bytearray) -> None:
        store = await self._bucket(create=True)
        assert store is not None
        bucket = self._jlog.names.snapshot_bucket

        async def put(js: JetStreamContext) -> None:  # idempotent: the same name, the same bytes
            # nats-py copies a bytearray into a BytesIO; a reader over it is read in chunks.
            body = data if isinstance(data, bytes) else _Reader(data)
            await (await js.object_store(bucket)).put(object_name(seq), body)

        # Retried like provisioning: a bucket created a moment ago may not answer yet.
        await with_retries(put, nc=self._jlog.nc, what=f"snapshot {object_name(seq)} in {bucket}", budget_s=30.0)
        log.info("snapshot_saved", seq=seq, bytes=len(data), bucket=self._jlog.names.snapshot_bucket)
        seqs = await self._seqs(store)
        for old in seqs[: max(0, len(seqs) - self.keep)]:
            await store.delete(object_name(old))

    async def latest(self, *, at_or_before: int | None = None) -> tuple[int, bytes] | None:
        buf = io.BytesIO()
        seq = await self.latest_into(buf.write, at_or_before=at_or_before)
        return None if seq is None else (seq, buf.getvalue())

    async def latest_into(
        self, write: Callable[[bytes], object], *, at_or_before: int | None = None
    ) -> int | None:
        # nats-py hands each chunk (128 KiB) to ``writeinto.write`` in the loop's default executor,
        # one at a time; the ordered consumer's flow control holds the server back meanwhile.
        store = await self._bucket(create=False)
        if store is None:
            return None
        seqs = [s for s in await self._seqs(store) if at_or_before is None or s <= at_or_before]
        if not seqs:
            return None
        await store.get(object_name(seqs[-1]), writeinto=_Writer(write))
        return seqs[-1]


class _Writer(io.BufferedIOBase):
    """Hands each chunk nats-py writes to a function (``latest_into``)."""

    def __init__(self, write: Callable[[bytes], object]) -> None:
        self._write = write

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._write(data)
        return len(data)


class _Reader(io.BufferedIOBase):
    """Reads a buffer without copying it whole (``io.BytesIO`` copies anything but ``bytes``)."""

    def __init__(self, data: bytearray) -> None:
        self._view = memoryview(data)
        self._at = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), len(self._view) - self._at)
        buffer[:n] = self._view[self._at : self._at + n]
        self._at += n
        return n


async def _compress(js: JetStreamContext, stream: str) -> None:
    """S2 on the bucket's stream (nats-py's object store config cannot say it): a snapshot is
    msgpack of every live job, mostly repeated field names and labels, and a million jobs make
    hundreds of MB per snapshot (docs/sizing.md). Old snapshots' blocks stay as written."""
    info = await created_info(js, stream)  # "not found" just after creation: retried
    if info.config.compression in (None, StoreCompression.NONE):
        await js.update_stream(info.config.evolve(compression=StoreCompression.S2))
