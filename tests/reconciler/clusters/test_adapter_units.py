"""The adapter's pure pieces: manifests, facts, quantities, usage, backfill, RBAC, the projection."""

from __future__ import annotations

from typing import Any

import pytest

from eventlog import events as ev
from eventlog.kube.kinds import lookup_api_version
from eventlog.kube.quantity import to_units
from reconciler.core.state import RETIRE_DELETED_AFTER_MS
from reconciler.service.clusters import rbac
from reconciler.service.clusters.backfill import NotBackfillable, placement_of, submission_of
from reconciler.service.clusters.base import RemoteSpec, fact_id, remote_fact_id
from reconciler.service.clusters.desired import Desired, Intent
from reconciler.service.clusters.remote import Origin, PermanentFailure, job_facts, origin_of, remote_manifest
from reconciler.service.clusters.usage import from_cluster_queues, from_nodes_and_pods
from tests.reconciler.clusters.conftest import batch_job
from webhook import placement as webhook_placement

REF = ev.JobRef(namespace="ml", name="bert", uid="u-1", api_version="kubeflow.org/v1", kind="PyTorchJob")


def pytorch_job() -> dict[str, object]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "bert", "namespace": "ml", "uid": "u-1", "resourceVersion": "9"},
        "spec": {
            "runPolicy": {"suspend": True, "managedBy": "kueue.x-k8s.io/multikueue"},
            "pytorchReplicaSpecs": {},
        },
        "status": {"conditions": []},
    }


def test_remote_manifest_of_a_kubeflow_job_clears_run_policy_managed_by() -> None:
    kind = lookup_api_version("kubeflow.org/v1", "PyTorchJob")
    assert kind is not None
    spec = RemoteSpec(job=REF, cluster="w1", attempt=3, manifest=pytorch_job())
    body = remote_manifest(spec, kind=kind, manager_id="m", kueue=False)
    assert body["spec"]["runPolicy"] == {"suspend": False}
    assert "status" not in body
    assert body["metadata"] == {
        "name": "bert",
        "namespace": "ml",
        "labels": {"kdispatch.io/origin": "m", "kdispatch.io/job-uid": "u-1", "kdispatch.io/attempt": "3"},
    }
    origin = origin_of({**body, "metadata": {**body["metadata"], "uid": "remote"}}, manager_id="m")
    assert origin is not None and origin.job == REF and origin.attempt == 3
    assert origin_of(body, manager_id="another-manager") is None


def test_no_manifest_is_a_permanent_failure() -> None:
    kind = lookup_api_version("batch/v1", "Job")
    assert kind is not None
    with pytest.raises(PermanentFailure, match="no manifest"):
        remote_manifest(RemoteSpec(job=REF, cluster="w", attempt=1), kind=kind, manager_id="m", kueue=True)


def test_job_facts_failed_job() -> None:
    kind = lookup_api_version("batch/v1", "Job")
    assert kind is not None
    body = remote_manifest(
        RemoteSpec(
            job=ev.JobRef(namespace="team-a", name="x", uid="u"),
            cluster="w",
            attempt=1,
            manifest=batch_job("x"),
        ),
        kind=kind,
        manager_id="m",
        kueue=False,
    )
    body["status"] = {
        "startTime": "t",
        "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}],
    }
    origin = origin_of(body, manager_id="m")
    assert origin is not None
    facts = job_facts(body, origin, cluster="w", kueue=False)
    assert [type(f).__name__ for f in facts] == ["RemoteCreated", "RemoteAdmitted", "RemoteFinished"]
    assert isinstance(facts[2], ev.RemoteFinished) and not facts[2].succeeded
    assert facts[2].reason == "BackoffLimitExceeded"
    assert [remote_fact_id(f) for f in facts] == ["w/u/1/created", "w/u/1/admitted", "w/u/1/finished"]
    assert fact_id(cluster="w", job_uid="u", attempt=1, fact="gone") == "w/u/1/gone"


@pytest.mark.parametrize(
    ("resource", "value", "expected"),
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", 3, 3000),
        ("memory", "1Gi", 2**30),
        ("memory", "1.5k", 1500),
        ("nvidia.com/gpu", 8, 8),
        ("cpu", "0.1m", 1),
    ],
)
def test_quantities(resource: str, value: object, expected: int) -> None:
    assert to_units(resource, value) == expected


def test_quantity_errors_name_the_resource() -> None:
    with pytest.raises(ValueError, match="memory: 'lots'"):
        to_units("memory", "lots")


def test_usage_from_nodes_and_pods() -> None:
    nodes = [
        {"status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}}},
        {"spec": {"unschedulable": True}, "status": {"allocatable": {"cpu": "8"}}},
    ]
    pod = {
        "spec": {
            "nodeName": "n1",
            "containers": [
                {"resources": {"requests": {"cpu": "500m"}, "limits": {"nvidia.com/gpu": "1"}}},
                {"resources": {"requests": {"cpu": "250m"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
            "overhead": {"cpu": "100m"},
        },
        "status": {"phase": "Running"},
    }
    done = {**pod, "status": {"phase": "Succeeded"}}
    pending = {**pod, "spec": {**pod["spec"], "nodeName": ""}}  # type: ignore[dict-item]
    capacity, usage = from_nodes_and_pods(nodes, [pod, done, pending])
    assert capacity == {"cpu": 8000, "memory": 32 * 2**30, "nvidia.com/gpu": 4}
    assert usage == {"cpu": 2100, "nvidia.com/gpu": 1}  # max(750, init 2000) + overhead 100


def test_usage_from_cluster_queues_sums_flavors() -> None:
    cq = {
        "spec": {
            "resourceGroups": [
                {
                    "flavors": [
                        {"name": "a", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]},
                        {"name": "b", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "4"}]},
                    ]
                }
            ]
        },
        "status": {"flavorsUsage": [{"name": "a", "resources": [{"name": "nvidia.com/gpu", "total": "3"}]}]},
    }
    assert from_cluster_queues([cq, cq]) == ({"nvidia.com/gpu": 16}, {"nvidia.com/gpu": 6})


def test_backfill_reads_the_webhook_canonical_placement_back() -> None:
    placement = ev.Placement(
        cluster_selector={"region": "eu"},
        cluster_affinity=ev.ClusterAffinity(
            required=[
                ev.SelectorTerm(
                    match_expressions=[ev.MatchExpression(key="gpu", operator="In", values=["a100"])]
                )
            ],
            preferred=[
                ev.WeightedTerm(
                    weight=30,
                    term=ev.SelectorTerm(
                        match_expressions=[ev.MatchExpression(key="tier", operator="Exists")]
                    ),
                )
            ],
        ),
        cluster_tolerations=[
            ev.Toleration(key="spot", operator="Exists", effect="NoSchedule", toleration_seconds=60)
        ],
        dispatch_mode="BestEffort",
        nominate=2,
        cluster_names=["w1", "w2"],
        preemption_policy="Never",
    )
    assert placement_of(webhook_placement.canonical_json(placement)) == placement


def test_backfill_of_any_kind_reads_the_pod_sets_and_priority_the_webhook_wrote() -> None:
    kind = lookup_api_version("kubeflow.org/v1", "PyTorchJob")
    assert kind is not None
    obj = pytorch_job()
    obj["metadata"] = {**obj["metadata"], "annotations": {"kdispatch.io/placement": "{}"}}  # type: ignore[dict-item]
    with pytest.raises(
        NotBackfillable, match=r"no kdispatch\.io/pod-sets annotation.*update the object once"
    ):
        submission_of(obj, kind)
    obj["metadata"]["annotations"].update(  # type: ignore[index]
        {
            "kdispatch.io/pod-sets": '[{"count":1,"name":"master","requests":{"cpu":2000}},'
            '{"count":3,"minCount":2,"name":"worker","requests":{"nvidia.com/gpu":1}}]',
            "kdispatch.io/priority": '{"class":"high","value":1000}',
        }
    )
    submitted = submission_of(obj, kind)
    assert submitted.pod_sets == [
        ev.PodSet(name="master", count=1, requests={"cpu": 2000}),
        ev.PodSet(name="worker", count=3, requests={"nvidia.com/gpu": 1}, min_count=2),
    ]
    assert (submitted.priority_class, submitted.priority) == ("high", 1000)
    assert submitted.suspended is False  # held by kdispatch (managedBy), not suspended by its user
    assert submitted.source == "watch" and submitted.manifest is not None
    assert "status" not in submitted.manifest


def test_every_adapter_call_is_listed_and_unlisted_calls_fail() -> None:
    rbac.check("worker", "batch", "jobs", "create")
    rbac.check("manager", "batch", "jobs/status", "patch")
    with pytest.raises(rbac.UnlistedApiCall, match="worker patch batch/jobs/status"):
        rbac.check("worker", "batch", "jobs/status", "patch")
    with pytest.raises(rbac.UnlistedApiCall):
        rbac.check("manager", "batch", "jobs", "delete")  # kdispatch never deletes user jobs


def entry(seq: int, event: ev.AnyEvent, *, at_ms: int | None = None) -> ev.LogEntry:
    return ev.LogEntry(seq=seq, at_ms=seq if at_ms is None else at_ms, event=event)


def test_projection_intents_are_levels_and_gone_is_final() -> None:
    d = Desired()
    job = ev.JobRef(namespace="a", name="b", uid="u")
    assert d.fold(entry(1, ev.Nominated(job=job, clusters=["w1", "w2"], attempt=1))) == [
        ("u", "w1", 1),
        ("u", "w2", 1),
    ]
    assert d.fold(entry(2, ev.Nominated(job=job, clusters=["w1"], attempt=1))) == []  # no change
    assert d.fold(entry(3, ev.Withdrawn(job=job, cluster="w2", attempt=1))) == [("u", "w2", 1)]
    assert d.fold(entry(4, ev.Nominated(job=job, clusters=["w2"], attempt=1))) == []  # never back
    d.fold(entry(5, ev.Finished(job=job, cluster="w1", attempt=1)))
    assert d.intent(("u", "w1", 1)) is Intent.FINISHED and d.wanted("u", "w1", 1)
    d.fold(entry(6, ev.Nominated(job=job, clusters=["w3"], attempt=2)))
    assert d.collectable(job_uid="u", cluster="w1", attempt=0, age_ms=0, grace_ms=10)  # older attempt
    assert not d.collectable(job_uid="u", cluster="w3", attempt=2, age_ms=99, grace_ms=10)
    assert d.collectable(job_uid="u", cluster="w2", attempt=1, age_ms=0, grace_ms=10)  # withdrawn
    assert not d.collectable(job_uid="other", cluster="w1", attempt=1, age_ms=5, grace_ms=10)  # too young
    assert d.collectable(job_uid="other", cluster="w1", attempt=1, age_ms=11, grace_ms=10)
    assert d.active() == [("u", "w3", 2)]


def test_projection_forgets_an_ended_jobs_spec_but_not_that_it_was_submitted() -> None:
    d = Desired()
    job = ev.JobRef(namespace="a", name="b", uid="u")
    d.fold(entry(1, ev.JobSubmitted(job=job, pod_sets=[], manifest={"big": "x" * 1000})))
    d.fold(entry(2, ev.Nominated(job=job, clusters=["w1", "w2"], attempt=1)))
    d.fold(entry(3, ev.Withdrawn(job=job, cluster="w2", attempt=1)))
    assert "u" in d.jobs  # still running on w1
    d.fold(entry(4, ev.Finished(job=job, cluster="w1", attempt=1)))
    assert "u" in d.jobs  # the copy on w1 is not cleaned up yet
    d.fold(entry(5, ev.CleanUp(job=job, cluster="w1", attempt=1)))
    assert "u" not in d.jobs and "u" in d.submitted  # a restart's watcher will not backfill it
    assert d.collectable(job_uid="u", cluster="w1", attempt=1, age_ms=0, grace_ms=10)


def test_projection_forgets_a_deleted_job_a_period_after_its_copies_are_gone() -> None:
    d = Desired()
    job = ev.JobRef(namespace="a", name="b", uid="u")
    other = ev.JobRef(namespace="a", name="c", uid="v")
    d.fold(entry(1, ev.JobSubmitted(job=job, pod_sets=[]), at_ms=0))
    d.fold(entry(2, ev.Nominated(job=job, clusters=["w1"], attempt=1), at_ms=0))
    d.fold(entry(3, ev.JobDeleted(job=job), at_ms=1_000))
    # Its copy is not withdrawn yet when the period is over: kept for another period.
    d.fold(entry(4, ev.JobSubmitted(job=other, pod_sets=[]), at_ms=1_000 + RETIRE_DELETED_AFTER_MS))
    assert "u" in d.submitted and d.intent(("u", "w1", 1)) is Intent.RUN
    d.fold(entry(5, ev.CleanUp(job=job, cluster="w1", attempt=1), at_ms=2_000 + RETIRE_DELETED_AFTER_MS))
    d.fold(entry(6, ev.Tick(), at_ms=1_000 + 2 * RETIRE_DELETED_AFTER_MS))
    assert "u" not in d.submitted and "u" not in d.refs and d.intent(("u", "w1", 1)) is None
    assert "v" in d.submitted  # not deleted: kept
    # A copy of it still found on a worker is collected like any unknown copy, after the grace.
    assert not d.collectable(job_uid="u", cluster="w1", attempt=1, age_ms=5, grace_ms=10)
    assert d.collectable(job_uid="u", cluster="w1", attempt=1, age_ms=11, grace_ms=10)


def _copy_of(manifest: dict[str, object], *, api_version: str, kind_name: str, kueue: bool) -> dict[str, Any]:
    kind = lookup_api_version(api_version, kind_name)
    assert kind is not None
    spec = RemoteSpec(job=REF, cluster="w1", attempt=1, manifest=manifest)
    return remote_manifest(spec, kind=kind, manager_id="m", kueue=kueue)


def test_a_pod_copy_loses_the_webhook_gate_only_and_the_managers_priority_value() -> None:
    held = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "schedulingGates": [{"name": "kdispatch.io/dispatch"}, {"name": "example.com/other"}],
            "priorityClassName": "high",
            "priority": 1000,
            "containers": [{"name": "c", "image": "x"}],
        },
    }
    body = _copy_of(held, api_version="v1", kind_name="Pod", kueue=True)
    assert body["spec"]["schedulingGates"] == [{"name": "example.com/other"}]
    assert "priority" not in body["spec"] and body["spec"]["priorityClassName"] == "high"
    assert body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"  # the worker's Kueue gates it
    held["spec"]["schedulingGates"] = [{"name": "kdispatch.io/dispatch"}]  # type: ignore[index]
    body = _copy_of(held, api_version="v1", kind_name="Pod", kueue=False)
    assert (
        "schedulingGates" not in body["spec"]
        and "kueue.x-k8s.io/queue-name" not in body["metadata"]["labels"]
    )


def test_a_workload_copy_is_active() -> None:
    held = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "ml"},
        "spec": {"active": False, "podSets": [{"name": "main", "count": 1}]},
    }
    body = _copy_of(held, api_version="kueue.x-k8s.io/v1beta2", kind_name="Workload", kueue=True)
    assert body["spec"]["active"] is True


def test_facts_of_a_pod_copy_and_a_workload_copy() -> None:
    pod_ref = ev.JobRef(namespace="ml", name="p", uid="u-1", api_version="v1", kind="Pod")
    origin = Origin(job=pod_ref, attempt=2, remote_uid="r")
    running = {"kind": "Pod", "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}}
    assert [type(f).__name__ for f in job_facts(running, origin, cluster="w1", kueue=False)] == [
        "RemoteCreated",
        "RemoteAdmitted",
    ]
    failed = {"kind": "Pod", "status": {"phase": "Failed", "reason": "OOMKilled"}}
    *_, last = job_facts(failed, origin, cluster="w1", kueue=True)
    assert last == ev.RemoteFinished(
        job=pod_ref, cluster="w1", attempt=2, succeeded=False, reason="OOMKilled"
    )
    wl_ref = ev.JobRef(
        namespace="ml", name="wl", uid="u-2", api_version="kueue.x-k8s.io/v1beta2", kind="Workload"
    )
    wl_origin = Origin(job=wl_ref, attempt=1, remote_uid="r2")
    done = {
        "kind": "Workload",
        "status": {
            "conditions": [
                {"type": "Admitted", "status": "True"},
                {"type": "Finished", "status": "True", "reason": "Succeeded"},
            ]
        },
    }
    assert [type(f).__name__ for f in job_facts(done, wl_origin, cluster="w1", kueue=True)] == [
        "RemoteCreated",
        "RemoteAdmitted",
        "RemoteFinished",
    ]
