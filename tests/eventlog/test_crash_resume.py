"""kill -9 a sequencer process mid-stream, restart it: every inbox entry is in the log exactly
once, in inbox order, whatever the moment of the kill (even between an append and its ack)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

from eventlog import codec
from eventlog import events as ev
from eventlog.jetstream import JetStreamLog

N = 3000
ROOT_DIR = Path(__file__).resolve().parents[2]


def start(nats_url: str, root: str, leader: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.eventlog.sequencer_proc", nats_url, root, leader],
        cwd=ROOT_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


async def wait_for_log(jslog: JetStreamLog, at_least: int, proc: subprocess.Popen[bytes]) -> int:
    for _ in range(600):
        last = await jslog.reader.last_seq()
        if last >= at_least:
            return last
        assert proc.poll() is None, "the sequencer process died on its own"
        await asyncio.sleep(0.05)
    raise AssertionError(f"log stuck at {await jslog.reader.last_seq()} entries, wanted {at_least}")


async def test_kill_9_mid_stream_then_restart_copies_every_inbox_entry_once(
    jslog: JetStreamLog, nats_url: str
) -> None:
    root = jslog.names.root

    async def produce() -> None:
        for i in range(N):
            await jslog.inbox.publish(ev.ClusterHeartbeat(cluster=f"c{i}"), msg_id=f"hb-{i}")

    producer = asyncio.create_task(produce())
    procs: list[subprocess.Popen[bytes]] = []
    after_kill: list[int] = []  # the log's last seq once each killed process was gone
    try:
        for round_, kill_at in enumerate((300, 1200, 2400)):
            procs.append(start(nats_url, root, f"leader-{round_}"))
            await wait_for_log(jslog, kill_at, procs[-1])
            procs[-1].send_signal(signal.SIGKILL)
            procs[-1].wait()
            after_kill.append(await jslog.reader.last_seq())
        await producer
        procs.append(start(nats_url, root, "leader-final"))
        for _ in range(600):
            entries = [e async for batch in jslog.reader.read() for e in batch]
            if max((e.inbox_seq or 0 for e in entries), default=0) == N:
                break
            await asyncio.sleep(0.05)
    finally:
        producer.cancel()
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)

    copied = [e for e in entries if e.inbox_seq is not None]
    assert [e.inbox_seq for e in copied] == list(range(1, N + 1))
    assert [e.event for e in copied] == [ev.ClusterHeartbeat(cluster=f"c{i}") for i in range(N)]
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert {e.leader for e in entries} >= {"leader-0", "leader-final"}
    # Each restart resumed exactly where the killed one stopped: the last entry in the log, and
    # the last inbox entry copied up to it.
    for proc, last_seq in zip(procs[1:], after_kill, strict=True):
        out = proc.stdout.read().decode() if proc.stdout else ""
        resumed = next(line for line in out.splitlines() if line.startswith("resumed "))
        last_inbox = max(e.inbox_seq or 0 for e in entries[:last_seq])
        assert resumed == f"resumed {last_seq} {last_inbox}"
    # The inbox itself still has each message once (de-duplicated by msg_id).
    info = await jslog.js.stream_info(jslog.names.inbox_stream)
    assert info.state.messages == N
    raw = await jslog.js.get_msg(jslog.names.inbox_stream, N)
    assert codec.decode_event(raw.data) == ev.ClusterHeartbeat(cluster=f"c{N - 1}")
