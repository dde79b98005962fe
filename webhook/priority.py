"""Job priority, after Kueue's ``ExtractPriority``.

The class name comes from the ``kueue.x-k8s.io/priority-class`` label, else (Kubeflow kinds)
``runPolicy.schedulingPolicy.priorityClass``, else the first pod set's ``priorityClassName``.
Its value is known here only through the ``--priority-classes`` mapping or the config file's
``policy.priorityClasses``; otherwise the event carries the name with priority 0 and the
reconciler resolves it through the policy it records in the log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eventlog.kube.kinds import SUPPORTED_KINDS
from eventlog.kube.names import PRIORITY_CLASS_LABEL
from webhook.podsets import PodSetSpec

_KUBEFLOW_KINDS = frozenset(k.kind for k in SUPPORTED_KINDS if k.family == "kubeflow")


class PriorityError(ValueError):
    pass


def priority_class(*, kind: str, obj: dict[str, Any], sets: Sequence[PodSetSpec]) -> str | None:
    return priority_class_and_source(kind=kind, obj=obj, sets=sets)[0]


def priority_class_and_source(*, kind: str, obj: dict[str, Any], sets: Sequence[PodSetSpec]) -> tuple[str | None, str]:
    """The class name and where it was read, for messages that must point at the field to change."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    labels = meta.get("labels") if isinstance(meta, dict) else None
    if isinstance(labels, dict) and isinstance(labels.get(PRIORITY_CLASS_LABEL), str):
        return str(labels[PRIORITY_CLASS_LABEL]), f"label {PRIORITY_CLASS_LABEL}"
    if kind == "Workload":
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        ref = spec.get("priorityClassRef")
        name = ref.get("name") if isinstance(ref, dict) else spec.get("priorityClassName")
        if isinstance(name, str) and name:
            return name, "$.spec.priorityClassRef.name" if isinstance(ref, dict) else "$.spec.priorityClassName"
    if kind in _KUBEFLOW_KINDS:
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        run_policy = spec.get("runPolicy") if isinstance(spec, dict) else None
        policy = run_policy.get("schedulingPolicy") if isinstance(run_policy, dict) else None
        name = policy.get("priorityClass") if isinstance(policy, dict) else None
        if isinstance(name, str) and name:
            return name, "$.spec.runPolicy.schedulingPolicy.priorityClass"
    for s in sets:
        if s.spec.priority_class_name:
            return s.spec.priority_class_name, f"{s.path}.priorityClassName"
    return None, ""


def priority_value(name: str | None, classes: Mapping[str, int]) -> int:
    """The class's value when it is configured here, else 0 (the reconciler resolves the name)."""
    return classes.get(name, 0) if name is not None else 0


def parse_mapping(text: str) -> dict[str, int]:
    """``--priority-classes high=1000,low=10`` → {"high": 1000, "low": 10}."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, eq, value = part.partition("=")
        try:
            if not eq:
                raise ValueError
            out[name.strip()] = int(value)
        except ValueError:
            raise PriorityError(f"{part!r}: expected NAME=INTEGER, e.g. high=1000") from None
    return out
