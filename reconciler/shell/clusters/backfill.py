"""A ``JobSubmitted`` rebuilt from a manager object, for jobs the webhook could not record.

Only batch/v1 Job is supported here (reconciler may not import the webhook's per-kind pod-set
code): one pod set of ``parallelism`` pods with the template's requests. Other kinds are reported
as ``JobObserved`` only and a warning names them (see docs/clusters.md).
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from eventlog import events as ev
from reconciler.shell.clusters.base import PLACEMENT_ANNOTATION
from reconciler.shell.clusters.usage import pod_requests

PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
RUNTIME_ANNOTATION = "kdispatch.io/simulated-runtime"
MANAGED_BY = "kueue.x-k8s.io/multikueue"  # held by kdispatch, not suspended by the user
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|h|m|s)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


class NotBackfillable(ValueError):
    pass


def job_ref(obj: dict[str, Any]) -> ev.JobRef:
    meta = obj.get("metadata") or {}
    return ev.JobRef(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        api_version=str(obj.get("apiVersion") or "batch/v1"),
        kind=str(obj.get("kind") or "Job"),
    )


def placement_of(text: str) -> ev.Placement:
    """The canonical ``kdispatch.io/placement`` annotation (camelCase JSON) as a ``Placement``."""
    raw = json.loads(text)
    affinity = raw.get("clusterAffinity") or {}
    converted = {
        "cluster_selector": raw.get("clusterSelector") or {},
        "cluster_affinity": {
            "required": [_term(t) for t in affinity.get("required") or []],
            "preferred": [
                {"weight": w.get("weight", 1), "term": _term(w.get("preference") or {})}
                for w in affinity.get("preferred") or []
            ],
        },
        "cluster_tolerations": [
            {
                "key": t.get("key", ""),
                "operator": t.get("operator", "Equal"),
                "value": t.get("value", ""),
                "effect": t.get("effect", ""),
                "toleration_seconds": t.get("tolerationSeconds"),
            }
            for t in raw.get("clusterTolerations") or []
        ],
        "dispatch_mode": raw.get("dispatchMode", "MustBeAdmitted"),
        "profile": raw.get("profile", "default"),
        "nominate": raw.get("nominate"),
        "cluster_names": raw.get("clusterNames") or [],
        "preemption_policy": raw.get("preemptionPolicy", "PreemptLowerPriority"),
    }
    return msgspec.convert(converted, ev.Placement)


def _term(term: dict[str, Any]) -> dict[str, Any]:
    return {"match_expressions": term.get("matchExpressions") or []}


def _runtime_ms(annotations: dict[str, Any]) -> int | None:
    raw = annotations.get(RUNTIME_ANNOTATION)
    if not isinstance(raw, str):
        return None
    text = raw.strip()
    if text.isdigit():
        return int(text)
    total, pos = 0.0, 0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNIT_MS[m.group(2)]
        pos = m.end()
    return round(total) if pos == len(text) and text else None


def pod_sets_of(obj: dict[str, Any]) -> list[ev.PodSet]:
    if obj.get("apiVersion") != "batch/v1" or obj.get("kind") != "Job":
        raise NotBackfillable(
            f"{obj.get('apiVersion')} {obj.get('kind')}: only batch/v1 Job can be backfilled"
        )
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    count = int(spec.get("parallelism", 1) or 0)
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    raw_min = annotations.get(MIN_PARALLELISM_ANNOTATION)
    min_count = int(raw_min) if isinstance(raw_min, str) and raw_min.isdigit() else None
    return [ev.PodSet(name="main", count=count, requests=pod_requests(template), min_count=min_count)]


def submission_of(obj: dict[str, Any]) -> ev.JobSubmitted:
    """The ``JobSubmitted`` the webhook would have recorded (source ``watch``)."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    text = annotations.get(PLACEMENT_ANNOTATION)
    if not isinstance(text, str):
        raise NotBackfillable("no kdispatch.io/placement annotation")
    try:
        placement = placement_of(text)
    except (ValueError, msgspec.ValidationError) as err:
        raise NotBackfillable(f"unreadable {PLACEMENT_ANNOTATION}: {err}") from None
    template_spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    priority_class = labels.get(PRIORITY_CLASS_LABEL) or template_spec.get("priorityClassName")
    return ev.JobSubmitted(
        job=job_ref(obj),
        pod_sets=pod_sets_of(obj),
        priority=int(template_spec.get("priority", 0) or 0),
        priority_class=priority_class,
        placement=placement,
        queue=labels.get(QUEUE_LABEL),
        suspended=bool((obj.get("spec") or {}).get("suspend"))
        and (obj.get("spec") or {}).get("managedBy") != MANAGED_BY,
        runtime_ms=_runtime_ms(annotations),
        manifest=obj,
        source="watch",
    )
