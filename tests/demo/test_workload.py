"""The demo's generated jobs and the apiserver's JSONPatch step, without running anything."""

from __future__ import annotations

import json

from reconciler.demo.apiserver import apply_patch, review
from reconciler.demo.run import Options, make_plan
from reconciler.demo.workload import PRIORITY_LABEL


def test_plan_mixes_four_kinds_with_placement_specs_and_is_seeded() -> None:
    plan = make_plan(Options(jobs=200))
    jobs = plan.all
    assert len(jobs) == 200
    assert {j.kind for j in jobs} == {"Job", "JobSet", "RayJob", "PyTorchJob"}
    names = [j.name for j in jobs]
    assert len(set(names)) == len(names)
    annotations = [j.manifest["metadata"].get("annotations", {}) for j in jobs]
    assert any("kdispatch.io/cluster-selector" in a for a in annotations)
    assert any("kdispatch.io/cluster-affinity" in a for a in annotations)
    assert any("kdispatch.io/cluster-tolerations" in a for a in annotations)
    assert all("kdispatch.io/simulated-runtime" in a for a in annotations)
    assert {j.manifest["metadata"]["labels"][PRIORITY_LABEL] for j in jobs} == {"low", "normal", "high"}
    assert all(j.priority_class == "high" for j in plan.burst)
    again = make_plan(Options(jobs=200))
    assert [json.dumps(j.manifest, sort_keys=True) for j in again.all] == [
        json.dumps(j.manifest, sort_keys=True) for j in jobs
    ]


def test_review_is_an_admission_review_v1_for_the_kind() -> None:
    job = make_plan(Options(jobs=40)).burst[0]
    body = review(job.manifest)
    req = body["request"]
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    assert req["operation"] == "CREATE" and req["uid"]
    assert req["resource"] == {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"}
    assert req["object"] is job.manifest and req["namespace"] == "demo"


def test_apply_patch_add_replace_remove() -> None:
    obj = {"metadata": {"annotations": {"a": "1"}}, "spec": {"list": [1, 2]}}
    patched = apply_patch(
        obj,
        [
            {"op": "add", "path": "/metadata/annotations/kdispatch.io~1placement", "value": "{}"},
            {"op": "replace", "path": "/metadata/annotations/a", "value": "2"},
            {"op": "add", "path": "/spec/list/-", "value": 3},
            {"op": "remove", "path": "/spec/list/0"},
            {"op": "add", "path": "/spec/suspend", "value": True},
        ],
    )
    assert patched == {
        "metadata": {"annotations": {"a": "2", "kdispatch.io/placement": "{}"}},
        "spec": {"list": [2, 3], "suspend": True},
    }
    assert obj["spec"] == {"list": [1, 2]}  # the original is left alone
