"""A log read that gets nothing while the stream holds more ends with an error a person can act
on instead of waiting for ever: a term starting with such a read would hold the lease and decide
nothing. Its caller (a standby, a term starting) retries or hands the lease on."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import connect
from eventlog.store import LogError

N = 30_000


async def test_a_read_that_stalls_fails_and_a_read_after_the_server_is_back_completes(tmp_path: Path) -> None:
    server = EmbeddedNats(data_dir=tmp_path / "nats")
    await server.start_async()
    jlog = await connect(server.url, root="stall")
    try:
        seq = jlog.sequencer("a")
        for start in range(0, N, 5_000):
            await seq.append_decisions([ev.ClusterLost(cluster=f"c{i}") for i in range(start, start + 5_000)], at_ms=1)
        jlog.reader.stall_s = 1.0
        reader = jlog.reader.read(batch=100)
        got = len(await anext(reader))
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)  # the connection stays; nothing more is delivered
        try:
            with pytest.raises(LogError) as err:
                async for chunk in reader:
                    got += len(chunk)
            assert got < N
            assert f"nothing after entry {got} " in str(err.value) and f"ends at {N}" in str(err.value)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        count = 0
        async for chunk in jlog.reader.read():
            count += len(chunk)
        assert count == N
    finally:
        await jlog.close()
        await server.stop_async()
