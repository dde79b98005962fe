"""A draining cluster (the kdispatch.io/draining taint a deleted WorkerCluster gets, docs/clusters.md)
through the event API: nothing new goes there, whatever the job tolerates; NoSchedule leaves what
runs there alone, NoExecute withdraws it."""

from __future__ import annotations

from eventlog import events as ev
from eventlog.kube.names import DRAINING_TAINT
from tests.reconciler.core.harness import Harness, cluster, job, of_type, ref

EVERYTHING = ev.Placement(cluster_tolerations=[ev.Toleration(operator="Exists")])


def place(h: Harness, name: str, **kw: object) -> str:
    [nominated] = of_type(h.feed(job(name, **kw)), ev.Nominated)  # type: ignore[arg-type]
    where = nominated.clusters[0]
    h.feed(ev.RemoteAdmitted(job=ref(name), cluster=where, attempt=nominated.attempt))
    return where


def drain(effect: str) -> ev.ClusterUpdated:
    taint = ev.Taint(key=DRAINING_TAINT, effect=effect)  # type: ignore[arg-type]
    return ev.ClusterUpdated(cluster="a", capacity={"cpu": 100_000, "memory": 256 << 30}, taints=[taint])


def test_leave_keeps_running_jobs_and_places_nothing_new_even_for_a_job_tolerating_everything() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=100_000), cluster("b", cpu=4_000))
    assert place(h, "running") == "a"  # the roomier
    assert [d for d in h.feed(drain("NoSchedule")) if getattr(d, "job", None) == ref("running")] == []
    [nominated] = of_type(h.feed(job("tolerant", placement=EVERYTHING)), ev.Nominated)
    assert nominated.clusters == ["b"]
    [unschedulable] = of_type(h.feed(job("big", cpu=50_000)), ev.Unschedulable)
    assert "cluster draining" in unschedulable.message
    assert h.state.jobs["team/running"].cluster == "a"


def test_withdraw_moves_running_jobs_elsewhere_even_when_they_tolerate_everything() -> None:
    h = Harness()
    h.inputs(cluster("a", cpu=100_000), cluster("b", cpu=4_000))
    assert place(h, "running", placement=EVERYTHING) == "a"
    decisions = h.feed(drain("NoExecute"))
    assert [(type(d).__name__, getattr(d, "cluster", None)) for d in decisions if hasattr(d, "job")][:3] == [
        ("Withdrawn", "a"),
        ("Requeued", "a"),
        ("Nominated", None),
    ]
    [nominated] = of_type(decisions, ev.Nominated)
    assert nominated.clusters == ["b"] and nominated.attempt == 2
