"""What users see of the queues on a log with tenancy (deploy/examples/three-teams.yaml): the
``kdispatch status`` queue table, ``kdispatch explain`` for a job waiting on its quota, the
per-ClusterQueue gauges, and the Events' queue and position."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from eventlog import events as ev
from eventlog.jsonl import export
from eventlog.kube.kueue import load_queues
from eventlog.memory import MemoryLog
from reconciler import core
from reconciler.service.clusters.jobview import JobView
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready
from reconciler.service.metrics import fleet_families
from tests.paths import REPO
from tests.waiting import eventually

from .scenario import CLUSTERS, POLICY

EXAMPLE = REPO / "deploy" / "examples" / "three-teams.yaml"
CORES = 1000


def _job(ns: str, name: str, cpu: int) -> ev.JobSubmitted:
    return ev.JobSubmitted(
        job=ev.JobRef(namespace=ns, name=name, uid=f"uid-{ns}-{name}"),
        pod_sets=[ev.PodSet(name="main", count=1, requests={"cpu": cpu * CORES})],
    )


# research: nominal 48 cores, may borrow 32 more (80 at most): two jobs of 32 run, the third
# waits on its borrowing limit; product runs one of 8 within its quota.
JOBS = [_job("research", f"r-{i}", 32) for i in range(3)] + [_job("product", "p-0", 8)]


@pytest.fixture(scope="module")
def tenancy_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, core.State, list[ev.LogEntry]]:
    """A leader (in memory) with the three teams' queues has decided on ``JOBS``: the log as a
    file, the leader's state and the entries."""
    path = tmp_path_factory.mktemp("tenancy") / "log.jsonl"

    async def record() -> tuple[core.State, list[ev.LogEntry]]:
        log = MemoryLog()
        loop = LeaderLoop(
            log, LoopSettings(leader_id="t", policy=POLICY, queues=load_queues(EXAMPLE), idle_wait_s=0.01)
        )
        stop = asyncio.Event()
        term = asyncio.create_task(loop.run_term(stop=stop))
        try:
            await wait_ready(loop, timeout_s=20)
            for event in [*CLUSTERS, *JOBS]:
                await log.inbox.publish(event)

            def decided() -> bool:
                state = loop.state
                return state is not None and all(
                    (j := state.jobs.get(s.job.key)) is not None and j.phase != "Queued" for s in JOBS
                )

            await eventually(decided, timeout_s=30, what="the leader to decide on every job")
            state = loop.state
            assert state is not None
        finally:
            stop.set()
            await term
        await export(log.reader, path)
        entries = [e async for batch in log.reader.read(from_seq=1) for e in batch]
        return state, entries

    state, entries = asyncio.run(record())
    return path, state, entries


def kd(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *argv, "--quiet"], capture_output=True, text=True, timeout=120
    )


def test_status_shows_each_cluster_queue_with_usage_against_quota_share_and_weight(
    tenancy_log: tuple[Path, core.State, list[ev.LogEntry]],
) -> None:
    path = tenancy_log[0]
    doc = json.loads(kd("status", "--file", str(path), "-o", "json").stdout)
    rows = {q["name"]: q for q in doc["queues"]}
    assert sorted(rows) == ["ci", "product", "research"]
    research = rows["research"]
    assert (research["pending"], research["admitted"]) == (1, 2)
    assert research["usage"]["default/cpu"] == 64 * CORES and research["quota"]["default/cpu"] == 48 * CORES
    assert research["weight"] == 2 and research["cohort"] == "engineering"
    assert research["fair_share"] == pytest.approx(research["facts"]["share"] / 2)
    assert (rows["ci"]["pending"], rows["ci"]["admitted"]) == (0, 0)
    table = kd("status", "--file", str(path))
    assert table.returncode == 0, table.stderr
    header = table.stdout.splitlines()[2].split()
    assert header[-2:] == ["COHORT", "WEIGHT"]
    line = next(ln for ln in table.stdout.splitlines() if ln.startswith("research "))
    assert "default/cpu 64/48" in line and line.split()[-2:] == ["engineering", "2"]
    queue = json.loads(kd("queue", "research", "--file", str(path), "-o", "json").stdout)
    assert [(j["name"], j["queue"], j["position"]) for j in queue["items"]] == [("r-2", "research", 1)]


def test_explain_says_why_a_job_waits_in_queue_terms(tenancy_log: tuple[Path, core.State, list[ev.LogEntry]]) -> None:
    path = tenancy_log[0]
    text = kd("explain", "research/r-2", "--file", str(path))
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert "queue: ClusterQueue research (cohort engineering, weight 2, BestEffortFIFO), position 1 in its queue" in out
    assert "default/cpu: 64 used of 48 nominal (16 borrowed)" in out
    assert "waits: " in out and "borrowing" in out.split("waits: ", 1)[1], out
    doc = json.loads(kd("explain", "research/r-2", "--file", str(path), "--json").stdout)
    queue = doc["now"]["queue"]
    assert queue["cluster_queue"] == "research" and queue["position"] == 1 and queue["reason"]
    cpu = next(u for u in queue["usage"] if u["resource"] == "cpu")
    assert (cpu["used"], cpu["nominal"], cpu["borrowed"]) == (64 * CORES, 48 * CORES, 16 * CORES)


def test_the_queue_gauges_read_the_cores_figures(tenancy_log: tuple[Path, core.State, list[ev.LogEntry]]) -> None:
    state = tenancy_log[1]
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in fleet_families(state) for s in f.samples}
    research = (("cluster_queue", "research"),)
    assert got[("kdispatch_queue_pending_jobs", research)] == 1
    assert got[("kdispatch_queue_admitted_jobs", research)] == 2
    assert got[("kdispatch_queue_resource_usage", (*research, ("resource", "cpu")))] == 64.0  # cores
    assert got[("kdispatch_queue_nominal_quota", (*research, ("resource", "cpu")))] == 48.0
    share = core.summary(state)["queues"]["research"]["weighted_share"]
    assert got[("kdispatch_queue_fair_share", research)] == pytest.approx(share) and share > 0
    assert ("kdispatch_queue_pending_jobs", (("cluster_queue", "default"),)) not in got


def test_events_name_the_cluster_queue_and_local_queue(tenancy_log: tuple[Path, core.State, list[ev.LogEntry]]) -> None:
    view = JobView()
    for entry in tenancy_log[2]:
        view.fold(entry)
    waiting = view.jobs["uid-research-r-2"]
    assert waiting.queue == "research" and view.position("uid-research-r-2") == 1
    notes = [s.occurrence.note for s in view.series_of("uid-research-r-2")]
    assert "queued in ClusterQueue research (LocalQueue research/default) at position 3" in notes, notes
