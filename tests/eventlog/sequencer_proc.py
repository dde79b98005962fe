"""A minimal leader for the crash test: copy the inbox into the log forever, one decision after
each copied batch. Run as ``python -m tests.eventlog.sequencer_proc URL ROOT LEADER``."""

from __future__ import annotations

import asyncio
import sys

from eventlog import events as ev
from eventlog.jetstream import connect


async def main(url: str, root: str, leader: str) -> None:
    jlog = await connect(url, root=root)
    seq = jlog.sequencer(leader)
    last_seq, last_inbox = await seq.resume()
    print(f"resumed {last_seq} {last_inbox}", flush=True)
    at_ms = 0
    while True:
        items = await seq.pull(max_items=50, timeout_s=0.1)
        if not items:
            continue
        at_ms += 1
        await seq.append_inputs(items, at_ms=at_ms)
        await seq.append_decisions([ev.ClusterRecovered(cluster=leader)], at_ms=at_ms)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
