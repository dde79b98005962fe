"""The webhook's connection to the log: opened in the background and retried, so the server
answers reviews (and reports not-ready) while NATS is away."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import structlog

from eventlog.jetstream import JetStreamLog, TlsFiles, connect
from eventlog.natsauth import inbox_prefix
from webhook.batcher import BatchingInbox
from webhook.server import Inbox

log = structlog.get_logger("webhook.nats")


class NatsLink:
    def __init__(
        self,
        url: str | None,
        *,
        data_dir: str | Path,
        root: str = "kd",
        creds: str | None = None,
        nkey: str | None = None,
        replicas: int = 1,
        tls: TlsFiles | None = None,
        retry_s: float = 1.0,
        ping_timeout_s: float = 0.5,
    ) -> None:
        self.url = url
        self.data_dir = data_dir
        self.root = root
        self.creds = creds
        self.nkey = nkey
        self.replicas = replicas  # the streams are created (if missing) with the config's replication
        self.tls = tls
        self.retry_s = retry_s
        self.ping_timeout_s = ping_timeout_s
        self.log: JetStreamLog | None = None
        self._batching: BatchingInbox | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._connect_loop(), name="nats-connect")

    async def wait_connected(self) -> None:
        if self._task is not None:
            await asyncio.shield(self._task)

    async def _connect_loop(self) -> None:
        attempt = 0
        while True:
            try:
                self.log = await connect(
                    self.url,
                    data_dir=self.data_dir,
                    root=self.root,
                    creds=self.creds,
                    nkey=self.nkey,
                    tls=self.tls,
                    replicas=self.replicas,
                    name="kdispatch-webhook",
                    inbox_prefix=inbox_prefix("webhook"),
                    # With a NATS identity of its own the webhook may publish only its facts to
                    # <root>.in.webhook.> and create nothing: the reconciler makes the streams.
                    **self._producer_options(),
                )
                try:
                    self._batching = await BatchingInbox(self.log).open()
                except BaseException:
                    await self.log.close()  # not left connected behind the next attempt's connection
                    self.log = None
                    raise
                log.info("nats_connected", url=self.log.url, root=self.root)
                return
            except asyncio.CancelledError:
                raise
            except Exception as err:  # unreachable, refused, no JetStream: keep trying
                attempt += 1
                if attempt == 1 or attempt % 30 == 0:
                    log.warning("nats_unavailable", url=self.url, attempt=attempt, error=f"{type(err).__name__}: {err}")
                await asyncio.sleep(self.retry_s)

    def _producer_options(self) -> dict[str, Any]:
        if self.creds is None and self.nkey is None:
            return {}  # a server without authorization (development): as before
        return {"create_streams": False, "source": "webhook"}

    def inbox(self) -> Inbox | None:
        # While reconnecting (the server we were on stopped) publishes are buffered by the client
        # and retried by the batcher within their bound: only a closed connection means no inbox.
        if self.log is None or self._batching is None or self.log.nc.is_closed:
            return None
        return self._batching

    async def ready(self) -> bool:
        if self.log is None or not self.log.nc.is_connected:
            return False
        try:
            await asyncio.wait_for(self.log.nc.flush(), self.ping_timeout_s)
        except Exception:  # no PONG in time: not ready
            return False
        return True

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.log is not None:
            await self.log.close()
            self.log = None
