"""A dense log for ``replay --verify``, made by the real core (simulated workers, virtual time).

Decisions are as dense as in a real run (the demo's log: 1,722 inputs, 1,148 decisions in 645
batches): jobs in 100 ClusterQueues / 10 cohorts arrive a few at a time onto 50 simulated
clusters that stay nearly full, so most input batches lead to a small decision batch (nominate,
place, finish, clean up, report the unschedulable). The log is cached as JSONL under the temp
dir, keyed by its size, so the verify bench measures replay, not generation.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from bench.dispatch import queues_config
from eventlog import events as ev
from reconciler.simulate.logfile import JsonlWriter
from reconciler.simulate.runner import CoreApi, RunSettings, VirtualRun
from reconciler.simulate.trace import Trace, TraceCluster, TraceJob

GPU = "nvidia.com/gpu"
CLUSTERS = 50
QUEUES = 100
ENTRIES_PER_JOB = 11.0  # measured on small runs: inputs + decisions per job
VERSION = 2  # bump when the generator or the core's decisions change, so an old cache is not reused
# (v1 logs were made before the preemption changes of 03:36-04:29 on 2026-11-25: they no longer verify)

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
    worker_lost_timeout_ms=600_000,
)


def trace(jobs: int, *, seed: int = 11) -> Trace:
    rng = random.Random(seed)
    clusters = [
        TraceCluster(
            name=f"c{c:03d}",
            capacity={"cpu": 64_000, "memory": 512 << 30, GPU: 16},
            labels={"zone": f"z{c % 4}"},
            admission_latency_ms=200 + 50 * (c % 5),
        )
        for c in range(CLUSTERS)
    ]
    out = []
    t = 0
    for j in range(jobs):
        # ~0.6 jobs/s at a mean of ~4 GPUs x 200 s against 800 GPUs: the fleet runs about 60%
        # full on average and full in bursts, so some jobs wait (Unschedulable) or preempt.
        t += int(rng.expovariate(1 / 1600))
        gpus = rng.choice([0, 1, 2, 4, 8])
        requests = {"cpu": rng.choice([1000, 2000, 4000]), "memory": rng.choice([1, 4, 16]) << 30}
        if gpus:
            requests[GPU] = gpus
        placement = ev.Placement(cluster_selector={"zone": f"z{j % 4}"}) if j % 5 == 0 else ev.Placement()
        out.append(
            TraceJob(
                name=f"job-{j:07d}",
                submit_ms=t,
                runtime_ms=int(rng.expovariate(1 / 200_000)) + 1000,
                pod_sets=[ev.PodSet(name="main", count=rng.choice([1, 1, 2]), requests=requests)],
                priority=rng.choice([0, 0, 0, 100]),
                placement=placement,
                cluster_queue=f"team-{j % QUEUES:03}",
            )
        )
    return Trace(jobs=out, clusters=clusters)


class IntervalHeartbeats(VirtualRun):
    """Workers report on an interval only (as the reporter does), not after every change:
    otherwise heartbeats would be half the log, far more than in a real run."""

    def _heartbeats(self, *, changed: set[str] | None = None) -> list[ev.InputEvent]:
        return super()._heartbeats(changed=None if changed is None else set())


def dense_log(entries: int, *, cache: Path | None = None) -> Path:
    """A JSONL log of at least ``entries`` entries (cached); returns its path."""
    cache = cache or Path(tempfile.gettempdir()) / "kdispatch-bench"
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"dense-v{VERSION}-{entries}.jsonl"
    if path.exists():
        return path
    jobs = int(entries / ENTRIES_PER_JOB) + 1
    writer = JsonlWriter(path)
    t0 = time.perf_counter()
    run = IntervalHeartbeats(
        trace(jobs),
        policy=POLICY,
        profile_name="default",
        core=CoreApi.real(),
        observers=[writer],
        settings=RunSettings(heartbeat_interval_ms=120_000),
        queues=queues_config(QUEUES, 10),
    )
    run.run()
    writer.close()
    print(
        f"(generated {path}: {run.seq:,} entries, {run.decisions:,} decisions in {run.batches:,} batches, "
        f"{time.perf_counter() - t0:.0f} s; cached)"
    )
    return path
