"""What the manager watcher reads off a job object: a ``JobSubmitted`` rebuilt for jobs the
webhook could not record, and the pod sets and priority of a ``JobUpdated``.

Any kind: the reconciler may not import the webhook's per-kind pod-set code, so the webhook leaves
its result on the object (``kdispatch.io/pod-sets`` and ``kdispatch.io/priority``, canonical JSON,
recomputed at every CREATE and UPDATE: see webhook/stamps.py) and this module reads it back.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from eventlog import events as ev
from eventlog.kube import queues as queue_rules
from eventlog.kube.duration import DurationError, parse_duration_ms
from eventlog.kube.kinds import KindInfo
from eventlog.kube.names import (
    MANAGED_BY,
    PLACEMENT_ANNOTATION,
    POD_SETS_ANNOTATION,
    PRIORITY_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    RUNTIME_ANNOTATION,
)


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
    try:
        return parse_duration_ms(raw)
    except DurationError:
        return None  # a hint only: the job is still backfilled, with the default runtime


class _PodSetStamp(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    name: str
    count: int
    requests: dict[str, int] = msgspec.field(default_factory=dict)
    min_count: int | None = None
    node_selector: dict[str, str] = msgspec.field(default_factory=dict)
    node_affinity: list[ev.SelectorTerm] = msgspec.field(default_factory=list)
    tolerations: list[ev.Toleration] = msgspec.field(default_factory=list)
    topology: ev.TopologyRequest | None = None
    group: str | None = None


class _PriorityStamp(msgspec.Struct, rename={"class_": "class"}):
    value: int = 0
    class_: str | None = None


_pod_sets_decoder = msgspec.json.Decoder(list[_PodSetStamp])
_priority_decoder = msgspec.json.Decoder(_PriorityStamp)


def _annotations(obj: dict[str, Any]) -> dict[str, Any]:
    annotations = (obj.get("metadata") or {}).get("annotations")
    return annotations if isinstance(annotations, dict) else {}


def pod_sets_of(obj: dict[str, Any]) -> list[ev.PodSet]:
    """The pod sets the webhook computed, from its ``kdispatch.io/pod-sets`` annotation (any kind)."""
    text = _annotations(obj).get(POD_SETS_ANNOTATION)
    if not isinstance(text, str):
        raise NotBackfillable(
            f"no {POD_SETS_ANNOTATION} annotation (admitted by an older kdispatch webhook?): "
            "update the object once so that the webhook writes it"
        )
    try:
        stamps = _pod_sets_decoder.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise NotBackfillable(f"unreadable {POD_SETS_ANNOTATION}: {err}") from None
    return [
        ev.PodSet(
            name=s.name,
            count=s.count,
            requests=s.requests,
            min_count=s.min_count,
            node_selector=s.node_selector,
            node_affinity=s.node_affinity,
            tolerations=s.tolerations,
            topology=s.topology,
            group=s.group,
        )
        for s in stamps
    ]


def priority_of(obj: dict[str, Any]) -> tuple[str | None, int]:
    """(priority class, value) from the webhook's ``kdispatch.io/priority`` annotation; without
    it, the class label (the reconciler resolves the class through its policy)."""
    text = _annotations(obj).get(PRIORITY_ANNOTATION)
    if isinstance(text, str):
        try:
            stamp = _priority_decoder.decode(text)
            return stamp.class_, stamp.value
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
    label = ((obj.get("metadata") or {}).get("labels") or {}).get(PRIORITY_CLASS_LABEL)
    return (label if isinstance(label, str) else None), 0


def _get(obj: dict[str, Any], path: tuple[str, ...] | None) -> Any:
    node: Any = obj
    for key in path or ():
        node = node.get(key) if isinstance(node, dict) else None
    return node


def user_suspended(kind: KindInfo, obj: dict[str, Any]) -> bool:
    """Did the *user* suspend it? A job kdispatch holds (managedBy MultiKueue, suspended by the
    webhook; a Pod's gate; an inactive Workload) is not suspended in that sense, as the webhook
    records it (``suspended=False``)."""
    if kind.hold != "suspend":
        return False
    if kind.managed_by_path is not None and _get(obj, kind.managed_by_path) == MANAGED_BY:
        return False
    return _get(obj, kind.suspend_path) is True


def manifest_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The object for the remote copy, as the webhook records it: no status, no managedFields."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


def submission_of(
    obj: dict[str, Any], kind: KindInfo, *, queues: ev.QueuesConfigured | None = None
) -> ev.JobSubmitted:
    """The ``JobSubmitted`` the webhook would have recorded (source ``watch``). With the log's
    queue config, its ClusterQueue resolved as the webhook does; a job that does not resolve (the
    webhook, had it seen it, would have denied it) is recorded without one, and waits with the
    reason the dispatcher gives."""
    meta = obj.get("metadata") or {}
    annotations = _annotations(obj)
    labels = meta.get("labels") or {}
    text = annotations.get(PLACEMENT_ANNOTATION)
    if not isinstance(text, str):
        raise NotBackfillable("no kdispatch.io/placement annotation")
    try:
        placement = placement_of(text)
    except (ValueError, msgspec.ValidationError) as err:
        raise NotBackfillable(f"unreadable {PLACEMENT_ANNOTATION}: {err}") from None
    priority_class, priority = priority_of(obj)
    queue = labels.get(QUEUE_LABEL)
    cluster_queue = None
    if queues is not None:
        namespace = str(meta.get("namespace", ""))
        cluster_queue = queue_rules.cluster_queue_of(queues, namespace=namespace, queue_name=queue)
    return ev.JobSubmitted(
        job=job_ref(obj),
        pod_sets=pod_sets_of(obj),
        priority=priority,
        priority_class=priority_class,
        placement=placement,
        queue=queue,
        suspended=user_suspended(kind, obj),
        runtime_ms=_runtime_ms(annotations),
        manifest=manifest_of(obj),
        source="watch",
        cluster_queue=cluster_queue,
    )
