"""Results must not depend on PYTHONHASHSEED: run the same world in two interpreters."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from eventlog import codec
from eventlog import events as ev
from tests.reconciler.core.harness import Harness, cluster, job

ROOT = Path(__file__).resolve().parents[3]


def tie_heavy_world() -> Harness:
    """Identical clusters (every score ties), many labels and taints, preemption, loss."""
    h = Harness()
    taint = ev.Taint(key="pool", value="spot", effect="PreferNoSchedule")
    for i in range(24):
        labels = {f"k{i % 5}": f"v{i % 3}", "zone": f"z{i % 4}", "region": "eu"}
        h.inputs(cluster(f"cl-{(i * 7) % 24:02}", cpu=16_000, labels=labels, taints=[taint] if i % 3 else []))
    h.step()
    for n in range(120):
        selector = {f"k{n % 5}": f"v{n % 3}"} if n % 4 == 0 else {}
        placement = ev.Placement(cluster_selector=selector, nominate=1 + n % 3)
        h.inputs(job(f"j{n:03}", cpu=2_000 + 1_000 * (n % 5), priority=n % 4 * 10, placement=placement))
        if n % 10 == 9:
            for d in h.step():
                if isinstance(d, ev.Nominated):
                    h.inputs(ev.RemoteAdmitted(job=d.job, cluster=d.clusters[-1], attempt=d.attempt))
            h.step()
    h.silent.add("cl-03")
    h.advance(61_000)
    h.inputs(job("boss", cpu=16_000, priority=1_000))
    h.step()
    for j in sorted((j for j in h.state.jobs.values() if j.phase == "Placed"), key=lambda j: j.key)[:5]:
        h.inputs(ev.RemoteFinished(job=j.ref, cluster=j.cluster or "", attempt=j.attempt))
    h.step()
    return h


def digest() -> str:
    h = tie_heavy_world()
    sha = hashlib.sha256()
    for entry in h.log:
        sha.update(codec.encode(entry))
    return sha.hexdigest()


def _digest_under(seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
    code = "from tests.reconciler.core.test_determinism import digest; print(digest())"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_same_decisions_under_different_hash_seeds() -> None:
    here = digest()
    assert _digest_under("1") == here
    assert _digest_under("4242") == here


def test_the_tie_heavy_world_really_decides_things() -> None:
    h = tie_heavy_world()
    kinds = {type(e.event).__name__ for e in h.log if e.batch}
    assert {"Nominated", "Placed", "ClusterLost", "Requeued", "PreemptionClaimed", "Finished"} <= kinds
