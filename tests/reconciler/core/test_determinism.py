"""Results must not depend on PYTHONHASHSEED (the same world in two interpreters) nor on other
states built in the same process (replay, what-if and simulate build several)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path

from eventlog import codec
from eventlog import events as ev
from tests.reconciler.core.harness import Harness, cluster, job

ROOT = Path(__file__).resolve().parents[3]


def _code_fingerprint() -> str:
    """The code the worlds run, as this interpreter found it on disk when it imported this
    module. A full run takes minutes: a merge landing meanwhile hands the subprocesses other
    code than the one this process loaded, which must not pass for a determinism bug."""
    sha = hashlib.sha256()
    for path in sorted(
        [
            *ROOT.glob("eventlog/**/*.py"),
            *ROOT.glob("reconciler/core/**/*.py"),
            *Path(__file__).parent.glob("*.py"),
        ]
    ):
        sha.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return sha.hexdigest()


CODE = _code_fingerprint()


def tie_heavy_steps(h: Harness, *, cpu: int = 16_000, shift: int = 0) -> Iterator[None]:
    """Identical clusters (every score ties), many labels and taints, preemption, loss; pauses
    after every decide pass. ``cpu`` and ``shift`` (labels and taints move by it) make another
    world with the same cluster names, job names and job specs."""
    taint = ev.Taint(key="pool", value="spot", effect="PreferNoSchedule")
    for i in range(24):
        k = i + shift
        labels = {f"k{k % 5}": f"v{k % 3}", "zone": f"z{k % 4}", "region": "eu"}
        h.inputs(cluster(f"cl-{(i * 7) % 24:02}", cpu=cpu, labels=labels, taints=[taint] if k % 3 else []))
    h.step()
    yield
    for n in range(120):
        selector = {f"k{n % 5}": f"v{n % 3}"} if n % 4 == 0 else {}
        placement = ev.Placement(cluster_selector=selector, nominate=1 + n % 3)
        h.inputs(job(f"j{n:03}", cpu=2_000 + 1_000 * (n % 5), priority=n % 4 * 10, placement=placement))
        if n % 10 == 9:
            for d in h.step():
                if isinstance(d, ev.Nominated):
                    h.inputs(ev.RemoteAdmitted(job=d.job, cluster=d.clusters[-1], attempt=d.attempt))
            yield
            h.step()
            yield
    h.silent.add("cl-03")
    h.advance(61_000)
    yield
    h.inputs(job("boss", cpu=cpu, priority=1_000))
    h.step()
    yield
    for j in sorted((j for j in h.state.jobs.values() if j.phase == "Placed"), key=lambda j: j.key)[:5]:
        h.inputs(ev.RemoteFinished(job=j.ref, cluster=j.cluster or "", attempt=j.attempt))
    h.step()
    yield


def other_steps(h: Harness) -> Iterator[None]:
    """Another world with the same cluster names, job names and job specs: other labels,
    taints and sizes, so other clusters pass the same static filters."""
    return tie_heavy_steps(h, cpu=12_000, shift=2)


WORLDS = {"tie_heavy": tie_heavy_steps, "other": other_steps}


def tie_heavy_world() -> Harness:
    h = Harness()
    for _ in tie_heavy_steps(h):
        pass
    return h


def log_digest(h: Harness) -> str:
    sha = hashlib.sha256()
    for entry in h.log:
        sha.update(codec.encode(entry))
    return sha.hexdigest()


def digest(world: str = "tie_heavy") -> str:
    h = Harness()
    for _ in WORLDS[world](h):
        pass
    return log_digest(h)


def _digest_under(seed: str | None, world: str = "tie_heavy") -> str:
    """The digest computed by a fresh interpreter: nothing this process did can reach it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if seed is not None:
        env["PYTHONHASHSEED"] = seed
    code = f"from tests.reconciler.core.test_determinism import CODE, digest; print(CODE, digest({world!r}))"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    code_there, result = out.stdout.split()
    assert code_there == CODE, "eventlog/ or reconciler/core/ changed on disk during this run: compare again"
    return result


def test_same_decisions_under_different_hash_seeds() -> None:
    here = digest()
    assert _digest_under("1") == here
    assert _digest_under("4242") == here


def test_the_tie_heavy_world_really_decides_things() -> None:
    h = tie_heavy_world()
    kinds = {type(e.event).__name__ for e in h.log if e.batch}
    assert {"Nominated", "Placed", "ClusterLost", "Requeued", "PreemptionClaimed", "Finished"} <= kinds


def test_two_states_in_one_process_do_not_share_anything() -> None:
    """Replay, what-if and simulate build several states in one process. A state built before
    this one, and another built at the same time, with the same policy, cluster and job names
    and job specs, and cluster tables whose versions count up alike but hold other clusters,
    must not change a single decision of this one (nor it of them). Compared with what fresh
    interpreters decide: a cache shared across states would spoil any in-process baseline."""
    first = Harness()
    for _ in other_steps(first):
        pass
    here, other = Harness(), Harness()
    for _ in zip_longest(other_steps(other), tie_heavy_steps(here)):
        pass

    fresh_here, fresh_other = _digest_under(None), _digest_under(None, "other")
    assert fresh_here != fresh_other  # the worlds differ
    assert log_digest(here) == fresh_here
    assert log_digest(first) == log_digest(other) == fresh_other
