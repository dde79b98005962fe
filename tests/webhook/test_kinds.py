"""SUPPORTED_KINDS, which deploy's WebhookConfigurations are generated from, against KINDS.md."""

from __future__ import annotations

from webhook import kinds


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
            assert kinds.MANAGED_BY not in k.default_controllers


def test_the_families_the_issue_names() -> None:
    names = {k.kind for k in kinds.SUPPORTED_KINDS}
    assert names == {
        "Job", "JobSet", "RayJob", "RayCluster", "PyTorchJob", "TFJob", "MPIJob", "XGBoostJob",
        "PaddleJob", "JAXJob", "TrainJob", "AppWrapper", "Pod", "Workload",
    }  # fmt: skip
