"""The leader loop (inbox -> log -> fold -> decide -> log -> fold) on a real nats-server, side by
side with the bare sequencer (inbox -> log, nothing decided) over the same inbox in the same run;
then replay of the resulting log, plain and with ``--verify`` (every decision recomputed).

    .venv/bin/python bench/leader_loop.py [--jobs N] [--clusters C]

What it shows: how much the shell adds to sequencing (fold + decide + the decision appends), and
what verification costs over a plain replay. The last line is the headline figure.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import JetStreamLog, connect
from reconciler.history.replay import replay
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready

GPU = "nvidia.com/gpu"
POLICY = ev.PolicyLoaded(
    profiles=[
        ev.Profile(
            name="default",
            filters=[ev.FilterSpec(name=n) for n in ("ClusterHealth", "ClusterSelector", "ClusterFeasibility", "ClusterHeadroom")],
            scores=[ev.ScoreSpec(name="CapacityScore")],
            strategy=ev.StrategySpec(type="TopK", k=1),
        )
    ],
    worker_lost_timeout_ms=3_600_000,
)


def inputs(jobs: int, clusters: int) -> list[ev.InputEvent]:
    out: list[ev.InputEvent] = []
    for c in range(clusters):
        name = f"c{c:03d}"
        out.append(
            ev.ClusterRegistered(
                cluster=name, labels={"zone": f"z{c % 4}"}, capacity={"cpu": 10_000_000, GPU: 100_000}
            )
        )
        out.append(ev.ClusterHeartbeat(cluster=name))
    for j in range(jobs):
        placement = ev.Placement(cluster_selector={"zone": f"z{j % 4}"}) if j % 3 == 0 else ev.Placement()
        out.append(
            ev.JobSubmitted(
                job=ev.JobRef(namespace="bench", name=f"job-{j}", uid=f"u{j}"),
                pod_sets=[ev.PodSet(name="main", count=1 + j % 4, requests={"cpu": 1000, GPU: 1})],
                placement=placement,
            )
        )
    return out


async def publish_all(jlog: JetStreamLog, events: list[ev.InputEvent]) -> None:
    for i in range(0, len(events), 200):
        await asyncio.gather(*(jlog.inbox.publish(e, msg_id=f"b{i + k}") for k, e in enumerate(events[i : i + 200])))


async def bare_sequencer(jlog: JetStreamLog, total: int) -> float:
    seqr = jlog.sequencer("bare")
    await seqr.resume()
    started = time.perf_counter()
    done = 0
    while done < total:
        items = await seqr.pull(max_items=500, timeout_s=0.05)
        if items:
            await seqr.append_inputs(items, at_ms=time.time_ns() // 1_000_000)
            done += len(items)
    return time.perf_counter() - started


async def leader(jlog: JetStreamLog, total: int) -> tuple[float, int]:
    loop = LeaderLoop(jlog, LoopSettings(leader_id="bench", policy=POLICY, snapshot_every=10**9))
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    await wait_ready(loop, timeout_s=60)
    started = time.perf_counter()
    while True:
        copied = sum(s.value for m in loop.metrics.inputs.collect() for s in m.samples if s.name.endswith("_total"))
        if copied >= total + 1:  # + the PolicyLoaded
            break
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - started
    stop.set()
    await term
    decide_s = sum(s.value for m in loop.metrics.decide_seconds.collect() for s in m.samples if s.name.endswith("_sum"))
    print(f"  (of the leader loop's {elapsed:.2f} s, {decide_s:.2f} s in the core's decide)")
    return elapsed, loop.last_seq


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--clusters", type=int, default=50)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    events = inputs(args.jobs, args.clusters)
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedNats(data_dir=Path(tmp))
        await server.start_async()
        try:
            bare_log = await connect(server.url, root="benchbare")
            loop_log = await connect(server.url, root="benchloop")
            await publish_all(bare_log, events)
            await publish_all(loop_log, events)
            bare_s = await bare_sequencer(bare_log, len(events))
            loop_s, last_seq = await leader(loop_log, len(events))
            t0 = time.perf_counter()
            await replay(loop_log.reader)
            plain_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            verified = await replay(loop_log.reader, verify=True)
            verify_s = time.perf_counter() - t0
            assert verified.mismatch is None, verified.mismatch
            await bare_log.close()
            await loop_log.close()
        finally:
            await server.stop_async()
    n = len(events)
    decisions = verified.decisions
    print(f"inputs: {n} ({args.jobs} jobs, {args.clusters} clusters); decisions appended: {decisions}; log: {last_seq} entries")
    print(f"bare sequencer (inbox -> log):              {n / bare_s:10.0f} inputs/s")
    print(f"leader loop (inbox -> log -> decide -> log): {n / loop_s:10.0f} inputs/s  ({decisions / loop_s:.0f} decisions/s)")
    print(f"  log entries appended/s: leader loop {last_seq / loop_s:.0f} (inputs + decisions), bare {n / bare_s:.0f}")
    print(f"  ratio leader loop / bare sequencer (inputs/s): {bare_s / loop_s:.2f}")
    print(f"replay (fold only):       {last_seq / plain_s:10.0f} entries/s")
    print(f"replay --verify (decide): {last_seq / verify_s:10.0f} entries/s  ({verified.verified_batches} batches recomputed)")
    print(f"  ratio verify / plain replay: {plain_s / verify_s:.2f}")
    print(f"leader loop: {n / loop_s:.0f} inputs/s sequenced and decided = {bare_s / loop_s:.2f} x the bare sequencer")


if __name__ == "__main__":
    asyncio.run(main())
