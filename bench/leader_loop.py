"""The leader loop (inbox -> log -> fold -> decide -> log -> fold) on a real nats-server, with
tenancy on (100 ClusterQueues in 10 cohorts), side by side with nats-py's pipelined publish of
the same number of log-entry payloads to a plain stream in the same run; then the latency of one
input to its decision at a steady offered rate; then a cold backlog (published while no term
runs, drained by the next term: no head start while publishing, and the process's CPU time per
input, which unlike inputs/s does not depend on what else runs on the machine); then the
sequencer alone (the NATS side of the loop without the core: pull an input, append it, append one
decision for it); then replay of the log, plain and ``--verify``.

    .venv/bin/python bench/leader_loop.py [--jobs N] [--clusters C] [--rate R] [--profile]

Floors (issue 16): >= 20,000 inputs/s sustained and >= 0.6 x the plain pipelined publish; p99
input-to-decision-appended latency is printed (at ``--rate`` inputs/s offered). The last line is
the headline figure. ``--profile`` runs the throughput phase under cProfile and prints the top.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from bench.dispatch import Leader, queues_config
from bench.log_append import bench_plain as plain_publish
from eventlog import codec
from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import JetStreamLog, connect
from eventlog.jetstream.publish import Outgoing, Publisher
from reconciler.edge.percentile import percentile
from reconciler.history.replay import replay
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready

GPU = "nvidia.com/gpu"
QUEUES = 100
POLICY = ev.PolicyLoaded(
    profiles=[
        ev.Profile(
            name="default",
            filters=[
                ev.FilterSpec(name=n)
                for n in ("ClusterHealth", "ClusterSelector", "ClusterFeasibility", "ClusterHeadroom")
            ],
            scores=[ev.ScoreSpec(name="CapacityScore")],
            strategy=ev.StrategySpec(type="TopK", k=1),
        )
    ],
    worker_lost_timeout_ms=3_600_000,
)


def clusters(n: int) -> list[ev.InputEvent]:
    out: list[ev.InputEvent] = []
    for c in range(n):
        name = f"c{c:04d}"
        out.append(
            ev.ClusterRegistered(
                cluster=name, labels={"zone": f"z{c % 4}"}, capacity={"cpu": 10_000_000, GPU: 100_000}
            )
        )
        out.append(ev.ClusterHeartbeat(cluster=name))
    return out


def job(j: int, *, prefix: str = "job") -> ev.JobSubmitted:
    """Every job in one of the 100 ClusterQueues; one in four asks for GPUs, so some queues
    run out of GPU quota (and borrow, or wait) while CPU quota lasts."""
    placement = ev.Placement(cluster_selector={"zone": f"z{j % 4}"}) if j % 3 == 0 else ev.Placement()
    requests = {"cpu": 1000, GPU: 1} if j % 4 == 0 else {"cpu": 1000}
    return ev.JobSubmitted(
        job=ev.JobRef(namespace="bench", name=f"{prefix}-{j}", uid=f"{prefix}-u{j}"),
        pod_sets=[ev.PodSet(name="main", count=1 + j % 4, requests=requests)],
        placement=placement,
        cluster_queue=f"team-{j % QUEUES:03}",
    )


async def publish_all(jlog: JetStreamLog, events: Sequence[ev.InputEvent], *, tag: str) -> None:
    for i in range(0, len(events), 1000):
        chunk = events[i : i + 1000]
        await jlog.inbox.publish_many([(e, f"{tag}{i + k}") for k, e in enumerate(chunk)], timeout_s=30)


class TimedLoop(LeaderLoop):
    """The leader loop, noting when each job's first decision was appended (for latency)."""

    decided_at: dict[str, float]

    def _fold_all(self, entries: Sequence[ev.LogEntry], *, decisions: bool) -> None:
        if decisions:
            now = time.perf_counter()
            for entry in entries:
                ref = getattr(entry.event, "job", None)
                if ref is not None and ref.key not in self.decided_at:
                    self.decided_at[ref.key] = now
        super()._fold_all(entries, decisions=decisions)


def inputs_seen(loop: LeaderLoop) -> float:
    return sum(s.value for m in loop.metrics.inputs.collect() for s in m.samples if s.name.endswith("_total"))


async def until_inputs(loop: LeaderLoop, total: float) -> None:
    while inputs_seen(loop) < total:
        await asyncio.sleep(0.005)


async def paced(jlog: JetStreamLog, events: list[ev.JobSubmitted], *, rate: float) -> dict[str, float]:
    """Offer ``events`` at ``rate``/s in 5 ms slices; returns when each was acknowledged by the inbox."""
    pub = Publisher(jlog.nc)
    sent: dict[str, float] = {}
    per_slice = max(1, int(rate * 0.005))
    t0 = time.perf_counter()
    for i in range(0, len(events), per_slice):
        due = t0 + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        chunk = events[i : i + per_slice]
        stamp = time.perf_counter()
        batch: list[Outgoing] = [
            (jlog.inbox.subject(e), codec.encode(e), {"Nats-Msg-Id": f"lat-{i + k}"})
            for k, e in enumerate(chunk)
        ]
        acks = await pub.publish(batch, timeout_s=30)
        assert all(a is not None and a.error is None for a in acks)
        for e in chunk:
            sent[e.job.key] = stamp
    return sent


def core_only(world: list[ev.InputEvent], backlog: list[ev.JobSubmitted], *, batch: int = 500) -> float:
    """The same inputs through the pure core alone (fold, decide, fold the decisions; batches of
    the loop's pull size): inputs per CPU second. The loop cannot go faster than this."""
    leader = Leader()
    leader.inputs([POLICY, queues_config(QUEUES, 10), *world])
    leader.decide()
    t0 = time.process_time()
    for i in range(0, len(backlog), batch):
        leader.inputs(list(backlog[i : i + batch]))
        leader.decide()
    return len(backlog) / (time.process_time() - t0)


async def cold_backlog(
    url: str, settings: LoopSettings, world: list[ev.InputEvent], backlog: list[ev.JobSubmitted]
) -> tuple[float, float]:
    """The backlog on a log of its own, all in the inbox before a term starts (no head start while
    publishing), the state before it the same as ``core_only``'s: (seconds, CPU seconds) to drain."""
    jlog = await connect(url, root="benchcold")
    try:
        loop = LeaderLoop(jlog, settings)
        stop = asyncio.Event()
        term = asyncio.create_task(loop.run_term(stop=stop))
        await wait_ready(loop, timeout_s=120)
        await publish_all(jlog, world, tag="w")
        await until_inputs(loop, len(world))
        stop.set()
        await term
        await publish_all(jlog, backlog, tag="j")
        stop = asyncio.Event()
        term = asyncio.create_task(loop.run_term(stop=stop))
        await wait_ready(loop, timeout_s=120)
        base = inputs_seen(loop)
        cpu0, t0 = time.process_time(), time.perf_counter()
        await until_inputs(loop, base + len(backlog))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        stop.set()
        await term
        return elapsed, cpu
    finally:
        await jlog.close()


async def sequencer_only(url: str, backlog: list[ev.JobSubmitted]) -> float:
    """CPU seconds per input to pull it from the inbox, append it and append one decision for it,
    in batches of the loop's pull size: what the loop costs besides the core (no fold, no decide)."""
    jlog = await connect(url, root="benchseq")
    try:
        await publish_all(jlog, backlog, tag="s")
        seqr = jlog.sequencer("bench")
        await seqr.resume()
        done = 0
        cpu0 = time.process_time()
        while done < len(backlog):
            items = await seqr.pull(max_items=500, timeout_s=5.0)
            entries = await seqr.append_inputs(items, at_ms=1)
            decisions = [ev.Nominated(job=e.event.job, clusters=["c0000"], attempt=1) for e in entries]  # type: ignore[attr-defined]
            await seqr.append_decisions(decisions, at_ms=1)
            done += len(items)
        return (time.process_time() - cpu0) / len(backlog)
    finally:
        await jlog.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--rate", type=float, default=2_000, help="offered inputs/s in the latency phase")
    parser.add_argument("--latency-jobs", type=int, default=10_000)
    parser.add_argument("--profile", action="store_true", help="cProfile the throughput phase")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    world = clusters(args.clusters)
    backlog = [job(j) for j in range(args.jobs)]
    later = [job(j, prefix="lat") for j in range(args.latency_jobs)]
    n = len(backlog)
    with tempfile.TemporaryDirectory(prefix="kd-bench-") as tmp:
        server = EmbeddedNats(data_dir=Path(tmp))
        await server.start_async()
        try:
            jlog = await connect(server.url, root="benchloop")
            entries = [
                ev.LogEntry(seq=i + 1, at_ms=1, event=e, inbox_seq=i + 1, leader="bench")
                for i, e in enumerate(backlog)
            ]
            payloads = [(f"{type(e.event).__name__}.x", codec.encode(e)) for e in entries]
            plain_rate = await plain_publish(jlog, payloads, window=500)
            await publish_all(jlog, world, tag="w")
            settings = LoopSettings(
                leader_id="bench", policy=POLICY, queues=queues_config(QUEUES, 10), snapshot_every=10**9
            )
            loop = TimedLoop(jlog, settings)
            loop.decided_at = {}
            stop = asyncio.Event()
            term = asyncio.create_task(loop.run_term(stop=stop))
            await wait_ready(loop, timeout_s=120)
            await until_inputs(loop, len(world))
            # Throughput: the whole backlog lands in the inbox, the loop drains it.
            base = inputs_seen(loop)
            await publish_all(jlog, backlog, tag="j")
            profiler = cProfile.Profile() if args.profile else None
            if profiler is not None:
                profiler.enable()
            started = time.perf_counter()
            await until_inputs(loop, base + n)
            loop_s = time.perf_counter() - started
            if profiler is not None:
                profiler.disable()
            decide_s = sum(
                s.value
                for m in loop.metrics.decide_seconds.collect()
                for s in m.samples
                if s.name.endswith("_sum")
            )
            # Latency: inputs offered at a steady rate well under the ceiling.
            base = inputs_seen(loop)
            sent = await paced(jlog, later, rate=args.rate)
            await until_inputs(loop, base + len(later))
            deadline = time.perf_counter() + 30
            while any(k not in loop.decided_at for k in sent) and time.perf_counter() < deadline:
                await asyncio.sleep(0.01)
            latencies = [(loop.decided_at[k] - t) * 1000 for k, t in sent.items() if k in loop.decided_at]
            stop.set()
            await term
            cold_s, cold_cpu = await cold_backlog(server.url, settings, world, backlog)
            seq_cpu = await sequencer_only(server.url, backlog)
            last_seq = loop.last_seq
            t0 = time.perf_counter()
            await replay(jlog.reader)
            plain_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            verified = await replay(jlog.reader, verify=True)
            verify_s = time.perf_counter() - t0
            assert verified.mismatch is None, verified.mismatch
            await jlog.close()
        finally:
            await server.stop_async()
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    rate = n / loop_s
    ratio = rate / plain_rate
    ceiling = core_only(world, backlog)
    decisions = verified.decisions
    print(
        f"inputs: {n:,} jobs in {QUEUES} ClusterQueues / 10 cohorts, {args.clusters} clusters; log {last_seq:,} entries, {decisions:,} decisions"
    )
    print(f"nats-py publish_async, plain stream:        {plain_rate:10,.0f} msgs/s")
    print(
        f"leader loop (inbox -> log -> decide -> log): {rate:10,.0f} inputs/s  ({decide_s / loop_s:.0%} of it in decide)"
    )
    print(f"  ratio leader loop / plain publish: {ratio:.2f}")
    print(
        f"cold backlog drained by a new term:          {n / cold_s:10,.0f} inputs/s  "
        f"({cold_cpu / n * 1e6:.0f} us of CPU per input; the core alone {1e6 / ceiling:.0f} us: "
        f"{(cold_cpu / n - 1 / ceiling) * 1e6:.0f} us for NATS and the loop)"
    )
    print(f"the core alone on the same inputs (no NATS): {ceiling:10,.0f} inputs/s of CPU time")
    print(f"the sequencer alone (pull, append the input and one decision): {seq_cpu * 1e6:.1f} us of CPU per input")
    p50, p99 = percentile(latencies, 50) or 0.0, percentile(latencies, 99) or 0.0
    print(
        f"input -> decision appended at {args.rate:,.0f} inputs/s offered: p50 {p50:.1f} ms  p99 {p99:.1f} ms"
        f"  ({len(latencies):,} of {len(sent):,} decided)"
    )
    print(f"replay (fold only):       {last_seq / plain_s:10,.0f} entries/s")
    print(
        f"replay --verify (decide): {last_seq / verify_s:10,.0f} entries/s  ({verified.verified_batches} batches recomputed)"
    )
    ok = rate >= 20_000 and ratio >= 0.6
    print(f"floors: >= 20,000 inputs/s and >= 0.6 x plain publish: {'met' if ok else 'NOT met'}")
    print(
        f"leader_loop: {rate:,.0f} inputs/s with tenancy = {ratio:.2f} x nats-py pipelined publish; p99 input->decision {p99:.1f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
