"""The embedded server picks free ports itself; if another process takes one before nats-server
binds it, start-up picks again instead of failing (a race every busy machine can hit)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from eventlog.embedded import EmbeddedError, EmbeddedNats


def _occupy(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def test_a_port_taken_after_it_was_picked_is_picked_again(tmp_path: Path) -> None:
    server = EmbeddedNats(data_dir=tmp_path / "store")
    taken = server.port
    with _occupy(taken):
        server.start()
        try:
            assert server.running() and server.port != taken
        finally:
            server.stop()


async def test_the_async_start_picks_again_too(tmp_path: Path) -> None:
    server = EmbeddedNats(data_dir=tmp_path / "store")
    taken = server.port
    with _occupy(taken):
        await server.start_async()
        try:
            assert server.running() and server.port != taken
        finally:
            await server.stop_async()


def test_a_port_the_caller_chose_is_not_changed(tmp_path: Path) -> None:
    probe = EmbeddedNats(data_dir=tmp_path / "probe")
    with _occupy(probe.port):
        server = EmbeddedNats(data_dir=tmp_path / "store", port=probe.port, ready_timeout_s=10)
        with pytest.raises(EmbeddedError, match="address already in use"):
            server.start()
        assert server.port == probe.port
