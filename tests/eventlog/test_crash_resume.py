"""kill -9 a sequencer process mid-stream, restart it: every inbox entry is in the log exactly
once, in inbox order, whatever the moment of the kill (even between an append and its ack)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from eventlog import codec
from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from tests.waiting import Unmet, eventually

N = 1000  # at least this many inbox entries, published while the sequencers come and go
ROOT_DIR = Path(__file__).resolve().parents[2]


def start(nats_url: str, root: str, leader: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.eventlog.sequencer_proc", nats_url, root, leader],
        cwd=ROOT_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


async def resumed_line(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stdout is not None
    while True:
        line = (await asyncio.to_thread(proc.stdout.readline)).decode()
        assert line, "the sequencer process exited before resuming"
        if line.startswith("resumed "):
            return line.strip()


async def wait_for_log(jslog: JetStreamLog, at_least: int, proc: subprocess.Popen[bytes]) -> int:
    async def last_seq() -> Any:
        last = await jslog.reader.last_seq()
        assert proc.poll() is None, "the sequencer process died on its own"
        return last if last >= at_least else Unmet(f"last seq {last}")

    result: int = await eventually(last_seq, timeout_s=30, what=f"the log to reach {at_least} entries")
    return result


async def test_kill_9_mid_stream_then_restart_copies_every_inbox_entry_once(
    jslog: JetStreamLog, nats_url: str
) -> None:
    root = jslog.names.root

    published = 0
    stop_producing = asyncio.Event()

    async def produce() -> None:
        nonlocal published
        while not stop_producing.is_set():
            await jslog.inbox.publish(ev.ClusterHeartbeat(cluster=f"c{published}"), msg_id=f"hb-{published}")
            published += 1
            if published % 20 == 0:
                await asyncio.sleep(0.005)  # keep the inbox growing during every round

    producer = asyncio.create_task(produce())
    procs: list[subprocess.Popen[bytes]] = []
    resumed: list[str] = []  # what each process said when it started
    after_kill: list[int] = []  # the log's last seq once each killed process was gone
    try:
        for round_ in range(3):
            procs.append(start(nats_url, root, f"leader-{round_}"))
            resumed.append(await resumed_line(procs[-1]))
            await wait_for_log(jslog, await jslog.reader.last_seq() + 300, procs[-1])
            procs[-1].send_signal(signal.SIGKILL)
            procs[-1].wait()
            after_kill.append(await jslog.reader.last_seq())
        procs.append(start(nats_url, root, "leader-final"))
        resumed.append(await resumed_line(procs[-1]))
        await wait_for_log(jslog, await jslog.reader.last_seq() + 100, procs[-1])
        await eventually(lambda: published >= N or Unmet(published), timeout_s=60, what=f"{N} facts published")
        stop_producing.set()
        await producer

        async def all_copied() -> Any:
            read = [e async for batch in jslog.reader.read() for e in batch]
            last = max((e.inbox_seq or 0 for e in read), default=0)
            return read if last == published else Unmet(f"copied up to inbox seq {last} of {published}")

        entries = await eventually(all_copied, timeout_s=30, what="every published fact copied to the log")
    finally:
        producer.cancel()
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)

    copied = [e for e in entries if e.inbox_seq is not None]
    assert [e.inbox_seq for e in copied] == list(range(1, published + 1))
    assert [e.event for e in copied] == [ev.ClusterHeartbeat(cluster=f"c{i}") for i in range(published)]
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert {e.leader for e in entries} == {"leader-0", "leader-1", "leader-2", "leader-final"}
    # Each restart resumed exactly where the killed one stopped: the last entry in the log, and
    # the last inbox entry copied up to it.
    assert resumed[0] == "resumed 0 0"
    for line, last_seq in zip(resumed[1:], after_kill, strict=True):
        last_inbox = max(e.inbox_seq or 0 for e in entries[:last_seq])
        assert line == f"resumed {last_seq} {last_inbox}"
    # The inbox itself still has each message once (de-duplicated by msg_id).
    info = await jslog.js.stream_info(jslog.names.inbox_stream)
    assert info.state.messages == published
    raw = await jslog.js.get_msg(jslog.names.inbox_stream, published)
    assert codec.decode_event(raw.data) == ev.ClusterHeartbeat(cluster=f"c{published - 1}")
