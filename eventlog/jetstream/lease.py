"""Leader election: one JetStream KV key per lease, in a bucket whose TTL is the lease's.

- Acquire: ``create`` the key (succeeds only if absent, deleted or expired).
- Renew every ``ttl_s / 3``: ``update`` with the revision we last wrote (optimistic lock). If
  anyone else wrote the key meanwhile, the update fails and the lease is lost.
- The key expires ``ttl_s`` after its last write, so a holder that stops renewing (crashed,
  partitioned) is replaced at most ``ttl_s`` later.
- ``valid()`` is our own conservative view: renewed less than ``0.8 * ttl_s`` ago (measured from
  when the renewal was *sent*), so an old holder stops trusting its lease before the server can
  expire it. The sequencer checks it before every append; fencing on the log's last sequence
  catches whatever slips through.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import uuid
from types import TracebackType
from typing import TYPE_CHECKING

import structlog
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import BadRequestError, BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from eventlog.jetstream.provision import STREAM_NAME_IN_USE, created_info, require_leader, with_retries
from eventlog.store import NotLeader

if TYPE_CHECKING:
    from eventlog.jetstream import JetStreamLog

log = structlog.get_logger("eventlog.lease")

_VALID_FRACTION = 0.8


def default_holder() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Lease:
    """A lease on ``name``; ``lost`` is set when it is no longer ours."""

    def __init__(self, jlog: JetStreamLog, *, name: str, ttl_s: float, holder: str | None = None) -> None:
        self._jlog = jlog
        self.name = name
        self.ttl_s = ttl_s
        self.holder = holder or default_holder()
        self.lost = asyncio.Event()
        self._kv: KeyValue | None = None
        self._revision: int | None = None
        self._valid_until = 0.0
        self._renewer: asyncio.Task[None] | None = None
        # Set by ``release`` / ``stop_renewing``: no renewal may write after it. Cancelling the
        # renewer is not enough: a renewal whose answer arrives as the cancel does can swallow the
        # cancel (asyncio.wait_for in nats-py's request, Python 3.11) and write back a revision,
        # and the loop would renew for ever a lease its replica had given up (the 60-minute soak).
        self._stopped = False
        self._last_written: int | None = None  # a renewal's revision written after the stop
        self.renewals = 0  # successful renewals (observable by tests)
        self._log = log.bind(lease=name, holder=self.holder)

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            bucket = self._jlog.names.lease_bucket
            await with_retries(self._provision, nc=self._jlog.nc, what=f"lease bucket {bucket}", budget_s=30.0)
            # Each lease operation gets a short timeout: a request lost while the bucket's stream
            # elects a leader (a node died) would otherwise be waited for longer than the lease
            # lives; failing fast lets the next renewal or attempt go out at once.
            js = self._jlog.nc.jetstream(timeout=max(1.0, min(2.0, self.ttl_s / 3)))
            self._kv = await js.key_value(bucket)
        return self._kv

    async def _provision(self, js: JetStreamContext) -> None:
        """Create the bucket if missing; give it this lease's TTL if it has another."""
        bucket = self._jlog.names.lease_bucket
        try:
            await js.key_value(bucket)
        except BucketNotFoundError:
            try:
                await js.create_key_value(
                    KeyValueConfig(
                        bucket=bucket,
                        description="kdispatch leader leases (one key per lease, TTL = lease TTL)",
                        history=1,
                        ttl=self.ttl_s,
                        storage=StorageType.FILE,
                        replicas=self._jlog.replicas,
                    )
                )
            except BadRequestError as err:
                if err.err_code != STREAM_NAME_IN_USE:  # not "created by another replica just now"
                    raise
        info = await created_info(js, f"KV_{bucket}")
        ttl = info.config.max_age or 0.0
        if abs(ttl - self.ttl_s) > 0.001:
            # The lease TTL changed in the configuration. Replicas still on the old one see
            # the key expire at the new time; fencing on the log keeps their appends out.
            self._log.warning("lease_ttl_changed", bucket=bucket, old_ttl_s=ttl, ttl_s=self.ttl_s)
            window = min(info.config.duplicate_window or self.ttl_s, self.ttl_s)  # must be <= max age
            await js.update_stream(info.config.evolve(max_age=self.ttl_s, duplicate_window=window))
        await require_leader(js, f"KV_{bucket}")

    def _value(self) -> bytes:
        return json.dumps({"holder": self.holder, "ttl_s": self.ttl_s}).encode()

    def valid(self) -> bool:
        """Ours, and renewed recently enough that no one else can have it yet."""
        return (
            self._revision is not None
            and not self.lost.is_set()
            and asyncio.get_running_loop().time() < self._valid_until
        )

    async def current_holder(self) -> str | None:
        kv = await self._bucket()
        try:
            entry = await kv.get(self.name)
        except KeyNotFoundError:
            return None
        if not entry.value:
            return None
        holder: str = json.loads(entry.value).get("holder", "?")
        return holder

    async def try_acquire(self) -> bool:
        kv = await self._bucket()
        sent = asyncio.get_running_loop().time()
        try:
            revision = await kv.create(self.name, self._value())
        except KeyWrongLastSequenceError:
            return False
        self._took(revision, sent)
        self._log.info("lease_acquired", revision=revision, ttl_s=self.ttl_s)
        return True

    def _took(self, revision: int, sent: float) -> None:
        self._stopped = False
        self._revision = revision
        self._valid_until = sent + self.ttl_s * _VALID_FRACTION
        self.lost.clear()
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew_loop(), name=f"lease-renew-{self.name}")

    async def acquire(self, *, timeout_s: float | None = None, poll_s: float | None = None) -> None:
        """Wait until the lease is ours (the holder released it or stopped renewing)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        poll = poll_s if poll_s is not None else max(0.05, min(1.0, self.ttl_s / 4))
        waiting_logged = False
        while True:
            try:
                if await self.try_acquire():
                    return
                if not waiting_logged:
                    self._log.info("lease_waiting", current=await self.current_holder())
                    waiting_logged = True
            except (NotLeader, ValueError):
                raise
            except Exception as err:  # NATS unreachable or failing over: keep waiting
                self._log.warning("lease_attempt_failed", error=str(err) or type(err).__name__)
            if deadline is not None and loop.time() >= deadline:
                raise NotLeader(f"lease {self.name} not acquired by {self.holder} within {timeout_s}s")
            await asyncio.sleep(poll)

    async def renew(self) -> None:
        """One renewal; raises ``NotLeader`` (and sets ``lost``) if someone else has it."""
        if self._revision is None:
            raise NotLeader(f"lease {self.name} is not held by {self.holder}")
        kv = await self._bucket()
        sent = asyncio.get_running_loop().time()
        try:
            revision = await kv.update(self.name, self._value(), last=self._revision)
        except KeyWrongLastSequenceError as err:
            self._lose("taken over or expired")
            raise NotLeader(f"lease {self.name} was taken over or expired; {self.holder} steps down") from err
        if self._stopped:
            # Given up while this renewal was on its way: the key now carries ``revision``,
            # which ``release`` (waiting for this task) deletes.
            self._last_written = revision
            raise NotLeader(f"lease {self.name} was given up by {self.holder}")
        self._revision = revision
        self._valid_until = sent + self.ttl_s * _VALID_FRACTION
        self.renewals += 1

    def _lose(self, why: str) -> None:
        if not self.lost.is_set():
            self._log.warning("lease_lost", reason=why)
        self._revision = None
        self.lost.set()

    async def _renew_loop(self) -> None:
        interval = self.ttl_s / 3
        while self._revision is not None and not self._stopped:
            await asyncio.sleep(interval)
            if self._revision is None or self._stopped:
                return
            try:
                await self.renew()
            except NotLeader:
                return
            except Exception as err:  # transient (timeout, reconnect): retry until no longer valid
                self._log.warning("lease_renew_failed", error=str(err) or type(err).__name__)
                if not self.valid():
                    self._lose(f"could not renew within {self.ttl_s * _VALID_FRACTION:.1f}s")
                    return

    def stop_renewing(self) -> None:
        """Stop renewing but keep the key (as a crashed holder would): for failover tests."""
        self._stopped = True
        if self._renewer is not None:
            self._renewer.cancel()
            self._renewer = None

    async def release(self) -> None:
        """Give the lease up now (delete the key if still ours) so a successor need not wait."""
        renewer = self._renewer
        self.stop_renewing()
        if renewer is not None and not renewer.done():
            # A renewal on its way may still write: wait for it (bounded), then delete the
            # revision it wrote rather than the one before.
            await asyncio.wait({renewer}, timeout=self.ttl_s)
        revision, self._revision = self._last_written or self._revision, None
        self._last_written = None
        if revision is not None and self._kv is not None:
            with contextlib.suppress(Exception):  # not ours any more, or NATS gone: TTL frees it
                await self._kv.delete(self.name, last=revision)
            self._log.info("lease_released")
        self.lost.set()

    async def __aenter__(self) -> Lease:
        await self.acquire()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.release()
