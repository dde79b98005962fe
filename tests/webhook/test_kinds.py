"""The kind table (eventlog/kube/kinds.py), which deploy's WebhookConfigurations are generated from
(tests/deploy/test_webhooks.py checks those), against the facts of Kueue's integrations, and the
webhook's readers against the table."""

from __future__ import annotations

from typing import Any

import pytest

from eventlog.kube import kinds, names
from webhook import podsets
from webhook.priority import priority_class


def test_every_kind_once_with_its_plural() -> None:
    keys = [(k.group, k.version, k.kind) for k in kinds.SUPPORTED_KINDS]
    assert len(keys) == len(set(keys))
    for k in kinds.SUPPORTED_KINDS:
        assert k.plural == k.kind.lower() + "s"
        assert kinds.lookup_api_version(k.api_version, k.kind) is k


def test_suspend_and_managed_by_where_each_kind_keeps_them() -> None:
    by_kind = {(k.api_version, k.kind): k for k in kinds.SUPPORTED_KINDS}
    assert by_kind[("kubeflow.org/v1", "PyTorchJob")].suspend_path == ("spec", "runPolicy", "suspend")
    assert by_kind[("kubeflow.org/v2beta1", "MPIJob")].managed_by_path == ("spec", "runPolicy", "managedBy")
    assert by_kind[("batch/v1", "Job")].managed_by_path == ("spec", "managedBy")
    assert by_kind[("v1", "Pod")].hold == "gate" and by_kind[("v1", "Pod")].managed_by_path is None
    assert by_kind[("kueue.x-k8s.io/v1beta2", "Workload")].suspend_path == ("spec", "active")
    for k in kinds.SUPPORTED_KINDS:
        if k.managed_by_path is not None:  # one JSONPatch add creates both when the parent is missing
            assert k.managed_by_path[:-1] == k.suspend_path[:-1]
            assert names.MANAGED_BY not in k.default_controllers


def test_the_families_the_issue_names() -> None:
    names = {k.kind for k in kinds.SUPPORTED_KINDS}
    assert names == {
        "Job", "JobSet", "RayJob", "RayCluster", "PyTorchJob", "TFJob", "MPIJob", "XGBoostJob",
        "PaddleJob", "JAXJob", "TrainJob", "AppWrapper", "Pod", "Workload",
    }  # fmt: skip


_KUBEFLOW = [k for k in kinds.SUPPORTED_KINDS if k.family == "kubeflow"]


def _replica(name: str) -> dict[str, Any]:
    return {"replicas": 1, "template": {"spec": {"priorityClassName": name, "containers": [{"name": "c"}]}}}


@pytest.mark.parametrize("info", _KUBEFLOW, ids=lambda k: f"{k.kind}.{k.version}")
def test_kubeflow_pod_sets_are_read_where_the_table_says(info: kinds.KindInfo) -> None:
    # Replica keys as users write them (``Worker``), listed against the table's order.
    replicas = {role.capitalize(): _replica(role) for role in reversed(info.roles)}
    obj = {"apiVersion": info.api_version, "kind": info.kind, "spec": {info.replica_specs: replicas}}
    sets = podsets.extract(info, obj)
    assert [s.name for s in sets] == list(info.roles)
    assert priority_class(kind=info.kind, obj=obj, sets=sets) == info.roles[0]
    obj["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": "policy"}}
    assert priority_class(kind=info.kind, obj=obj, sets=sets) == "policy"


def test_only_kubeflow_kinds_read_the_run_policys_priority_class() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"runPolicy": {"schedulingPolicy": {"priorityClass": "policy"}}}}
    assert priority_class(kind="Job", obj=job, sets=[]) is None
    assert {k.kind for k in _KUBEFLOW} == {"PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob", "MPIJob"}
