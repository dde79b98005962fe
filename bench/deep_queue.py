"""Decide while the queue is deep: K jobs waiting behind quota in 100 ClusterQueues (10 cohorts).

    .venv/bin/python bench/deep_queue.py [--jobs 100000] [--clusters 500] [--shapes 8] [--rounds 40]

The world is built through the real fold and decide (no log, no NATS): the queue configuration,
the clusters, then the jobs in batches, every nomination answered at once by its cluster (created,
admitted: the job runs), until every queue is at its quota and the rest wait (``Unschedulable``,
``QuotaExceeded``). Then rounds: one running job finishes (its cluster reports it), which frees
quota in its cohort and capacity on its cluster; ``decide`` runs twice on the same state, once
with the per-queue pending index (``reconciler/core/pending.py``) and once with the plain full
scan of every waiting job, the two batches must be equal, and the batch is folded (and its
nominations answered) before the next round. Times are CPU time of this process (the machine is
shared). Each job's shape is one of ``--shapes`` templates per queue (the index groups jobs of
equal spec, priority and verdict; ``--shapes 0``: a shape drawn per job, 216 combinations, as
bench/fleet.py draws them, so that at 100 jobs per queue most lanes hold one job).

The collector runs as ``kdispatch serve`` runs it (``reconciler.edge.gcpolicy``: tuned at start-up,
the state frozen once built, as a term freezes it after its rebuild; ``--gc default``: Python's),
and the bench prints what one full collection of the built state costs.

The last line is the headline: p50/p99 of one decide with the index vs the full scan.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eventlog import events as ev
from reconciler.core import State, decide, fold, new_state, phases
from reconciler.edge import gcpolicy
from reconciler.edge.percentile import percentile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet import GPU, POLICY, REGIONS

cpu = time.process_time
FLOOR_MS = 50.0



def queues_config(n_queues: int, n_cohorts: int, strict_every: int) -> ev.QueuesConfigured:
    """Quota for a few jobs per queue (8 CPUs, 2 GPUs nominal, GPUs borrowable up to 2 more)."""

    def quota() -> list[ev.ResourceGroup]:
        return [
            ev.ResourceGroup(
                covered_resources=["cpu", "memory", GPU],
                flavors=[
                    ev.FlavorQuotas(
                        name="default",
                        resources=[
                            ev.ResourceQuota(name="cpu", nominal=8_000),
                            ev.ResourceQuota(name="memory", nominal=1 << 40),
                            ev.ResourceQuota(name=GPU, nominal=2, borrowing_limit=2),
                        ],
                    )
                ],
            )
        ]

    return ev.QueuesConfigured(
        cluster_queues=[
            ev.ClusterQueueSpec(
                name=f"team-{i:03}",
                cohort=f"cohort-{i % n_cohorts:02}",
                namespace_selector=ev.LabelSelector(),
                resource_groups=quota(),
                weight_milli=1000 + 250 * (i % 4),
                queueing_strategy="StrictFIFO" if strict_every and i % strict_every == 0 else "BestEffortFIFO",
            )
            for i in range(n_queues)
        ],
        source="bench/deep_queue.py",
    )


def make_clusters(n: int, rng: random.Random) -> list[ev.ClusterRegistered]:
    out = []
    for i in range(n):
        capacity = {"cpu": rng.choice([64, 128, 256]) * 1000, "memory": rng.choice([256, 512]) << 30, GPU: 16}
        labels = {"topology.kubernetes.io/region": REGIONS[i % len(REGIONS)]}
        out.append(ev.ClusterRegistered(cluster=f"cluster-{i:05}", labels=labels, capacity=capacity))
    return out


def shape(rng: random.Random) -> tuple[dict[str, int], dict[str, str], int]:
    requests = {"cpu": rng.choice([500, 1000, 2000]), "memory": rng.choice([1, 2, 4]) << 30}
    if rng.random() < 0.3:
        requests[GPU] = 1
    selector = {"topology.kubernetes.io/region": rng.choice(REGIONS)} if rng.random() < 0.5 else {}
    return requests, selector, rng.choice([1, 1, 2])


def make_job(i: int, n_queues: int, rng: random.Random, templates: list[list[tuple[dict[str, int], dict[str, str], int]]]) -> ev.JobSubmitted:
    q = i % n_queues
    requests, selector, count = rng.choice(templates[q]) if templates else shape(rng)
    queue = f"team-{q:03}"
    return ev.JobSubmitted(
        job=ev.JobRef(namespace=queue, name=f"job-{i:07}", uid=f"uid-{i}"),
        pod_sets=[ev.PodSet(name="main", count=count, requests=requests)],
        placement=ev.Placement(cluster_selector=selector),
        queue="user-queue",
        cluster_queue=queue,
    )


class World:
    def __init__(self) -> None:
        self.state: State = new_state()
        self.seq = 0
        self.now = 1_700_000_000_000

    def fold(self, event: ev.AnyEvent, batch: tuple[int, int] | None = None) -> None:
        self.seq += 1
        fold(self.state, ev.LogEntry(seq=self.seq, at_ms=self.now, event=event, batch=batch))

    def fold_batch(self, decisions: list[ev.DecisionEvent]) -> None:
        for i, d in enumerate(decisions):
            self.fold(d, (i, len(decisions)))

    def step(self, inputs: list[ev.InputEvent]) -> None:
        """Fold, decide, fold the decisions, answer the nominations, until nothing is left."""
        while inputs:
            self.now += 1
            for e in inputs:
                self.fold(e)
            out = decide(self.state)
            self.fold_batch(out)
            inputs = admitted(out)


def admitted(decisions: list[ev.DecisionEvent]) -> list[ev.InputEvent]:
    acks: list[ev.InputEvent] = []
    for d in decisions:
        if isinstance(d, ev.Nominated):
            acks.append(ev.RemoteCreated(job=d.job, cluster=d.clusters[0], attempt=d.attempt))
            acks.append(ev.RemoteAdmitted(job=d.job, cluster=d.clusters[0], attempt=d.attempt))
    return acks


def ms(values: list[float], p: float) -> float:
    got = percentile(values, p)
    return 0.0 if got is None else got * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--cohorts", type=int, default=10)
    parser.add_argument("--shapes", type=int, default=8, help="templates per queue (0: a shape drawn per job)")
    parser.add_argument("--strict-every", type=int, default=4, help="every n-th queue StrictFIFO (0: none)")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--no-plain", action="store_true", help="skip the full-scan baseline (and the check)")
    parser.add_argument(
        "--gc",
        choices=["leader", "default"],
        default="leader",
        help="the collector as `kdispatch serve` runs it (reconciler.edge.gcpolicy: frozen at start-up and once "
        "the state is built, as a term freezes it after its rebuild), or Python's default",
    )
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: give at least 1 job")
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give at least 1 round")
    for flag, value in (("--shapes", args.shapes), ("--strict-every", args.strict_every)):
        if value < 0:
            parser.error(f"{flag} {value}: give 0 or more")
    for flag, value in (("--clusters", args.clusters), ("--queues", args.queues), ("--cohorts", args.cohorts), ("--batch", args.batch)):
        if value < 1:
            parser.error(f"{flag} {value}: give at least 1")
    if args.gc == "leader":
        gcpolicy.at_start()
    started = time.perf_counter()
    rng = random.Random(16)
    templates = [[shape(rng) for _ in range(args.shapes)] for _ in range(args.queues)] if args.shapes else []
    w = World()
    w.step([POLICY, queues_config(args.queues, args.cohorts, args.strict_every)])
    w.step(list(make_clusters(args.clusters, rng)))
    for start in range(0, args.jobs, args.batch):
        w.step([make_job(i, args.queues, rng, templates) for i in range(start, min(args.jobs, start + args.batch))])
    state = w.state
    # What one full collection costs with this state: the pause some decide pays whenever CPython
    # runs one (it walks every tracked object that is not frozen).
    t0 = cpu()
    if args.gc == "leader":
        gcpolicy.settle()  # the state as a term holds it after its rebuild (a collection, then the freeze)
    else:
        gc.collect()
    full_ms = (cpu() - t0) * 1000
    t0 = cpu()
    gc.collect()
    after_ms = (cpu() - t0) * 1000
    running = sorted(k for k, j in state.jobs.items() if j.phase == phases.PLACED)
    policy = gcpolicy.NAME if args.gc == "leader" else f"Python default (thresholds {gc.get_threshold()}, nothing frozen)"
    print(f"gc: {policy}; a full collection took {full_ms:,.0f} ms, then {after_ms:,.1f} ms")
    print(
        f"built: {args.jobs:,} jobs ({len(state.waiting):,} waiting, {len(running):,} running), "
        f"{args.clusters:,} clusters, {args.queues} queues in {args.cohorts} cohorts, "
        f"{f'{args.shapes} shapes per queue' if args.shapes else 'a shape drawn per job'}, {time.perf_counter() - started:,.1f} s",
        flush=True,
    )
    indexed: list[float] = []
    plain: list[float] = []
    decided = 0
    for r in range(args.rounds):
        running = sorted(k for k, j in state.jobs.items() if j.phase == phases.PLACED)
        if not running:
            break
        job = state.jobs[rng.choice(running)]
        assert job.cluster is not None
        w.now += 1_000
        w.fold(ev.RemoteFinished(job=job.ref, cluster=job.cluster, attempt=job.attempt, succeeded=True))
        t0 = cpu()
        out = decide(state)
        t1 = cpu()
        indexed.append(t1 - t0)
        if not args.no_plain:
            t0 = cpu()
            want = decide(state, index=False)
            plain.append(cpu() - t0)
            assert out == want, f"round {r}: the index decided differently from the full scan"
        decided += len(out)
        w.fold_batch(out)
        w.step(admitted(out))
    print(f"rounds: {len(indexed)}, decisions {decided:,}, waiting after {len(state.waiting):,}; wall {time.perf_counter() - started:,.1f} s")
    line = f"deep decide at {len(state.waiting):,} waiting: index p50 {ms(indexed, 50):,.1f} ms, p99 {ms(indexed, 99):,.1f} ms"
    if plain:
        ratio = ms(plain, 99) / max(ms(indexed, 99), 1e-6)
        line += f"; full scan p50 {ms(plain, 50):,.1f} ms, p99 {ms(plain, 99):,.1f} ms ({ratio:,.0f}x); floor p99 < {FLOOR_MS:g} ms"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
