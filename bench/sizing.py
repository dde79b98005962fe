"""Sizing figures for docs/deploy.md, measured: NATS storage per million log events, reconciler
memory per 10,000 jobs.

1. Storage. A representative event stream (every job's life: submitted with its manifest,
   nominated, created, admitted, placed, finished, cleaned up, gone; cluster heartbeats between)
   is written to a real nats-server with file storage, in kdispatch's own streams (created by
   ``eventlog.jetstream.connect``): each input to the inbox as its producer publishes it, then to
   the log as a ``LogEntry`` with the headers the sequencer sends; decisions to the log only.
   Bytes on disk are read from the stream directories and from the server's stream state, and
   compared side by side with the baseline: the encoded payload bytes alone (ratio = overhead of
   JetStream's storage format: headers, subjects, indexes). By default 200,000 log entries are
   written and the result scaled to one million (storage is linear in messages; ``--events
   1000000`` measures the full million).

2. Memory. 10,000 jobs folded into the core state (``reconciler.core``: submitted, decided,
   placed and admitted on 50 clusters: the live state a leader holds), measured with tracemalloc
   and RSS, side by side with the baseline: the same 10,000 JobSubmitted events held as decoded
   structs (what any in-memory model must keep at least). Also the snapshot size (dump_state).

Run:  .venv/bin/python bench/sizing.py [--events N] [--jobs N]
The last line is the headline.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eventlog import codec
from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import connect
from reconciler.service.clusters.heartbeats import HeartbeatGate, keepalive_ms

MANIFEST = Path(__file__).resolve().parent.parent / "data" / "manifests" / "kueue" / "jobs" / "sample-job.yaml"
CLUSTERS = 50
HEARTBEATS_PER_JOB = 2  # 50 clusters every 5 s and ~5 submissions/s: ~2 heartbeats per job's 9 entries
T0 = 1_800_000_000_000
CHUNK_JOBS = 200  # jobs whose inputs are published, sequenced and decided as one batch


def _manifest(i: int) -> dict[str, Any]:
    """A real Job manifest (Kueue's sample job), named and annotated as the webhook admits it."""
    try:
        obj: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    except OSError:  # outside this workspace: the same shape inline
        obj = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
            "spec": {
                "parallelism": 3,
                "completions": 3,
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "dummy-job",
                                "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
                                "command": ["/bin/sh"],
                                "args": ["-c", "sleep 60"],
                                "resources": {"requests": {"cpu": "1", "memory": "200Mi"}},
                            }
                        ],
                        "restartPolicy": "Never",
                    }
                },
            },
        }
    meta = obj["metadata"]
    meta.pop("generateName", None)
    meta.update(name=f"sample-job-{i:07d}", uid=f"00000000-0000-4000-8000-{i:012d}", namespace="team-a")
    meta.setdefault("annotations", {})["kdispatch.io/placement"] = (
        '{"clusterAffinity":{},"clusterSelector":{"kdispatch.io/gpu":"a100"},"dispatchMode":"MustBeAdmitted",'
        '"preemptionPolicy":"PreemptLowerPriority","profile":"default"}'
    )
    obj["spec"]["suspend"] = True
    obj["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    return obj


def job_events(i: int) -> list[ev.AnyEvent]:
    """One job's life in the log, in order: inputs and decisions."""
    ref = ev.JobRef(namespace="team-a", name=f"sample-job-{i:07d}", uid=f"00000000-0000-4000-8000-{i:012d}")
    cluster = f"worker-{i % CLUSTERS:03d}"
    pod_sets = [ev.PodSet(name="main", count=3, requests={"cpu": 1000, "memory": 209_715_200})]
    return [
        ev.JobSubmitted(
            job=ref,
            pod_sets=pod_sets,
            priority=1000,
            priority_class="normal",
            placement=ev.Placement(cluster_selector={"kdispatch.io/gpu": "a100"}),
            queue="user-queue",
            manifest=_manifest(i),
        ),
        ev.Nominated(job=ref, clusters=[cluster], attempt=1, deadline_ms=T0 + 60_000),
        ev.RemoteCreated(job=ref, cluster=cluster, attempt=1),
        ev.RemoteAdmitted(job=ref, cluster=cluster, attempt=1),
        ev.Placed(job=ref, cluster=cluster, attempt=1),
        ev.RemoteFinished(job=ref, cluster=cluster, attempt=1),
        ev.Finished(job=ref, cluster=cluster, attempt=1),
        ev.CleanUp(job=ref, cluster=cluster, attempt=1),
        ev.RemoteGone(job=ref, cluster=cluster, attempt=1),
    ]


def heartbeat(i: int) -> ev.ClusterHeartbeat:
    return ev.ClusterHeartbeat(
        cluster=f"worker-{i % CLUSTERS:03d}",
        usage={"cpu": 120_000 + i % 997, "memory": 400 << 30, "nvidia.com/gpu": 12},
    )


def heartbeats_per_day(*, interval_ms: int = 5_000, lost_timeout_ms: int = 60_000) -> dict[str, int]:
    """Heartbeats one cluster puts in the log in a day at the defaults (5 s checks, 60 s
    worker-lost timeout), counted by running the observers' own gate over a day of checks: two
    replicas observing the same cluster, their message ids de-duplicated as the inbox does."""
    keepalive = keepalive_ms(interval_ms=interval_ms, lost_timeout_ms=lost_timeout_ms)
    out: dict[str, int] = {}
    for label, changing in (("idle cluster (keepalive), 2 replicas", False), ("usage changing at every check, 2 replicas", True)):
        ids: set[str] = set()
        for replica, skew_ms in enumerate((0, 37)):  # two replicas, clocks 37 ms apart
            gate = HeartbeatGate("worker-000", interval_ms=interval_ms, keepalive_ms=keepalive)
            now = 1_000 + replica * 2_222  # started at different moments
            while now < 86_400_000:
                # What the cluster runs at that moment, the same for both replicas to see.
                usage = {"cpu": 1000 * ((now // interval_ms) % 7 if changing else 1)}
                msg_id = gate.observe(ev.ClusterHeartbeat(cluster="worker-000", usage=usage), now + skew_ms)
                if msg_id is not None:
                    ids.add(msg_id)
                now = gate.next_check_ms(now)
        out[label] = len(ids)
    out["before: every check, every replica (2 replicas)"] = 2 * 86_400_000 // interval_ms
    return out


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def measure_storage(events_target: int, *, heartbeats_only: bool = False) -> dict[str, float]:
    """Write through the real path: producers publish inputs to the inbox (``Inbox.publish``,
    acknowledged, Nats-Msg-Id), the sequencer (``JetStreamLog.sequencer``) pulls them and appends
    them to the log, then appends the decisions as one batch, exactly as the leader does."""
    with tempfile.TemporaryDirectory(prefix="kdispatch-sizing-") as tmp:
        server = EmbeddedNats(data_dir=tmp)
        await server.start_async()
        try:
            jlog = await connect(server.url, root="kd")
            sequencer = jlog.sequencer("kdispatch-reconciler-0")
            await sequencer.resume()
            seq = inbox_seq = 0
            payload_bytes = 0
            at_ms = T0
            started = time.perf_counter()
            i = 0
            while seq < events_target:
                inputs: list[ev.InputEvent] = []
                decisions: list[ev.DecisionEvent] = []
                for _ in range(CHUNK_JOBS):
                    if heartbeats_only:
                        events: list[ev.AnyEvent] = [heartbeat(i)]
                    else:
                        events = job_events(i)
                        events[1:1] = [
                            heartbeat(i * HEARTBEATS_PER_JOB + k) for k in range(HEARTBEATS_PER_JOB)
                        ]
                    for event in events:
                        if ev.is_decision(event):
                            decisions.append(event)  # type: ignore[arg-type]
                        else:
                            inputs.append(event)  # type: ignore[arg-type]
                    i += 1
                await asyncio.gather(
                    *(jlog.inbox.publish(e, msg_id=f"{i}/{k}", timeout_s=30.0) for k, e in enumerate(inputs))
                )
                payload_bytes += sum(len(codec.encode(e)) for e in inputs)
                items: list[Any] = []
                while len(items) < len(inputs):
                    items += await sequencer.pull(max_items=1000, timeout_s=1.0)
                at_ms += 1000
                entries = await sequencer.append_inputs(items, at_ms=at_ms)
                if decisions:
                    entries += await sequencer.append_decisions(decisions, at_ms=at_ms)
                payload_bytes += sum(len(codec.encode(e)) for e in entries)
                seq += len(entries)
                inbox_seq += len(inputs)
            elapsed = time.perf_counter() - started
            log_info = await jlog.js.stream_info(jlog.names.log_stream)
            inbox_info = await jlog.js.stream_info(jlog.names.inbox_stream)
            assert log_info.state.messages == seq, f"log holds {log_info.state.messages} of {seq}"
            assert inbox_info.state.messages == inbox_seq, (
                f"inbox holds {inbox_info.state.messages} of {inbox_seq}"
            )
            state_bytes = log_info.state.bytes + inbox_info.state.bytes
            await sequencer.close()
            await jlog.close()
        finally:
            await server.stop_async()
        # Files as they rest on disk after a clean stop (blocks, indexes, metadata).
        disk = _dir_bytes(Path(tmp) / "jetstream")
    scale = 1_000_000 / seq
    return {
        "disk_per_entry": disk / seq,
        "log_entries": seq,
        "inbox_messages": inbox_seq,
        "jobs": i,
        "seconds": elapsed,
        "disk_per_million": disk * scale,
        "state_per_million": state_bytes * scale,
        "payload_per_million": payload_bytes * scale,
    }


def _rss() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_memory(jobs: int) -> dict[str, float]:
    from reconciler import core

    def entries(events: list[ev.AnyEvent], seq: int, at_ms: int) -> list[ev.LogEntry]:
        return [ev.LogEntry(seq=seq + k + 1, at_ms=at_ms, event=e) for k, e in enumerate(events)]

    registrations: list[ev.AnyEvent] = [
        ev.ClusterRegistered(
            cluster=f"worker-{c:03d}",
            labels={"kdispatch.io/gpu": "a100", "topology.kubernetes.io/region": f"r{c % 5}"},
            capacity={"cpu": 10_000_000, "memory": 1 << 45, "nvidia.com/gpu": 10_000},
        )
        for c in range(CLUSTERS)
    ]
    submissions = [job_events(i)[0] for i in range(jobs)]

    # Baseline: the submissions alone, decoded (what any in-memory model keeps at least).
    gc.collect()
    tracemalloc.start()
    base0 = tracemalloc.get_traced_memory()[0]
    decoded = [codec.decode_event(codec.encode(s)) for s in submissions]
    baseline = tracemalloc.get_traced_memory()[0] - base0
    tracemalloc.stop()
    del decoded
    gc.collect()

    rss0 = _rss()
    tracemalloc.start()
    t0 = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    state = core.new_state()
    seq, at_ms = 0, T0
    for entry in entries(registrations, seq, at_ms):
        state = core.fold(state, entry)
    seq += len(registrations)
    batch = 500
    placed = 0
    for start in range(0, jobs, batch):
        at_ms += 1000
        chunk = submissions[start : start + batch]
        for entry in entries(list(chunk), seq, at_ms):
            state = core.fold(state, entry)
        seq += len(chunk)
        decisions = core.decide(state)
        for entry in entries(list(decisions), seq, at_ms):
            state = core.fold(state, entry)
        seq += len(decisions)
        facts: list[ev.AnyEvent] = []
        for d in decisions:
            if isinstance(d, ev.Nominated):
                for cluster in d.clusters:
                    facts += [
                        ev.RemoteCreated(job=d.job, cluster=cluster, attempt=d.attempt),
                        ev.RemoteAdmitted(job=d.job, cluster=cluster, attempt=d.attempt),
                    ]
        at_ms += 100
        for entry in entries(facts, seq, at_ms):
            state = core.fold(state, entry)
        seq += len(facts)
        decisions = core.decide(state)
        placed += sum(isinstance(d, ev.Placed) for d in decisions)
        for entry in entries(list(decisions), seq, at_ms):
            state = core.fold(state, entry)
        seq += len(decisions)
    elapsed = time.perf_counter() - started
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - t0
    tracemalloc.stop()
    rss = _rss() - rss0
    phases: dict[str, int] = {}
    for info in core.summary(state)["jobs"].values():
        phases[info["phase"]] = phases.get(info["phase"], 0) + 1
    snapshot = len(core.dump_state(state))
    scale = 10_000 / jobs
    return {
        "jobs": jobs,
        "placed": placed,
        "phases": phases,  # type: ignore[dict-item]
        "seconds": elapsed,
        "traced_per_10k": traced * scale,
        "rss_per_10k": rss * scale,
        "baseline_per_10k": baseline * scale,
        "snapshot_per_10k": snapshot * scale,
        "log_entries": seq,
    }


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--events", type=int, default=200_000, help="log entries to write (default 200,000; scaled to 1M)"
    )
    parser.add_argument(
        "--jobs", type=int, default=10_000, help="jobs folded into the core state (default 10,000)"
    )
    args = parser.parse_args()

    s = asyncio.run(measure_storage(args.events))
    print(
        f"storage: {s['log_entries']:,} log entries ({s['jobs']:,} jobs, {s['inbox_messages']:,} inbox messages) "
        f"written in {s['seconds']:.1f}s, file storage, 1 replica"
    )
    print(f"  payload only (baseline)       {_mb(s['payload_per_million'])} per million log entries")
    print(
        f"  JetStream stream state        {_mb(s['state_per_million'])} per million  "
        f"(x{s['state_per_million'] / s['payload_per_million']:.2f} of payload)"
    )
    print(
        f"  files on disk (both streams)  {_mb(s['disk_per_million'])} per million  "
        f"(x{s['disk_per_million'] / s['payload_per_million']:.2f} of payload)"
        + ("" if args.events == 1_000_000 else f"  [scaled from {s['log_entries']:,}]")
    )

    h = asyncio.run(measure_storage(max(args.events // 4, 10_000), heartbeats_only=True))
    per_job = (
        s["disk_per_million"]
        - h["disk_per_entry"] * HEARTBEATS_PER_JOB * s["jobs"] * 1_000_000 / s["log_entries"]
    ) / (s["jobs"] * 1_000_000 / s["log_entries"])
    print(f"  one job's life (9 entries, 5 inputs also in the inbox)  {per_job / 1e3:,.1f} kB on disk")
    print(f"  one cluster heartbeat (log + inbox)                      {h['disk_per_entry']:,.0f} B on disk")
    day = heartbeats_per_day()
    for label, count in day.items():
        print(f"    {label:<58} {count:>7,} a day = {h['disk_per_entry'] * count / 1e6:6.1f} MB per cluster per day")

    m = measure_memory(args.jobs)
    print(
        f"memory: {m['jobs']:,} jobs on {CLUSTERS} clusters folded in {m['seconds']:.1f}s "
        f"({m['log_entries']:,} entries; phases {m['phases']})"
    )
    print(f"  submissions as structs (baseline) {_mb(m['baseline_per_10k'])} per 10,000 jobs")
    print(
        f"  core state, tracemalloc           {_mb(m['traced_per_10k'])} per 10,000 jobs  "
        f"(x{m['traced_per_10k'] / m['baseline_per_10k']:.2f} of baseline)"
    )
    print(f"  process RSS growth                {_mb(m['rss_per_10k'])} per 10,000 jobs")
    print(f"  snapshot (dump_state)             {_mb(m['snapshot_per_10k'])} per 10,000 jobs")
    print(
        f"sizing: {_mb(s['disk_per_million'])} of NATS storage per million log events per replica; "
        f"{_mb(max(m['traced_per_10k'], m['rss_per_10k']))} of reconciler memory per 10,000 live jobs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
