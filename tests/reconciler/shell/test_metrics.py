"""``/metrics`` after a scripted scenario through the real leader loop, checked against the log.

Every figure the reconciler exports is derived from the log: counters from the decisions the
leader appended, gauges from the state it folded. So each is compared here with what the log
itself says (entries counted, the state replayed from it), up to the log sequence the scrape
reports (``kdispatch_log_last_seq``): the loop may append a Tick after the scenario settles.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from reconciler import core
from reconciler.core import phases
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready
from reconciler.service.metrics import (
    FleetGauges,
    ReconcilerMetrics,
    base_units,
    fleet_families,
    start_metrics_server,
)

from .scenario import GPU, POLICY, admit, decisions_of, publish_clusters, read_all, submission, wait_for

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _ref(name: str) -> ev.JobRef:
    return ev.JobRef(namespace="team-a", name=name, uid=f"u-{name}")


def _west(name: str, priority: int) -> ev.JobSubmitted:
    """A job that needs all of west's 4 GPUs."""
    return ev.JobSubmitted(
        job=_ref(name),
        pod_sets=[ev.PodSet(name="main", count=1, requests={"cpu": 2000, GPU: 4})],
        placement=ev.Placement(cluster_selector={"region": "west"}),
        priority=priority,
    )


async def _scenario(jlog: JetStreamLog) -> None:
    """Placements on east and west, a preemption on west (the victim requeued), a job that fits
    nowhere, and a cluster that goes silent and is declared lost."""
    await publish_clusters(jlog)
    flaky = ev.ClusterRegistered(
        cluster="flaky", labels={"region": "north"}, capacity={"cpu": 1000}, worker_lost_timeout_ms=200
    )
    await jlog.inbox.publish(flaky, msg_id="register/flaky")
    await jlog.inbox.publish(ev.ClusterHeartbeat(cluster="flaky"), msg_id="hb/flaky/0")
    for s in (submission(0, gpus=6), submission(1, region="east"), submission(2, region="east"), _west("low", 10)):
        await jlog.inbox.publish(s, msg_id=f"submit/{s.job.uid}")
    entries = await wait_for(jlog, lambda es: len(decisions_of(es, ev.Nominated)) >= 4)
    for e in decisions_of(entries, ev.Nominated):
        assert isinstance(e.event, ev.Nominated)
        await admit(jlog, e.event, cluster=e.event.clusters[0])
    await wait_for(jlog, lambda es: len(decisions_of(es, ev.Placed)) >= 4)

    await jlog.inbox.publish(_west("high", 100), msg_id="submit/high")
    entries = await wait_for(jlog, lambda es: bool(decisions_of(es, ev.Evict)))
    evict = decisions_of(entries, ev.Evict)[0].event
    assert isinstance(evict, ev.Evict) and evict.job.name == "low"
    gone = ev.RemoteEvicted(job=evict.job, cluster="west", attempt=evict.attempt, reason="Preempted")
    await jlog.inbox.publish(gone, msg_id="evicted/low")
    entries = await wait_for(
        jlog, lambda es: any(isinstance(e.event, ev.Nominated) and e.event.job.name == "high" for e in es)
    )
    high = next(e.event for e in entries if isinstance(e.event, ev.Nominated) and e.event.job.name == "high")
    await admit(jlog, high, cluster="west")

    huge = ev.JobSubmitted(job=_ref("huge"), pod_sets=[ev.PodSet(name="main", count=16, requests={GPU: 4})])
    await jlog.inbox.publish(huge, msg_id="submit/huge")
    await wait_for(
        jlog,
        lambda es: len(decisions_of(es, ev.Placed)) >= 5
        and any(isinstance(e.event, ev.Unschedulable) and e.event.job.name == "huge" for e in es)
        and bool(decisions_of(es, ev.ClusterLost)),
    )


async def _scrape(port: int) -> tuple[Samples, set[str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as resp,
    ):
        assert resp.status == 200
        text = await resp.text()
    samples: Samples = {}
    families = set()
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, families


def _of(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def _series(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in samples.items() if n == name}


async def test_metrics_after_a_scenario_agree_with_the_log(jslog: JetStreamLog) -> None:
    metrics = ReconcilerMetrics(fleet_refresh_s=0)  # every scrape computes the fleet gauges afresh
    loop = LeaderLoop(jslog, LoopSettings(leader_id="A", policy=POLICY, idle_wait_s=0.02), metrics=metrics)
    runner = await start_metrics_server(metrics, host="127.0.0.1", port=0)
    port = runner.addresses[0][1]
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    try:
        await wait_ready(loop, timeout_s=20)
        await _scenario(jslog)
        samples, _ = await _scrape(port)
    finally:
        stop.set()
        assert await term == "stopped"
    try:
        await _check(samples, jslog)
        # Once this replica no longer leads, its state is stale: the fleet gauges are still
        # declared (dashboards and alerts find them) but carry no samples; counters stay.
        after, families = await _scrape(port)
        assert {"kdispatch_queue_pending_jobs", "kdispatch_cluster_health"} <= families
        assert not _series(after, "kdispatch_cluster_health") and not _series(after, "kdispatch_queue_pending_jobs")
        assert _of(after, "kdispatch_decisions_total", type="Placed") == _of(samples, "kdispatch_decisions_total", type="Placed")
    finally:
        await runner.cleanup()


async def _check(samples: Samples, jlog: JetStreamLog) -> None:
    last_seq = _of(samples, "kdispatch_log_last_seq")
    assert last_seq is not None and _of(samples, "kdispatch_fleet_seq") == last_seq
    entries = [e for e in await read_all(jlog) if e.seq <= last_seq]
    state = core.new_state()
    for entry in entries:
        state = core.fold(state, entry)
    summary = core.summary(state)

    # Counters: one per entry the leader appended, by type (it appended the whole log).
    kinds = Counter(type(e.event).__name__ for e in entries)
    decided = {k: n for k, n in kinds.items() if any(t.__name__ == k for t in ev.DECISION_TYPES)}
    assert {dict(k)["type"]: v for k, v in _series(samples, "kdispatch_decisions_total").items()} == decided
    inputs = {k: n for k, n in kinds.items() if k not in decided}
    assert {dict(k)["type"]: v for k, v in _series(samples, "kdispatch_inputs_total").items()} == inputs
    assert {"Placed", "Evict", "Requeued", "Unschedulable", "ClusterLost"} <= set(decided)

    # Submit -> placement, one observation per Placed, in seconds of sequencing time.
    submitted: dict[str, int] = {}
    waits: list[float] = []
    for e in entries:
        if isinstance(e.event, ev.JobSubmitted):
            submitted[e.event.job.key] = e.at_ms
        elif isinstance(e.event, ev.Placed):
            waits.append((e.at_ms - submitted[e.event.job.key]) / 1000)
    assert _of(samples, "kdispatch_job_wait_seconds_count", cluster_queue="default") == len(waits) == 5
    assert abs((_of(samples, "kdispatch_job_wait_seconds_sum", cluster_queue="default") or 0) - sum(waits)) < 1e-6
    assert _of(samples, "kdispatch_job_wait_seconds_bucket", cluster_queue="default", le="+Inf") == len(waits)

    evicts = [e.event for e in entries if isinstance(e.event, ev.Evict)]
    assert _of(samples, "kdispatch_preemptions_total", reason="Preempted") == len(evicts) == 1
    requeues = Counter(e.event.reason for e in entries if isinstance(e.event, ev.Requeued))
    assert {dict(k)["reason"]: v for k, v in _series(samples, "kdispatch_requeues_total").items()} == requeues

    # Gauges: the state replayed from the log.
    jobs = summary["jobs"].values()
    pending = sum(1 for j in jobs if j["phase"] in phases.WAITING)
    admitted = [j for j in jobs if j["phase"] in (phases.NOMINATED, phases.PLACED)]
    assert _series(samples, "kdispatch_queue_pending_jobs") == {(("cluster_queue", "default"),): pending}
    assert pending == 2  # low (its cluster is taken) and huge (fits nowhere)
    assert _of(samples, "kdispatch_queue_admitted_jobs", cluster_queue="default") == len(admitted) == 4
    gpus = sum(state.jobs[k].demand.get(GPU, 0) for k, j in summary["jobs"].items() if j in admitted)
    assert _of(samples, "kdispatch_queue_resource_usage", cluster_queue="default", resource=GPU) == gpus
    assert _of(samples, "kdispatch_queue_resource_usage", cluster_queue="default", resource="cpu") == 3 * 1 + 2  # cores: job-0..2 and high
    assert not _series(samples, "kdispatch_queue_nominal_quota")  # no queues configured: no quota
    for name, cluster in summary["clusters"].items():
        for health in ("Ready", "Lost", "Removed"):
            want = 1.0 if cluster["health"] == health else 0.0
            assert _of(samples, "kdispatch_cluster_health", cluster=name, state=health) == want, (name, health)
        for resource, amount in cluster["capacity"].items():
            assert _of(samples, "kdispatch_cluster_capacity", cluster=name, resource=resource) == base_units(resource, amount)
        for resource in cluster["capacity"]:
            used = max(cluster["reported"].get(resource, 0), cluster["assumed"].get(resource, 0))
            assert _of(samples, "kdispatch_cluster_usage", cluster=name, resource=resource) == base_units(resource, used)
        placed = sum(1 for k in cluster["jobs"] if summary["jobs"][k]["phase"] == phases.PLACED)
        assert _of(samples, "kdispatch_cluster_placed_jobs", cluster=name) == placed
    assert summary["clusters"]["flaky"]["health"] == "Lost" and summary["clusters"]["east"]["health"] == "Ready"
    assert _of(samples, "kdispatch_cluster_capacity", cluster="east", resource="cpu") == 64.0
    assert _of(samples, "kdispatch_cluster_usage", cluster="west", resource=GPU) == 4.0
    # No job's name is a label value anywhere.
    names = {j.name for j in (e.event.job for e in entries if isinstance(e.event, ev.JobSubmitted))}
    values: set[Any] = {v for (_, labels) in samples for _, v in labels}
    assert not names & values


def _folded(*events: ev.Event) -> core.State:
    state = core.new_state()
    for seq, event in enumerate(events, start=1):
        state = core.fold(state, ev.LogEntry(seq=seq, at_ms=1_000 * seq, event=event))  # type: ignore[arg-type]
    return state


def _samples(families: list[Any]) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_per_queue_figures_the_core_reports_are_used_as_given(monkeypatch: Any) -> None:
    """With queues configured the core's summary carries per-ClusterQueue figures (``queues``,
    usage and quota per "flavor/resource"); the gauges sum them per resource, in base units.
    tests/reconciler/shell/test_tenancy_views.py reads them from a real tenancy log."""
    state = _folded(*CLUSTERS_AND_A_JOB)
    plain = core.summary
    facts = {
        "team-a": {
            "pending": 3,
            "admitted": 1,
            "usage": {f"a100/{GPU}": 2, "a100/cpu": 4000, f"h100/{GPU}": 1},
            "nominal": {"a100/cpu": 8000, f"a100/{GPU}": 4},
            "weighted_share": 0.5,
        },
        "team-b": {"pending": 0, "admitted": 0, "weighted_share": None},
    }
    asked: list[bool] = []

    def with_facts(s: core.State, *, jobs: bool = True) -> dict[str, Any]:
        asked.append(jobs)
        return {**plain(s, jobs=jobs), "queues": facts}

    monkeypatch.setattr(core, "summary", with_facts)
    got = _samples(fleet_families(state))
    assert got[("kdispatch_queue_pending_jobs", (("cluster_queue", "team-a"),))] == 3
    assert got[("kdispatch_queue_resource_usage", (("cluster_queue", "team-a"), ("resource", GPU)))] == 3
    assert got[("kdispatch_queue_resource_usage", (("cluster_queue", "team-a"), ("resource", "cpu")))] == 4.0
    assert got[("kdispatch_queue_nominal_quota", (("cluster_queue", "team-a"), ("resource", "cpu")))] == 8.0
    assert got[("kdispatch_queue_fair_share", (("cluster_queue", "team-a"),))] == 0.5
    assert got[("kdispatch_queue_admitted_jobs", (("cluster_queue", "team-b"),))] == 0
    assert ("kdispatch_queue_fair_share", (("cluster_queue", "team-b"),)) not in got  # weight 0: no share
    # The job of a log without tenancy is in the default queue, counted from the state.
    assert got[("kdispatch_queue_pending_jobs", (("cluster_queue", "default"),))] == 1
    # A scrape never builds the summary's per-job section (about a kB per job at fleet size).
    assert asked == [False]


def test_fleet_gauges_are_computed_at_most_once_per_refresh_interval() -> None:
    state = _folded(*CLUSTERS_AND_A_JOB)
    now = [0.0]
    fleet = FleetGauges(refresh_s=15, clock=lambda: now[0])
    fleet.follow(lambda: state)
    first = _samples(list(fleet.collect()))
    assert first[("kdispatch_fleet_seq", ())] == len(CLUSTERS_AND_A_JOB)
    state = core.fold(state, ev.LogEntry(seq=99, at_ms=99_000, event=ev.JobDeleted(job=submission(0).job)))
    now[0] = 14.9
    assert _samples(list(fleet.collect())) == first  # the same figures until the interval is over
    now[0] = 15.0
    again = _samples(list(fleet.collect()))
    assert again[("kdispatch_fleet_seq", ())] == 99
    assert again[("kdispatch_queue_pending_jobs", (("cluster_queue", "default"),))] == 0
    fleet.follow(lambda: None)  # not leading: declared, no samples
    assert _samples(list(fleet.collect())) == {}


CLUSTERS_AND_A_JOB: tuple[ev.Event, ...] = (
    ev.ClusterRegistered(cluster="east", capacity={"cpu": 64_000, GPU: 8}),
    ev.ClusterHeartbeat(cluster="east"),
    submission(0, gpus=16),  # fits nowhere: waits
)
