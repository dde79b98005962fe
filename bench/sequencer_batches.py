"""The sequencer alone (pull an input, append it and one decision for it) with its appends as
fast-ingest batches (one ack per append) and one by one (one ack per entry, a Log stream without
``allow_batched``), alternating on one real nats-server: CPU per input of this process and of the
nats-server (from /proc/<pid>/stat), and the Log stream's bytes per entry.

    .venv/bin/python bench/sequencer_batches.py [--inputs N] [--rounds R] [--pull P]

``--pull`` is the most inputs a pull returns (the loop's is 500); small pulls are what a leader
sees at a moderate offered rate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.leader_loop import job, publish_all
from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import JetStreamLog, connect

TICKS = os.sysconf("SC_CLK_TCK")
WAYS = ("one by one", "batches")


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def one_round(
    jlog: JetStreamLog, jobs: list[ev.JobSubmitted], *, server_pid: int, pull: int, tag: str
) -> tuple[float, float]:
    """(this process's, the server's) CPU seconds per input to sequence ``jobs``."""
    await publish_all(jlog, jobs, tag=tag)
    seqr = jlog.sequencer("bench")
    await seqr.resume()
    done = 0
    await asyncio.sleep(0.2)  # the server's own work for the publishing above, done before counting
    server0, cpu0 = cpu_of(server_pid), time.process_time()
    while done < len(jobs):
        items = await seqr.pull(max_items=pull, timeout_s=5.0)
        entries = await seqr.append_inputs(items, at_ms=1)
        decisions = [ev.Nominated(job=e.event.job, clusters=["c0000"], attempt=1) for e in entries]  # type: ignore[attr-defined]
        await seqr.append_decisions(decisions, at_ms=1)
        done += len(items)
    cpu = time.process_time() - cpu0
    await asyncio.sleep(0.2)  # acks are in; let the server finish what it queued (flushes)
    server = cpu_of(server_pid) - server0
    await seqr.close()
    return cpu / len(jobs), server / len(jobs)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=20_000, help="inputs per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each way, alternating")
    parser.add_argument("--pull", type=int, default=500, help="most inputs per pull")
    args = parser.parse_args()
    if args.inputs < 1:
        parser.error(f"--inputs must be at least 1, got {args.inputs}")
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.pull < 1:
        parser.error(f"--pull must be at least 1, got {args.pull}")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    results: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    sizes: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="kd-bench-") as tmp:
        server = EmbeddedNats(data_dir=Path(tmp))
        await server.start_async()
        assert server.pid is not None
        try:
            logs = {way: await connect(server.url, root=f"bench{i}") for i, way in enumerate(WAYS)}
            old = logs["one by one"]
            info = await old.js.stream_info(old.names.log_stream)
            await old.js.update_stream(info.config.evolve(allow_batched=False))
            for r in range(args.rounds):
                for way in WAYS if r % 2 == 0 else reversed(WAYS):
                    jobs = [job(j, prefix=f"r{r}") for j in range(args.inputs)]
                    results[way].append(
                        await one_round(logs[way], jobs, server_pid=server.pid, pull=args.pull, tag=f"r{r}-")
                    )
            for way, jlog in logs.items():
                state = (await jlog.js.stream_info(jlog.names.log_stream)).state
                sizes[way] = state.bytes / max(1, state.messages)
                await jlog.close()
        finally:
            await server.stop_async()
    print(
        f"{args.inputs:,} inputs per round, pulls of at most {args.pull}, {args.rounds} rounds each (alternating)"
    )
    for way in WAYS:
        ours = [r[0] * 1e6 for r in results[way]]
        theirs = [r[1] * 1e6 for r in results[way]]
        print(
            f"{way:>11}: this process {statistics.median(ours):5.1f} us/input ({', '.join(f'{x:.1f}' for x in ours)}); "
            f"nats-server {statistics.median(theirs):5.1f} us/input ({', '.join(f'{x:.1f}' for x in theirs)}); "
            f"log {sizes[way]:.0f} bytes/entry"
        )


if __name__ == "__main__":
    asyncio.run(main())
