"""Log bytes per worker per hour of capacity facts (docs/capacity-reports.md), measured.

A 5,000-node GPU worker (50 racks of 100 nodes in 2 zones; A100 and H100 nodes with 8 GPUs,
96 CPUs and 1 TiB each, a few cordoned and a few tainted) runs a steady stream of training pods
(1, 2, 4 or 8 GPUs with 12 CPUs and 96 GiB per GPU, and small CPU-only pods), each living
``--mean-life`` on average, at ``--churn`` pod starts per second (as many finish: the worker stays
~80% busy). The reporter (``reconciler.service.clusters.capacity_facts``: ``WorkerState`` and
``ReportDiffer``) follows every pod event and reports at most once per ``--interval`` seconds
for one simulated hour. The bytes are the events as the log stores them (``eventlog.codec``).

Baseline, in the same run: a full snapshot every interval (what "send the state every few
seconds" would cost). The ratio is the saving of reporting changes.

Run:  .venv/bin/python bench/capacity_facts.py [--nodes 5000] [--churn 2] [--interval 5]
The last line is the headline.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eventlog import codec
from eventlog import events as ev
from reconciler.service.clusters.capacity_facts import ReportDiffer, WorkerState

GI = 1024**3
RACK = "cloud.example.com/rack"
ZONE = "topology.kubernetes.io/zone"


def node(i: int) -> dict[str, Any]:
    rack = i // 100
    spec: dict[str, Any] = {}
    if i % 997 == 0:
        spec["unschedulable"] = True
    if i % 250 == 1:
        spec["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    return {
        "metadata": {
            "name": f"node-{i}",
            "labels": {
                "kubernetes.io/hostname": f"node-{i}",
                RACK: f"rack-{rack}",
                ZONE: f"zone-{rack % 2}",
                "nvidia.com/gpu.product": "H100" if rack % 5 == 0 else "A100",
                "node.kubernetes.io/instance-type": "p5.48xlarge" if rack % 5 == 0 else "p4d.24xlarge",
            },
        },
        "spec": spec,
        "status": {"allocatable": {"cpu": "95500m", "memory": f"{1000 * GI}", "nvidia.com/gpu": "8", "pods": "110"}},
    }


def pod(name: str, on: str, gpus: int) -> dict[str, Any]:
    if gpus:
        requests = {"cpu": str(12 * gpus), "memory": f"{96 * gpus}Gi", "nvidia.com/gpu": str(gpus)}
    else:
        requests = {"cpu": "500m", "memory": "2Gi"}
    return {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"nodeName": on, "containers": [{"name": "main", "resources": {"requests": requests}}]},
        "status": {"phase": "Running"},
    }


TOPOLOGY = {"metadata": {"name": "default"}, "spec": {"levels": [{"nodeLabel": ZONE}, {"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]}}


class Worker:
    def __init__(self, nodes: int, rng: random.Random, bits: int) -> None:
        self.rng = rng
        self.state = WorkerState(bits=bits)
        self.state.on_topology("LISTED", TOPOLOGY)
        self.free_gpus = [8] * nodes
        for i in range(nodes):
            self.state.on_node("LISTED", node(i))
        self.running: dict[str, tuple[int, int, float]] = {}  # pod -> (node, gpus, ends at)
        self.seq = 0

    def start(self, now: float, mean_life_s: float) -> None:
        gpus = self.rng.choice([0, 0, 1, 1, 2, 4, 8, 8])
        candidates = [i for i in self.rng.sample(range(len(self.free_gpus)), 64) if self.free_gpus[i] >= gpus]
        if not candidates:
            return  # full: the pod waits (not a node event)
        at = candidates[0]
        self.seq += 1
        name = f"p{self.seq}"
        self.free_gpus[at] -= gpus
        self.running[name] = (at, gpus, now + self.rng.expovariate(1 / mean_life_s))
        self.state.on_pod("ADDED", pod(name, f"node-{at}", gpus))

    def finish_due(self, now: float) -> None:
        for name in [p for p, (_, _, end) in self.running.items() if end <= now]:
            at, gpus, _ = self.running.pop(name)
            self.free_gpus[at] += gpus
            self.state.on_pod("DELETED", pod(name, f"node-{at}", gpus))


def run(nodes: int, churn: float, interval_s: int, mean_life_s: float, seed: int, bits: int = 3) -> dict[str, float]:
    """One simulated hour; byte counts of what was reported and of the baseline."""
    rng = random.Random(seed)
    worker = Worker(nodes, rng, bits)
    # Warm up to a steady state (~80% of GPUs busy) before measuring.
    target = 0.8 * 8 * nodes
    now = 0.0
    while sum(8 - f for f in worker.free_gpus) < target:
        worker.start(now, mean_life_s)
    differ = ReportDiffer("gpu-worker", min_interval_ms=interval_s * 1000)
    full_bytes: list[int] = []
    delta_bytes: list[int] = []
    events = 0
    baseline_total = 0
    started = time.perf_counter()
    for second in range(3600):
        now = float(second)
        worker.finish_due(now)
        for _ in range(_poisson(rng, churn)):
            worker.start(now, mean_life_s)
            events += 1
        if second % interval_s == 0:
            report = differ.next_report(worker.state, now_ms=second * 1000)
            if report is not None:
                (full_bytes if report[0].full else delta_bytes).append(len(codec.encode(report[0])))
            snapshot = ev.ClusterCapacityReported(
                cluster="gpu-worker",
                full=True,
                node_groups=sorted(worker.state.node_groups().values(), key=lambda g: g.id),
                topology_levels=worker.state.levels,
            )
            baseline_total += len(codec.encode(snapshot))
    elapsed = time.perf_counter() - started
    groups = len(worker.state.node_groups())
    bins = sum(len(g.bins) for g in worker.state.node_groups().values())
    return {
        "pod_starts": events,
        "reports": len(full_bytes) + len(delta_bytes),
        "first_full_bytes": full_bytes[0] if full_bytes else 0,
        "delta_bytes": sum(delta_bytes),
        "total_bytes": sum(full_bytes) + sum(delta_bytes),
        "baseline_bytes": baseline_total,
        "groups": groups,
        "bins": bins,
        "elapsed_s": elapsed,
    }


def _poisson(rng: random.Random, lam: float) -> int:
    # Knuth: fine for the small means used here.
    limit, k, p = pow(2.718281828459045, -lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--churn", type=float, default=2.0, help="pod starts per second (as many finish)")
    parser.add_argument("--interval", type=int, default=5, help="seconds between reports at most")
    parser.add_argument("--mean-life", type=float, default=1800.0, help="mean pod lifetime, seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bits", type=int, default=3, help="significant binary digits kept of free amounts")
    args = parser.parse_args()
    r = run(args.nodes, args.churn, args.interval, args.mean_life, args.seed, args.bits)
    mib = 1024 * 1024
    print(f"worker: {args.nodes} nodes -> {r['groups']} node groups, {r['bins']} bins at the end")
    print(f"churn: {r['pod_starts']} pod starts in the hour ({args.churn}/s, as many finishes), report every <= {args.interval}s")
    print(f"reports: {r['reports']} (1 full of {r['first_full_bytes']} bytes, then changes)")
    print(f"baseline (full snapshot every {args.interval}s): {r['baseline_bytes'] / mib:.1f} MiB/h")
    print(f"measured in {r['elapsed_s']:.1f}s (a loaded machine: the figures are bytes, not timings)")
    ratio = r["baseline_bytes"] / max(r["total_bytes"], 1)
    print(
        f"HEADLINE capacity facts: {r['total_bytes'] / mib:.2f} MiB per worker per hour "
        f"({args.nodes} nodes, {args.churn} pod starts/s), {ratio:.0f}x less than full snapshots"
    )


if __name__ == "__main__":
    main()
