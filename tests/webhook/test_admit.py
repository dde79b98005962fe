"""The admission decision: what is patched, denied and recorded, per operation."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from eventlog import events as ev
from eventlog.kube import kinds, names
from webhook import admit, jsonpatch, objects, placement
from webhook.review import AdmissionRequest, decode_review

SETTINGS = admit.Settings(priority_classes={"high": 1000})


def _job(**annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "team-a",
            "labels": {names.QUEUE_LABEL: "user-queue", "kueue.x-k8s.io/priority-class": "high"},
            "annotations": dict(annotations),
        },
        "spec": {
            "parallelism": 2,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}},
        },
    }


def _request(
    obj: dict[str, Any] | None, *, operation: str = "CREATE", old: dict[str, Any] | None = None, dry_run: bool = False, uid: str = "rev-1"
) -> AdmissionRequest:
    source = obj if obj is not None else old
    assert source is not None
    group, _, version = source["apiVersion"].rpartition("/")
    request = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": source["kind"]},
        "operation": operation,
        "namespace": "team-a",
        "name": source["metadata"].get("name", ""),
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
    }
    _, parsed = decode_review(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode())
    return parsed


def _ops(outcome: admit.Outcome) -> list[dict[str, Any]]:
    return json.loads(base64.b64decode(outcome.response.patch)) if outcome.response.patch else []


def _admitted(obj: dict[str, Any], *, uid: str = "obj-uid-1") -> dict[str, Any]:
    """What the API server stores: our patch applied, then name and uid filled in."""
    patched = jsonpatch.apply(obj, _ops(admit.mutate(_request(obj), SETTINGS)))
    patched["metadata"]["uid"] = uid
    patched["metadata"].setdefault("name", "train-x7k2p")
    patched["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    return patched


def test_create_is_patched_with_canonical_annotation_suspend_and_managed_by() -> None:
    obj = _job(**{"kueue.x-k8s.io/cluster-selector": "region=eu"})
    outcome = admit.mutate(_request(obj), SETTINGS)
    assert outcome.allowed and outcome.response.patch_type == "JSONPatch"
    canonical = placement.canonical_json(ev.Placement(cluster_selector={"region": "eu"}))
    assert _ops(outcome) == [
        {"op": "add", "path": "/metadata/annotations/kdispatch.io~1placement", "value": canonical},
        {"op": "add", "path": "/metadata/annotations/kdispatch.io~1pod-sets", "value": '[{"count":2,"name":"main","requests":{"cpu":1000}}]'},
        {"op": "add", "path": "/metadata/annotations/kdispatch.io~1priority", "value": '{"class":"high","value":1000}'},
        {"op": "add", "path": "/spec/suspend", "value": True},
        {"op": "add", "path": "/spec/managedBy", "value": "kueue.x-k8s.io/multikueue"},
    ]


def test_objects_without_annotations_get_the_whole_map() -> None:
    obj = _job()
    del obj["metadata"]["annotations"]
    ops = _ops(admit.mutate(_request(obj), SETTINGS))
    assert ops[0]["path"] == "/metadata/annotations" and placement.PLACEMENT_ANNOTATION in ops[0]["value"]


def test_kubeflow_jobs_get_a_run_policy() -> None:
    obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p", "labels": {names.QUEUE_LABEL: "q"}},
        "spec": {"pytorchReplicaSpecs": {"Master": {"template": {"spec": {"containers": [{"name": "pytorch"}]}}}}},
    }
    ops = _ops(admit.mutate(_request(obj), SETTINGS))
    assert ops[1:] == [{"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True, "managedBy": names.MANAGED_BY}}]


def test_a_job_without_pod_sets_is_admitted_with_a_warning() -> None:
    aw = {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "aw", "labels": {names.QUEUE_LABEL: "q"}},
        "spec": {"components": [{"template": {"apiVersion": "example.com/v1", "kind": "Unknown", "spec": {}}}]},
    }
    outcome = admit.mutate(_request(aw), SETTINGS)
    assert outcome.allowed and outcome.response.patch
    assert outcome.response.warnings == ["kdispatch: no pod sets found in this AppWrapper: it is dispatched as needing no resources"]


def test_pods_are_held_by_a_scheduling_gate() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {names.QUEUE_LABEL: "q"}}, "spec": {"containers": [{"name": "c"}]}}
    assert _ops(admit.mutate(_request(pod), SETTINGS))[1:] == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": names.POD_SCHEDULING_GATE}]}
    ]
    pod["spec"]["schedulingGates"] = [{"name": "other"}]
    assert _ops(admit.mutate(_request(pod), SETTINGS))[1:] == [
        {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": names.POD_SCHEDULING_GATE}}
    ]


def test_pods_made_by_a_controller_are_left_alone() -> None:
    # A Job that runs here (not submitted to kdispatch) with the queue label on its pod template.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "local-job-x7k2p",
            "labels": {names.QUEUE_LABEL: "q"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "local-job", "uid": "u", "controller": True}],
        },
        "spec": {"containers": [{"name": "c"}]},
    }
    for hook in (admit.mutate, admit.validate):
        outcome = hook(_request(pod), SETTINGS)
        assert outcome.allowed and outcome.response.patch is None and not outcome.records


@pytest.mark.parametrize(
    ("owner_kind", "owner_api", "touched"),
    [("JobSet", "jobset.x-k8s.io/v1alpha2", False), ("CronJob", "batch/v1", True)],
)
def test_jobs_of_a_dispatched_kind_are_left_alone_but_a_cronjobs_are_submissions(owner_kind: str, owner_api: str, touched: bool) -> None:
    obj = _job()
    obj["metadata"]["ownerReferences"] = [{"apiVersion": owner_api, "kind": owner_kind, "name": "o", "uid": "u", "controller": True}]
    outcome = admit.mutate(_request(obj), SETTINGS)
    assert outcome.allowed and (outcome.response.patch is not None) == touched


def test_workloads_are_held_inactive() -> None:
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w", "annotations": {"kdispatch.io/profile": "gpu"}}, "spec": {"podSets": []}}
    assert _ops(admit.mutate(_request(wl), SETTINGS))[3:] == [{"op": "add", "path": "/spec/active", "value": False}]


@pytest.mark.parametrize(
    "obj",
    [
        {**_job(), "metadata": {"name": "plain", "labels": {"app": "x"}}},  # not opted in
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labels": {names.QUEUE_LABEL: "q"}}, "spec": {}},
    ],
    ids=["not-opted-in", "unsupported-kind"],
)
def test_others_are_allowed_untouched(obj: dict[str, Any]) -> None:
    for hook in (admit.mutate, admit.validate):
        outcome = hook(_request(obj), SETTINGS)
        assert outcome.allowed and outcome.response.patch is None and not outcome.records


def test_invalid_placement_is_denied_with_every_reason() -> None:
    obj = _job(**{"kdispatch.io/dispatch-mode": "fast", "kdispatch.io/nominate": "x"})
    outcome = admit.mutate(_request(obj), SETTINGS)
    assert not outcome.allowed and outcome.reason == "invalid-placement"
    assert outcome.response.status is not None and outcome.response.status.code == 400
    message = outcome.response.status.message
    assert "kdispatch.io/dispatch-mode" in message and "kdispatch.io/nominate" in message
    assert outcome.response.uid == "rev-1"


def test_bad_quantities_are_denied_at_validate_with_their_path() -> None:
    obj = _job()
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "one"
    message = "$.spec.template.spec.containers[0].resources.requests.cpu: 'one' is not a quantity"
    # /mutate writes the pod sets onto the object, so it reads the quantities too
    for outcome in (admit.mutate(_request(obj), SETTINGS), admit.validate(_request(obj), SETTINGS)):
        assert not outcome.allowed and outcome.reason == "invalid-podsets"
        assert outcome.response.status is not None
        assert message in outcome.response.status.message


def test_metadata_of_the_wrong_shape_is_denied_with_its_path() -> None:
    # The API server decodes metadata before any webhook runs; a hand-made review is told where.
    obj = _job()
    obj["metadata"]["labels"]["team"] = 7
    for hook in (admit.mutate, admit.validate):
        outcome = hook(_request(obj), SETTINGS)
        assert not outcome.allowed and outcome.reason == "invalid-object" and not outcome.records
        assert outcome.response.status is not None
        assert outcome.response.status.message == "kdispatch: cannot read the metadata of this Job: $.metadata.labels.team: expected a string, found 7"


def test_a_job_managed_by_another_controller_is_denied() -> None:
    obj = _job()
    obj["spec"]["managedBy"] = "example.com/my-controller"
    outcome = admit.mutate(_request(obj), SETTINGS)
    assert not outcome.allowed and outcome.reason == "managed-elsewhere"
    assert outcome.response.status is not None and "'example.com/my-controller'" in outcome.response.status.message


def test_the_kinds_own_controller_default_is_replaced() -> None:
    obj = _job()
    obj["spec"]["managedBy"] = "kubernetes.io/job-controller"
    assert {"op": "add", "path": "/spec/managedBy", "value": names.MANAGED_BY} in _ops(admit.mutate(_request(obj), SETTINGS))


def test_generate_name_objects_are_patched_at_mutate() -> None:
    obj = _job()
    obj["metadata"] = {**obj["metadata"], "generateName": "train-"}
    del obj["metadata"]["name"]
    assert admit.mutate(_request(obj), SETTINGS).response.patch


def test_validate_records_one_submission_with_everything_the_dispatcher_needs() -> None:
    stored = _admitted(
        _job(**{"kdispatch.io/cluster-names": "east,west", "kdispatch.io/simulated-runtime": "90s", admit.LAST_APPLIED: "{}"})
    )
    outcome = admit.validate(_request(stored, uid="rev-7"), SETTINGS)
    assert outcome.allowed
    [record] = outcome.records
    assert record.msg_id == "sub/obj-uid-1"  # per job: the watcher backfills it under the same id
    event = record.event
    assert isinstance(event, ev.JobSubmitted)
    assert event.job == ev.JobRef(namespace="team-a", name="train", uid="obj-uid-1", api_version="batch/v1", kind="Job")
    assert event.pod_sets == [ev.PodSet(name="main", count=2, requests={"cpu": 1000})]
    assert (event.priority_class, event.priority) == ("high", 1000)
    assert event.placement == ev.Placement(cluster_names=["east", "west"])
    assert (event.queue, event.runtime_ms, event.source) == ("user-queue", 90_000, "webhook")
    assert event.manifest is not None and "managedFields" not in event.manifest["metadata"]
    assert admit.LAST_APPLIED not in event.manifest["metadata"]["annotations"]
    assert placement.PLACEMENT_ANNOTATION in event.manifest["metadata"]["annotations"]
    assert event.manifest["spec"]["suspend"] is True


def test_validate_dry_run_records_nothing() -> None:
    outcome = admit.validate(_request(_admitted(_job()), dry_run=True), SETTINGS)
    assert outcome.allowed and not outcome.records


def test_validate_denies_an_object_the_mutating_hook_did_not_hold() -> None:
    stored = _job()
    stored["metadata"]["uid"] = "u"
    outcome = admit.validate(_request(stored), SETTINGS)
    assert not outcome.allowed and outcome.reason == "not-held"
    assert outcome.response.status is not None and "MutatingWebhookConfiguration" in outcome.response.status.message


def test_validate_without_a_name_leaves_it_to_the_watcher() -> None:
    stored = _admitted(_job(), uid="")
    outcome = admit.validate(_request(stored), SETTINGS)
    assert outcome.allowed and not outcome.records and outcome.response.warnings


def test_pod_group_members_share_one_submission() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "g-0",
            "namespace": "team-a",
            "labels": {names.QUEUE_LABEL: "q", "kueue.x-k8s.io/pod-group-name": "g"},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"},
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }
    ids = set()
    for i in range(2):
        pod["metadata"]["name"] = f"g-{i}"
        stored = _admitted(pod, uid=f"pod-{i}")
        [record] = admit.validate(_request(stored, uid=f"rev-{i}"), SETTINGS).records
        assert isinstance(record.event, ev.JobSubmitted) and record.event.job.name == "g"
        assert record.event.pod_sets == [ev.PodSet(name="main", count=2, requests={"cpu": 1000})]
        ids.add(record.msg_id)
    assert ids == {"podgroup/team-a/g"}


def test_update_changing_the_placement_of_a_submitted_job_is_denied() -> None:
    old = _admitted(_job(**{"kdispatch.io/cluster-selector": "region=eu"}))
    new = json.loads(json.dumps(old))
    new["metadata"]["annotations"]["kdispatch.io/cluster-selector"] = "region=us"
    for hook in (admit.mutate, admit.validate):
        outcome = hook(_request(new, operation="UPDATE", old=old), SETTINGS)
        assert not outcome.allowed and outcome.reason == "placement-changed"
        assert outcome.response.status is not None and outcome.response.status.code == 403
        assert "changed: clusterSelector" in outcome.response.status.message


def test_kdispatch_marking_where_a_job_runs_is_allowed_and_named_in_later_denials() -> None:
    old = _admitted(_job(**{"kdispatch.io/cluster-selector": "region=eu"}))
    placed = json.loads(json.dumps(old))
    placed["metadata"]["annotations"]["kdispatch.io/cluster"] = "east"  # what the manager adapter patches in
    placed["metadata"]["annotations"]["kdispatch.io/status"] = '{"phase":"Placed","cluster":"east"}'
    placed["metadata"]["labels"]["kdispatch.io/cluster"] = "east"
    for hook in (admit.mutate, admit.validate):
        outcome = hook(_request(placed, operation="UPDATE", old=old), SETTINGS)
        assert outcome.allowed and outcome.response.patch is None and not outcome.records
    moved = json.loads(json.dumps(placed))
    moved["metadata"]["annotations"]["kdispatch.io/cluster-selector"] = "region=us"
    outcome = admit.mutate(_request(moved, operation="UPDATE", old=placed), SETTINGS)
    assert outcome.response.status is not None and "it runs on cluster 'east'" in outcome.response.status.message


def test_update_that_keeps_the_placement_is_allowed_without_patch() -> None:
    old = _admitted(_job(**{"kdispatch.io/cluster-selector": "region=eu"}))
    new = json.loads(json.dumps(old))
    new["metadata"]["labels"]["team"] = "ml"
    outcome = admit.mutate(_request(new, operation="UPDATE", old=old), SETTINGS)
    assert outcome.allowed and outcome.response.patch is None
    assert not admit.validate(_request(new, operation="UPDATE", old=old), SETTINGS).records


def test_an_update_cannot_strip_the_placement() -> None:
    old = _admitted(_job(**{"kdispatch.io/cluster-selector": "region=eu"}))
    stripped = json.loads(json.dumps(old))
    stripped["metadata"]["annotations"] = {}
    del stripped["metadata"]["labels"][names.QUEUE_LABEL]
    outcome = admit.mutate(_request(stripped, operation="UPDATE", old=old), SETTINGS)
    assert not outcome.allowed and outcome.reason == "placement-changed"
    plain_old = _admitted(_job())
    plain = json.loads(json.dumps(plain_old))
    plain["metadata"]["annotations"] = {}
    outcome = admit.mutate(_request(plain, operation="UPDATE", old=plain_old), SETTINGS)
    assert outcome.allowed and [op["path"] for op in _ops(outcome)] == [
        "/metadata/annotations/kdispatch.io~1placement",
        "/metadata/annotations/kdispatch.io~1pod-sets",
        "/metadata/annotations/kdispatch.io~1priority",
    ]


def test_update_that_changes_pod_sets_is_recorded() -> None:
    old = _admitted(_job())
    new = json.loads(json.dumps(old))
    new["spec"]["parallelism"] = 5
    outcome = admit.validate(_request(new, operation="UPDATE", old=old, uid="rev-9"), SETTINGS)
    [record] = outcome.records
    assert record.msg_id == "rev-9" and isinstance(record.event, ev.JobUpdated)
    assert record.event.pod_sets == [ev.PodSet(name="main", count=5, requests={"cpu": 1000})]
    assert record.event.suspended is False  # held by kdispatch, not suspended by its user
    assert record.event.priority == 1000


def test_update_of_a_job_kdispatch_never_admitted_is_left_alone() -> None:
    old = _job()
    new = json.loads(json.dumps(old))
    new["spec"]["parallelism"] = 5
    outcome = admit.mutate(_request(new, operation="UPDATE", old=old), SETTINGS)
    assert outcome.allowed and outcome.response.patch is None and outcome.response.warnings
    assert not admit.validate(_request(new, operation="UPDATE", old=old), SETTINGS).records


def test_delete_is_recorded() -> None:
    old = _admitted(_job())
    [record] = admit.validate(_request(None, operation="DELETE", old=old, uid="rev-d"), SETTINGS).records
    assert record == admit.Record(ev.JobDeleted(job=admit.job_ref(kinds.SUPPORTED_KINDS[0], objects.metadata(old), request=_request(old))), "rev-d")
    assert not admit.validate(_request(None, operation="DELETE", old=old, dry_run=True), SETTINGS).records
    assert admit.mutate(_request(None, operation="DELETE", old=old), SETTINGS).allowed


def test_pod_sets_and_priority_travel_with_the_object_and_cannot_be_forged() -> None:
    stored = _admitted(_job())
    annotations = stored["metadata"]["annotations"]
    assert json.loads(annotations[placement.POD_SETS_ANNOTATION]) == [{"count": 2, "name": "main", "requests": {"cpu": 1000}}]
    assert json.loads(annotations[placement.PRIORITY_ANNOTATION]) == {"class": "high", "value": 1000}
    # mutating what was stored changes nothing, at CREATE and at UPDATE
    assert admit.mutate(_request(stored), SETTINGS).response.patch is None
    assert admit.mutate(_request(stored, operation="UPDATE", old=stored), SETTINGS).response.patch is None
    forged = json.loads(json.dumps(stored))
    forged["metadata"]["annotations"][placement.POD_SETS_ANNOTATION] = '[{"count":1,"name":"main","requests":{}}]'
    forged["metadata"]["annotations"][placement.PRIORITY_ANNOTATION] = '{"class":"high","value":99999}'
    for operation in ("CREATE", "UPDATE"):
        ops = _ops(admit.mutate(_request(forged, operation=operation, old=stored), SETTINGS))
        assert jsonpatch.apply(forged, ops)["metadata"]["annotations"] == annotations
    grown = json.loads(json.dumps(stored))
    grown["spec"]["parallelism"] = 3
    patched = jsonpatch.apply(grown, _ops(admit.mutate(_request(grown, operation="UPDATE", old=stored), SETTINGS)))
    assert json.loads(patched["metadata"]["annotations"][placement.POD_SETS_ANNOTATION])[0]["count"] == 3


def test_an_update_is_recorded_under_the_id_the_manager_watcher_gives_the_same_change() -> None:
    old = _admitted(_job())
    old["metadata"]["resourceVersion"] = "41"
    new = json.loads(json.dumps(old))
    new["spec"]["suspend"] = True
    new["spec"]["parallelism"] = 4
    [record] = admit.validate(_request(new, operation="UPDATE", old=old, uid="rev-7"), SETTINGS).records
    assert record.msg_id == "upd/obj-uid-1/41"  # the version the change was made to (webhook/stamps.py)
