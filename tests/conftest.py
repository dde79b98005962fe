"""Shared fixtures: one real nats-server for the whole test session.

How other areas use it::

    async def test_something(nats_url: str) -> None:          # just the server URL
        nc = await nats.connect(nats_url)

    async def test_with_a_log(jslog: JetStreamLog) -> None:     # a fresh, isolated log
        seq = await jslog.inbox.publish(event, msg_id="x")
        async for batch in jslog.reader.read(): ...

    async def test_own_connect(nats_url: str, log_root: str) -> None:
        jlog = await connect(nats_url, root=log_root)           # what `kdispatch serve` would do
        ...                                                     # (pass the same root to every
        await jlog.close()                                      #  process under test)

``log_root`` is unique per test; every stream/bucket name derives from it (``kd`` is the
production root), so tests never see each other's messages. The ``jslog`` fixture deletes its
streams afterwards. For a CLI under test, pass ``--nats-url {nats_url}`` and the root the command
accepts (see docs/eventlog.md).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from nats.js.errors import NotFoundError

from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import JetStreamLog, connect


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    """The session's nats-server (JetStream, file store in a temp dir, free loopback port)."""
    server = EmbeddedNats(data_dir=tmp_path_factory.mktemp("nats"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def nats_url(nats_server: EmbeddedNats) -> str:
    """URL of the session's real nats-server, e.g. ``nats://127.0.0.1:41234``."""
    return nats_server.url


@pytest.fixture
def log_root() -> str:
    """A root token unique to this test: ``connect(nats_url, root=log_root)`` gives a fresh log."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def jslog(nats_url: str, log_root: str) -> AsyncIterator[JetStreamLog]:
    """A fresh JetStream log (its own streams on the session server), removed after the test."""
    jlog = await connect(nats_url, root=log_root)
    try:
        yield jlog
    finally:
        await _delete_log(jlog)
        await jlog.close()


async def _delete_log(jlog: JetStreamLog) -> None:
    names = jlog.names
    for stream in (
        names.inbox_stream,
        names.log_stream,
        f"KV_{names.lease_bucket}",
        f"OBJ_{names.snapshot_bucket}",
    ):
        with contextlib.suppress(NotFoundError):  # never created by this test: nothing to clean
            await jlog.js.delete_stream(stream)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A per-test data dir (the embedded server's store / the JSONL exports)."""
    path = tmp_path / "kdispatch"
    path.mkdir()
    return path
