"""Where the priority class comes from, in Kueue's order (KINDS.md, "Priority")."""

from __future__ import annotations

from typing import Any

import pytest

from eventlog.kube import kinds
from webhook import podsets
from webhook.priority import priority_class, priority_value


def _class(api_version: str, kind: str, obj: dict[str, Any]) -> str | None:
    info = kinds.lookup_api_version(api_version, kind)
    assert info is not None
    full = {"apiVersion": api_version, "kind": kind, **obj}
    return priority_class(kind=kind, obj=full, sets=podsets.extract(info, full))


def _pytorch(**run_policy: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "spec": {
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": {
                "Worker": {"template": {"spec": {"priorityClassName": "from-worker", "containers": []}}},
                "Master": {"template": {"spec": {"priorityClassName": "from-master", "containers": []}}},
            },
        },
    }


@pytest.mark.parametrize(
    ("api_version", "kind", "obj", "expected"),
    [
        ("kubeflow.org/v1", "PyTorchJob", _pytorch(), "from-master"),  # replica templates in the fixed order
        ("kubeflow.org/v1", "PyTorchJob", _pytorch(schedulingPolicy={"priorityClass": "policy"}), "policy"),
        (
            "kubeflow.org/v1",
            "PyTorchJob",
            {**_pytorch(schedulingPolicy={"priorityClass": "policy"}), "metadata": {"labels": {"kueue.x-k8s.io/priority-class": "label"}}},
            "label",  # the WorkloadPriorityClass label wins
        ),
        ("batch/v1", "Job", {"spec": {"template": {"spec": {"priorityClassName": "pod"}}}}, "pod"),
        ("batch/v1", "Job", {"spec": {"template": {"spec": {}}}}, None),
        ("kueue.x-k8s.io/v1beta1", "Workload", {"spec": {"priorityClassName": "wl", "podSets": []}}, "wl"),
        ("kueue.x-k8s.io/v1beta2", "Workload", {"spec": {"priorityClassRef": {"name": "ref"}, "podSets": []}}, "ref"),
    ],
)
def test_priority_class_in_kueue_order(api_version: str, kind: str, obj: dict[str, Any], expected: str | None) -> None:
    assert _class(api_version, kind, obj) == expected


def test_values_known_here_or_zero() -> None:
    assert priority_value("high", {"high": 1000}) == 1000
    assert priority_value("unknown", {"high": 1000}) == 0
    assert priority_value(None, {"high": 1000}) == 0
